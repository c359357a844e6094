#!/usr/bin/env python3
"""The Python package's training against the CLI's, the same training on the same rows: prints each
one's wall time (the median of --repeat runs, alternating) and the ratio Python / CLI.

    python tools/bench/python_vs_cli.py [--dump resources/samples/pydocs-hd128] [--tensor layers.2.value]
                                        [--bpa 1] [--repeat 3] [--cli build/app/cli/gsrq]

CLI: `gsrq --no-db train DUMP --tensors T --bpa B --attention-queries 0 -q` as a process (start-up,
reading and hashing the dump included). Python: gsrq.open_dump, Dump.rows and gsrq.train in this
process. Both print the codebooks' training NMSE, which must agree (the same engine and codes).
Run it with the package on PYTHONPATH (the build's python/ folder) or installed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from gsrqtools.paths import ROOT, default_gsrq, import_built_gsrq


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dump", default=os.path.join(ROOT, "resources", "samples", "pydocs-hd128"))
    ap.add_argument("--tensor", default="layers.2.value")
    ap.add_argument("--bpa", type=float, default=1.0)
    ap.add_argument("--iters", type=int, default=25)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cli", default=default_gsrq())
    a = ap.parse_args(argv)
    gsrq = import_built_gsrq()

    cli_s, py_s = [], []
    cli_nmse = py_nmse = None
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        out = subprocess.run([a.cli, "--no-db", "train", a.dump, "--tensors", a.tensor, "--bpa", str(a.bpa), "--iters",
                              str(a.iters), "--attention-queries", "0", "--json", "-q"],
                             capture_output=True, text=True, check=True).stdout
        cli_s.append(time.perf_counter() - t0)
        cli_nmse = json.loads(out)["tensors"][0]["train"]["nmse"]

        t0 = time.perf_counter()
        dump = gsrq.open_dump(a.dump)
        r = gsrq.train(dump.rows(a.tensor), bpa=a.bpa, iterations=a.iters)
        py_s.append(time.perf_counter() - t0)
        py_nmse = r.metrics["nmse"]

    c, p = statistics.median(cli_s), statistics.median(py_s)
    print(f"training {a.tensor} of {a.dump} at {a.bpa} bits per activation, {a.iters} iterations per stage, "
          f"median of {a.repeat}")
    print(f"  cli     {c:8.3f} s   nmse {cli_nmse:.6f}")
    print(f"  python  {p:8.3f} s   nmse {py_nmse:.6f}")
    print(f"  python / cli = {p / c:.3f}")
    if abs(py_nmse - cli_nmse) > 1e-6:
        print("python and cli disagree on the training's NMSE", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
