"""``det-calib calibrate`` against plain Ultralytics val of the same model on the same two splits.

Each side runs in a fresh process (so peak memory is its own); runs are paired (calibrate, then
val, ``--repeats`` times) and the medians are printed side by side with their ratios: wall time,
CPU time (user + system: the honest figure on a shared machine) and peak RSS. The load average
before and after is printed too.

- calibrate: ``det-calib calibrate`` with no arguments (embedded demo detector and data: both
  heads, fit and eval split, fit, evaluation with bootstrap intervals, the Ultralytics val checks,
  report and calibrated checkpoint); or ``--model/--data`` and any extra ``calibrate`` options
  after ``--``.
- val: ``YOLO(model).val(data=...)`` on the fit and on the eval split (a yaml per split, with it
  as ``val``), the default head, everything else at Ultralytics' defaults (batch 16, conf
  0.001), plots off.

Run from the repository root::

    PYTHONPATH=. python benchmarks/bench_calibrate.py [--repeats 2] [--boxes]

``--boxes`` also times ``calibrate --boxes`` on the first run's output folder (no forward pass).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

VAL = """
import os, sys
os.environ.setdefault("YOLO_VERBOSE", "False")
from ultralytics import YOLO
m = YOLO(sys.argv[1])
for i, data in enumerate(sys.argv[2:]):
    m.val(data=data, split="val", plots=False, verbose=False, project=os.environ["BENCH_TMP"], name=str(i))
"""


def _split_yamls(data: str, splits: list[str], tmp: Path) -> list[str]:
    """One data.yaml per split with that split as ``val`` (Ultralytics resolves only train/val/test
    against ``path``; a ``calib`` key would not be found)."""
    import yaml

    d = yaml.safe_load(Path(data).read_text())
    root = Path(d.get("path") or Path(data).parent)
    if not root.is_absolute():
        root = (Path(data).parent / root).resolve()
    out = []
    for sp in splits:
        y = {"path": str(root), "train": d.get("train", d[sp]), "val": d[sp], "names": d["names"]}
        path = tmp / f"{sp}.yaml"
        path.write_text(yaml.safe_dump(y))
        out.append(str(path))
    return out


def _run(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """Run a command in a fresh process; its wall, CPU (user + sys) seconds and peak RSS (bytes)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{err[-2000:]}")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss": ru.ru_maxrss * 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="detector .pt (default: the demo detector)")
    ap.add_argument("--data", help="data.yaml (default: the demo dataset)")
    ap.add_argument("--splits", nargs=2, default=("calib", "test"), help="fit and eval split (default calib test)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--boxes", action="store_true", help="also time calibrate --boxes on the first run's folder")
    ap.add_argument("extra", nargs="*", help="extra calibrate options (after --)")
    args = ap.parse_args()

    env = {**os.environ, "PYTHONPATH": str(REPO), "YOLO_OFFLINE": "1"}
    env.setdefault("OMP_NUM_THREADS", "1")
    if args.model is None:
        sys.path.insert(0, str(REPO))
        from det_calib import demo

        args.model, args.data = str(demo.demo_model()), str(demo.demo_data_yaml())
    cal_opts = ["--model", args.model, "--data", args.data, "--fit-split", args.splits[0], "--eval-split",
                args.splits[1], "-q", *args.extra]
    print(f"model {args.model}\ndata  {args.data}  splits {args.splits[0]} + {args.splits[1]}")
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    cal, val, reuse = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench_calibrate_") as tmp:
        env["BENCH_TMP"] = tmp
        yamls = _split_yamls(args.data, list(args.splits), Path(tmp))
        for r in range(args.repeats):
            out = str(Path(tmp) / f"run{r}")
            cal.append(_run([sys.executable, "-m", "det_calib.cli", "calibrate", *cal_opts, "--out", out], env))
            val.append(_run([sys.executable, "-c", VAL, args.model, *yamls], env))
            print(f"  repeat {r}: calibrate {cal[-1]['wall']:.1f} s, val {val[-1]['wall']:.1f} s", flush=True)
        if args.boxes:
            for r in range(args.repeats):
                reuse.append(_run([sys.executable, "-m", "det_calib.cli", "calibrate", *cal_opts, "--boxes",
                                   str(Path(tmp) / "run0"), "--out", str(Path(tmp) / f"reuse{r}")], env))
    print(f"load average after:  {' '.join(f'{x:.1f}' for x in os.getloadavg())}")

    def med(rows: list[dict], k: str) -> float:
        return statistics.median(x[k] for x in rows)

    gib = 1 << 30
    print(f"\nmedian of {args.repeats} paired runs")
    print(f"{'':34s} {'wall s':>8s} {'cpu s':>8s} {'peak RSS GiB':>13s}")
    rows = [("det-calib calibrate", cal), ("Ultralytics val, same 2 splits", val)]
    if reuse:
        rows.append(("det-calib calibrate --boxes", reuse))
    for name, rr in rows:
        print(f"{name:34s} {med(rr, 'wall'):8.1f} {med(rr, 'cpu'):8.1f} {med(rr, 'rss') / gib:13.2f}")
    print(f"{'ratio calibrate / val':34s} {med(cal, 'wall') / med(val, 'wall'):7.2f}x "
          f"{med(cal, 'cpu') / med(val, 'cpu'):7.2f}x {med(cal, 'rss') / med(val, 'rss'):12.2f}x")


if __name__ == "__main__":
    main()
