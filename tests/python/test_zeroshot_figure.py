#!/usr/bin/env python3
"""notebooks/zeroshot_figure.py draws zero_shot.png from a zero-shot study's output.

    test_zeroshot_figure.py SOURCE_DIR

Makes a small output of bench/zeroshot_study.sh's shape in a temporary folder (a training
row; fno_predict rows at two grids, whole and under a budget, one row replaced by a later
one; neuraloperator rows, one out of memory; two snapshots), runs the script on it and checks
the PNG; then on a folder without results, where it draws nothing and exits 0.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def rows():
    yield {"row": "train", "grid": 16, "n_train": 8, "epochs": 1, "datagen_s": 1.0,
           "train_s": 2.0, "metrics": {"16_l2": 0.5}, "device": "cpu", "n_params": 10}
    for g, l2 in ((16, 0.4), (32, 0.5)):
        for budget in ("none", "2GiB"):
            yield {"row": "zeroshot", "impl": "fno_predict", "grid": g, "train_grid": 16,
                   "budget": budget, "batch": 1, "exit": 0, "wall_s": 3.0,
                   "gpu_peak_bytes": g * g * 1000, "forward_s": [0.5, 0.1, 0.12],
                   "n_samples": 3, "mean_l2": l2, "mean_h1": 2 * l2, "l2": [l2] * 3,
                   "h1": [2 * l2] * 3, "plan": "whole grid"}
    # a later row of the same grid and budget replaces the first (a study in two calls)
    yield {"row": "zeroshot", "impl": "fno_predict", "grid": 32, "train_grid": 16,
           "budget": "none", "batch": 1, "exit": 0, "wall_s": 3.0, "gpu_peak_bytes": 2048000,
           "forward_s": [0.5, 0.2], "n_samples": 2, "mean_l2": 0.45, "mean_h1": 0.9,
           "l2": [0.45, 0.45], "h1": [0.9, 0.9], "plan": "whole grid"}
    yield {"row": "neuralop", "impl": "neuraloperator-2.0.0", "grid": 16, "batch": 1,
           "ms_per_batch": 300.0, "gpu_peak_bytes": 600000}
    yield {"row": "neuralop", "impl": "neuraloperator-2.0.0", "grid": 32, "batch": 1,
           "error": "out of memory: CUDA out of memory"}


def main():
    src = sys.argv[1]
    script = os.path.join(src, "notebooks", "zeroshot_figure.py")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        os.makedirs(os.path.join(out, "zeroshot"))
        with open(os.path.join(out, "zeroshot.jsonl"), "w") as f:
            for r in rows():
                f.write(json.dumps(r) + "\n")
        with open(os.path.join(out, "zeroshot", "gpu.txt"), "w") as f:
            f.write("Some GPU, 81559 MiB\n")
        rng = np.random.default_rng(0)
        for g in (16, 32):
            a = {k: rng.standard_normal((16, 16)).astype(np.float16) for k in
                 ("input", "truth", "pred", "error", "input_crop", "truth_crop", "pred_crop",
                  "error_crop")}
            np.savez_compressed(os.path.join(out, "zeroshot", f"snap_{g}.npz"), grid=g,
                                stride=g // 16, crop_start=0, l2=0.4, **a)
        env = {**os.environ, "FNO_NB_ZEROSHOT_DIRS": out, "MPLBACKEND": "Agg"}
        env.pop("FNO_NB_FIG_DIR", None)
        p = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
        png = os.path.join(out, "figures", "zero_shot.png")
        ok = p.returncode == 0 and os.path.exists(png) and os.path.getsize(png) > 10000
        with open(png, "rb") as f:
            ok = ok and f.read(8) == b"\x89PNG\r\n\x1a\n"
        if not ok:
            print(f"the figure of a small study: exit {p.returncode}\n{p.stdout}{p.stderr}")
            return 1
        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        env["FNO_NB_ZEROSHOT_DIRS"] = empty
        p = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
        if p.returncode != 0 or "nothing drawn" not in p.stdout or \
                os.path.exists(os.path.join(empty, "figures", "zero_shot.png")):
            print(f"a folder without results: exit {p.returncode}\n{p.stdout}{p.stderr}")
            return 1
    print("zero-shot figure: drawn from a small study; nothing drawn without results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
