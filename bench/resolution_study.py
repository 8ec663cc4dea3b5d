#!/usr/bin/env python3
"""Collects a resolution study into OUT/study.csv, OUT/steps.csv and OUT/study.json.

    resolution_study.py OUT

Called by bench/resolution_study.sh, which leaves OUT/runs.tsv (one line per
training run: resolution, label, policy, budget, run directory, exit code, and
why it was skipped), OUT/steps.tsv (one line per fno_bench cell, the same way)
and the settings in STUDY_* environment variables. Per run it reads what
fno_train wrote: metrics.jsonl (seconds and peak_gpu_bytes per epoch),
summary.json (test metrics, device, n_params) and stderr.txt (the auto plan,
the error); per cell, fno_bench's steps/RES_LABEL.json (its row: status, median
ms per step, peak memory, plan) and .log. Standard library only. Exits 1 when
neither a run nor a cell succeeded.
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
STEP_COLUMNS = ["resolution", "label", "policy", "budget", "budget_bytes", "batch", "status",
                "exit_code", "ms_per_step", "peak_allocated_bytes", "peak_reserved_bytes",
                "estimated_peak_bytes", "bytes_offloaded", "plan_seconds", "wall_seconds",
                "device", "plan", "message"]


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
    if row.get("skipped"):
        return {**{k: None for k in COLUMNS}, "resolution": int(row["resolution"]),
                "label": row["label"], "policy": row["policy"], "budget": row["budget"],
                "budget_bytes": parse_bytes(row["budget"]), "status": "skipped",
                "epochs_done": 0, "device": "", "plan": "", "message": row["skipped"],
                "run_dir": row["run_dir"]}
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


def step_status(status, rc):
    """fno_bench's row status in the study's words: ok, oom, refused, timeout or error."""
    if status == "ok":
        return "ok"
    if rc in (124, 137):
        return "timeout"
    if status == "oom" or "out of memory" in status.lower():
        return "oom"
    if status.startswith("over budget"):
        return "refused"
    return "error"


def collect_step(out, row):
    """One fno_bench cell: its JSON row, or why there is none."""
    name = os.path.join(out, "steps", f"{row['resolution']}_{row['label']}")
    bench = read_json(name + ".json")
    r = (bench.get("rows") or [{}])[0]
    log = read_lines(name + ".log")
    rc = int(row["exit_code"]) if row["exit_code"] else None
    budget = row["budget"]
    step = {k: None for k in STEP_COLUMNS}
    step.update({
        "resolution": int(row["resolution"]), "label": row["label"], "policy": row["policy"],
        "budget": budget, "budget_bytes": parse_bytes(budget) if budget not in ("", "free") else None,
        "batch": int(row["batch"]), "exit_code": rc,
        "wall_seconds": float(row["seconds"]) if row["seconds"] else None,
        "device": bench.get("device", ""), "plan": r.get("plan", ""), "message": "",
    })
    if row.get("skipped"):
        step.update(status="skipped", message=row["skipped"])
        return step
    status = step_status(r.get("status", ""), rc)
    step["status"] = status
    if status == "ok":
        for k in ("ms_per_step", "peak_allocated_bytes", "peak_reserved_bytes",
                  "estimated_peak_bytes", "bytes_offloaded", "plan_seconds"):
            step[k] = r.get(k)
    else:
        said = next((l for l in reversed(log) if l.strip()), "")
        step["message"] = r.get("status") if r.get("status") not in (None, "", "oom") else said
        if status == "timeout":
            step["message"] = f"no result within the cell's time (exit {rc})"
        elif not step["message"] and rc and rc > 128:
            step["message"] = f"killed by signal {rc - 128}"
    return step


def write_csv(path, columns, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r[k] is None else r[k]) for k in columns})


def main():
    out = sys.argv[1]
    with open(os.path.join(out, "runs.tsv")) as f:
        runs = [collect(out, r) for r in csv.DictReader(f, delimiter="\t")]
    steps = []
    if os.path.exists(os.path.join(out, "steps.tsv")):
        with open(os.path.join(out, "steps.tsv")) as f:
            steps = [collect_step(out, r) for r in csv.DictReader(f, delimiter="\t")]
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
        "small_budgets": env("STUDY_SMALL_BUDGETS", env("STUDY_SMALL_BUDGET", "")).split(),
        "small_budgets_bytes": [parse_bytes(b) for b in
                                env("STUDY_SMALL_BUDGETS", env("STUDY_SMALL_BUDGET", "")).split()],
        "device": ", ".join(devices),
        "device_bytes": int(env("STUDY_DEVICE_BYTES", "0")),
        "step_batch": int(env("STUDY_STEP_BATCH", "0")),
        "step_warmup": int(env("STUDY_STEP_WARMUP", "0")),
        "step_steps": int(env("STUDY_STEP_STEPS", "0")),
        "runs": runs,
        "steps": steps,
    }
    if not study["device"]:
        study["device"] = next((s["device"] for s in steps if s["device"]), "")
    # (each file whole or not at all: written beside, then renamed)
    with open(os.path.join(out, "study.json.part"), "w") as f:
        json.dump(study, f, indent=1)
        f.write("\n")
    write_csv(os.path.join(out, "study.csv.part"), COLUMNS, runs)
    write_csv(os.path.join(out, "steps.csv.part"), STEP_COLUMNS, steps)
    for name in ("study.json", "study.csv", "steps.csv"):
        os.replace(os.path.join(out, name + ".part"), os.path.join(out, name))

    def fmt(v, spec):
        return "-" if v is None else format(v, spec)
    print(f"{'res':>6} {'run':<16} {'status':<6} {'peak GiB':>9} {'s/epoch':>8} {'test_l2':>8}")
    for r in runs:
        peak = None if r["peak_gpu_bytes"] is None else r["peak_gpu_bytes"] / 2 ** 30
        print(f"{r['resolution']:>6} {r['label']:<16} {r['status']:<6} {fmt(peak, '9.2f')} "
              f"{fmt(r['seconds_per_epoch'], '8.2f')} {fmt(r['test_l2'], '8.4f')}")
    if steps:
        print(f"{'res':>6} {'step':<16} {'status':<8} {'peak GiB':>9} {'ms/step':>9}  plan or why not")
        for r in steps:
            peak = None if r["peak_allocated_bytes"] is None else r["peak_allocated_bytes"] / 2 ** 30
            print(f"{r['resolution']:>6} {r['label']:<16} {r['status']:<8} {fmt(peak, '9.2f')} "
                  f"{fmt(r['ms_per_step'], '9.1f')}  {(r['plan'] or r['message'])[:90]}")
    print(f"wrote {out}/study.csv, {out}/steps.csv and {out}/study.json")
    if not any(r["status"] == "ok" for r in runs + steps):
        print("resolution_study: no run succeeded", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
