"""A synthetic data set in The Well's layout (docs/data.md, "Benchmark formats"),
of any size: <out>/data/<split>/synthetic_<split>_<k>.hdf5, each shard holding
`--trajectories` trajectories of `--steps` steps on a `--grid` grid, with
`--fields` scalar fields (t0_fields: field0, field1, ...) that vary in time,
float32, seeded. Uncompressed and unchunked, as The Well's files are, so that a
trajectory's steps are one contiguous byte range per field.

    python bench/make_well_set.py OUT --grid 512 512 --steps 24 --trajectories 16 --shards 3

Refuses to write into an OUT that exists (it never overwrites data).
"""

import argparse
import os
import sys

import h5py
import numpy as np


def write_shard(path, n_traj, n_steps, grid, n_fields, seed):
    rng = np.random.default_rng(seed)
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs["dataset_name"] = "synthetic"
        f.attrs["grid_type"] = "cartesian"
        f.attrs["n_spatial_dims"] = len(grid)
        f.attrs["n_trajectories"] = n_traj
        dims = f.create_group("dimensions")
        names = ["x", "y", "z"][: len(grid)]
        dims.attrs["spatial_dims"] = names
        t = dims.create_dataset("time", data=np.linspace(0, 1, n_steps, dtype=np.float32))
        t.attrs["sample_varying"] = False
        for name, n in zip(names, grid):
            d = dims.create_dataset(name, data=np.linspace(0, 1, n, endpoint=False, dtype=np.float32))
            d.attrs["sample_varying"] = False
            d.attrs["time_varying"] = False
        f.create_group("boundary_conditions")
        f.create_group("scalars").attrs["field_names"] = []
        t0 = f.create_group("t0_fields")
        fields = [f"field{i}" for i in range(n_fields)]
        t0.attrs["field_names"] = fields
        for i, name in enumerate(fields):
            d = t0.create_dataset(name, shape=(n_traj, n_steps, *grid), dtype=np.float32)
            for n in range(n_traj):
                # A mean and scale per field, so that normalization matters.
                d[n] = (i + 1.0) + (0.5 + i) * rng.standard_normal((n_steps, *grid), dtype=np.float32)
            d.attrs["dim_varying"] = [True] * len(grid)
            d.attrs["sample_varying"] = True
            d.attrs["time_varying"] = True
        f.create_group("t1_fields").attrs["field_names"] = []
        f.create_group("t2_fields").attrs["field_names"] = []
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--grid", type=int, nargs="+", default=[64, 64])
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--trajectories", type=int, default=8, help="per shard")
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--fields", type=int, default=2)
    p.add_argument("--splits", nargs="+", default=["train"])
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if os.path.exists(a.out):
        sys.exit(f"{a.out}: exists; give a new folder")
    for s, split in enumerate(a.splits):
        d = os.path.join(a.out, "data", split)
        os.makedirs(d)
        for k in range(a.shards):
            write_shard(os.path.join(d, f"synthetic_{split}_{k}.hdf5"), a.trajectories, a.steps,
                        a.grid, a.fields, a.seed * 1000 + s * 100 + k)


if __name__ == "__main__":
    main()
