"""The default ``det-calib calibrate`` (``--method auto``) against ``--method temperature``, side by side.

Both run the whole job on the embedded demo (both heads, capture, fit, evaluation with bootstrap
intervals, the Ultralytics val checks, report, checkpoint), each in a fresh process, alternating
(default, temperature) ``--repeats`` times so that a change of load hits both; the medians of wall
and CPU time (user + system) are printed with their ratio. ``--boxes`` times both from the first
run's boxes instead (no forward pass): what the automatic choice itself costs.

Run from the repository root::

    PYTHONPATH=. python3 benchmarks/bench_default.py [--repeats 3] [--boxes]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one ``det-calib calibrate`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(
        [sys.executable, "-m", "det_calib.cli", "calibrate", "-q", *args],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--boxes", action="store_true", help="both from the first run's boxes (no forward pass)"
    )
    args = ap.parse_args()
    times: dict[str, list[tuple[float, float]]] = {"default": [], "temperature": []}
    with tempfile.TemporaryDirectory() as tmp:
        extra: list[str] = []
        if args.boxes:
            run(["--out", f"{tmp}/first"])
            extra = ["--boxes", f"{tmp}/first"]
        print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
        for i in range(args.repeats):
            for name, opts in (("default", []), ("temperature", ["--method", "temperature"])):
                w, c = run([*opts, *extra, "--out", f"{tmp}/{name}{i}"])
                times[name].append((w, c))
                print(f"  {name:12s} run {i + 1}: wall {w:6.1f} s, CPU {c:6.1f} s", flush=True)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    med = {
        k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for k, v in times.items()
    }
    print(f"{'':14s} {'wall':>8s} {'CPU':>8s}")
    for k, (w, c) in med.items():
        print(f"{k:14s} {w:7.1f}s {c:7.1f}s")
    (wd, cd), (wt, ct) = med["default"], med["temperature"]
    print(
        f"{'ratio':14s} {wd / wt:7.2f}x {cd / ct:7.2f}x   (default / temperature, medians of "
        f"{args.repeats})"
    )


if __name__ == "__main__":
    main()
