#!/usr/bin/env python3
"""Round-trip check: a checkpoint written by the C++ port must load into
neuraloperator 2.0.0's FNO and reproduce the C++ output.

Usage:
    check_cpp_checkpoint.py STATE_PT IO_PT [--tol 1e-5]

STATE_PT  written by the C++ side: a plain dict str -> Tensor in torch.save zip
          format, keys equal to neuraloperator's FNO state_dict keys (a '_metadata'
          entry, if present, is popped by neuralop's BaseModel.load_state_dict).
IO_PT     plain dict str -> Tensor with 'x', 'y' (the C++ model's output for x) and
          the cfg.* tensors of tests/golden/README.md (cfg.n_modes, cfg.in_channels,
          cfg.out_channels, cfg.hidden_channels, cfg.n_layers,
          cfg.lifting_channel_ratio, cfg.projection_channel_ratio,
          cfg.domain_padding, optionally cfg.n_params and cfg.use_channel_mlp).

Builds neuralop.models.FNO from cfg (all other options at their defaults), loads
STATE_PT with torch.load(weights_only=True) and load_state_dict(strict=True), runs
model(x) with the odd-size inverse-shift fix (tests/python/neuralop_fix.py) and
requires ||y_py - y_cpp|| / ||y_py|| <= tol.

Prints one line.  Exit status: 0 pass, 1 mismatch or error, 77 (CTest "skipped")
when torch / neuraloperator cannot be imported.
"""

import argparse
import os
import sys

SKIP = 77

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def build_kwargs(io):
    def scalar_int(key):
        return int(io[key].item())

    def scalar_float(key):
        return float(io[key].item())

    dp = [float(v) for v in io["cfg.domain_padding"].reshape(-1).tolist()]
    if len(dp) == 0:
        domain_padding = None
    elif len(dp) == 1:
        domain_padding = dp[0]
    else:
        domain_padding = dp
    extra = {}
    if "cfg.use_channel_mlp" in io:
        extra["use_channel_mlp"] = bool(io["cfg.use_channel_mlp"].item())
    return dict(
        **extra,
        n_modes=tuple(int(m) for m in io["cfg.n_modes"].reshape(-1).tolist()),
        in_channels=scalar_int("cfg.in_channels"),
        out_channels=scalar_int("cfg.out_channels"),
        hidden_channels=scalar_int("cfg.hidden_channels"),
        n_layers=scalar_int("cfg.n_layers"),
        lifting_channel_ratio=scalar_float("cfg.lifting_channel_ratio"),
        projection_channel_ratio=scalar_float("cfg.projection_channel_ratio"),
        domain_padding=domain_padding,
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description="C++ -> neuraloperator checkpoint round-trip check")
    ap.add_argument("state_pt")
    ap.add_argument("io_pt")
    ap.add_argument("--tol", type=float, default=1e-5,
                    help="max relative L2 error (default: %(default)g)")
    args = ap.parse_args(argv)
    tag = f"check_cpp_checkpoint {os.path.basename(args.state_pt)}"

    try:
        import torch
        import neuralop
        from neuralop.models import FNO
        from neuralop.utils import count_model_params
        import neuralop_fix
    except Exception as e:  # ImportError, or a broken install raising something else
        print(f"{tag}: SKIP: cannot import torch/neuraloperator ({type(e).__name__}: {e})")
        return SKIP

    try:
        torch.set_num_threads(1)
        io = torch.load(args.io_pt, weights_only=True, map_location="cpu")
        kwargs = build_kwargs(io)
        model = FNO(**kwargs)
        if "cfg.n_params" in io:
            n_expected, n_got = int(io["cfg.n_params"].item()), count_model_params(model)
            if n_expected != n_got:
                print(f"{tag}: FAIL: cfg.n_params {n_expected} but neuralop FNO{kwargs} "
                      f"has {n_got}")
                return 1
        sd = torch.load(args.state_pt, weights_only=True, map_location="cpu")
        model.load_state_dict(sd, strict=True)
        x, y_cpp = io["x"], io["y"]
        with torch.no_grad(), neuralop_fix.fixed():
            y_py = model(x.to(torch.float32))
        if tuple(y_py.shape) != tuple(y_cpp.shape):
            print(f"{tag}: FAIL: shape mismatch python {tuple(y_py.shape)} vs C++ "
                  f"{tuple(y_cpp.shape)}")
            return 1
        y_py64, y_cpp64 = y_py.double(), y_cpp.double()
        denom = y_py64.norm().item()
        diff = (y_py64 - y_cpp64).norm().item()
        rel = diff / denom if denom > 0 else diff
        ok = rel <= args.tol  # False for NaN too
    except Exception as e:
        print(f"{tag}: FAIL: {type(e).__name__}: {e}".replace("\n", " "))
        return 1

    status = "PASS" if ok else "FAIL"
    print(f"{tag}: {status}: rel L2 error {rel:.3e} (tol {args.tol:g}), y {tuple(y_py.shape)}, "
          f"torch {torch.__version__}, neuraloperator {neuralop.__version__}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
