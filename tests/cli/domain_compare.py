# Whether run directory A's outputs equal B's within 1e-5 relative (--tol T:
# within T; each tensor's or number's difference against its norm): every number of each
# metrics.jsonl line (but seconds and peak memory), summary.json's metrics,
# model.pt, normalizers.pt (or neither run has one: no normalization) and
# checkpoint_latest.pt (same keys; all but the checkpoint's digest),
# predictions.h5's datasets. Prints
# per pair "ok A B" or "differ A B: what differs"; exit 1 when anything does.
#   python domain_compare.py [--tol T] A B [A2 B2 ...]
import json, os, sys, torch, h5py
bad = []
args = sys.argv[1:]
TOL = 1e-5
if args[:1] == ["--tol"]:
    TOL, args = float(args[1]), args[2:]
def close(what, x, y, tol=None):
    tol = TOL if tol is None else tol
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    x, y = [torch.view_as_real(t) if t.is_complex() else t for t in (x, y)]
    x, y = x.double(), y.double()
    if x.shape != y.shape:
        bad.append(f"{what}: shape {tuple(x.shape)} vs {tuple(y.shape)}"); return
    d = (x - y).norm().item(); s = y.norm().item()
    if d > tol * s + 1e-12: bad.append(f"{what}: relative difference {d / max(s, 1e-30):.3g}")
def compare(a, b):
    la = [json.loads(l) for l in open(f"{a}/metrics.jsonl")]
    lb = [json.loads(l) for l in open(f"{b}/metrics.jsonl")]
    if len(la) != len(lb) or not la: bad.append(f"metrics.jsonl: {len(la)} vs {len(lb)} lines")
    for i, (x, y) in enumerate(zip(la, lb)):
        for k, v in y.items():
            if k in ("seconds", "peak_gpu_bytes"): continue
            if k not in x: bad.append(f"line {i}: no {k}"); continue
            close(f"line {i} {k}", x[k], v)
    sa, sb = json.load(open(f"{a}/summary.json")), json.load(open(f"{b}/summary.json"))
    if sorted(sa["metrics"]) != sorted(sb["metrics"]): bad.append("summary.json metrics keys differ")
    for k, v in sb["metrics"].items(): close(f"summary {k}", sa["metrics"].get(k, float("nan")), v)
    for f in ("model.pt", "normalizers.pt", "checkpoint_latest.pt"):
        if f == "normalizers.pt" and not os.path.exists(f"{b}/{f}"):
            if os.path.exists(f"{a}/{f}"): bad.append(f"{f}: only in {a}")
            continue
        da, db = torch.load(f"{a}/{f}"), torch.load(f"{b}/{f}")
        if sorted(da) != sorted(db): bad.append(f"{f}: keys differ"); continue
        # (Not the digest of the file's bytes, nor the data-parallel shards it
        # was written by: 2 x 2 ranks are compared with one process.)
        for k in db:
            if k not in ("meta.sha1", "meta.world_size"): close(f"{f} {k}", da[k], db[k])
    with h5py.File(f"{a}/predictions.h5") as fa, h5py.File(f"{b}/predictions.h5") as fb:
        names = []
        fb.visit(lambda n: names.append(n) if isinstance(fb[n], h5py.Dataset) else None)
        for n in names:
            if n not in fa: bad.append(f"predictions.h5: no {n}"); continue
            close(f"predictions.h5 {n}", fa[n][()], fb[n][()])

failed = False
for a, b in zip(args[::2], args[1::2]):
    bad = []
    try:
        compare(a, b)
    except Exception as e:  # a missing or unreadable output
        bad.append(f"{type(e).__name__}: {e}")
    print(f"ok {a} {b}" if not bad else f"differ {a} {b}: " + "; ".join(bad[:6]))
    failed = failed or bool(bad)
sys.exit(1 if failed else 0)
