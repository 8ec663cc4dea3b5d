#!/usr/bin/env python3
"""Issue 28: how fast can the last dim's real-DFT GEMMs of a SpectralConv run?

A 2D FNO block at S x S (batch B, C channels, k kept modes of the last dim)
runs four fp32 GEMMs against small constant matrices (libfno/src/spectral.h's
RealDft), M = B * C * S rows each:
  analysis    [M, S]  @ [S, 2k]   (forward)      and its adjoint [M, 2k] @ [2k, S]^T
  synthesis   [M, 2k] @ [2k, S]   (forward)      and its adjoint [M, S]  @ [S, 2k]^T
With 2k = 18 (the seed model's 16 modes) cuBLAS pads the narrow side to its
tile (64 or 128), so these GEMMs run well below the memory bound. This times
each as LibTorch calls it (torch.matmul), cuBLAS in other arrangements, and
Triton's autotuned GEMM (torch.compile max-autotune, where it compiles), against
the memory floor (one read of the grid-sized operand and one write of the
output, timed as a copy of the same bytes). Prints one JSON line per row.

    python3 bench/dft_gemm_probe.py [--sizes 64,128,256] [--batch 32] [--channels 32]
        [--modes 9] [--triton]
"""
import argparse
import json

import torch

from micro_ops import bench  # (this folder; it also turns TF32 off)


def median_ms(fn):
    return bench(fn, reps=15, inner=20)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="64,128,256")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--channels", type=int, default=32)
    ap.add_argument("--modes", type=int, default=9, help="kept modes of the last dim (2k columns)")
    ap.add_argument("--triton", action="store_true", help="also torch.compile max-autotune")
    a = ap.parse_args()
    dev = "cuda"
    k2 = 2 * a.modes
    for s in [int(v) for v in a.sizes.split(",")]:
        m = a.batch * a.channels * s
        x = torch.randn(m, s, device=dev)  # a grid: rows of the last dim
        z = torch.randn(m, k2, device=dev)  # kept modes, re/im interleaved
        an = torch.randn(s, k2, device=dev)  # analysis [S, 2k]
        sy = torch.randn(k2, s, device=dev)  # synthesis [2k, S]
        big_out = torch.empty(m, s, device=dev)
        small_out = torch.empty(m, k2, device=dev)
        # (name, the op, bytes moved at the least: the grid once and the small side once)
        grid_bytes, small_bytes = x.numel() * 4, z.numel() * 4
        rows = [
            ("analysis x@A", lambda: torch.matmul(x, an, out=small_out)),
            ("analysis (A^T x^T)^T", lambda: torch.mm(an.t(), x.t())),
            ("analysis bmm by S-row blocks",
             lambda: torch.bmm(x.view(-1, s, s), an.unsqueeze(0).expand(m // s, -1, -1))),
            ("synthesis z@S", lambda: torch.matmul(z, sy, out=big_out)),
            ("synthesis (S^T z^T)^T", lambda: torch.mm(sy.t(), z.t())),
            ("analysis adjoint g@A^T", lambda: torch.matmul(z, an.t(), out=big_out)),
            ("synthesis adjoint g@S^T", lambda: torch.matmul(x, sy.t(), out=small_out)),
        ]
        floor_src = torch.empty(grid_bytes + small_bytes, dtype=torch.uint8, device=dev)
        floor_dst = torch.empty_like(floor_src)
        floor = median_ms(lambda: floor_dst.copy_(floor_src))
        print(json.dumps({"S": s, "M": m, "2k": k2, "op": "floor: copy of grid + modes bytes",
                          "ms": round(floor, 4)}), flush=True)
        for name, fn in rows:
            print(json.dumps({"S": s, "M": m, "2k": k2, "op": name,
                              "ms": round(median_ms(fn), 4)}), flush=True)
        if a.triton:
            for name, f, arg, w in [("analysis triton", lambda u, v: u @ v, x, an),
                                    ("synthesis triton", lambda u, v: u @ v, z, sy),
                                    ("synthesis adjoint triton", lambda u, v: u @ v.t(), x, sy)]:
                try:
                    g = torch.compile(f, mode="max-autotune-no-cudagraphs", dynamic=False)
                    ms = median_ms(lambda: g(arg, w))
                    print(json.dumps({"S": s, "M": m, "2k": k2, "op": name, "ms": round(ms, 4)}),
                          flush=True)
                except Exception as e:  # no Triton, or no compiler on the machine
                    print(json.dumps({"S": s, "op": name, "error": str(e).splitlines()[0][:200]}),
                          flush=True)


if __name__ == "__main__":
    main()
