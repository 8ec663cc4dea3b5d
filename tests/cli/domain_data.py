# The data of test_domain.sh and test_domain_nccl.sh, written into WORK:
# train16.h5 (the shipped 16 x 16 Darcy set's first 48 samples as HDF5,
# coeff/sol), cube.h5 (24 samples on a 12 x 8 x 6 grid) and thin.h5 (its
# first 3 rows of a 2D slice: a grid too thin to split).
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
