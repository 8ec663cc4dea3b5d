# fp32 sums of squares over long rows on the GPU, against float64: LibTorch's reduction as
# band_rel_loss calls it (t.flatten(2).pow(2).sum(-1)), and with dtype=float64.
import time, torch
torch.manual_seed(0)
dev = "cuda"
for shape in [(1, 1, 1 << 20), (1, 1, 1 << 24), (1, 1, 1 << 28), (1, 32, 1 << 26), (1, 1, (1 << 31) + 7), (1, 2, (1 << 31) + 7)]:
    x = torch.randn(shape, device=dev) * 0.1 + 1.0
    ref = x.double().pow(2).sum(-1)
    torch.cuda.synchronize(); t = time.time()
    f32 = x.pow(2).sum(-1)
    torch.cuda.synchronize(); t32 = time.time() - t; t = time.time()
    f64 = x.pow(2).sum(-1, dtype=torch.float64)
    torch.cuda.synchronize(); t64 = time.time() - t
    e32 = ((f32.double() - ref).abs() / ref).max().item()
    e64 = ((f64 - ref).abs() / ref).max().item()
    print(f"{str(shape):28s} fp32 sum: rel err {e32:.2e} ({t32*1e3:.1f} ms); dtype=float64: {e64:.2e} ({t64*1e3:.1f} ms)", flush=True)
    del x, ref, f32, f64
    torch.cuda.empty_cache()
