#!/usr/bin/env python3
"""Sums the CUDA kernels of a Chrome trace (fno_bench --trace, tiled_step_bench --trace)
by name: total GPU time per kernel, their share of the GPU's busy time, and the
busy time against the trace's span (how much of the step the GPU was idle).

    bench/trace_kernels.py TRACE.json [--top 25]
"""
import argparse
import collections
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not kernels:
        print("no GPU events")
        return
    by_name = collections.defaultdict(lambda: [0.0, 0])
    spans = []
    for e in kernels:
        name = e["name"] if e["cat"] == "kernel" else e["cat"] + ": " + e["name"]
        by_name[name][0] += e["dur"]
        by_name[name][1] += 1
        spans.append((e["ts"], e["ts"] + e["dur"]))
    spans.sort()
    busy, end = 0.0, -1e30
    for a, b in spans:
        if b <= end:
            continue
        busy += b - max(a, end)
        end = b
    first, last = spans[0][0], max(b for _, b in spans)
    print(f"GPU events {len(kernels)}, span {(last - first) / 1e3:.2f} ms, "
          f"busy {busy / 1e3:.2f} ms ({100 * busy / (last - first):.1f}%)")
    total = sum(v[0] for v in by_name.values())
    for name, (us, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{us / 1e3:9.2f} ms {100 * us / total:5.1f}% {n:6d}x  {name[:110]}")


if __name__ == "__main__":
    main()
