#!/usr/bin/env python3
"""Draws figures/domain_scaling.png from fno_bench --domain-parallel's JSON (one sample's rows
split over GPUs; docs/domain_parallel.md):

  left:   strong scaling: one GPU's step time (policy auto) over N GPUs' for the same grid,
          precision and batch, against the number of GPUs, with the ideal N;
  right:  weak scaling: one GPU's step time over N GPUs' for a grid N times as large (the same
          grid points per GPU), in percent, with the ideal 100%.

Each number comes from the rows of fno_bench --json files: a row's ms_per_step, and its
baseline from the row of one GPU in the same folder (or the row's own ms_per_step_one_gpu when
fno_bench timed it in the same run). Only rows of status ok count; a grid whose one-GPU row is
missing or failed is left out, with a line saying so.

Its inputs, as the notebooks' (notebooks/README.md), from environment variables:
  FNO_NB_DOMAIN_DIRS  folders of fno_bench --domain-parallel JSON (bench/domain_parallel_study.sh's
                      OUT/domain, or a folder holding one), ':'-separated; a baseline pairs
                      only with rows of its own folder (one host, one study). Default: every
                      results/*/domain folder.
  FNO_NB_FIG_DIR      where the PNG goes. Default: notebooks/figures/ for the committed
                      results, a figures/ folder in the first input folder for others.
  FNO_NB_CWD          the folder relative paths resolve against (default: the repository root).

    .venv/bin/python notebooks/domain_scaling_figure.py
    FNO_NB_DOMAIN_DIRS=/tmp/fno-domain/domain .venv/bin/python notebooks/domain_scaling_figure.py

Without matplotlib it says so and draws nothing (exit 0).
"""
import glob
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def resolve(path):
    return os.path.join(os.environ.get("FNO_NB_CWD", ROOT), path)


def inputs():
    given = os.environ.get("FNO_NB_DOMAIN_DIRS", "")
    if given:
        dirs = []
        for d in (resolve(d) for d in given.split(":") if d):
            dirs.append(os.path.join(d, "domain") if os.path.isdir(os.path.join(d, "domain")) else d)
        return dirs, False
    return sorted(glob.glob(os.path.join(ROOT, "results", "*", "domain"))), True


def grid_points(grid):
    """The points of fno_bench's grid text: '8192^2', '512^3', '512^2x40'."""
    n = 1
    for part in grid.split("x"):
        base, _, power = part.partition("^")
        n *= int(base) ** int(power or 1)
    return n


def grid_label(grid):
    return re.sub(r"\^(\d)", lambda m: "²" if m.group(1) == "2" else "³", grid).replace("x", "×")


def read_rows(d):
    """The ok rows of the fno_bench JSON files in folder d, each with the file's device."""
    rows = []
    for path in sorted(glob.glob(os.path.join(d, "*.json"))):
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{path}: not JSON ({e}); skipped")
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
            continue  # (a study's summary.json: the rows' own files are read instead)
        for r in doc["rows"]:
            if r.get("status") == "ok" and r.get("ms_per_step", 0) > 0:
                rows.append({**r, "device": doc.get("device", ""), "file": path})
    return rows


def short_device(name):
    m = re.search(r"\b([A-Z]\d{2,3}[A-Z]?)\b", name or "")
    return m.group(1) if m else (name or "?")


def scaling(d):
    """Strong and weak scaling points of folder d: {label: [(gpus, value)]}, each from 1 GPU."""
    rows = read_rows(d)
    ones = {}
    for r in rows:
        if r.get("world_size", 1) == 1:
            ones[(r["grid"], r["precision"], r["batch"])] = r["ms_per_step"]
    strong, weak = {}, {}
    for r in rows:
        n = r.get("world_size", 1)
        if n <= 1 or r.get("domain_parallel", 1) != n:
            continue
        key = (r["grid"], r["precision"], r["batch"])
        base = ones.get(key) or r.get("ms_per_step_one_gpu") or 0
        dev = short_device(r["device"])
        if base > 0:
            label = f"{grid_label(r['grid'])} {r['precision']}, B={r['batch']} ({dev})"
            strong.setdefault(label, [(1, 1.0)]).append((n, base / r["ms_per_step"]))
            continue
        per_gpu = grid_points(r["grid"]) / n
        match = [(g, ms) for (g, p, b), ms in ones.items()
                 if p == r["precision"] and b == r["batch"] and g.count("^") == r["grid"].count("^")
                 and grid_points(g) == per_gpu]
        if match:
            g, ms = match[0]
            label = (f"{grid_label(g)} a GPU, {r['precision']}, B={r['batch']} ({dev}): "
                     f"{grid_label(r['grid'])} on {n}")
            weak.setdefault(label, [(1, 100.0)]).append((n, 100.0 * ms / r["ms_per_step"]))
        else:
            print(f"{r['file']}: {r['grid']} {r['precision']} on {n} GPUs has no one-GPU row "
                  f"in {d}; left out")
    return strong, weak


def draw(strong, weak, path, plt):
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    top = max([n for pts in strong.values() for n, _ in pts] + [4])
    gpus = [2 ** k for k in range(int(math.log2(top)) + 1)]
    a.plot(gpus, gpus, color="gray", ls="--", lw=1, label="ideal (N×)")
    for i, (label, pts) in enumerate(sorted(strong.items())):
        pts = sorted(pts)
        ups = ", ".join(f"{s:.2f}× on {n}" for n, s in pts[1:])
        a.plot(*zip(*pts), marker="os^Dv"[i % 5], color=f"C{i}", label=f"{label}: {ups}")
    a.set_xscale("log", base=2)
    a.set_yscale("log", base=2)
    a.set_xticks(gpus, [str(g) for g in gpus])
    a.set_yticks(gpus, [f"{g}×" for g in gpus])
    a.minorticks_off()
    a.set_xlabel("GPUs sharing one sample")
    a.set_ylabel("speed-up against one GPU (auto)")
    a.set_title("strong scaling: the same grid on N GPUs", fontsize=9)
    a.grid(alpha=0.3)
    a.legend(fontsize=7, loc="upper left")
    b.axhline(100, color="gray", ls="--", lw=1, label="ideal (100%)")
    for i, (label, pts) in enumerate(sorted(weak.items())):
        pts = sorted(pts)
        b.plot(*zip(*pts), marker="os^Dv"[i % 5], color=f"C{i + len(strong)}", label=label)
        for n, e in pts[1:]:
            b.annotate(f"{e:.1f}%", (n, e), textcoords="offset points", xytext=(6, -12),
                       fontsize=7, color=f"C{i + len(strong)}")
    wgpus = sorted({n for pts in weak.values() for n, _ in pts} | {1})
    b.set_xscale("log", base=2)
    b.set_xticks(wgpus, [str(g) for g in wgpus])
    b.set_xlim(0.8, max(wgpus) * 1.4)
    b.minorticks_off()
    low = min([e for pts in weak.values() for _, e in pts] + [100.0])
    b.set_ylim(min(80.0, low - 5), 105)
    b.set_xlabel("GPUs sharing one sample")
    b.set_ylabel("weak-scaling efficiency (%)")
    b.set_title("weak scaling: N times the grid points on N GPUs", fontsize=9)
    b.grid(alpha=0.3)
    b.legend(fontsize=7, loc="lower left")
    if not weak:
        b.text(0.5, 0.5, "no weak-scaling rows", transform=b.transAxes, ha="center")
    fig.suptitle("One sample split over GPUs (fno_bench --domain-parallel): step time of one GPU "
                 "over N GPUs'", fontsize=10)
    fig.tight_layout()
    fig.savefig(path + ".part.png", dpi=110)
    os.replace(path + ".part.png", path)


def main():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"matplotlib is not available ({e}); domain_scaling.png not drawn")
        return 0
    dirs, committed = inputs()
    strong, weak = {}, {}
    for d in dirs:
        # (the same series from two folders: each named by its folder)
        where = os.path.basename(os.path.dirname(os.path.abspath(d)))
        for found, into in zip(scaling(d), (strong, weak)):
            for label, pts in found.items():
                into[label if label not in into else f"{label}, {where}"] = pts
    if not strong and not weak:
        print(f"no domain-parallel rows with a one-GPU baseline in {':'.join(dirs) or 'results/*/domain'}; "
              "nothing drawn")
        return 0
    for label, pts in sorted(strong.items()):
        print(f"strong {label}: " + ", ".join(f"{n} GPUs {v:.2f}x" for n, v in sorted(pts)[1:]))
    for label, pts in sorted(weak.items()):
        print(f"weak {label}: " + ", ".join(f"{n} GPUs {v:.1f}%" for n, v in sorted(pts)[1:]))
    fig_dir = os.environ.get("FNO_NB_FIG_DIR")
    fig_dir = resolve(fig_dir) if fig_dir else (
        os.path.join(ROOT, "notebooks", "figures") if committed else
        os.path.join(dirs[0], "figures"))
    os.makedirs(fig_dir, exist_ok=True)
    path = os.path.join(fig_dir, "domain_scaling.png")
    draw(strong, weak, path, plt)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
