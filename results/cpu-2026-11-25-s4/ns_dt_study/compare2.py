import h5py, numpy as np, os
def load(name):
    p = f"/tmp/dtstudy/{name}.h5"
    return h5py.File(p, "r")["u"][...] if os.path.exists(p) else None
def diff(a, b, label):
    if a is None or b is None:
        print(f"{label}: not made yet"); return
    e = np.sqrt(((a - b) ** 2).sum(axis=(1, 2)) / (b ** 2).sum(axis=(1, 2)))  # (N, T)
    T = e.shape[1]
    traj = np.sqrt(((a - b) ** 2).sum(axis=(1, 2, 3)) / (b ** 2).sum(axis=(1, 2, 3)))
    print(f"{label}: rel L2 at records 1/10/{T//2}/{T}: {e[:,0].mean():.2e} {e[:,min(9,T-1)].mean():.2e} "
          f"{e[:,T//2-1].mean():.2e} {e[:,-1].mean():.2e}; over the trajectory {traj.mean():.2e} (2 samples)")
diff(load("nu1e-3_dt1e-3"), load("nu1e-3_dt1e-4"), "nu 1e-3, float32: dt 1e-3 vs dt 1e-4")
diff(load("nu1e-3_dt5e-4"), load("nu1e-3_dt1e-4"), "nu 1e-3, float32: dt 5e-4 vs dt 1e-4")
diff(load("nu1e-3_dt1e-3"), load("nu1e-3_dt1e-3_f64"), "nu 1e-3, dt 1e-3: float32 vs float64")
diff(load("nu1e-3_dt1e-4"), load("nu1e-3_dt1e-4_f64"), "nu 1e-3, dt 1e-4: float32 vs float64")
diff(load("nu1e-3_dt1e-3_f64"), load("nu1e-3_dt1e-4_f64"), "nu 1e-3, float64: dt 1e-3 vs dt 1e-4")
diff(load("nu1e-5_dt1e-3"), load("nu1e-5_dt1e-4"), "nu 1e-5, float32: dt 1e-3 vs dt 1e-4")
diff(load("nu1e-5_dt5e-4"), load("nu1e-5_dt1e-4"), "nu 1e-5, float32: dt 5e-4 vs dt 1e-4")
