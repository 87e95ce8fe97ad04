"""The deployed kept-set LaECE_0 of ``--target iou``: the run's calibrated.pt through plain Ultralytics (issue 42).

For each size (``--limit 64``, ``--limit 128`` and the full demo by default) this runs
``det-calib calibrate --target iou [--limit N] --out RUNS/<size>`` on the demo (a run folder that already
holds a ``calibration.json`` is measured as it is, unless ``--rerun``), then for each head a child Python
process in which det_calib cannot be imported loads the demo detector and the run's ``calibrated.pt`` with
``ultralytics.YOLO`` and runs ``predict`` at conf 0.25 (``nms=False`` for the one-to-one head), one image at
a time, over the run's eval split (as many images as the run used). This process scores the kept boxes of
each: kept-set LaECE_0 (the reference conventions: per class, 25 bins, greedy IoU >= 0 matching, crowd
matches left out; :class:`det_calib.metrics.operating_point.LaECE0Targets`) and kept-set ECE (15 bins,
IoU 0.5), beside the run's own figures (``operating_before`` / ``operating_after`` in calibration.json).

Each kept set's LaECE_0 is set beside its sampling floor (:func:`det_calib.metrics.operating_point.kept_laece_floor`:
what a detector whose every conf is the expected IoU target of its box would score on those boxes, mean and 95%
range), for the raw and for the calibrated kept set; a kept set is "at floor" when its LaECE_0 is at most the
high end of that range.

The issue's Done-when line for ``--target iou``: deployed kept-set LaECE_0 at 0.25 at most 0.8x raw on average
over the three sizes x both heads, and never above 1.05x. The closing lines say whether it holds, and what it
asks against the floor: in how many cases the raw kept set is already at its floor, and in how many 0.8x raw is
below the low end of the calibrated kept set's floor range (a LaECE_0 that a perfectly calibrated detector would
score less than 2.5% of the time on those boxes). ``--doc`` writes docs/generated/targets_deployed.md (included
by docs/targets.md).

``--per-class``, ``--method M`` or ``--criterion C`` run the grid with that option of ``calibrate`` (its own run
folders, and with ``--doc`` docs/generated/targets_deployed_<mode>.md); the mAP50-95 column (the run's own on its
boxes rescored, and for a per-class map the folded model's against the original's, ``detection_change``) says what
the map costs.

Run from the repository root::

    PYTHONPATH=. python3 benchmarks/measure_targets_deployed.py --doc
    PYTHONPATH=. python3 benchmarks/measure_targets_deployed.py --per-class --doc
    PYTHONPATH=. python3 benchmarks/measure_targets_deployed.py --limits 64 --runs /tmp/iou_runs
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

CHILD = r"""
import json, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "det_calib" or name.startswith("det_calib."):
            raise ImportError("det_calib is blocked in this process")
sys.meta_path.insert(0, Block())
from ultralytics import YOLO
args = json.loads(sys.argv[1])
out = {}
for tag, path in (("raw", args["original"]), ("calibrated", args["calibrated"])):
    model = YOLO(path)
    rows = []
    for i, img in enumerate(args["images"]):
        b = model.predict(img, conf=args["conf"], nms=args["nms"], imgsz=args["imgsz"], verbose=False)[0].boxes
        for xyxy, c, k in zip(b.xyxy.cpu().numpy().tolist(), b.conf.cpu().numpy().tolist(),
                              b.cls.cpu().numpy().astype(int).tolist()):
            rows.append([i, *xyxy, c, k])
    out[tag] = rows
out["det_calib_loaded"] = any(m == "det_calib" or m.startswith("det_calib.") for m in sys.modules)
json.dump(out, open(args["out"], "w"))
"""

THRESHOLD = 0.25
DONE_MEAN, DONE_MAX = 0.8, 1.05


def _kept_targets(rows: list, gt: pl.DataFrame, threshold: float) -> tuple[np.ndarray, Any]:
    """The kept predict rows (``conf > threshold``, (k, 7)) and their LaECE_0 matching.

    Matching only the kept boxes gives the matches they have among all boxes down to any lower floor: both
    matchings are greedy by score, and every kept box outranks every box left out."""
    from det_calib.metrics.operating_point import LaECE0Targets

    a = np.array(rows, dtype=np.float64).reshape(-1, 7)
    a = a[a[:, 5] > threshold]
    crowd = gt["crowd"].to_numpy() if "crowd" in gt.columns else None
    gxy = np.column_stack([gt[c].to_numpy() for c in ("x1", "y1", "x2", "y2")])
    return a, LaECE0Targets(
        a[:, 0],
        a[:, 1:5],
        a[:, 6],
        a[:, 5],
        gt["image_id"].to_numpy(),
        gxy,
        gt["cls"].to_numpy(),
        crowd,
    )


def kept_figures(
    rows: list,
    gt: pl.DataFrame,
    *,
    threshold: float = THRESHOLD,
    iou: float = 0.5,
    ece_bins: int = 15,
    laece_bins: int = 25,
) -> tuple[int, float, float]:
    """``(kept boxes, kept-set LaECE_0, kept-set ECE)`` of predict rows ``[image, x1, y1, x2, y2, conf, cls]``."""
    from det_calib.matching.one_to_one import match_boxes
    from det_calib.metrics.operating_point import kept_ece

    a, t = _kept_targets(rows, gt, threshold)
    la = t.laece(a[:, 5], threshold=threshold, n_bins=laece_bins)
    table = pl.DataFrame(
        {
            "image_id": a[:, 0].astype(np.int64),
            "x1": a[:, 1],
            "y1": a[:, 2],
            "x2": a[:, 3],
            "y2": a[:, 4],
            "conf": a[:, 5],
            "cls": a[:, 6].astype(np.int32),
        }
    )
    m = match_boxes(table, gt, iou=iou, loc_iou=min(iou, 0.1)).filter(~pl.col("ignore"))
    return (
        m.height,
        la,
        kept_ece(
            m["conf"].to_numpy(), m["correct"].to_numpy(), threshold=threshold, n_bins=ece_bins
        ),
    )


def kept_floor(
    rows: list, gt: pl.DataFrame, *, threshold: float = THRESHOLD, laece_bins: int = 25
) -> Any:
    """The sampling floor (``ECEFloor(mean, low, high)``, None when nothing is kept) of the kept-set LaECE_0 of
    predict rows, as :func:`kept_figures` scores it: the matched IoUs of the kept boxes are the IoU distribution."""
    from det_calib.metrics.operating_point import kept_laece_floor

    a, t = _kept_targets(rows, gt, threshold)
    return kept_laece_floor(t, a[:, 5], threshold=threshold, n_bins=laece_bins)


@dataclass
class Case:
    """One size and head: deployed (kept, LaECE_0, ECE) of the original and of calibrated.pt, and the run's own;
    the LaECE_0 floors (``ECEFloor``) of both deployed kept sets; mAP50-95 raw, calibrated (and folded)."""

    size: str
    head: str
    method: str
    images: int
    raw: tuple[int, float, float]
    calibrated: tuple[int, float, float]
    run_raw: tuple[int, float, float]
    run_calibrated: tuple[int, float, float]
    raw_floor: Any = None
    calibrated_floor: Any = None
    map50_95: tuple[float | None, ...] = (None, None, None, None)

    @property
    def ratio(self) -> float:
        return self.calibrated[1] / self.raw[1]

    @property
    def raw_at_floor(self) -> bool | None:
        return None if self.raw_floor is None else self.raw[1] <= self.raw_floor.high

    @property
    def at_floor(self) -> bool | None:
        """The deployed calibrated LaECE_0 within its floor's range or below it (None: no floor)."""
        return (
            None
            if self.calibrated_floor is None
            else self.calibrated[1] <= self.calibrated_floor.high
        )

    @property
    def goal_below_floor(self) -> bool | None:
        """Whether 0.8x raw is below the low end of the calibrated kept set's floor range (None: no floor)."""
        return (
            None
            if self.calibrated_floor is None
            else DONE_MEAN * self.raw[1] < self.calibrated_floor.low
        )


def calibrate(limit: int | None, out: Path, rerun: bool, extra: list[str] | None = None) -> None:
    """``det-calib calibrate --target iou [extra]`` on the demo into ``out`` (skipped when it holds a finished run)."""
    if (out / "calibration.json").is_file() and not rerun:
        return
    cmd = [
        sys.executable,
        "-m",
        "det_calib.cli",
        "calibrate",
        "--target",
        "iou",
        *(extra or []),
        "--out",
        str(out),
        "-q",
        "--no-report",
        *(["--limit", str(limit)] if limit else []),
    ]
    print("$", " ".join(["det-calib", *cmd[3:]]), flush=True)
    subprocess.run(cmd, check=True)


def plain_predict(spec: dict) -> dict:
    """The child's predictions (det_calib blocked in it)."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = {**spec, "out": str(Path(tmp) / "pred.json")}
        subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], check=True, cwd=tmp)
        pred = json.loads((Path(tmp) / "pred.json").read_text())
    if pred["det_calib_loaded"]:
        raise SystemExit(
            "the child process imported det_calib: the check is not of plain Ultralytics"
        )
    return pred


def measure_run(run: Path, size: str) -> list[Case]:
    """The deployed figures of every head of a finished run."""
    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.record.run_result import RunResult

    res = RunResult.read(run / "calibration.json")
    st = res.settings
    ids = pl.read_parquet(run / "boxes.parquet", columns=["split", "image_id"])
    n = int(ids.filter(pl.col("split") == st.eval_split)["image_id"].max()) + 1
    sp = load_split(load_data_yaml(res.data), st.eval_split, limit=n)
    cases = []
    for head in res.heads:
        pred = plain_predict(
            {
                "original": res.model,
                "calibrated": str(run / "calibrated.pt"),
                "conf": THRESHOLD,
                "nms": False if head == "e2e" else None,
                "imgsz": st.imgsz,
                "images": [str(p) for p in sp.images],
            }
        )
        fig = {
            tag: kept_figures(
                pred[tag], sp.gt, iou=st.iou_match, ece_bins=st.ece_bins, laece_bins=st.laece_bins
            )
            for tag in ("raw", "calibrated")
        }
        floor = {
            tag: kept_floor(pred[tag], sp.gt, laece_bins=st.laece_bins)
            for tag in ("raw", "calibrated")
        }
        hr = res.head(head)
        o0, o1 = hr.eval.operating_before[0], hr.eval.operating_after[0]
        dc = hr.detection_change
        cases.append(
            Case(
                size=size,
                head=head,
                method=hr.calibrator.method if hr.calibrator else "none",
                images=n,
                raw=fig["raw"],
                calibrated=fig["calibrated"],
                run_raw=(o0.boxes, o0.laece0, o0.ece),
                run_calibrated=(o1.boxes, o1.laece0, o1.ece),
                raw_floor=floor["raw"],
                calibrated_floor=floor["calibrated"],
                map50_95=(
                    hr.eval.map50_95_before,
                    hr.eval.map50_95_after,
                    *((None, None) if dc is None else (dc.map50_95_original, dc.map50_95_folded)),
                ),
            )
        )
    return cases


def verdict(cases: list[Case]) -> tuple[float, float, bool]:
    """Mean and largest deployed LaECE_0 ratio, and whether the Done-when line holds."""
    r = np.array([c.ratio for c in cases])
    return float(r.mean()), float(r.max()), bool(r.mean() <= DONE_MEAN and r.max() <= DONE_MAX)


def _floor(f: Any) -> str:
    return "n/a" if f is None else f"{f.mean:.4f} [{f.low:.4f}, {f.high:.4f}]"


def _yes(v: bool | None) -> str:
    return "n/a" if v is None else "yes" if v else "no"


def _map(m: tuple[float | None, ...]) -> str:
    """The run's mAP50-95 of its boxes rescored, and (a per-class map) of the folded model against the original's."""
    before, after, original, folded = m
    if before is None or after is None:
        return "n/a"
    text = "unchanged" if before == after else f"{before:.4f} → {after:.4f}"
    return text + (
        f"; folded model {original:.4f} → {folded:.4f}"
        if original is not None and folded is not None
        else ""
    )


def table(cases: list[Case]) -> str:
    def f(t: tuple[int, float, float], floor: Any) -> str:
        return f"{t[0]} | {t[1]:.4f} | {_floor(floor)} | {t[2]:.4f}"

    lines = [
        "| size | head | deployed map | images | raw: kept | raw LaECE_0 | its floor | raw ECE | "
        "calibrated.pt: kept | LaECE_0 | its floor | ECE | LaECE_0 ratio | at floor: raw, "
        "calibrated | "
        "mAP50-95 | the run's own: kept, LaECE_0, ECE raw → calibrated |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---|---|---|",
    ]
    for c in cases:
        (n0, l0, e0), (n1, l1, e1) = c.run_raw, c.run_calibrated
        lines.append(
            f"| {c.size} | {c.head} | {c.method} | {c.images} | {f(c.raw, c.raw_floor)} | "
            f"{f(c.calibrated, c.calibrated_floor)} | {c.ratio:.3f} | {_yes(c.raw_at_floor)}, "
            f"{_yes(c.at_floor)} | {_map(c.map50_95)} | "
            f"{n0} → {n1}, {l0:.4f} → {l1:.4f}, {e0:.4f} → {e1:.4f} |"
        )
    mean, worst, ok = verdict(cases)
    lines += [
        "",
        f"Deployed LaECE_0 ratio calibrated / raw: mean {mean:.3f} (Done when <= {DONE_MEAN}), "
        "largest "
        f"{worst:.3f} (Done when <= {DONE_MAX}): {'met' if ok else 'NOT met'}.",
        "",
        floor_line(cases),
    ]
    return "\n".join(lines)


def floor_line(cases: list[Case]) -> str:
    """What the Done-when asks against the sampling floor, in one sentence."""
    n = len(cases)
    raw_at = sum(bool(c.raw_at_floor) for c in cases)
    cal_at = sum(bool(c.at_floor) for c in cases)
    below = sum(bool(c.goal_below_floor) for c in cases)
    below_mean = sum(
        c.calibrated_floor is not None and DONE_MEAN * c.raw[1] < c.calibrated_floor.mean
        for c in cases
    )
    return (
        "Against the sampling floor (a detector whose conf is each box's expected IoU, on the "
        "same kept boxes): "
        f"the raw kept set is at its floor in {raw_at} of {n} cases, the calibrated in {cal_at} of "
        f"{n}; "
        f"{DONE_MEAN}x raw is below the calibrated kept set's floor mean in {below_mean} of {n} "
        "cases and below "
        "the low end of its range (where a perfectly calibrated detector scores less than 2.5% of "
        "the time) in "
        f"{below} of {n}."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--limits", type=int, nargs="+", default=[64, 128, 0], help="sizes; 0 = the full demo"
    )
    ap.add_argument(
        "--runs",
        type=Path,
        default=Path("runs/measure_targets_deployed"),
        help="folder of the runs",
    )
    ap.add_argument(
        "--rerun", action="store_true", help="calibrate again even where a finished run is found"
    )
    ap.add_argument(
        "--doc", action="store_true", help="write docs/generated/targets_deployed[_<mode>].md"
    )
    ap.add_argument("--per-class", action="store_true", help="calibrate with --per-class")
    ap.add_argument("--method", default=None, help="calibrate with --method METHOD")
    ap.add_argument(
        "--criterion", default=None, help="calibrate with --criterion CRITERION (auto's CV score)"
    )
    args = ap.parse_args()
    extra, mode = _mode(args)
    cases = []
    for limit in args.limits:
        size = f"--limit {limit}" if limit else "full"
        run = args.runs / (mode or "default") / (f"limit{limit}" if limit else "full")
        calibrate(limit or None, run, args.rerun, extra)
        for c in measure_run(run, size):
            print(
                f"{size} [{c.head}] {c.method}: deployed LaECE_0 {c.raw[1]:.4f} -> "
                f"{c.calibrated[1]:.4f} "
                f"(ratio {c.ratio:.3f}), ECE {c.raw[2]:.4f} -> {c.calibrated[2]:.4f}",
                flush=True,
            )
            cases.append(c)
    body = table(cases)
    print(body)
    if args.doc:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from doc_table import write_doc_table

        write_doc_table(
            "targets_deployed" + (f"_{mode}" if mode else ""),
            body,
            command=_command(args),
            note=f"`det-calib calibrate --target iou{''.join(' ' + a for a in extra)}`. Kept set: conf > "
            f"{THRESHOLD} on the demo's test split, plain Ultralytics `predict` (det_calib "
            "blocked) of the "
            "demo detector and of each run's calibrated.pt; LaECE_0 25 bins per class at IoU >= 0, "
            "ECE 15 "
            "bins at IoU 0.5. Floor: the LaECE_0 a detector whose every conf is its box's expected "
            "IoU "
            "target would score on the same kept boxes (200 draws, mean [95% range]); at floor: "
            "LaECE_0 "
            "at most the range's high end.",
        )


def _mode(args: argparse.Namespace) -> tuple[list[str], str]:
    """The extra options of ``calibrate`` and the mode's name ("" for the default)."""
    extra = (["--per-class"] if args.per_class else []) + (
        ["--method", args.method] if args.method else []
    )
    extra += ["--criterion", args.criterion] if args.criterion else []
    return extra, "_".join(a.lstrip("-").replace("-", "_") for a in extra)


def _command(args: argparse.Namespace) -> str:
    """The command that measured the table (the run folders' location left out: it is not the measurement)."""
    extra, _ = _mode(args)
    return (
        "python3 benchmarks/measure_targets_deployed.py --limits "
        + " ".join(map(str, args.limits))
        + "".join(" " + a for a in extra)
        + " --doc"
    )


if __name__ == "__main__":
    main()
