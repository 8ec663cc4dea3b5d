#!/usr/bin/env python3
"""neuraloperator 2.0.0's FNO as a predictor: the reference of fno_predict's studies.

Three commands, each printing what it made or measured (JSON lines on stdout):

  model    an FNO of the given settings (seed 0, random weights), saved as
           neuraloperator users save it, torch.save(model.state_dict(), DIR/state.pt),
           and its settings in fno_train's keys, DIR/model.yaml, for
           `fno_predict --model DIR/state.pt --model-config DIR/model.yaml`;
  input    an HDF5 input file: dataset 'coeff' (N, *S) float32, standard normal
           numbers (seed 0), written one sample at a time;
  forward  times the model's `model.eval()` forward under `torch.no_grad()` (fp32) or
           under `torch.autocast` (fp16, bf16), as neuraloperator users predict: one
           JSON line per grid with the median ms per batch over --batches timed
           batches after one untimed one (cuFFT plans), samples/s, the peak allocated
           GPU bytes (torch.cuda.max_memory_allocated, weights and input included), or
           the error (out of memory) where the forward fails. The input is on the
           device before the clock starts, the device synchronized after each batch.
           --compare PRED.h5 --input IN.h5: the first batch of IN.h5's 'coeff' through
           the model, against PRED.h5's 'pred' (fno_predict's output of the same
           state dict): their largest relative L2 difference per sample.

    python3 bench/neuralop_predict.py model --dim 2 --n-modes 16 16 --out DIR
    python3 bench/neuralop_predict.py model --from-config RUN/config.yaml --out DIR
    python3 bench/neuralop_predict.py input --resolution 256 --dim 2 --samples 1280 --out x.h5
    python3 bench/neuralop_predict.py forward --model-dir DIR --resolutions 256 --batch 256 \
        --batches 4 --precision fp32 [--state model.pt] [--device cuda|cpu] [--label TEXT]

--state loads other weights of the same settings (a fno_train run's model.pt is a
neuraloperator state dict); the time and memory of a forward do not depend on them.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

def settings(args):
    return {"n_modes": list(args.n_modes), "in_channels": args.in_channels,
            "out_channels": args.out_channels, "hidden_channels": args.hidden_channels,
            "n_layers": args.n_layers, "projection_channel_ratio": args.projection_channel_ratio}


def build(cfg):
    from neuralop.models import FNO
    return FNO(**{**cfg, "n_modes": tuple(cfg["n_modes"])})


def model_section(path):
    """The model: section of a fno_train config (the resolved config.yaml's block style, or
    flow lists), as {key: int, float, bool, str or list}; PyYAML is not needed."""
    def value(text):
        text = text.strip()
        if text.startswith("["):
            return [value(v) for v in text.strip("[]").split(",") if v.strip()]
        for cast in (int, float):
            try:
                return cast(text)
            except ValueError:
                pass
        return {"true": True, "false": False}.get(text, text.strip("'\""))

    out, key, inside = {}, None, False
    for line in open(path):
        line = line.split("#")[0].rstrip()
        if not line.strip():
            continue
        if not line.startswith(" "):
            inside = line.startswith("model:")
            continue
        if not inside:
            continue
        body = line.strip()
        if body.startswith("- ") and key is not None:
            out.setdefault(key, [])
            out[key].append(value(body[2:]))
        elif ":" in body and line.startswith("  ") and not line.startswith("   "):
            key, rest = body.split(":", 1)
            if rest.strip():
                out[key] = value(rest)
    return out


def cmd_model(args):
    if args.from_config:
        m = model_section(args.from_config)
        for k in ("n_modes", "in_channels", "out_channels", "hidden_channels", "n_layers",
                  "projection_channel_ratio"):
            if k in m:
                setattr(args, k, m[k])
    cfg = settings(args)
    torch.manual_seed(0)
    model = build(cfg)
    os.makedirs(args.out, exist_ok=True)
    state = os.path.join(args.out, "state.pt")
    torch.save(model.state_dict(), state + ".part")
    os.replace(state + ".part", state)
    with open(os.path.join(args.out, "settings.json"), "w") as f:
        json.dump(cfg, f)
    text = "model: {" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in cfg.items()) + "}\n"
    with open(os.path.join(args.out, "model.yaml"), "w") as f:
        f.write(text)
    print(json.dumps({"state": state, "settings": cfg,
                      "n_params": sum(p.numel() for p in model.parameters())}))


def cmd_input(args):
    import h5py
    import numpy as np
    shape = (args.samples,) + (args.resolution,) * args.dim
    rng = np.random.default_rng(0)
    part = args.out + ".part"
    with h5py.File(part, "w") as f:
        # chunks of bands of rows of about 1 MiB, as fno_datagen --inputs-only writes
        row = int(np.prod(shape[2:])) * 4
        rows = max(1, min(args.resolution, (1 << 20) // row))
        d = f.create_dataset("coeff", shape, dtype="f4", chunks=(1, rows) + shape[2:])
        for i in range(args.samples):
            d[i] = rng.standard_normal(shape[1:], dtype=np.float32)
    os.replace(part, args.out)
    print(json.dumps({"input": args.out, "shape": list(shape),
                      "bytes": os.path.getsize(args.out)}))


def load_model(args, device):
    with open(os.path.join(args.model_dir, "settings.json")) as f:
        cfg = json.load(f)
    torch.manual_seed(0)
    model = build(cfg)
    weights = args.state or os.path.join(args.model_dir, "state.pt")
    sd = torch.load(weights, map_location="cpu", weights_only=False)
    model.load_state_dict(sd, strict=True)
    return model.to(device).eval(), cfg, weights


def compare(model, args, device, autocast):
    import h5py
    with h5py.File(args.input) as f:
        x = torch.from_numpy(f["coeff"][: args.batch]).float()
    with h5py.File(args.compare) as f:
        ours = torch.from_numpy(f["pred"][: args.batch]).float()
    with torch.no_grad(), torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
        ref = model(x.unsqueeze(1).to(device)).float().squeeze(1).cpu()
    diff = ((ours - ref).flatten(1).norm(dim=1) / ref.flatten(1).norm(dim=1)).max().item()
    return {"compared": args.compare, "compared_samples": int(x.shape[0]),
            "max_rel_l2_vs_fno_predict": diff}


def time_grid(model, cfg, r, args, device, autocast):
    dim = len(cfg["n_modes"])
    x = torch.randn((args.batch, cfg["in_channels"]) + (r,) * dim, device=device)

    def once():
        with torch.no_grad(), torch.autocast(device.type, dtype=autocast,
                                             enabled=autocast is not None):
            y = model(x)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return y

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    once()  # untimed: cuFFT plans, the allocator
    times = []
    for _ in range(args.batches):
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    return {"ms_per_batch": round(ms, 3), "samples_per_s": round(args.batch / (ms / 1e3), 2),
            "gpu_peak_bytes": peak, "batch_ms": [round(t * 1e3, 3) for t in times]}


def cmd_forward(args):
    device = torch.device(args.device if args.device != "auto" else
                          ("cuda" if torch.cuda.is_available() else "cpu"))
    autocast = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.precision)
    if args.precision == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model, cfg, weights = load_model(args, device)
    import neuralop
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    common = {"impl": f"neuraloperator-{neuralop.__version__}", "label": args.label,
              "call": "model.eval() forward under torch.no_grad()" +
                      (f", torch.autocast({args.precision})" if autocast is not None else ""),
              "precision": args.precision, "batch": args.batch, "device": name,
              "weights": weights,
              # (PyTorch's defaults unless --precision tf32: cuDNN may use TF32 in the
              # channel MLPs' 1x1 convolutions, cuBLAS does not)
              "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
              "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}
    for r in args.resolutions:
        row = {**common, "grid": r, "dim": len(cfg["n_modes"])}
        try:
            row.update(time_grid(model, cfg, r, args, device, autocast))
        except torch.OutOfMemoryError as e:
            row["error"] = "out of memory: " + str(e).splitlines()[0][:200]
        except RuntimeError as e:  # noqa: BLE001 - reported as the row's result
            row["error"] = str(e).splitlines()[0][:300]
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if args.compare and "error" not in row:
            row.update(compare(model, args, device, autocast))
        print(json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model", help="an FNO's state dict and its settings")
    m.add_argument("--dim", type=int, default=2)
    m.add_argument("--n-modes", type=int, nargs="+", default=None)
    m.add_argument("--in-channels", type=int, default=1)
    m.add_argument("--out-channels", type=int, default=1)
    m.add_argument("--hidden-channels", type=int, default=32)
    m.add_argument("--n-layers", type=int, default=4)
    m.add_argument("--projection-channel-ratio", type=int, default=2)
    m.add_argument("--from-config", default="",
                   help="take the settings from a fno_train config's model: section")
    m.add_argument("--out", required=True)
    i = sub.add_parser("input", help="an HDF5 input file of standard normal numbers")
    i.add_argument("--resolution", type=int, required=True)
    i.add_argument("--dim", type=int, default=2)
    i.add_argument("--samples", type=int, default=1)
    i.add_argument("--out", required=True)
    f = sub.add_parser("forward", help="time the forward, one JSON line per grid")
    f.add_argument("--model-dir", required=True, help="a folder made by the 'model' command")
    f.add_argument("--state", default="", help="other weights of the same settings")
    f.add_argument("--resolutions", type=int, nargs="+", required=True)
    f.add_argument("--batch", type=int, default=1)
    f.add_argument("--batches", type=int, default=3, help="timed batches (median reported)")
    f.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"])
    f.add_argument("--device", default="auto")
    f.add_argument("--label", default="")
    f.add_argument("--compare", default="", help="fno_predict's output of the same model")
    f.add_argument("--input", default="", help="the input file --compare was made from")
    args = ap.parse_args()
    if args.cmd == "model":
        if args.n_modes is None:
            args.n_modes = [16] * args.dim
        if not args.from_config and len(args.n_modes) != args.dim:
            sys.exit(f"--n-modes: {len(args.n_modes)} values for --dim {args.dim}")
        cmd_model(args)
    elif args.cmd == "input":
        cmd_input(args)
    else:
        if bool(args.compare) != bool(args.input):
            sys.exit("--compare and --input go together")
        cmd_forward(args)


if __name__ == "__main__":
    main()
