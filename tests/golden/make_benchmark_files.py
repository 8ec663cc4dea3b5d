"""Small files in the layouts of The Well, PDEBench and PDEArena, and what the
benchmarks' own readers return for them (tests/test_benchmark_data.cpp checks
our loader against these goldens).

- The Well: written to the layout its `WellDataset` (the_well 1.2.0, installed
  from PyPI with --no-deps) reads, and the goldens are that reader's output.
- PDEBench (no installable PyPI release) and PDEArena (not on PyPI): the
  goldens come from a line-for-line re-reading of their loaders
  (pdebench/models/fno/utils.py: FNODatasetSingle and FNODatasetMult;
  pdearena/data/twod/datapipes: NavierStokesDatasetOpener and
  PDEEvalTimeStepData), written out below.

Run from the repository root (deterministic; the files are rewritten):

    PYTHONPATH=DIR .venv/bin/python tests/golden/make_benchmark_files.py

where DIR has `pip install --no-deps --target DIR the_well==1.2.0 einops==0.8.1
pyyaml==6.0.2` (requirements-nodeps.txt, requirements.txt pin them).
"""

import argparse
import os

import h5py
import numpy as np
import torch

HISTORY, HORIZON = 2, 1  # the time window of every golden


def rng_field(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------
# The Well
# ---------------------------------------------------------------------------
def write_well_file(path, n_traj, n_t, nx, ny, seed, wall="WALL"):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.attrs["dataset_name"] = "tiny_shear"
        f.attrs["grid_type"] = "cartesian"
        f.attrs["n_spatial_dims"] = 2
        f.attrs["n_trajectories"] = n_traj
        f.attrs["simulation_parameters"] = ["gamma"]
        dims = f.create_group("dimensions")
        dims.attrs["spatial_dims"] = ["x", "y"]
        t = dims.create_dataset("time", data=np.linspace(0, 1, n_t, dtype=np.float32))
        t.attrs["sample_varying"] = False
        for name, n in (("x", nx), ("y", ny)):
            d = dims.create_dataset(name, data=np.linspace(0, 1, n, endpoint=False, dtype=np.float32))
            d.attrs["sample_varying"] = False
            d.attrs["time_varying"] = False
        bcs = f.create_group("boundary_conditions")
        for bc_name, bc_type, dim, n, mask in (
            ("x_periodic", "PERIODIC", "x", nx, np.ones(nx, bool)),
            ("y_wall", wall, "y", ny, np.r_[True, np.zeros(ny - 2, bool), True]),
        ):
            g = bcs.create_group(bc_name)
            g.attrs["bc_type"] = bc_type
            g.attrs["associated_dims"] = [dim]
            g.attrs["associated_fields"] = []
            g.attrs["sample_varying"] = False
            g.attrs["time_varying"] = False
            g.create_dataset("mask", data=mask)
            g.create_dataset("values", data=np.zeros(n, np.float32))
        scalars = f.create_group("scalars")
        scalars.attrs["field_names"] = ["gamma", "reynolds", "forcing"]
        s = scalars.create_dataset("gamma", data=np.float32(1.4))
        s.attrs["sample_varying"] = False
        s.attrs["time_varying"] = False
        # One value per trajectory (as a Reynolds number swept over the runs),
        # and one varying in time (not an input: data.scalars refuses it).
        # (Not drawn from rng, so that the fields stay as they were.)
        s = scalars.create_dataset("reynolds", data=np.float32(100 * seed + 10 * np.arange(n_traj)))
        s.attrs["sample_varying"] = True
        s.attrs["time_varying"] = False
        s = scalars.create_dataset("forcing", data=np.linspace(0, 1, n_t, dtype=np.float32))
        s.attrs["sample_varying"] = False
        s.attrs["time_varying"] = True

        def field(group, name, data, sample_varying=True, time_varying=True):
            d = group.create_dataset(name, data=data)
            d.attrs["dim_varying"] = [True, True]
            d.attrs["sample_varying"] = sample_varying
            d.attrs["time_varying"] = time_varying

        t0 = f.create_group("t0_fields")
        t0.attrs["field_names"] = ["density", "tracer", "viscosity"]
        field(t0, "density", rng_field(rng, n_traj, n_t, nx, ny))
        field(t0, "tracer", rng_field(rng, n_traj, n_t, nx, ny))
        # A field constant in time (time_varying false): (B, X, Y).
        field(t0, "viscosity", rng_field(rng, n_traj, nx, ny), time_varying=False)
        t1 = f.create_group("t1_fields")
        t1.attrs["field_names"] = ["velocity"]
        field(t1, "velocity", rng_field(rng, n_traj, n_t, nx, ny, 2))
        t2 = f.create_group("t2_fields")
        t2.attrs["field_names"] = []


# The Well's statistics (stats.yaml beside data/, as the_well's
# ZScoreNormalization reads it): a number per field, or one per component; the
# tracer's std below the_well's 1e-4 floor; velocity's mean one number for
# both components.
WELL_STATS = {
    "mean": {"density": 0.1, "tracer": -0.2, "viscosity": 0.0, "velocity": 0.05},
    "std": {"density": 0.9, "tracer": 5e-5, "viscosity": 1.2, "velocity": [1.1, 0.8]},
    "mean_delta": {"density": 0.0, "tracer": 0.0, "velocity": [0.0, 0.0]},
    "std_delta": {"density": 1.3, "tracer": 1.3, "velocity": [1.4, 1.4]},
}


def make_well(out, goldens):
    import yaml
    from the_well.data import WellDataset
    from the_well.data.normalization import ZScoreNormalization

    root = os.path.join(out, "well")
    nx, ny, n_t = 6, 8, 7  # non-square, as shear_flow (256 x 512)
    shards = {"train": [(2, 11), (1, 12)], "valid": [(1, 21), (2, 22)]}
    for split, files in shards.items():
        os.makedirs(os.path.join(root, "data", split), exist_ok=True)
        for k, (n_traj, seed) in enumerate(files):
            write_well_file(os.path.join(root, "data", split, f"tiny_shear_{split}_{k}.hdf5"),
                            n_traj, n_t, nx, ny, seed)
    with open(os.path.join(root, "stats.yaml"), "w") as f:
        yaml.safe_dump(WELL_STATS, f)
    for split in shards:
        ds = WellDataset(path=root, well_split_name=split, n_steps_input=HISTORY,
                         n_steps_output=HORIZON, use_normalization=False, return_grid=False,
                         boundary_return_type=None)
        goldens[f"well.{split}.len"] = torch.tensor(len(ds))
        for i in range(len(ds)):
            s = ds[i]
            # [Ti, X, Y, C] as The Well returns them.
            goldens[f"well.{split}.{i}.input_fields"] = s["input_fields"].contiguous()
            goldens[f"well.{split}.{i}.output_fields"] = s["output_fields"].contiguous()
            goldens[f"well.{split}.{i}.constant_fields"] = s["constant_fields"].contiguous()
            # The scalars constant in time, in the files' order: [gamma, reynolds].
            goldens[f"well.{split}.{i}.constant_scalars"] = s["constant_scalars"].contiguous()
        # The same windows normalized by stats.yaml, as WellDataset(use_normalization=True).
        ds = WellDataset(path=root, well_split_name=split, n_steps_input=HISTORY,
                         n_steps_output=HORIZON, use_normalization=True,
                         normalization_type=ZScoreNormalization, return_grid=False,
                         boundary_return_type=None)
        for i in range(len(ds)):
            s = ds[i]
            for key in ("input_fields", "output_fields", "constant_fields"):
                goldens[f"well.norm.{split}.{i}.{key}"] = s[key].contiguous()
    # The boundary conditions as WellDataset returns them for padding: per
    # spatial dim, its two ends' BoundaryCondition codes (WALL 0, OPEN 1, PERIODIC 2).
    ds = WellDataset(path=root, well_split_name="train", n_steps_input=HISTORY,
                     n_steps_output=HORIZON, use_normalization=False, return_grid=False,
                     boundary_return_type="padding")
    goldens["well.boundary_conditions"] = ds[0]["boundary_conditions"].contiguous()
    # A shard whose boundary condition The Well does not know (an error).
    write_well_file(os.path.join(out, "well_bad_bc.hdf5"), 1, n_t, nx, ny, 13, wall="NEUMANN")
    # The Well's VRMSE per field on a made-up prediction of the valid set's windows.
    from the_well.benchmark.metrics import VRMSE

    ds = WellDataset(path=root, well_split_name="valid", n_steps_input=HISTORY,
                     n_steps_output=HORIZON, use_normalization=False, return_grid=False,
                     boundary_return_type=None)
    y = torch.stack([ds[i]["output_fields"] for i in range(len(ds))])  # [B, To, X, Y, C]
    g = torch.Generator().manual_seed(5)
    pred = y + 0.3 * torch.randn(y.shape, generator=g)
    goldens["well.vrmse.pred"] = pred.contiguous()
    goldens["well.vrmse.target"] = y.contiguous()
    goldens["well.vrmse.value"] = VRMSE.eval(pred, y, ds.metadata).contiguous()  # [B, To, C]


# ---------------------------------------------------------------------------
# PDEBench
# ---------------------------------------------------------------------------
def make_pdebench(out, goldens):
    root = os.path.join(out, "pdebench")
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(31)
    n, n_t, nx, ny = 10, 5, 6, 8
    path = os.path.join(root, "2D_CFD_tiny.hdf5")
    with h5py.File(path, "w") as f:
        for name in ("density", "pressure", "Vx", "Vy"):
            f[name] = rng_field(rng, n, n_t, nx, ny)  # (N, T, X, Y)
        f["x-coordinate"] = np.linspace(0, 1, nx, dtype=np.float32)
        f["y-coordinate"] = np.linspace(0, 1, ny, dtype=np.float32)
        f["t-coordinate"] = np.linspace(0, 1, n_t + 1, dtype=np.float32)
    # FNODatasetSingle, CFD 2D branch (reduced_* = 1): data [N, X, Y, T, 4] in
    # the order density, pressure, Vx, Vy; test = the first int(N * 0.1)
    # samples, train = the rest.
    with h5py.File(path, "r") as f:
        data = np.zeros([n, nx, ny, n_t, 4], np.float32)
        for c, name in enumerate(("density", "pressure", "Vx", "Vy")):
            data[..., c] = np.transpose(np.array(f[name], np.float32), (0, 2, 3, 1))
    test_idx = int(n * 0.1)
    goldens["pdebench.single.train"] = torch.tensor(data[test_idx:n])
    goldens["pdebench.single.test"] = torch.tensor(data[:test_idx])

    path = os.path.join(root, "2D_diff-react_tiny.h5")
    with h5py.File(path, "w") as f:
        for k in range(10):
            g = f.create_group(f"{k:04d}")
            g["data"] = rng_field(rng, n_t, nx, ny, 2)  # (T, X, Y, V)
            g["grid/x"] = np.linspace(0, 1, nx, dtype=np.float32)
            g["grid/y"] = np.linspace(0, 1, ny, dtype=np.float32)
            g["grid/t"] = np.linspace(0, 1, n_t, dtype=np.float32)
    # FNODatasetMult: sorted group names, train = the first int(n * 0.9), test
    # the rest; each sample's data permuted (T, X, Y, V) -> (X, Y, T, V).
    with h5py.File(path, "r") as f:
        keys = sorted(f.keys())
        test_idx = int(len(keys) * (1 - 0.1))
        for split, names in (("train", keys[:test_idx]), ("test", keys[test_idx:])):
            goldens[f"pdebench.mult.{split}"] = torch.stack(
                [torch.tensor(np.array(f[k]["data"], "f")).permute(1, 2, 0, 3) for k in names])


# ---------------------------------------------------------------------------
# PDEArena
# ---------------------------------------------------------------------------
def make_pdearena(out, goldens):
    root = os.path.join(out, "pdearena")
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(41)
    n_t, nx, ny = 6, 8, 6
    for split, n in (("train", 3), ("valid", 2)):
        path = os.path.join(root, f"NavierStokes2D_{split}_tiny.h5")
        with h5py.File(path, "w") as f:
            g = f.create_group(split)
            g["u"] = rng_field(rng, n, n_t, nx, ny)
            g["vx"] = rng_field(rng, n, n_t, nx, ny)
            g["vy"] = rng_field(rng, n, n_t, nx, ny)
            g["buo_y"] = rng.uniform(0.2, 0.5, n).astype(np.float32)
            g["x"] = np.tile(np.linspace(0, 32, nx, dtype=np.float32), (n, 1))
            g["y"] = np.tile(np.linspace(0, 32, ny, dtype=np.float32), (n, 1))
            g["t"] = np.tile(np.linspace(18, 102, n_t, dtype=np.float32), (n, 1))
        # NavierStokesDatasetOpener: u [T, 1, X, Y], v = cat(vx, vy) [T, 2, X, Y];
        # PDEEvalTimeStepData (time_gap 0): data = cat(u[s:s+h], v[s:s+h], dim=1),
        # labels the next `time_future` steps, for every start s.
        with h5py.File(path, "r") as f:
            d = f[split]
            for idx in range(d["u"].shape[0]):
                u = torch.tensor(d["u"][idx]).unsqueeze(1).float()
                v = torch.cat((torch.tensor(d["vx"][idx])[:, None],
                               torch.tensor(d["vy"][idx])[:, None]), dim=1).float()
                for start in range(n_t - HISTORY - HORIZON + 1):
                    end = start + HISTORY
                    data = torch.cat((u[start:end], v[start:end]), dim=1)  # [h, 3, X, Y]
                    labels = torch.cat((u[end:end + HORIZON], v[end:end + HORIZON]), dim=1)
                    goldens[f"pdearena.{split}.{idx}.{start}.data"] = data.contiguous()
                    goldens[f"pdearena.{split}.{idx}.{start}.labels"] = labels.contiguous()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--out", default=os.path.join(here, "benchmarks"))
    args = p.parse_args()
    torch.set_num_threads(1)
    goldens = {}
    make_well(args.out, goldens)
    make_pdebench(args.out, goldens)
    make_pdearena(args.out, goldens)
    torch.save(goldens, os.path.join(args.out, "goldens.pt"))
    print(f"wrote {len(goldens)} tensors to {args.out}")


if __name__ == "__main__":
    main()
