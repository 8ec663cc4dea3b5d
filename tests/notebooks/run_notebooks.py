#!/usr/bin/env python3
"""Executes notebooks headlessly (nbclient); any cell error fails.

    run_notebooks.py [--env KEY=VALUE ...] NOTEBOOK [NOTEBOOK ...]

Each notebook runs in its own directory with the given environment variables,
which its first ("parameters") cell reads; FNO_NB_CWD (unless set) names the
directory this script was started from, against which the notebooks resolve
relative paths given in the environment. Exits 77 (CTest: skipped) when the
notebook packages are not installed, e.g. with the GPU machine's system python.
"""
import argparse
import os
import sys

try:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    import matplotlib  # noqa: F401  (the notebooks' own imports, checked up front)
    import pandas  # noqa: F401
    import h5py  # noqa: F401
except ImportError as e:
    print(f"run_notebooks: skipped: {e}")
    sys.exit(77)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for the parameters cell")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    ap.add_argument("notebooks", nargs="+")
    args = ap.parse_args()
    for kv in args.env:
        key, sep, value = kv.partition("=")
        if not sep:
            ap.error(f"--env {kv}: expected KEY=VALUE")
        os.environ[key] = value
    os.environ.setdefault("FNO_NB_CWD", os.getcwd())
    failed = 0
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                                resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}})
        try:
            client.execute()
            print(f"run_notebooks: {path}: ok ({len(nb.cells)} cells)")
        except CellExecutionError as e:
            failed += 1
            lines = [l for l in str(e).splitlines() if l.strip()]
            print(f"run_notebooks: {path}: FAILED: {lines[-1] if lines else e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
