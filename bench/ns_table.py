#!/usr/bin/env python3
"""The FNO paper's Navier-Stokes table (Li et al. 2020, section 5.3, Table 1) against our runs.

Reads fno_train run directories (or the copies `scripts/gpu.sh nstrain` brings back:
config.yaml, metrics.jsonl, and segments.tsv when present) and prints one markdown row per
run: viscosity, T (t_in + t_out records), N (training samples), the model (space_time: FNO-3D,
recurrent: FNO-2D) and what differs from neuraloperator's (model.use_channel_mlp false: "paper
blocks"; model.single_gelu true: "one GELU"; model.spectral_init paper: "paper init";
training.max_grad_norm N below 1e30: "clip N"), the seed, the epochs trained of the
config's, our test relative L2 (the last evaluation's `<set>_l2`), the paper's cell, whether
ours is at or under it, the error of the first 10 predicted records alone (`<set>_l2_upto`'s
tenth entry, where the run has it: a 10-record rollout's reading), and the training time (the
epochs' seconds, and the fno_train calls' wall time from segments.tsv), and the validation
samples' relative L2 where the run evaluated a test set named `val` (its last `val_l2`: a
choice between configs is made on it, never on the test error).

    bench/ns_table.py DIR [DIR ...] [--tsv OUT]

Standard library only. The viscosity comes from the training file's name
(fno_datagen's ns_v<nu>_T<T>_train.h5, as the paper configs name it).
"""
import argparse
import json
import os
import re
import sys

# The paper's test relative L2 errors, Table 1: (nu, T, N) -> (FNO-3D, FNO-2D).
PAPER = {
    ("1e-3", 50, 1000): (0.0086, 0.0128),
    ("1e-4", 30, 1000): (0.1918, 0.1559),
    ("1e-4", 30, 10000): (0.0820, 0.0834),
    ("1e-5", 20, 1000): (0.1893, 0.1556),
}
MODELS = {"space_time": "FNO-3D", "recurrent": "FNO-2D"}


def read_config(path):
    """The few keys used here from fno_train's resolved config.yaml: {section: {key: text}}."""
    out, section = {}, None
    with open(path) as f:
        for line in f:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if not line[0].isspace():
                section = line.split(":", 1)[0].strip()
                out.setdefault(section, {})
            elif section and line.startswith("  ") and not line.startswith("   "):
                key, _, value = line.strip().partition(":")
                out[section][key.strip()] = value.strip().strip('"')
    return out


def run_row(d):
    cfg = read_config(os.path.join(d, "config.yaml"))
    data, training = cfg.get("data", {}), cfg.get("training", {})
    if data.get("problem") != "ns":
        raise ValueError(f"{d}: data.problem is {data.get('problem')!r}, not ns")
    name = os.path.basename(data.get("train_file", ""))
    m = re.match(r"ns_v([0-9.eE+-]+)_T(\d+)", name)
    if not m:
        raise ValueError(f"{d}: data.train_file {name!r} is not ns_v<nu>_T<T>_train.h5")
    nu = m.group(1)
    t = int(data["t_in"]) + int(data["t_out"])
    n = int(data["n_train"])
    model = MODELS.get(data.get("ns_mode"), data.get("ns_mode"))
    m_cfg = cfg.get("model", {})
    variant = [v for k, off, v in (("use_channel_mlp", "false", "paper blocks"),
                                   ("single_gelu", "true", "one GELU"),
                                   ("spectral_init", "paper", "paper init"))
               if m_cfg.get(k) == off]
    clip = float(training.get("max_grad_norm", 0) or 0)
    if 0 < clip < 1e30:  # (1e30 and above log the norms without clipping)
        variant.append("clip " + (f"{clip:.0e}".replace("e+0", "e").replace("e+", "e")
                                  if clip >= 1e3 else f"{clip:g}"))
    lines = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
    if not lines:
        raise ValueError(f"{d}: metrics.jsonl holds no epoch")
    evals = [l for l in lines if any(k.endswith("_l2") and k != "val_l2" for k in l)]
    ours = first10 = val = None
    if evals:
        key = next(k for k in evals[-1] if k.endswith("_l2") and k != "val_l2")
        ours = evals[-1][key]
        upto = evals[-1].get(key + "_upto")
        val = evals[-1].get("val_l2")  # a data.test set named val: the validation samples
        if upto and len(upto) > 10:
            first10 = upto[9]
    wall = None
    seg = os.path.join(d, "segments.tsv")
    if os.path.exists(seg):
        wall = sum(float(l.split("\t")[2]) for l in open(seg) if l.strip())
    paper = PAPER.get((nu, t, n))
    cell = None if paper is None else paper[0 if model == "FNO-3D" else 1]
    return {
        "nu": nu, "T": t, "N": n, "model": model,
        "epochs": f"{lines[-1]['epoch']} of {training.get('epochs', '?')}",
        "ours": ours, "paper": cell,
        "at_or_under": None if ours is None or cell is None else ours <= cell,
        "variant": ", ".join(variant), "seed": training.get("seed", ""), "first10": first10,
        "train_min": sum(l.get("seconds", 0.0) for l in lines) / 60.0,
        "wall_min": None if wall is None else wall / 60.0,
        "run": d, "val": val,
    }


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--tsv", help="also write the rows here, tab-separated")
    args = ap.parse_args()
    try:
        rows = [run_row(d) for d in args.dirs]
    except (OSError, ValueError, KeyError) as e:
        print(f"ns_table: {e}", file=sys.stderr)
        return 1
    rows.sort(key=lambda r: (r["nu"], r["T"], r["N"], r["model"], r["variant"], str(r["seed"])))
    print("| ν | T | N | model | seed | epochs | test rel. L2, ours | paper | at or under | "
          "first 10 records | training (min) | fno_train wall (min) | validation rel. L2 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        verdict = {None: "", True: "yes", False: "no"}[r["at_or_under"]]
        model = r["model"] + (f" ({r['variant']})" if r["variant"] else "")
        print(f"| {r['nu']} | {r['T']} | {r['N']} | {model} | {r['seed']} | {r['epochs']} | "
              f"{fmt(r['ours'], '.4f')} | {fmt(r['paper'], '.4f')} | {verdict} | "
              f"{fmt(r['first10'], '.4f')} | {fmt(r['train_min'], '.1f')} | "
              f"{fmt(r['wall_min'], '.1f')} | {fmt(r['val'], '.5f')} |")
    if args.tsv:
        keys = list(rows[0].keys())
        with open(args.tsv, "w") as f:
            f.write("\t".join(keys) + "\n")
            for r in rows:
                f.write("\t".join("" if r[k] is None else str(r[k]) for k in keys) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
