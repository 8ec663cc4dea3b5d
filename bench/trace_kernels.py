#!/usr/bin/env python3
"""Sums the CUDA kernels of a Chrome trace (fno_bench --trace, tiled_step_bench --trace)
by name: total GPU time per kernel, their share of the GPU's busy time, and the
busy time against the trace's span (how much of the step the GPU was idle).
With --gaps N: the CUDA runtime calls by total host time (a long
cudaStreamSynchronize or cudaFree is a host sync), and the N longest stretches
the GPU sat idle, each with the GPU work after it and the host calls and CPU
ops that ran while it waited. With --ops: under each kernel, the CPU ops that
launched it (innermost last, the most common chain).

    bench/trace_kernels.py TRACE.json [--top 25] [--gaps 10] [--ops]
"""
import argparse
import bisect
import collections
import json

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def busy_spans(events):
    """Merged [start, end) intervals of the given events."""
    merged = []
    for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in events):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged


def report_gaps(events, gpu, spans, count, chain=None):
    runtime = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    by_call = collections.defaultdict(lambda: [0.0, 0])
    for e in runtime:
        by_call[e["name"]][0] += e.get("dur", 0)
        by_call[e["name"]][1] += 1
    print("host time in CUDA calls:")
    for name, (us, n) in sorted(by_call.items(), key=lambda kv: -kv[1][0])[:12]:
        print(f"{us / 1e3:9.2f} ms {n:6d}x  {name}")
        if chain and "Synchronize" in name:
            where = collections.Counter(" > ".join(chain(r=e)[-4:]) for e in runtime
                                        if e["name"] == name)
            for c, k in where.most_common(3):
                print(f"{'':26}{k}x from {c[-150:]}")
    cpu = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    cpu_ts = [e["ts"] for e in cpu]
    starts = sorted(gpu, key=lambda e: e["ts"])
    start_ts = [e["ts"] for e in starts]
    gaps = [(b[0] - a[1], a[1], b[0]) for a, b in zip(spans, spans[1:])]
    total = sum(g for g, _, _ in gaps)
    print(f"GPU idle between events: {total / 1e3:.2f} ms in {len(gaps)} gaps; "
          f"over 50 us: {sum(g for g in (x[0] for x in gaps) if g > 50) / 1e3:.2f} ms")
    for g, a, b in sorted(gaps, reverse=True)[:count]:
        nxt = starts[bisect.bisect_left(start_ts, b)]
        calls = [e for e in runtime if e["ts"] < b and e["ts"] + e.get("dur", 0) > a
                 and e.get("dur", 0) > 0.2 * g]
        lo, hi = bisect.bisect_left(cpu_ts, a), bisect.bisect_left(cpu_ts, b)
        ops = collections.Counter(e["name"] for e in cpu[lo:hi])
        print(f"  idle {g / 1e3:7.3f} ms before {nxt['name'][:70]}")
        for e in calls[:3]:
            print(f"      host call {e['name']} {e['dur'] / 1e3:.3f} ms")
        if ops:
            print("      cpu ops: " + ", ".join(f"{n} x{c}" for n, c in ops.most_common(6)))


def launchers(events):
    """Kernel correlation id -> the chain of CPU ops (outermost first) around its launch."""
    runtime = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            runtime[e["args"]["correlation"]] = e
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and "dur" in e:
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for ops in by_thread.values():
        ops.sort(key=lambda e: e["ts"])
    starts = {k: [e["ts"] for e in v] for k, v in by_thread.items()}

    def chain(corr=None, r=None):
        r = r if r is not None else runtime.get(corr)
        if r is None:
            return ()
        key = (r.get("pid"), r.get("tid"))
        ops = by_thread.get(key, [])
        hi = bisect.bisect_right(starts.get(key, []), r["ts"])
        around = [e for e in ops[max(0, hi - 400):hi] if e["ts"] + e["dur"] >= r["ts"]]
        return tuple(e["name"] for e in sorted(around, key=lambda e: (e["ts"], -e["dur"])))

    return chain


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--gaps", type=int, default=0, help="list the N longest GPU idle gaps")
    ap.add_argument("--ops", action="store_true", help="the CPU ops that launched each kernel")
    args = ap.parse_args()
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") in GPU_CATS and "dur" in e]
    if not kernels:
        print("no GPU events")
        return
    by_name = collections.defaultdict(lambda: [0.0, 0])
    chains = collections.defaultdict(collections.Counter)
    chain = launchers(events) if args.ops else None
    for e in kernels:
        name = e["name"] if e["cat"] == "kernel" else e["cat"] + ": " + e["name"]
        by_name[name][0] += e["dur"]
        by_name[name][1] += 1
        if chain:
            c = chain(e.get("args", {}).get("correlation"))
            chains[name][" > ".join(c[-5:])] += 1
    spans = busy_spans(kernels)
    busy = sum(b - a for a, b in spans)
    first, last = spans[0][0], spans[-1][1]
    print(f"GPU events {len(kernels)}, span {(last - first) / 1e3:.2f} ms, "
          f"busy {busy / 1e3:.2f} ms ({100 * busy / (last - first):.1f}%)")
    total = sum(v[0] for v in by_name.values())
    for name, (us, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{us / 1e3:9.2f} ms {100 * us / total:5.1f}% {n:6d}x  {name[:110]}")
        for c, k in chains[name].most_common(2):
            print(f"{'':26}{k}x from {c[-150:]}")
    if args.gaps:
        report_gaps(events, kernels, spans, args.gaps, chain)


if __name__ == "__main__":
    main()
