# The outputs of fno_predict --domain-parallel against one process's: the
# datasets pred, l2, h1, (Navier-Stokes) l2_per_record and (benchmark runs)
# rollout, vrmse, nrmse (those present in either) and the summary's mean_l2,
# mean_h1, l2_per_record and (benchmark runs) n_windows and every metric per
# field (*rmse*), within 1e-5 relative (of the largest magnitude).
# Prints "ok A B" or "differ A B: what" per pair; exits 1 when any differs.
#   python predict_domain_compare.py A.h5 B.h5 [A2.h5 B2.h5 ...]
import json, os, sys

import h5py
import numpy as np

TOL = 1e-5


def summary(path):
    s = os.path.splitext(path)[0] + ".summary.json"
    if not os.path.exists(s):
        return None
    with open(s) as f:
        return json.load(f)


def compare(a, b):
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names = sorted(set(fa.keys()) | set(fb.keys()))
        for name in ("pred", "l2", "h1", "l2_per_record", "rollout", "vrmse", "nrmse"):
            if name not in names:
                continue
            if name not in fa or name not in fb:
                return f"{name} in one file only"
            x, y = fa[name][...], fb[name][...]
            if x.shape != y.shape:
                return f"{name} shape {x.shape} vs {y.shape}"
            scale = max(float(np.abs(y).max()), 1e-30)
            err = float(np.abs(x - y).max()) / scale
            if not np.isfinite(err) or err > TOL:
                return f"{name} differs by {err:.3g} relative"
        if "pred" not in names:
            return "no pred dataset"
    sa, sb = summary(a), summary(b)
    if (sa is None) != (sb is None):
        return "a summary beside one file only"
    if sa is not None:
        keys = [k for k in ("mean_l2", "mean_h1", "n_samples", "n_windows") if k in sb]
        keys += [k for k in sb if "rmse" in k]
        for key in keys:
            if key not in sa:
                return f"summary: no {key}"
            va, vb = float(sa[key]), float(sb[key])
            if abs(va - vb) > TOL * max(abs(vb), 1e-30):
                return f"summary {key} {va} vs {vb}"
        if ("l2_per_record" in sa) != ("l2_per_record" in sb):
            return "l2_per_record in one summary only"
        if "l2_per_record" in sa:
            va, vb = np.array(sa["l2_per_record"]), np.array(sb["l2_per_record"])
            if va.shape != vb.shape or np.abs(va - vb).max() > TOL * max(np.abs(vb).max(), 1e-30):
                return f"summary l2_per_record {va.tolist()} vs {vb.tolist()}"
    return None


failed = False
args = sys.argv[1:]
for a, b in zip(args[0::2], args[1::2]):
    try:
        why = compare(a, b)
    except Exception as e:  # a missing or unreadable file
        why = f"{type(e).__name__}: {e}"
    print(f"ok {a} {b}" if why is None else f"differ {a} {b}: {why}")
    failed |= why is not None
sys.exit(1 if failed else 0)
