#!/usr/bin/env python3
"""Generate the golden reference files for the C++ (LibTorch) FNO port.

What it makes (next to this script, or in --out):

  {case}_state.pt   torch.save(model.state_dict()) of a neuralop.models.FNO, exactly
                    as a neuraloperator user saves it (an OrderedDict that also holds
                    neuraloperator's '_metadata' entry: the constructor kwargs, which
                    pickle references to torch._C._nn.gelu and
                    neuralop.layers.spectral_convolution.SpectralConv).
  {case}_io.pt      plain dict str -> Tensor: x, y = model(x), w, grad.<param> =
                    d/dparam (y * w).sum(), and cfg.* tensors describing the model.
  losses.pt         LpLoss / H1Loss values and input gradients (float64).
  optim.pt          neuralop.training.AdamW and torch.optim.Adam trajectories (+ lr schedulers) and
                    scheduler-only lr sequences.

Model cases: fno1d_even, fno1d_odd, fno2d_even, fno2d_odd, fno2d_small_grid,
fno2d_padding, fno2d_no_channel_mlp, fno3d_even, fno3d_odd, seed (+ seed_odd_io.pt, same weights as seed).

All model outputs are computed with the odd-size inverse-shift fix
(tests/python/neuralop_fix.py): neuraloperator 2.0.0 applies fftshift (instead of
ifftshift) before the inverse FFT, which is wrong for odd grid sizes; the C++ port
implements the corrected version.  The fix is a no-op for even sizes (checked below).

Pinned versions (checked at runtime): torch 2.11.0 (PyPI wheel), neuraloperator 2.0.0
(installed --no-deps), tensorly 0.10.0, tensorly-torch 0.5.0, opt_einsum 3.4.0.
CPU only, float32 models (float64 losses), deterministic (torch.manual_seed per case,
one thread).

Rerun from the repository root:

    .venv/bin/python tests/golden/make_golden.py            # writes into tests/golden/
    .venv/bin/python tests/golden/make_golden.py --out DIR  # writes elsewhere

See tests/golden/README.md for the file format.
"""

import argparse
import os
import sys
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "python"))

import torch  # noqa: E402
import neuralop  # noqa: E402
from neuralop.layers.spectral_convolution import SpectralConv  # noqa: E402
from neuralop.losses.data_losses import H1Loss, LpLoss  # noqa: E402
from neuralop.models import FNO  # noqa: E402
from neuralop.training import AdamW  # noqa: E402
from neuralop.utils import count_model_params  # noqa: E402

import neuralop_fix  # noqa: E402  (tests/python/neuralop_fix.py)

assert torch.__version__.startswith("2.11.0"), f"need torch 2.11.0, have {torch.__version__}"
assert neuralop.__version__ == "2.0.0", f"need neuraloperator 2.0.0, have {neuralop.__version__}"

SEED_N_PARAMS = 1192801

# name -> (FNO kwargs beyond defaults, input shape [B, C, *res], torch seed)
FNO1D = dict(n_modes=(8,), in_channels=2, out_channels=1, hidden_channels=8, n_layers=2)
FNO2D = dict(n_modes=(8, 6), in_channels=1, out_channels=2, hidden_channels=8, n_layers=3)
FNO3D = dict(n_modes=(4, 4, 4), in_channels=1, out_channels=1, hidden_channels=4, n_layers=2)
SEED = dict(n_modes=(16, 16), in_channels=1, out_channels=1, hidden_channels=32,
            projection_channel_ratio=2)
MODEL_CASES = [
    ("fno1d_even", FNO1D, [2, 2, 32], 101),
    ("fno1d_odd", FNO1D, [2, 2, 37], 102),
    ("fno2d_even", FNO2D, [2, 1, 16, 20], 201),
    ("fno2d_odd", FNO2D, [2, 1, 17, 15], 202),
    ("fno2d_small_grid",
     dict(n_modes=(16, 16), in_channels=1, out_channels=1, hidden_channels=8, n_layers=2),
     [2, 1, 9, 11], 203),
    ("fno2d_padding",
     dict(n_modes=(8, 8), in_channels=1, out_channels=1, hidden_channels=8, n_layers=2,
          domain_padding=0.25),
     [2, 1, 16, 16], 204),
    # Blocks without their channel MLPs: the FNO paper's block (neuraloperator
    # applies GELU twice between such blocks).
    ("fno2d_no_channel_mlp", dict(FNO2D, use_channel_mlp=False), [2, 1, 16, 20], 205),
    ("fno3d_even", FNO3D, [1, 1, 8, 8, 8], 301),
    ("fno3d_odd", FNO3D, [1, 1, 7, 9, 5], 302),
    ("seed", SEED, [2, 1, 16, 16], 401),
]
SEED_ODD_SHAPE, SEED_ODD_SEED = [1, 1, 21, 21], 402


def save(obj, out_dir, name, written):
    path = os.path.join(out_dir, name)
    torch.save(obj, path)
    written.append(path)


def cfg_tensors(model, kwargs):
    dp = kwargs.get("domain_padding")
    if dp is None:
        dp = []
    elif isinstance(dp, (int, float)):
        dp = [float(dp)]
    extra = {}
    if "use_channel_mlp" in kwargs:  # (only where set: the other files stay as they were)
        extra["cfg.use_channel_mlp"] = torch.tensor(bool(kwargs["use_channel_mlp"]))
    return {
        **extra,
        "cfg.n_modes": torch.tensor(list(kwargs["n_modes"]), dtype=torch.int64),
        "cfg.in_channels": torch.tensor(model.in_channels, dtype=torch.int64),
        "cfg.out_channels": torch.tensor(model.out_channels, dtype=torch.int64),
        "cfg.hidden_channels": torch.tensor(model.hidden_channels, dtype=torch.int64),
        "cfg.n_layers": torch.tensor(model.n_layers, dtype=torch.int64),
        "cfg.lifting_channel_ratio": torch.tensor(float(model.lifting_channel_ratio), dtype=torch.float64),
        "cfg.projection_channel_ratio": torch.tensor(float(model.projection_channel_ratio), dtype=torch.float64),
        "cfg.domain_padding": torch.tensor(dp, dtype=torch.float64),
        "cfg.n_params": torch.tensor(count_model_params(model), dtype=torch.int64),
    }


def run_case(model, x, with_grads=True):
    """y = model(x) with the fix; w ~ randn like y; grads of (y*w).sum()."""
    model.zero_grad(set_to_none=True)
    with neuralop_fix.fixed():
        y = model(x)
    w = torch.randn(y.shape, dtype=y.dtype)
    grads = {}
    if with_grads:
        (y * w).sum().backward()
        for name, p in model.named_parameters():
            assert p.grad is not None, f"no grad for {name}"
            assert p.grad.dtype == p.dtype, (name, p.grad.dtype, p.dtype)
            grads["grad." + name] = p.grad.detach().clone()
    return y.detach().clone(), w, grads


def unpatched(model, x):
    with torch.no_grad(), neuralop_fix.fixed(enabled=False):
        return model(x)


def check_fix_semantics():
    """The patched SpectralConv must be translation-equivariant on odd grids
    (a Fourier multiplier commutes with circular shifts); the unpatched 2.0.0 one
    is not.  Also: on even grids patched == unpatched bit for bit."""
    torch.manual_seed(7)
    conv = SpectralConv(3, 3, n_modes=(5, 4), bias=False)
    for shape, shift in (((2, 3, 9, 7), (2, 3)), ((2, 3, 11, 8), (4, 1)), ((2, 3, 10, 12), (3, 5))):
        x = torch.randn(shape)
        xs = torch.roll(x, shifts=shift, dims=(-2, -1))
        with torch.no_grad():
            with neuralop_fix.fixed():
                a, b = torch.roll(conv(x), shifts=shift, dims=(-2, -1)), conv(xs)
            err_fixed = ((a - b).norm() / a.norm()).item()
            with neuralop_fix.fixed(enabled=False):
                a0, b0 = torch.roll(conv(x), shifts=shift, dims=(-2, -1)), conv(xs)
            err_orig = ((a0 - b0).norm() / a0.norm()).item()
        assert err_fixed < 1e-5, (shape, err_fixed)
        if shape[-2] % 2:
            assert err_orig > 1e-2, (shape, err_orig)  # 2.0.0 breaks equivariance for odd sizes
        else:
            assert torch.equal(a, a0) and torch.equal(b, b0), shape
        print(f"  equivariance {shape}: fixed rel err {err_fixed:.2e}, 2.0.0 rel err {err_orig:.2e}")


def make_models(out_dir, written, seed_grads=True):
    for name, kwargs, shape, seed in MODEL_CASES:
        torch.manual_seed(seed)
        model = FNO(**kwargs)  # float32
        n_params = count_model_params(model)
        if name == "seed":
            assert n_params == SEED_N_PARAMS, n_params
        x = torch.randn(shape, dtype=torch.float32)
        want_grads = seed_grads or not name.startswith("seed")
        y, w, grads = run_case(model, x, with_grads=want_grads)

        # Fix-patch checks: identical for even sizes and for 1-D; different otherwise.
        y0 = unpatched(model, x)
        res = shape[2:]
        if all(s % 2 == 0 for s in res[:-1]) or len(res) == 1:
            assert torch.equal(y, y0), f"{name}: patch changed an even-size/1-D output"
            fix_note = "patched == unpatched (bitwise)"
        else:
            d = ((y - y0).norm() / y.norm()).item()
            assert d > 1e-4, f"{name}: expected the fix to matter, rel diff {d}"
            fix_note = f"patched vs 2.0.0 rel diff {d:.3e}"

        sd = model.state_dict()
        assert isinstance(sd, OrderedDict) and "_metadata" in sd
        save(sd, out_dir, f"{name}_state.pt", written)

        # Reload the way a neuraloperator user would and check we reproduce y.
        reloaded = FNO(**kwargs)
        reloaded.load_state_dict(torch.load(written[-1], weights_only=False), strict=True)
        with torch.no_grad(), neuralop_fix.fixed():
            assert torch.equal(reloaded(x), y), f"{name}: reload mismatch"

        io = {"x": x, "y": y, "w": w, **grads, **cfg_tensors(model, kwargs)}
        save(io, out_dir, f"{name}_io.pt", written)
        print(f"  {name}: x {list(x.shape)} -> y {list(y.shape)}, n_params {n_params}, "
              f"{len(grads)} grads; {fix_note}")

        if name == "seed":
            # seed_odd: same model & weights (no second state file), odd 21x21 input.
            torch.manual_seed(SEED_ODD_SEED)
            x = torch.randn(SEED_ODD_SHAPE, dtype=torch.float32)
            y, w, grads = run_case(model, x, with_grads=seed_grads)
            y0 = unpatched(model, x)
            d = ((y - y0).norm() / y.norm()).item()
            assert d > 1e-4, d
            io = {"x": x, "y": y, "w": w, **grads, **cfg_tensors(model, kwargs)}
            save(io, out_dir, "seed_odd_io.pt", written)
            print(f"  seed_odd: x {list(x.shape)} -> y {list(y.shape)}, {len(grads)} grads; "
                  f"patched vs 2.0.0 rel diff {d:.3e}")


LOSS_SHAPES = {1: [3, 2, 24], 2: [3, 2, 12, 10], 3: [3, 2, 6, 7, 5]}


def make_losses(out_dir, written):
    torch.manual_seed(500)
    out = {}
    for d, shape in LOSS_SHAPES.items():
        out[f"x.d{d}"] = torch.randn(shape, dtype=torch.float64)
        out[f"y.d{d}"] = torch.randn(shape, dtype=torch.float64)

    def rel_abs(loss, key, x, y, grad=True):
        xg = x.clone().requires_grad_(True)
        rel = loss.rel(xg, y)
        out[key + ".rel"] = rel.detach().clone()
        out[key + ".abs"] = loss.abs(x, y).detach().clone()
        if grad:
            (g,) = torch.autograd.grad(rel, xg)
            out[key + ".rel.grad"] = g

    for d in (1, 2, 3):
        x, y = out[f"x.d{d}"], out[f"y.d{d}"]
        for p in (1, 2, 3):
            for r in ("sum", "mean"):
                rel_abs(LpLoss(d=d, p=p, reduction=r), f"lp.d{d}.p{p}.{r}", x, y)
        pers = [("periodic", (True, True, True)), ("nonperiodic", (False, False, False))]
        if d >= 2:
            pers.append(("mixed", (True, False, True)))
        for per, (px, py, pz) in pers:
            for r in ("sum", "mean"):
                loss = H1Loss(d=d, reduction=r, periodic_in_x=px, periodic_in_y=py, periodic_in_z=pz)
                rel_abs(loss, f"h1.d{d}.{per}.{r}", x, y)

    x, y = out["x.d2"], out["y.d2"]
    out["lp.d2.p2.sum.measure.abs"] = LpLoss(d=2, p=2, measure=2.0).abs(x, y)
    h1m = H1Loss(d=2, measure=[2.0, 0.5])
    out["h1.d2.periodic.sum.measure.rel"] = h1m.rel(x, y)
    out["h1.d2.periodic.sum.measure.abs"] = h1m.abs(x, y)

    for k, v in out.items():
        assert v.dtype == torch.float64 and torch.isfinite(v).all(), k
        assert not v.requires_grad, k
    save(out, out_dir, "losses.pt", written)
    print(f"  losses.pt: {len(out)} tensors")


OPTIM_CONFIGS = [
    ("adamw_default", dict(lr=1e-3), None),
    ("adamw_wd", dict(lr=8e-3, weight_decay=1e-4), None),
    ("adamw_wd_nobias", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-8, weight_decay=1e-2,
                             correct_bias=False), None),
    ("adamw_cosine", dict(lr=8e-3, weight_decay=1e-4),
     lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5)),
    ("adamw_steplr", dict(lr=1e-3),
     lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)),
]
# torch.optim.Adam (the FNO paper's optimizer): an L2 weight decay, complex
# parameters as real pairs; fno::AdamW with torch_adam(true) replays these.
TORCH_ADAM_CONFIGS = [
    ("adam_wd", dict(lr=8e-3, weight_decay=1e-4), None),
    ("adam_paper", dict(lr=1e-3, weight_decay=1e-4, eps=1e-8),
     lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)),
    ("adam_betas_wd", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-1), None),
]
N_OPT_STEPS = 12

# (name, base lr, scheduler factory, metrics or None)
PLATEAU_METRIC = [
    10.0, 9.0,                  # improvements
    8.9995,                     # within rel threshold 1e-4 of 9.0 -> counts as bad
    9.5, 9.2,                   # bad 2, 3 > patience 2 -> lr 1.0 -> 0.5, cooldown 1
    9.3,                        # in cooldown: bad reset to 0
    9.3, 9.3, 9.3,              # bad 1, 2, 3 -> lr 0.25, cooldown
    5.0, 4.0,                   # improvements (first one also ends the cooldown)
    4.5, 4.5, 4.5,              # bad 1, 2, 3 -> lr 0.125, cooldown
    4.5,                        # cooldown
    4.5, 4.5, 4.5,              # -> lr 0.0625, cooldown
    4.5,                        # cooldown
    4.5, 4.5, 4.5,              # -> max(0.03125, min_lr 0.05) = 0.05, cooldown
    4.5,                        # cooldown
    4.5, 4.5,                   # bad 1, 2 (a further reduction would be clamped)
]
PLATEAU_MAX_ABS_METRIC = [
    0.5, 0.6,                   # improvements
    0.605,                      # not > 0.6 + 0.01 -> bad 1
    0.609,                      # bad 2 > patience 1 -> lr 1.0 -> 0.1 (no cooldown)
    0.7,                        # improvement resets
    0.65, 0.71,                 # bad 1, 2 (0.71 <= 0.7 + 0.01) -> 0.01
    0.0, 0.0,                   # -> 1e-3
    0.0, 0.0,                   # -> 1e-4
    0.0, 0.0,                   # -> 1e-5
    0.0, 0.0,                   # -> 1e-6
    0.0, 0.0,                   # -> 1e-7
    0.0, 0.0,                   # -> 1e-8
    0.0, 0.0,                   # old - new = 9e-9 < eps 1e-8: lr stays ~1e-8
    0.0, 0.0, 0.0, 0.0,
]
SCHED_CASES = [
    ("cosine", 1.0, lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7, eta_min=0.01), None),
    ("cosine30", 8e-3, lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=30), None),
    ("steplr", 0.5, lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=4, gamma=0.3), None),
    ("plateau", 1.0, lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(
        o, mode="min", factor=0.5, patience=2, threshold=1e-4, threshold_mode="rel",
        cooldown=1, min_lr=0.05), PLATEAU_METRIC),
    ("plateau_max_abs", 1.0, lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(
        o, mode="max", factor=0.1, patience=1, threshold=0.01, threshold_mode="abs"),
     PLATEAU_MAX_ABS_METRIC),
]
N_SCHED_STEPS = 25


def make_optim(out_dir, written):
    torch.manual_seed(600)
    out = {
        "p0.real": torch.randn(5, 4, dtype=torch.float32),
        "p0.cplx": torch.randn(3, 4, 2, dtype=torch.complex64),
    }
    for t in range(1, N_OPT_STEPS + 1):
        out[f"g.{t}.real"] = torch.randn(5, 4, dtype=torch.float32)
        out[f"g.{t}.cplx"] = torch.randn(3, 4, 2, dtype=torch.complex64)

    cases = [(AdamW, *c) for c in OPTIM_CONFIGS]
    cases += [(torch.optim.Adam, *c) for c in TORCH_ADAM_CONFIGS]
    for make_opt, cfg, kwargs, make_sched in cases:
        pr = torch.nn.Parameter(out["p0.real"].clone())
        pc = torch.nn.Parameter(out["p0.cplx"].clone())
        opt = make_opt([pr, pc], **kwargs)
        sched = make_sched(opt) if make_sched else None
        for t in range(1, N_OPT_STEPS + 1):
            pr.grad = out[f"g.{t}.real"].clone()
            pc.grad = out[f"g.{t}.cplx"].clone()
            lr = opt.param_groups[0]["lr"]
            out[f"{cfg}.lr{t}"] = torch.tensor(float(lr), dtype=torch.float64)
            opt.step()
            if sched is not None:
                sched.step()
            out[f"{cfg}.step{t}.real"] = pr.detach().clone()
            out[f"{cfg}.step{t}.cplx"] = pc.detach().clone()
        assert out[f"{cfg}.step{N_OPT_STEPS}.cplx"].dtype == torch.complex64

    for name, base, make_sched, metric in SCHED_CASES:
        dummy = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([dummy], lr=base)
        sched = make_sched(opt)
        out[f"sched.{name}.lr0"] = torch.tensor(float(opt.param_groups[0]["lr"]), dtype=torch.float64)
        lrs = []
        for i in range(N_SCHED_STEPS):
            opt.step()  # no grad: a no-op, avoids the "scheduler before optimizer" warning
            if metric is None:
                sched.step()
            else:
                sched.step(metric[i])
            lrs.append(float(opt.param_groups[0]["lr"]))
        out[f"sched.{name}.lr"] = torch.tensor(lrs, dtype=torch.float64)
        if metric is not None:
            assert len(metric) == N_SCHED_STEPS, (name, len(metric))
            out[f"sched.{name}.metric"] = torch.tensor(metric, dtype=torch.float64)
        print(f"  sched.{name}: lr0 {out[f'sched.{name}.lr0'].item():g} -> "
              + " ".join(f"{v:.6g}" for v in lrs))

    # Sanity on the scheduler edge cases the sequences are meant to exercise.
    pl = out["sched.plateau.lr"].tolist()
    assert min(pl) == 0.05 and pl[-1] == 0.05 and 0.5 in pl and 0.0625 in pl, pl
    pm = out["sched.plateau_max_abs.lr"].tolist()
    assert pm[-1] == pm[-5] and 5e-9 < pm[-1] < 2e-8, pm
    save(out, out_dir, "optim.pt", written)
    print(f"  optim.pt: {len(out)} tensors")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=HERE, help="output directory (default: %(default)s)")
    ap.add_argument("--no-seed-grads", action="store_true",
                    help="leave the grad.* entries out of seed_io.pt / seed_odd_io.pt "
                         "(they are ~4.8 MB each)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    neuralop_fix.uninstall()  # the fix is applied explicitly per forward call below

    written = []
    print("fix semantics:")
    check_fix_semantics()
    print("models:")
    make_models(args.out, written, seed_grads=not args.no_seed_grads)
    print("losses:")
    make_losses(args.out, written)
    print("optimizer / schedulers:")
    make_optim(args.out, written)

    total = 0
    print("written:")
    for p in written:
        size = os.path.getsize(p)
        total += size
        print(f"  {size:>10d}  {os.path.relpath(p)}")
    print(f"  {total:>10d}  total")


if __name__ == "__main__":
    main()
