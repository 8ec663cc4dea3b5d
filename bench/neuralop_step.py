#!/usr/bin/env python3
"""Times one training step of neuraloperator 2.0.0's FNO (the reference) on the GPU.

Step = forward, H1 loss, backward, AdamW step, as fno_smoke/fno_bench do.
Prints one JSON line: ms per step (median), peak GPU bytes; or, when the
step fails (autocast bf16 meets cuFFT), the error.

    python3 bench/neuralop_step.py --resolution 1024 --batch 8 [--save-on-cpu]
        [--precision fp32|tf32|fp16|bf16] [--block-precision full|mixed]

--precision tf32 allows TF32 in cuBLAS and cuDNN; fp16 and bf16 run forward
and loss under torch.autocast (what neuraloperator's Trainer does with
mixed_precision=True); --block-precision is FNO(fno_block_precision=...).
"""
import argparse
import json
import statistics
import time

import torch
from neuralop.losses import H1Loss
from neuralop.models import FNO
from neuralop.training import AdamW


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--resolution", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--save-on-cpu", action="store_true",
                    help="wrap forward+loss in torch.autograd.graph.save_on_cpu(pin_memory=True)")
    ap.add_argument("--trace", default="", help="write a Chrome trace of one more step here")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"])
    ap.add_argument("--block-precision", default="full", choices=["full", "mixed"])
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    autocast = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.precision)

    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = FNO(n_modes=(16, 16), in_channels=1, out_channels=1, hidden_channels=32,
                projection_channel_ratio=2, fno_block_precision=args.block_precision).to(dev)
    opt = AdamW(model.parameters(), lr=8e-3, weight_decay=1e-4)
    loss_fn = H1Loss(d=2)
    r = args.resolution
    x = torch.randn(args.batch, 1, r, r, device=dev)
    y = torch.randn(args.batch, 1, r, r, device=dev)

    def forward_loss():
        if autocast is None:
            return loss_fn(model(x), y)
        with torch.autocast("cuda", dtype=autocast):
            return loss_fn(model(x), y)

    def step():
        opt.zero_grad(set_to_none=True)
        if args.save_on_cpu:
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                loss = forward_loss()
        else:
            loss = forward_loss()
        loss.backward()
        opt.step()
        return loss

    common = {"impl": "neuraloperator-2.0.0", "save_on_cpu": args.save_on_cpu,
              "precision": args.precision, "block_precision": args.block_precision,
              "resolution": r, "batch": args.batch, "device": torch.cuda.get_device_name(0)}
    try:
        step()  # warm-up: cuFFT plans, allocator
    except Exception as e:  # noqa: BLE001 - reported as the row's result
        print(json.dumps({**common, "error": str(e).splitlines()[0]}))
        return
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    if args.trace:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        prof.export_chrome_trace(args.trace)
    print(json.dumps({**common, "ms_per_step": statistics.median(times),
                      "peak_bytes": torch.cuda.max_memory_allocated()}))


if __name__ == "__main__":
    main()
