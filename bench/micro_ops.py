#!/usr/bin/env python3
"""Micro-benchmarks of FNO building blocks on the GPU, to choose kernels.

Times forward+backward of candidate implementations with CUDA events
(median of repeats). Same ATen kernels as LibTorch uses.
"""
import torch

dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = False


def bench(fn, reps=10, inner=1):
    """Median ms of fn over reps timings, each of `inner` calls back to back (divided by it)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / inner)
    ts.sort()
    return ts[len(ts) // 2]


def pointwise(B, cin, cout, N):
    x = torch.randn(B, cin, N, device=dev, requires_grad=True)
    w = torch.randn(cout, cin, 1, device=dev, requires_grad=True)
    b = torch.randn(cout, device=dev, requires_grad=True)
    gy = torch.randn(B, cout, N, device=dev)

    def run(f):
        def g():
            x.grad = w.grad = b.grad = None
            f().backward(gy)
        return bench(g)

    w2 = lambda: w.squeeze(-1)
    res = {
        "conv1d": run(lambda: torch.nn.functional.conv1d(x, w, b)),
        "matmul": run(lambda: torch.matmul(w2(), x) + b[:, None]),
        "baddbmm_expand": run(lambda: torch.baddbmm(b[None, :, None], w2().expand(B, -1, -1), x)),
    }

    class PW(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w)
            return torch.baddbmm(b[None, :, None], w.squeeze(-1).expand(x.shape[0], -1, -1), x)

        @staticmethod
        def backward(ctx, gy):
            x, w = ctx.saved_tensors
            W = w.squeeze(-1)
            gx = torch.bmm(W.t().expand(x.shape[0], -1, -1), gy)
            gw = torch.zeros_like(W)
            for i in range(x.shape[0]):
                gw.addmm_(gy[i], x[i].t())
            gb = gy.sum(dim=(0, 2))
            return gx, gw.unsqueeze(-1), gb

    res["custom_loop_addmm"] = run(lambda: PW.apply(x, w, b))
    return res


def fft_variants(B, C, n, m):
    x = torch.randn(B, C, n, n, device=dev, requires_grad=True)
    k_last = m // 2 + 1

    def full():
        X = torch.fft.rfftn(x, dim=(-2, -1), norm="forward")
        Xk = torch.cat([X[..., n - m // 2:, :k_last], X[..., :m // 2, :k_last]], dim=-2)
        out = torch.zeros(B, C, n, n // 2 + 1, dtype=X.dtype, device=dev)
        out[..., :m // 2, :k_last] = Xk[..., m // 2:, :]
        out[..., n - m // 2:, :k_last] = Xk[..., :m // 2, :]
        return torch.fft.irfftn(out, s=(n, n), dim=(-2, -1), norm="forward")

    def staged():
        X = torch.fft.rfft(x, dim=-1, norm="forward")[..., :k_last]
        X = torch.fft.fft(X, dim=-2, norm="forward")
        Xk = torch.cat([X[..., n - m // 2:, :], X[..., :m // 2, :]], dim=-2)
        z = torch.zeros(B, C, n - m, k_last, dtype=X.dtype, device=dev)
        out = torch.cat([Xk[..., m // 2:, :], z, Xk[..., :m // 2, :]], dim=-2)
        out = torch.fft.ifft(out, dim=-2, norm="forward")
        return torch.fft.irfft(out, n=n, dim=-1, norm="forward")

    def staged_contig():
        X = torch.fft.rfft(x, dim=-1, norm="forward")[..., :k_last].contiguous()
        X = torch.fft.fft(X, dim=-2, norm="forward")
        Xk = torch.cat([X[..., n - m // 2:, :], X[..., :m // 2, :]], dim=-2)
        z = torch.zeros(B, C, n - m, k_last, dtype=X.dtype, device=dev)
        out = torch.cat([Xk[..., m // 2:, :], z, Xk[..., :m // 2, :]], dim=-2)
        out = torch.fft.ifft(out, dim=-2, norm="forward")
        return torch.fft.irfft(out, n=n, dim=-1, norm="forward")

    gy = torch.randn(B, C, n, n, device=dev)
    res = {}
    for name, f in [("rfftn_full", full), ("staged", staged), ("staged_contig", staged_contig)]:
        def g(f=f):
            x.grad = None
            f().backward(gy)
        res[name] = bench(g)
        res[name + "_fwd"] = bench(lambda f=f: f())
    return res


if __name__ == "__main__":
    print(torch.cuda.get_device_name(0))
    N = 1024 * 1024
    for cin, cout in [(3, 64), (64, 32), (32, 32), (32, 16), (16, 32), (32, 64), (64, 1)]:
        print("pointwise", cin, "->", cout, {k: round(v, 2) for k, v in pointwise(8, cin, cout, N).items()})
    print("fft 1024", {k: round(v, 2) for k, v in fft_variants(8, 32, 1024, 16).items()})
