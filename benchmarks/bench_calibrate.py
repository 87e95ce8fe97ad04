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

Each calibrate run's own timing line (``calibration.json``'s ``timings``: wall and CPU per stage)
is read back: the median per stage is printed, with the recorded wall against the wall measured
here (the line must add up to it). With ``--doc`` the tables are written to
``docs/generated/bench_calibrate.md`` (:mod:`benchmarks.doc_table`), which docs/speed.md links.

Run from the repository root::

    PYTHONPATH=. python benchmarks/bench_calibrate.py [--repeats 2] [--boxes] [--baseline ../main] [--doc]

``--boxes`` also times ``calibrate --boxes`` on the first run's output folder (no forward pass).
``--baseline DIR`` also runs ``calibrate`` from another checkout of det_calib (e.g. the main
branch's), in the same turns, so that a change is measured against the code before it under the same
load; the summary figures of the two are compared line by line (the timing line aside).
"""

from __future__ import annotations

import argparse
import json
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


def _run(cmd: list[str], env: dict[str, str], cwd: str | None = None) -> dict[str, float]:
    """Run a command in a fresh process; its wall, CPU (user + sys) seconds and peak RSS (bytes)."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=cwd
    )
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{err[-2000:]}")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss": ru.ru_maxrss * 1024}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", help="detector .pt (default: the demo detector)")
    ap.add_argument("--data", help="data.yaml (default: the demo dataset)")
    ap.add_argument(
        "--splits",
        nargs=2,
        default=("calib", "test"),
        help="fit and eval split (default calib test)",
    )
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--boxes", action="store_true", help="also time calibrate --boxes on the first run's folder"
    )
    ap.add_argument(
        "--baseline", help="another det_calib checkout whose calibrate runs in the same turns"
    )
    ap.add_argument(
        "--doc", action="store_true", help="write the tables to docs/generated/bench_calibrate.md"
    )
    ap.add_argument("extra", nargs="*", help="extra calibrate options (after --)")
    args = ap.parse_args()

    env = {**os.environ, "PYTHONPATH": str(REPO), "YOLO_OFFLINE": "1"}
    env.setdefault("OMP_NUM_THREADS", "1")
    args.omp = env["OMP_NUM_THREADS"]
    if args.model is None:
        sys.path.insert(0, str(REPO))
        from det_calib import demo

        args.model, args.data = str(demo.demo_model()), str(demo.demo_data_yaml())
    cal_opts = [
        "--model",
        args.model,
        "--data",
        args.data,
        "--fit-split",
        args.splits[0],
        "--eval-split",
        args.splits[1],
        "-q",
        *args.extra,
    ]
    print(f"model {args.model}\ndata  {args.data}  splits {args.splits[0]} + {args.splits[1]}")
    print(
        f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} "
        "CPUs)"
    )
    cal, val, reuse, timings, base = [], [], [], [], []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench_calibrate_") as tmp:
        env["BENCH_TMP"] = tmp
        yamls = _split_yamls(args.data, list(args.splits), Path(tmp))
        for r in range(args.repeats):
            out = str(Path(tmp) / f"run{r}")
            cal.append(
                _run(
                    [sys.executable, "-m", "det_calib.cli", "calibrate", *cal_opts, "--out", out],
                    env,
                )
            )
            timings.append(json.loads((Path(out) / "calibration.json").read_text()).get("timings"))
            val.append(_run([sys.executable, "-c", VAL, args.model, *yamls], env))
            if args.baseline:
                bout = str(Path(tmp) / f"base{r}")
                base.append(
                    _run(
                        [
                            sys.executable,
                            "-m",
                            "det_calib.cli",
                            "calibrate",
                            *cal_opts,
                            "--out",
                            bout,
                        ],
                        {**env, "PYTHONPATH": str(Path(args.baseline).resolve())},
                        cwd=str(Path(args.baseline).resolve()),
                    )
                )  # `-m` puts the cwd first on the path
                if r == 0:
                    same = _same_figures(Path(out) / "summary.txt", Path(bout) / "summary.txt")
                    print(
                        "  summary figures, this checkout vs baseline: "
                        f"{'identical' if same else 'DIFFERENT'}"
                    )
            print(
                f"  repeat {r}: calibrate {cal[-1]['wall']:.1f} s ({cal[-1]['cpu']:.1f} s CPU), "
                f"val {val[-1]['wall']:.1f} s ({val[-1]['cpu']:.1f} s CPU)"
                + (
                    f", baseline calibrate {base[-1]['wall']:.1f} s ({base[-1]['cpu']:.1f} s CPU)"
                    if base
                    else ""
                ),
                flush=True,
            )
        if args.boxes:
            for r in range(args.repeats):
                reuse.append(
                    _run(
                        [
                            sys.executable,
                            "-m",
                            "det_calib.cli",
                            "calibrate",
                            *cal_opts,
                            "--boxes",
                            str(Path(tmp) / "run0"),
                            "--out",
                            str(Path(tmp) / f"reuse{r}"),
                        ],
                        env,
                    )
                )
    load_after = os.getloadavg()
    print(f"load average after:  {' '.join(f'{x:.1f}' for x in load_after)}")

    def med(rows: list[dict], k: str) -> float:
        return statistics.median(x[k] for x in rows)

    gib = 1 << 30
    rows = [("det-calib calibrate", cal), ("Ultralytics val, same 2 splits", val)]
    if reuse:
        rows.append(("det-calib calibrate --boxes", reuse))
    if base:
        rows.append((f"baseline calibrate ({Path(args.baseline).name})", base))
    table = ["| | wall s | CPU s | peak RSS GiB |", "|---|---:|---:|---:|"]
    table += [
        f"| {name} | {med(rr, 'wall'):.1f} | {med(rr, 'cpu'):.1f} | {med(rr, 'rss') / gib:.2f} |"
        for name, rr in rows
    ]
    table.append(
        f"| **ratio calibrate / val** | **{med(cal, 'wall') / med(val, 'wall'):.2f}x** | "
        f"**{med(cal, 'cpu') / med(val, 'cpu'):.2f}x** | "
        f"**{med(cal, 'rss') / med(val, 'rss'):.2f}x** |"
    )
    if base:
        table.append(
            f"| ratio baseline calibrate / val | {med(base, 'wall') / med(val, 'wall'):.2f}x | "
            f"{med(base, 'cpu') / med(val, 'cpu'):.2f}x | "
            f"{med(base, 'rss') / med(val, 'rss'):.2f}x |"
        )
    stage_table = _stage_table(timings, cal)
    print(f"\nmedian of {args.repeats} paired runs (calibrate, then val, in turn)")
    print("\n".join(table))
    if stage_table:
        print("\ncalibrate's own timing line (calibration.json `timings`), median per stage")
        print("\n".join(stage_table))
    if args.doc:
        _write_doc(args, table, stage_table, load_before, load_after)


def _same_figures(a: Path, b: Path) -> bool:
    """Whether two summaries say the same, their timing lines aside."""

    def lines(p: Path) -> list[str]:
        return [x for x in p.read_text().splitlines() if not x.startswith("time: ")]

    return lines(a) == lines(b)


def _stage_table(timings: list[dict | None], cal: list[dict[str, float]]) -> list[str]:
    """Median wall and CPU per stage of the calibrate runs, and their recorded wall against the wall
    measured from outside (what the timing line must add up to)."""
    got = [t for t in timings if t]
    if not got:
        return []
    names = list(dict.fromkeys(n for t in got for n in t["stages"]))
    lines = ["| stage | wall s | CPU s |", "|---|---:|---:|"]
    for n in names:
        w = statistics.median(t["stages"].get(n, {}).get("wall", 0.0) for t in got)
        c = statistics.median(t["stages"].get(n, {}).get("cpu", 0.0) for t in got)
        lines.append(f"| {n} | {w:.1f} | {c:.1f} |")
    rec = statistics.median(t["wall"] for t in got)
    ext = statistics.median(r["wall"] for r in cal)
    lines.append(
        f"| **recorded total** | **{rec:.1f}** | "
        f"**{statistics.median(t['cpu'] for t in got):.1f}** |"
    )
    lines.append(
        f"| measured from outside (process start to exit) | {ext:.1f} | "
        f"{statistics.median(r['cpu'] for r in cal):.1f} |"
    )
    lines.append(f"| recorded / measured wall | {rec / ext:.3f} | |")
    return lines


def _write_doc(
    args: argparse.Namespace,
    table: list[str],
    stage_table: list[str],
    load_before: tuple[float, ...],
    load_after: tuple[float, ...],
) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from doc_table import write_doc_table

    note = (
        f"Model `{Path(args.model).name}`, data "
        f"`{Path(args.data).parent.name}/{Path(args.data).name}`, splits "
        f"{args.splits[0]} + {args.splits[1]}; extra options: {' '.join(args.extra) or 'none'}"
        + (f"; baseline: calibrate from {args.baseline} in the same turns" if args.baseline else "")
        + f". Median of {args.repeats} paired runs (calibrate, then val, in turn; fresh processes, "
        f"OMP_NUM_THREADS={args.omp}); {os.cpu_count()} CPUs, load average {load_before[0]:.1f} "
        "before and "
        f"{load_after[0]:.1f} after (a shared machine: wall times are noisy, CPU times less so)."
    )
    body = "\n".join(table)
    if stage_table:
        body += (
            "\n\nWhere calibrate's time went (its own timing line, `calibration.json` `timings`; "
            "the stages "
            "are exclusive and add up to the recorded total):\n\n" + "\n".join(stage_table)
        )
    write_doc_table("bench_calibrate", body, note=note)


if __name__ == "__main__":
    main()
