#!/usr/bin/env python3
"""Draws figures/zero_shot.png from bench/zeroshot_study.sh's output: a model trained at one
grid predicting, zero-shot, at finer grids with fno_predict.

  top:    the relative L2 and H1 error of each test sample against the grid (the means joined);
          peak GPU memory against the grid: fno_predict on the whole grid, fno_predict under its
          --gpu-memory-limit, neuraloperator 2.0.0's forward of the same weights (x: out of
          memory), with the device's memory and the budget drawn in (the prediction
          counterpart of figures/resolution_memory.png); the forward's seconds per sample
          (median over the samples after the first; a streamed run reports none) and
          fno_predict's whole process (start to the renamed output) per sample;
  below:  the first test sample at each grid: input, truth, prediction and error (the whole
          field, strided), and the error in a crop of the centre at full resolution.

Its inputs, as the notebooks' (notebooks/README.md), from environment variables:
  FNO_NB_ZEROSHOT_DIRS  the study's OUT folders (zeroshot.jsonl, zeroshot/snap_*.npz, or the
                        snapshots still packed in zeroshot.tgz), ':'-separated; rows of later folders replace earlier ones of the same
                        grid and kind (a study split over two calls). Default: the last
                        results/*/zeroshot folder holding a zeroshot.jsonl, else nothing drawn.
  FNO_NB_FIG_DIR        where the PNG goes. Default: notebooks/figures/ for the committed
                        results, a figures/ folder in the first input folder for others.
  FNO_NB_CWD            the folder relative paths resolve against (default: the repository root).

    .venv/bin/python notebooks/zeroshot_figure.py
    FNO_NB_ZEROSHOT_DIRS=/tmp/fno-zeroshot-out .venv/bin/python notebooks/zeroshot_figure.py
"""
import glob
import io
import json
import math
import os
import re
import sys
import tarfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 2.0**30


def resolve(path):
    return os.path.join(os.environ.get("FNO_NB_CWD", ROOT), path)


def inputs():
    given = os.environ.get("FNO_NB_ZEROSHOT_DIRS", "")
    if given:
        return [resolve(d) for d in given.split(":") if d], False
    found = sorted(os.path.dirname(p) for p in
                   glob.glob(os.path.join(ROOT, "results", "*", "zeroshot", "zeroshot.jsonl")))
    return found[-1:], True


def read_rows(dirs):
    """The rows of every folder; a later row of the same (row, impl, grid, budget) wins."""
    rows, snaps = {}, {}
    for d in dirs:
        path = os.path.join(d, "zeroshot.jsonl")
        if not os.path.exists(path):
            print(f"no {path}; skipped")
            continue
        for line in open(path):
            if line.strip():
                r = json.loads(line)
                rows[(r.get("row"), r.get("impl"), r.get("grid"), r.get("budget"))] = r
        for p in glob.glob(os.path.join(d, "zeroshot", "snap_*.npz")):
            snaps[int(re.search(r"snap_(\d+)\.npz$", p).group(1))] = p
        packed = os.path.join(d, "zeroshot.tgz")
        if not glob.glob(os.path.join(d, "zeroshot", "snap_*.npz")) and os.path.exists(packed):
            with tarfile.open(packed) as t:  # (the study's packed logs, not unpacked)
                for m in t.getmembers():
                    found = re.search(r"^zeroshot/snap_(\d+)\.npz$", m.name)
                    if found and m.isfile():
                        snaps[int(found.group(1))] = io.BytesIO(t.extractfile(m).read())
    return list(rows.values()), snaps


def per_sample_seconds(r):
    """The forward's seconds of one sample: the median after the first (its FFT plans)."""
    t = r.get("forward_s") or []
    if not t:
        return None
    timed = t[1:] or t
    return float(np.median(timed)) / max(1, r.get("batch", 1))


def device_memory_gib(dirs):
    """The GPU's memory from the study's zeroshot/gpu.txt (nvidia-smi: 'NAME, 81559 MiB')."""
    for d in dirs:
        path, packed = os.path.join(d, "zeroshot", "gpu.txt"), os.path.join(d, "zeroshot.tgz")
        text = ""
        if os.path.exists(path):
            text = open(path).read()
        elif os.path.exists(packed):
            with tarfile.open(packed) as t:
                if "zeroshot/gpu.txt" in t.getnames():
                    text = t.extractfile("zeroshot/gpu.txt").read().decode()
        m = re.search(r",\s*(\d+)\s*MiB", text)
        if m:
            return float(m.group(1)) / 1024
    return None


def grid_label(g):
    return f"{g}²"


def draw_errors(ax, zs, train_grid):
    for key, marker, color in (("l2", "o", "C0"), ("h1", "s", "C1")):
        pts = [(r["grid"], v) for r in zs for v in r.get(key, [])]
        if not pts:
            continue
        g, v = zip(*pts)
        ax.scatter(g, v, marker=marker, s=14, alpha=0.45, color=color)
        means = sorted((r["grid"], r[f"mean_{key}"]) for r in zs if f"mean_{key}" in r)
        ax.plot(*zip(*means), marker=marker, color=color, label=f"relative {key.upper()}")
    if train_grid:
        ax.axvline(train_grid, color="gray", ls=":", lw=1)
        ax.annotate("training grid", (train_grid, 0.02), xycoords=("data", "axes fraction"),
                    rotation=90, fontsize=7, color="gray", ha="right", va="bottom")
    ax.set_ylabel("relative error of the prediction")
    ax.set_title("error against the grid (zero-shot past the training grid)", fontsize=9)
    ax.legend(fontsize=7)


def series(rows, kind, impl, budget=None):
    out = [r for r in rows if r.get("row") == kind and r.get("impl", "").startswith(impl) and
           (budget is None or r.get("budget") == budget)]
    return sorted(out, key=lambda r: r["grid"])


def draw_memory_time(ax_m, ax_t, rows, budgets, dev_gib):
    drawn = [(f"fno_predict, whole grid", series(rows, "zeroshot", "fno_predict", "none"),
              "o", "C0")]
    for i, b in enumerate(budgets):
        drawn.append((f"fno_predict, --gpu-memory-limit {b}",
                      series(rows, "zeroshot", "fno_predict", b), "^", f"C{2 + i}"))
    drawn.append(("neuraloperator 2.0.0, eval() under no_grad()",
                  series(rows, "neuralop", "neuraloperator"), "s", "C1"))
    fail_y, mem_drawn = None, False
    for label, rs, marker, color in drawn:
        ok = [r for r in rs if r.get("exit", 0) == 0 and "error" not in r]
        bad = [r for r in rs if r not in ok]
        mem = [(r["grid"], r["gpu_peak_bytes"] / GIB) for r in ok if r.get("gpu_peak_bytes")]
        if mem:
            ax_m.plot(*zip(*mem), marker=marker, color=color, label=label)
            mem_drawn = True
        secs = []
        for r in ok:
            s = per_sample_seconds(r) if r.get("impl") == "fno_predict" else \
                r.get("ms_per_batch", 0) / 1e3 / max(1, r.get("batch", 1))
            if s:
                secs.append((r["grid"], s))
        if secs:
            ax_t.plot(*zip(*secs), marker=marker, color=color, label=label + ": forward")
        if label.startswith("fno_predict"):
            # (a streamed run reports no forward time: its whole process stands for it)
            proc = [(r["grid"], r["wall_s"] / max(1, r.get("n_samples", 1))) for r in ok]
            if proc:
                ax_t.plot(*zip(*proc), marker=marker, color=color, ls="--", mfc="none",
                          label=label + ": whole process / samples")
        if bad:
            fail_y = fail_y or (dev_gib or max([m for _, m in mem] or [1.0]))
            ax_m.scatter([r["grid"] for r in bad], [fail_y] * len(bad), marker="x", s=80,
                         color=color, lw=2.5, zorder=5)
    if dev_gib:
        ax_m.axhline(dev_gib, color="k", ls="--", lw=1, label=f"device memory {dev_gib:.1f} GiB")
    for i, b in enumerate(budgets):
        m = re.match(r"([\d.]+)\s*GiB", b)
        if m:
            ax_m.axhline(float(m.group(1)), color=f"C{2 + i}", ls=":", lw=1,
                         label=f"stated budget {b}")
    if fail_y:
        ax_m.scatter([], [], marker="x", color="k", label="x: out of memory")
    if not mem_drawn and not fail_y:
        ax_m.text(0.5, 0.5, "no GPU peaks (a CPU run)", transform=ax_m.transAxes, ha="center")
    ax_m.set_yscale("log")
    ax_m.set_ylabel("peak GPU memory (GiB)")
    ax_m.set_title("peak GPU memory of the prediction, batch 1", fontsize=9)
    ax_m.legend(fontsize=6, loc="lower right")
    ax_t.set_yscale("log")
    ax_t.set_ylabel("seconds per sample")
    ax_t.set_title("time per sample, batch 1", fontsize=9)
    ax_t.legend(fontsize=6, loc="best")


def draw_snapshots(fig, gs_row, snaps):
    grids = sorted(snaps)
    data = {g: {k: v.astype(np.float32) if v.dtype == np.float16 else v
                for k, v in np.load(snaps[g]).items()} for g in grids}
    panels = (("input", "input a", "viridis"), ("truth", "truth u", "magma"),
              ("pred", "prediction", "magma"), ("error", "error\n(prediction - truth)", "RdBu_r"),
              ("error_crop", "error, centre crop\n(full resolution)", "RdBu_r"))
    emax = max(float(np.nanpercentile(np.abs(d["error"]), 99.5)) for d in data.values()) or 1.0
    sub = gs_row.subgridspec(len(panels), len(grids) + 1, hspace=0.25, wspace=0.05,
                             width_ratios=[1] * len(grids) + [0.06])
    error_im = None
    for j, g in enumerate(grids):
        d = data[g]
        umax = float(np.nanmax(d["truth"]))
        for i, (key, name, cmap) in enumerate(panels):
            ax = fig.add_subplot(sub[i, j])
            v = d[key]
            if cmap == "RdBu_r":
                im = ax.imshow(v, cmap=cmap, vmin=-emax, vmax=emax, origin="lower")
            elif key == "input":
                im = ax.imshow(v, cmap=cmap, origin="lower")
            else:
                im = ax.imshow(v, cmap=cmap, vmin=0, vmax=umax, origin="lower")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                l2 = float(d.get("l2", math.nan))
                ax.set_title(f"{grid_label(g)} (L2 {l2:.3f})", fontsize=8)
            if key == "error_crop":
                side = v.shape[0]
                ax.set_xlabel(f"{side}×{side} of {g}×{g}", fontsize=6)
            if j == 0:
                ax.set_ylabel(name, fontsize=7)
            if cmap == "RdBu_r":
                error_im = im
    if error_im is not None:
        bar = fig.colorbar(error_im, cax=fig.add_subplot(sub[len(panels) - 2:, -1]))
        bar.ax.tick_params(labelsize=6)
        bar.set_label("prediction - truth", fontsize=7)


def main():
    dirs, committed = inputs()
    rows, snaps = read_rows(dirs)
    zs = [r for r in series(rows, "zeroshot", "fno_predict", "none") if r.get("exit", 0) == 0]
    if not zs:
        print(f"no zero-shot results in {':'.join(dirs) or 'results/*/zeroshot'}; nothing drawn")
        return 0
    fig_dir = os.environ.get("FNO_NB_FIG_DIR")
    fig_dir = resolve(fig_dir) if fig_dir else (
        os.path.join(ROOT, "notebooks", "figures") if committed else
        os.path.join(dirs[0], "figures"))
    os.makedirs(fig_dir, exist_ok=True)
    train = next((r for r in rows if r.get("row") == "train"), {})
    train_grid = train.get("grid") or zs[0].get("train_grid")
    budgets = sorted({r["budget"] for r in rows if r.get("row") == "zeroshot" and
                      r.get("budget") not in (None, "none")})
    dev = train.get("device") or next((r.get("device") for r in rows if r.get("device")), "")
    dev_gib = device_memory_gib(dirs)

    n_snap = len(snaps)
    fig = plt.figure(figsize=(max(13, 2.3 * n_snap), 4.2 + (2.1 * 5 if n_snap else 0)))
    gs = fig.add_gridspec(2 if n_snap else 1, 1, height_ratios=[4.2, 2.1 * 5][: 2 if n_snap else 1],
                          hspace=0.12, top=0.94 if n_snap else 0.85)
    top = gs[0].subgridspec(1, 3, wspace=0.3)
    axes = [fig.add_subplot(top[0, k]) for k in range(3)]
    draw_errors(axes[0], zs, train_grid)
    draw_memory_time(axes[1], axes[2], rows, budgets, dev_gib)
    grids = sorted({r["grid"] for r in rows if r.get("grid")})
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlim(min(grids) / 1.25, max(grids) * 1.25)
        ax.set_xticks(grids, [grid_label(g) for g in grids], fontsize=7)
        ax.minorticks_off()
        ax.set_xlabel("prediction grid")
        ax.grid(alpha=0.3)
    if n_snap:
        draw_snapshots(fig, gs[1], snaps)
    setting = f"trained at {grid_label(train_grid)}" if train_grid else ""
    if train.get("n_train"):
        setting += f" on {train['n_train']} fno_datagen Darcy samples, {train['epochs']} epochs"
    second = "; ".join(p for p in (dev, "fp32, batch 1",
                                   "test samples solved by fno_datagen at each grid") if p)
    fig.suptitle(f"Zero-shot super-resolution with fno_predict: {setting}\n{second}",
                 fontsize=10)
    path = os.path.join(fig_dir, "zero_shot.png")
    fig.savefig(path + ".part.png", dpi=110, bbox_inches="tight")
    os.replace(path + ".part.png", path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
