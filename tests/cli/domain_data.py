# The data of test_domain.sh and test_domain_nccl.sh, written into WORK:
# train16.h5 (the shipped 16 x 16 Darcy set's first 48 samples as HDF5,
# coeff/sol), cube.h5 (24 samples on a 12 x 8 x 6 grid) and thin.h5 (its
# first 3 rows of a 2D slice: a grid too thin to split) and ns16.h5 (Navier-
# Stokes-like records u [16, 16, 16, 8]: smooth periodic fields in x and y,
# drifting in time, as fno_datagen --problem ns writes them).
#   python domain_data.py DARCY_DIR WORK
import sys, torch, h5py
src, work = sys.argv[1], sys.argv[2]
d = torch.load(f"{src}/darcy_train_16.pt")
with h5py.File(f"{work}/train16.h5", "w") as f:
    f["coeff"] = d["x"][:48].float().numpy()
    f["sol"] = d["y"][:48].float().numpy()
g = torch.Generator().manual_seed(0)
x = torch.randn(24, 12, 8, 6, generator=g)
y = torch.fft.irfftn(torch.fft.rfftn(x, dim=(1, 2, 3)) * 0.3, s=(12, 8, 6), dim=(1, 2, 3)) + x.pow(2) * 0.1
with h5py.File(f"{work}/cube.h5", "w") as f:
    f["coeff"] = x.numpy()
    f["sol"] = y.numpy()
with h5py.File(f"{work}/thin.h5", "w") as f:
    f["coeff"] = x[:, :3, :, 0].numpy()
    f["sol"] = y[:, :3, :, 0].numpy()
g = torch.Generator().manual_seed(1)
k = torch.fft.fftfreq(16, 1 / 16)
damp = torch.exp(-(k[:, None] ** 2 + k[None, :] ** 2) / 8)[None, :, :, None]
w = torch.randn(16, 16, 16, 8, generator=g).cumsum(3) / 8 ** 0.5
u = torch.fft.ifft2(torch.fft.fft2(w, dim=(1, 2)) * damp, dim=(1, 2)).real
with h5py.File(f"{work}/ns16.h5", "w") as f:
    f["u"] = u.float().numpy()
