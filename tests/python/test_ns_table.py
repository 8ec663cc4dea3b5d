#!/usr/bin/env python3
"""bench/ns_table.py on synthetic runs of the nu = 1e-5 row (one under the paper's cell, one
over), a third with the paper's blocks and init, clipping and a 20-record rollout (its first 10
records' error), the first with validation samples (a test set named val), then on a directory that is no run: the rows, the verdicts, the TSV and the
one-line error.

    test_ns_table.py PATH/TO/bench/ns_table.py
"""
import json
import os
import subprocess
import sys
import tempfile

CONFIG = """model:
  hidden_channels: 20{model_extra}
data:
  problem: ns
  ns_mode: {mode}
  t_in: 10
  t_out: {t_out}
  train_file: /tmp/fno-nsdata/ns_v1e-5_T20_train.h5
  n_train: 1000
  test:
    - file: /tmp/fno-nsdata/ns_v1e-5_T20_test.h5
      name: ns
training:
  epochs: 500
  seed: {seed}{training_extra}
output:
  dir: runs/x
"""


def make_run(root, name, mode, l2, t_out=10, seed=0, model_extra="", training_extra="",
             val=None):
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write(CONFIG.format(mode=mode, t_out=t_out, seed=seed, model_extra=model_extra,
                              training_extra=training_extra))
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for e in range(1, 501):
            line = {"epoch": e, "lr": 1e-3, "train_loss": 1.0 / e, "seconds": 1.2}
            if e % 10 == 0:
                line.update({"ns_l2": l2 + (500 - e) * 1e-4, "ns_l2_step": l2,
                             "ns_l2_per_step": [l2] * t_out,
                             "ns_l2_upto": [l2 * (k + 1) / t_out for k in range(t_out)]})
                if val is not None:  # a second test set, the validation samples, named val
                    line["val_l2"] = val
            f.write(json.dumps(line) + "\n")
    with open(os.path.join(d, "segments.tsv"), "w") as f:
        f.write("2026-11-26T00:00:00Z\t124\t540\n2026-11-26T00:10:00Z\t0\t120\n")
    return d


def main():
    script = sys.argv[1]
    with tempfile.TemporaryDirectory() as root:
        a = make_run(root, "fno3d", "space_time", 0.1800, val=0.17654)
        b = make_run(root, "fno2d", "recurrent", 0.1600)
        # the paper's model, 20 records predicted (a T = 30 row's shape, named as nu = 1e-5's)
        c = make_run(root, "fno2d_paper", "recurrent", 0.1500, t_out=20, seed=1,
                     model_extra="\n  use_channel_mlp: false\n  single_gelu: true\n  spectral_init: paper",
                     training_extra="\n  max_grad_norm: 10000")
        tsv = os.path.join(root, "t.tsv")
        out = subprocess.run([sys.executable, script, a, b, c, "--tsv", tsv], capture_output=True,
                             text=True, check=True).stdout
        rows = [l for l in out.splitlines() if l.startswith("| 1e-5")]
        assert len(rows) == 3, out
        # sorted by T, then model: FNO-2D first; the first 10 records only where more were predicted
        assert "| 20 | 1000 | FNO-2D | 0 | 500 of 500 | 0.1600 | 0.1556 | no |  | 10.0 | 11.0 |" \
            in rows[0], rows[0]
        # (the FNO-3D's second test set, named val: its last val_l2 in the last column; the test
        # error stays ns_l2's)
        assert "| 20 | 1000 | FNO-3D | 0 | 500 of 500 | 0.1800 | 0.1893 | yes |  | 10.0 | 11.0 | " \
            "0.17654 |" in rows[1], rows[1]
        assert rows[0].endswith("| 11.0 |  |"), rows[0]
        # (no paper cell for T = 30 at nu = 1e-5: paper and verdict empty)
        assert "| 30 | 1000 | FNO-2D (paper blocks, one GELU, paper init, clip 1e4) | 1 | 500 of 500 | 0.1500 |  |  " \
            "| 0.0750 | 10.0 | 11.0 |" in rows[2], rows[2]
        lines = open(tsv).read().splitlines()
        assert lines[0].split("\t")[:8] == ["nu", "T", "N", "model", "epochs", "ours", "paper",
                                            "at_or_under"], lines[0]
        assert len(lines) == 4, lines
        assert lines[0].split("\t")[-1] == "val" and lines[2].split("\t")[-1] == "0.17654", lines
        bad = subprocess.run([sys.executable, script, root], capture_output=True, text=True)
        assert bad.returncode == 1 and bad.stdout == "", bad
        assert bad.stderr.startswith("ns_table: ") and bad.stderr.count("\n") == 1, bad.stderr
    print("ns_table: ok")


if __name__ == "__main__":
    main()
