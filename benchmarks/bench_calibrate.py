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
    PYTHONPATH=. python benchmarks/bench_calibrate.py --large 2000 [--device 0] [--json out.json] [--doc]
    PYTHONPATH=. python benchmarks/bench_calibrate.py --from-json out.json --doc   # a GPU run's file, here

``--large N`` also runs the pair (``--large-repeats`` times, default once) on a larger demo: the shapes
generator's calib and test splits rendered with N images each (into the cache, once), the same demo
detector; ``--only-large`` skips the default pair (its doc is then ``bench_calibrate_large.md``; a run
on a GPU writes ``bench_calibrate_gpu.md``).
``--device`` runs both sides there (calibrate's ``--device``, val's ``device=``): on a GPU, calibrate
captures 16 images per forward pass by default and val runs its batch of 16. ``--json`` writes
the measurements, which ``--from-json`` turns into the tables on any machine.

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
device = {"device": sys.argv[2]} if sys.argv[2] else {}
for i, data in enumerate(sys.argv[3:]):
    m.val(data=data, split="val", plots=False, verbose=False, project=os.environ["BENCH_TMP"], name=str(i), **device)
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


def measure(
    args: argparse.Namespace,
    model: str,
    data: str,
    *,
    repeats: int,
    label: str,
    baseline: str | None = None,
    boxes: bool = False,
) -> dict:
    """Paired runs (calibrate, then val, ``repeats`` times) on ``model`` and ``data``: the medians, the
    ratios and calibrate's stages, as a dict (what ``--json`` writes and the tables are drawn from)."""
    # this checkout first, then whatever else the path holds (packages installed beside, as on a GPU machine)
    rest = [
        p
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if p and Path(p).resolve() != REPO
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *rest]), "YOLO_OFFLINE": "1"}
    env.setdefault("OMP_NUM_THREADS", "1")
    device = [] if args.device is None else ["--device", args.device]
    cal_opts = [
        "--model",
        model,
        "--data",
        data,
        "--fit-split",
        args.splits[0],
        "--eval-split",
        args.splits[1],
        "-q",
        *device,
        *args.extra,
    ]
    print(
        f"[{label}] model {model}\n[{label}] data  {data}  splits {args.splits[0]} + "
        f"{args.splits[1]}"
    )
    cal, val, reuse, timings, base = [], [], [], [], []
    for checkout in [REPO, *([Path(baseline)] if baseline else [])]:
        _compiled(checkout)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench_calibrate_") as tmp:
        env["BENCH_TMP"] = tmp
        yamls = _split_yamls(data, list(args.splits), Path(tmp))
        val_cmd = [sys.executable, "-c", VAL, model, args.device or "", *yamls]
        for r in range(repeats):
            out = str(Path(tmp) / f"run{r}")
            cal.append(
                _run(
                    [sys.executable, "-m", "det_calib.cli", "calibrate", *cal_opts, "--out", out],
                    env,
                )
            )
            timings.append(json.loads((Path(out) / "calibration.json").read_text()).get("timings"))
            val.append(_run(val_cmd, env))
            if baseline:
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
                        {
                            **env,
                            "PYTHONPATH": os.pathsep.join([str(Path(baseline).resolve()), *rest]),
                        },
                        cwd=str(Path(baseline).resolve()),
                    )
                )  # `-m` puts the cwd first on the path
                if r == 0:
                    same = _same_figures(Path(out) / "summary.txt", Path(bout) / "summary.txt")
                    print(
                        "  summary figures, this checkout vs baseline: "
                        f"{'identical' if same else 'DIFFERENT'}"
                    )
            print(
                f"  [{label}] repeat {r}: calibrate {cal[-1]['wall']:.1f} s ({cal[-1]['cpu']:.1f} "
                "s CPU), "
                f"val {val[-1]['wall']:.1f} s ({val[-1]['cpu']:.1f} s CPU)"
                + (
                    f", baseline calibrate {base[-1]['wall']:.1f} s ({base[-1]['cpu']:.1f} s CPU)"
                    if base
                    else ""
                ),
                flush=True,
            )
        if boxes:
            for r in range(repeats):
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
        images = [_count_images(y) for y in yamls]
    rows = [("det-calib calibrate", cal), ("Ultralytics val, same 2 splits", val)]
    if reuse:
        rows.append(("det-calib calibrate --boxes", reuse))
    if base:
        rows.append((f"baseline calibrate ({Path(baseline).name})", base))
    return {
        "label": label,
        "model": model,
        "data": data,
        "splits": list(args.splits),
        "images": images,
        "repeats": repeats,
        "omp": env["OMP_NUM_THREADS"],
        "load": [load_before[0], os.getloadavg()[0]],
        "rows": {name: _medians(rr) for name, rr in rows},
        "timings": [t for t in timings if t],
        "cal_wall": [x["wall"] for x in cal],
        "cal_cpu": [x["cpu"] for x in cal],
        "baseline": bool(base),
    }


def _compiled(checkout: Path) -> None:
    """Write the bytecode of a checkout's ``det_calib`` (``__pycache__``, git-ignored), as installing the
    package does: with ``PYTHONDONTWRITEBYTECODE`` set (or a read-only checkout) every calibrate run would
    otherwise compile det_calib's modules from source (about 0.2 s of CPU on this project's machine), a cost
    no installed det_calib pays and plain val, whose packages are installed, does not pay either."""
    import compileall

    if not compileall.compile_dir(str(Path(checkout) / "det_calib"), quiet=1, workers=1):
        print(f"  (could not write the bytecode of {checkout}/det_calib: its runs compile it)")


def _count_images(yaml_path: str) -> int:
    """Images of the split a per-split yaml names as ``val``."""
    import yaml

    d = yaml.safe_load(Path(yaml_path).read_text())
    folder = Path(d["path"]) / d["val"]
    return sum(1 for p in folder.iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg", ".bmp"))


def _medians(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(x[k] for x in rows) for k in ("wall", "cpu", "rss")}


def large_demo(n: int) -> Path:
    """``data.yaml`` of a larger demo dataset: the shapes generator's calib and test splits with ``n``
    images each (rendered into the cache on first use, both splits at once, the same renderer and
    seed as the embedded demo's 400)."""
    from concurrent.futures import ProcessPoolExecutor

    sys.path.insert(0, str(REPO))
    from det_calib.demo import cache_dir
    from det_calib.demo.shapes import CLASS_NAMES, GENERATOR_VERSION

    root = cache_dir() / f"shapes-v{GENERATOR_VERSION}-seed0-{n}"
    todo = [sp for sp in ("calib", "test") if len(list((root / "images" / sp).glob("*.png"))) != n]
    if todo:
        print(f"rendering {n} images a split ({', '.join(todo)}) into {root}", flush=True)
        with ProcessPoolExecutor(max_workers=len(todo)) as pool:
            list(pool.map(_render, [root] * len(todo), todo, [n] * len(todo)))
    names = "".join(f"  {i}: {c}\n" for i, c in enumerate(CLASS_NAMES))
    yaml = root / "data.yaml"
    yaml.write_text(
        f"path: {root.resolve()}\ntrain: images/calib\nval: images/calib\ncalib: images/calib\n"
        f"test: images/test\nnames:\n{names}"
    )
    return yaml


def _render(root: Path, split: str, n: int) -> None:
    sys.path.insert(0, str(REPO))
    from det_calib.demo.shapes import generate

    generate(root, seed=0, splits={split: n})


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
        "--device", help="torch device of both sides, e.g. 0 (default: Ultralytics' choice)"
    )
    ap.add_argument(
        "--large",
        type=int,
        metavar="N",
        help="also run the pair on a larger demo: N images in each of the calib and test splits "
        "(rendered once into the cache; the demo detector)",
    )
    ap.add_argument(
        "--large-repeats", type=int, default=1, help="paired runs on the larger demo (default 1)"
    )
    ap.add_argument(
        "--only-large", action="store_true", help="skip the default pair (with --large)"
    )
    ap.add_argument(
        "--boxes", action="store_true", help="also time calibrate --boxes on the first run's folder"
    )
    ap.add_argument(
        "--baseline", help="another det_calib checkout whose calibrate runs in the same turns"
    )
    ap.add_argument("--json", type=Path, help="also write the measurements to this JSON file")
    ap.add_argument(
        "--from-json", type=Path, help="the tables of an earlier run's --json file (no run)"
    )
    ap.add_argument(
        "--doc",
        action="store_true",
        help="write the tables to docs/generated/bench_calibrate.md "
        "(bench_calibrate_large.md with --only-large; _gpu.md for a run on a GPU)",
    )
    ap.add_argument("extra", nargs="*", help="extra calibrate options (after --)")
    args = ap.parse_args()
    if args.from_json:
        res = json.loads(args.from_json.read_text())
    else:
        if args.model is None:
            sys.path.insert(0, str(REPO))
            from det_calib import demo

            args.model, args.data = str(demo.demo_model()), str(demo.demo_data_yaml())
        print(
            f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
            f"({os.cpu_count()} CPUs)"
        )
        res = {
            "device": _device_words(args.device),
            "cpus": os.cpu_count(),
            "extra": args.extra,
            "command": _command(),
            "runs": [],
        }
        if not args.only_large:
            res["runs"].append(
                measure(
                    args,
                    args.model,
                    args.data,
                    repeats=args.repeats,
                    label="default",
                    baseline=args.baseline,
                    boxes=args.boxes,
                )
            )
            _dump(
                args.json, res
            )  # each pair kept as soon as it is measured (a run stopped later keeps it)
        if args.large:
            res["runs"].append(
                measure(
                    args,
                    args.model,
                    str(large_demo(args.large)),
                    repeats=args.large_repeats,
                    label=f"{args.large} images a split",
                )
            )
        print(f"load average after:  {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    _dump(args.json, res)
    blocks = [_tables(run) for run in res["runs"]]
    for run, (table, stages) in zip(res["runs"], blocks, strict=True):
        print(
            f"\n[{run['label']}] median of {run['repeats']} paired runs (calibrate, then val, in "
            "turn) on "
            f"{res['device']}"
        )
        print("\n".join(table))
        if stages:
            print("\ncalibrate's own timing line (calibration.json `timings`), median per stage")
            print("\n".join(stages))
    if args.doc:
        _write_doc(res, blocks)


def _command() -> str:
    """This command line without its scratch files (``--json PATH``), to be rerun anywhere."""
    argv, keep = sys.argv[1:], []
    while argv:
        a = argv.pop(0)
        if a == "--json":
            argv = argv[1:]
        elif not a.startswith("--json="):
            keep.append(a)
    return "python3 " + " ".join([os.path.relpath(sys.argv[0], REPO), *keep])


def _dump(path: Path | None, res: dict) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, indent=1))


def _device_words(device: str | None) -> str:
    import torch

    if device not in (None, "cpu") and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"the CPU ({os.cpu_count()} cores), torch {torch.__version__}"


def _tables(run: dict) -> tuple[list[str], list[str]]:
    """The side-by-side table and the stage table of one measured pair."""
    gib = 1 << 30
    rows = run["rows"]
    cal, val = rows["det-calib calibrate"], rows["Ultralytics val, same 2 splits"]
    table = ["| | wall s | CPU s | peak RSS GiB |", "|---|---:|---:|---:|"]
    table += [
        f"| {name} | {m['wall']:.1f} | {m['cpu']:.1f} | {m['rss'] / gib:.2f} |"
        for name, m in rows.items()
    ]
    table.append(
        f"| **ratio calibrate / val** | **{cal['wall'] / val['wall']:.2f}x** | "
        f"**{cal['cpu'] / val['cpu']:.2f}x** | **{cal['rss'] / val['rss']:.2f}x** |"
    )
    base = next((m for name, m in rows.items() if name.startswith("baseline")), None)
    if base is not None:
        table.append(
            f"| ratio baseline calibrate / val | {base['wall'] / val['wall']:.2f}x | "
            f"{base['cpu'] / val['cpu']:.2f}x | {base['rss'] / val['rss']:.2f}x |"
        )
    cal_runs = [{"wall": w, "cpu": c} for w, c in zip(run["cal_wall"], run["cal_cpu"], strict=True)]
    return table, _stage_table(run["timings"], cal_runs)


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


def _write_doc(res: dict, blocks: list[tuple[list[str], list[str]]]) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from doc_table import write_doc_table

    parts = []
    for run, (table, stage_table) in zip(res["runs"], blocks, strict=True):
        parts.append(
            f"**{run['label'].capitalize()}**: model `{Path(run['model']).name}`, data "
            f"`{Path(run['data']).parent.name}/{Path(run['data']).name}`, splits "
            f"{' + '.join(run['splits'])} "
            f"({' + '.join(f'{n:,}' for n in run['images'])} images); extra options: "
            f"{' '.join(res['extra']) or 'none'}"
            + (
                "; baseline: calibrate from another checkout in the same turns"
                if run["baseline"]
                else ""
            )
            + f". Median of {run['repeats']} paired run{'s' if run['repeats'] > 1 else ''} "
            "(calibrate, then val, in "
            f"turn; fresh processes, OMP_NUM_THREADS={run['omp']}); load average "
            f"{run['load'][0]:.1f} before and "
            f"{run['load'][1]:.1f} after.\n\n" + "\n".join(table)
        )
        if stage_table:
            parts.append(
                "Where calibrate's time went (its own timing line, `calibration.json` `timings`; "
                "the "
                "stages are exclusive and add up to the recorded total):\n\n"
                + "\n".join(stage_table)
            )
    note = (
        f"On {res['device']} (a shared machine: wall times are noisy, CPU times less so)."
        if "CPU" in res["device"]
        else f"On {res['device']}; {res['cpus']} CPUs."
    )
    only_large = all(run["label"] != "default" for run in res["runs"])
    gpu = "CPU" not in res["device"]  # a GPU run's tables beside the CPU's, not over them
    name = "bench_calibrate" + ("_large" if only_large else "") + ("_gpu" if gpu else "")
    write_doc_table(name, "\n\n".join(parts), note=note, command=res["command"])


if __name__ == "__main__":
    main()
