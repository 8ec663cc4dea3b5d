#!/usr/bin/env python3
"""Collects a resolution study's runs into OUT/study.csv and OUT/study.json.

    resolution_study.py OUT

Called by bench/resolution_study.sh, which leaves OUT/runs.tsv (one line per
run: resolution, label, policy, budget, run directory, exit code) and the
settings in STUDY_* environment variables. Per run it reads what fno_train
wrote: metrics.jsonl (seconds and peak_gpu_bytes per epoch), summary.json
(test metrics, device, n_params) and stderr.txt (the auto plan, the error).
Standard library only. Exits 1 when no run succeeded.
"""
import csv
import datetime
import json
import os
import re
import statistics
import sys

UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
         "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}
COLUMNS = ["resolution", "label", "policy", "budget", "budget_bytes", "status", "exit_code",
           "peak_gpu_bytes", "seconds_per_epoch", "seconds_first_epoch", "epochs_done",
           "test_l2", "test_h1", "train_loss", "wall_seconds", "datagen_seconds", "n_params",
           "device", "plan", "message", "run_dir"]


def parse_bytes(text):
    """Sizes as fno_train reads them (16GiB, 8GB, 1.5e9); None when not one."""
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([A-Za-z]*)\s*", text or "")
    if not m or m.group(2).lower() not in UNITS:
        return None
    try:
        return int(float(m.group(1)) * UNITS[m.group(2).lower()])
    except ValueError:
        return None


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def read_lines(path):
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip("\n") for line in f]
    except OSError:
        return []


def collect(out, row):
    run_dir = os.path.join(out, row["run_dir"])
    rc = int(row["exit_code"])
    epochs = [json.loads(l) for l in read_lines(os.path.join(run_dir, "metrics.jsonl")) if l.strip()]
    summary = read_json(os.path.join(run_dir, "summary.json"))
    stderr = read_lines(os.path.join(run_dir, "stderr.txt"))
    message = next((l for l in reversed(stderr) if l.strip()), "")
    if rc == 0:
        status, message = "ok", ""
    elif "out of memory" in message.lower():
        status = "oom"
    else:
        status = "error"
        if rc > 128 and not message:
            message = f"killed by signal {rc - 128}"
    # auto prints "offload auto: budget 8.00 GiB, plan ...; measured peak ..."
    plan_line = next((l for l in stderr if l.startswith("offload auto: budget ")), "")
    budget_bytes = parse_bytes(row["budget"]) if row["budget"] not in ("", "free") else None
    m = re.match(r"offload auto: budget ([0-9.]+ ?[KMGT]?i?B)", plan_line)
    if budget_bytes is None and m:
        budget_bytes = parse_bytes(m.group(1))
    seconds = [e["seconds"] for e in epochs]
    peaks = [e.get("peak_gpu_bytes", 0) for e in epochs]
    metrics = summary.get("metrics", {}) if status == "ok" else {}
    return {
        "resolution": int(row["resolution"]),
        "label": row["label"],
        "policy": row["policy"],
        "budget": row["budget"],
        "budget_bytes": budget_bytes,
        "status": status,
        "exit_code": rc,
        "peak_gpu_bytes": max(peaks) if peaks else None,
        # The first epoch also plans (auto profiles and measures candidate plans).
        "seconds_per_epoch": statistics.mean(seconds[1:] or seconds) if seconds else None,
        "seconds_first_epoch": seconds[0] if seconds else None,
        "epochs_done": len(epochs),
        "test_l2": metrics.get("test_l2"),
        "test_h1": metrics.get("test_h1"),
        "train_loss": epochs[-1]["train_loss"] if epochs else None,
        "wall_seconds": summary.get("wall_seconds"),
        "datagen_seconds": float(row["datagen_seconds"]),
        "n_params": summary.get("n_params"),
        "device": summary.get("device", ""),
        "plan": plan_line[len("offload auto: "):] if plan_line else "",
        "message": message,
        "run_dir": row["run_dir"],
    }


def main():
    out = sys.argv[1]
    with open(os.path.join(out, "runs.tsv")) as f:
        runs = [collect(out, r) for r in csv.DictReader(f, delimiter="\t")]
    env = os.environ.get
    devices = sorted({r["device"] for r in runs if r["device"]})
    study = {
        "command": env("STUDY_COMMAND", ""),
        "commit": env("STUDY_COMMIT", ""),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "config": env("STUDY_CONFIG", ""),
        "epochs": int(env("STUDY_EPOCHS", "0")),
        "batch": int(env("STUDY_BATCH", "0")),
        "n_train": int(env("STUDY_N_TRAIN", "0")),
        "n_test": int(env("STUDY_N_TEST", "0")),
        "small_budget": env("STUDY_SMALL_BUDGET", ""),
        "small_budget_bytes": parse_bytes(env("STUDY_SMALL_BUDGET", "")),
        "device": ", ".join(devices),
        "device_bytes": int(env("STUDY_DEVICE_BYTES", "0")),
        "runs": runs,
    }
    with open(os.path.join(out, "study.json"), "w") as f:
        json.dump(study, f, indent=1)
        f.write("\n")
    with open(os.path.join(out, "study.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in runs:
            w.writerow({k: ("" if r[k] is None else r[k]) for k in COLUMNS})

    def fmt(v, spec):
        return "-" if v is None else format(v, spec)
    print(f"{'res':>6} {'run':<16} {'status':<6} {'peak GiB':>9} {'s/epoch':>8} {'test_l2':>8}")
    for r in runs:
        peak = None if r["peak_gpu_bytes"] is None else r["peak_gpu_bytes"] / 2 ** 30
        print(f"{r['resolution']:>6} {r['label']:<16} {r['status']:<6} {fmt(peak, '9.2f')} "
              f"{fmt(r['seconds_per_epoch'], '8.2f')} {fmt(r['test_l2'], '8.4f')}")
    print(f"wrote {out}/study.csv and {out}/study.json")
    if not any(r["status"] == "ok" for r in runs):
        print("resolution_study: no run succeeded", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
