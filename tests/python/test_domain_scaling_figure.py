#!/usr/bin/env python3
"""notebooks/domain_scaling_figure.py draws domain_scaling.png from fno_bench --domain-parallel JSON.

    test_domain_scaling_figure.py SOURCE_DIR

Writes fno_bench --json files of a small study in a temporary folder (one GPU at 64² and 128²;
64² on 2 and 4 GPUs; 128² on 4 GPUs, the weak row; a failed row; a 2-GPU row whose grid has no
one-GPU row), runs the script on it and checks the speed-ups and the efficiency it prints (each
one GPU's ms over N GPUs') and the PNG; then: a folder without rows draws nothing; without
matplotlib (a stand-in package that fails to import) it says so and draws nothing; both exit 0.
Last, on the committed results: the speed-ups and the efficiency docs/domain_parallel.md states.
"""
import json
import os
import subprocess
import sys
import tempfile


def bench_json(path, rows):
    with open(path, "w") as f:
        json.dump({"command": "fno_bench ...", "device": "NVIDIA H100 80GB HBM3",
                   "rows": rows, "largest_grid": {}}, f)


def row(grid, world, ms, status="ok", precision="fp32"):
    return {"policy": "auto" if world == 1 else f"domain {world}", "precision": precision,
            "grid": grid, "batch": 1, "status": status, "ms_per_step": ms, "world_size": world,
            "domain_parallel": world, "ms_per_step_one_gpu": 0}


def main():
    src = sys.argv[1]
    script = os.path.join(src, "notebooks", "domain_scaling_figure.py")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "study")
        os.makedirs(os.path.join(out, "domain"))
        d = os.path.join(out, "domain")
        bench_json(os.path.join(d, "strong_1.json"), [row("64^2", 1, 400.0)])
        bench_json(os.path.join(d, "strong_2.json"), [row("64^2", 2, 250.0)])
        bench_json(os.path.join(d, "strong_4.json"), [row("64^2", 4, 125.0)])
        bench_json(os.path.join(d, "big_1.json"), [row("128^2", 1, 1600.0, "out of memory")])
        bench_json(os.path.join(d, "weak_4.json"), [row("128^2", 4, 500.0)])
        bench_json(os.path.join(d, "lonely_2.json"), [row("96^2", 2, 90.0, precision="bf16")])
        with open(os.path.join(d, "summary.json"), "w") as f:
            json.dump({"strong_1": {"ms": 400.0}}, f)  # a study's summary: no rows, not read
        env = {**os.environ, "FNO_NB_DOMAIN_DIRS": out, "MPLBACKEND": "Agg"}
        env.pop("FNO_NB_FIG_DIR", None)
        p = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
        png = os.path.join(d, "figures", "domain_scaling.png")
        want = ["strong 64² fp32, B=1 (H100): 2 GPUs 1.60x, 4 GPUs 3.20x",
                "weak 64² a GPU, fp32, B=1 (H100): 128² on 4: 4 GPUs 80.0%",
                "96^2 bf16 on 2 GPUs has no one-GPU row"]
        ok = p.returncode == 0 and all(w in p.stdout for w in want)
        ok = ok and os.path.exists(png) and os.path.getsize(png) > 10000
        with open(png, "rb") as f:
            ok = ok and f.read(8) == b"\x89PNG\r\n\x1a\n"
        ok = ok and not os.path.exists(png + ".part.png")
        if not ok:
            print(f"the figure of a small study: exit {p.returncode}\n{p.stdout}{p.stderr}")
            return 1
        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        env["FNO_NB_DOMAIN_DIRS"] = empty
        p = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
        if p.returncode != 0 or "nothing drawn" not in p.stdout or \
                os.path.exists(os.path.join(empty, "figures")):
            print(f"a folder without rows: exit {p.returncode}\n{p.stdout}{p.stderr}")
            return 1
        fake = os.path.join(tmp, "fake", "matplotlib")
        os.makedirs(fake)
        with open(os.path.join(fake, "__init__.py"), "w") as f:
            f.write("raise ImportError('a stand-in without matplotlib')\n")
        env["FNO_NB_DOMAIN_DIRS"] = out
        env["PYTHONPATH"] = os.path.dirname(fake)
        os.remove(png)
        p = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
        if p.returncode != 0 or "matplotlib is not available" not in p.stdout or \
                os.path.exists(png):
            print(f"without matplotlib: exit {p.returncode}\n{p.stdout}{p.stderr}")
            return 1
        # The committed results: the speed-ups docs/domain_parallel.md states.
        env.pop("PYTHONPATH")
        env.pop("FNO_NB_DOMAIN_DIRS")
        env["FNO_NB_FIG_DIR"] = os.path.join(tmp, "committed")
        p = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
        want = ["8192² fp32, B=1 (H100): 2 GPUs 1.84x, 4 GPUs 3.46x",
                "8192² fp32, B=1 (H200): 2 GPUs 1.67x", "16384² bf16, B=1 (H100): 4 GPUs 3.80x",
                "512³ fp32, B=1 (H100): 4 GPUs 3.55x", "16384² on 4: 4 GPUs 96.5%"]
        if p.returncode != 0 or not all(w in p.stdout for w in want) or \
                not os.path.exists(os.path.join(tmp, "committed", "domain_scaling.png")):
            print(f"the committed results: exit {p.returncode}\n{p.stdout}{p.stderr}")
            return 1
    print("domain scaling figure: drawn from a small study and from the committed results; "
          "nothing drawn without rows or matplotlib")
    return 0


if __name__ == "__main__":
    sys.exit(main())
