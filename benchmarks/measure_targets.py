"""What each ``--target`` costs the other: kept-set LaECE_0 and kept-set ECE on the demo, both targets.

For each ``--limit`` asked (default: the full demo), one ``calibrate --target iou`` captures the
demo's calib and test splits (both heads); ``--target correct`` (the default) and, with
``--per-class``, ``--target iou --per-class`` run on the same boxes (``--boxes``: no second forward
pass). Every figure is the run's own (``calibration.json``): the boxes kept at conf 0.25 on the
test split, raw -> calibrated, with the run's 95% image-bootstrap intervals; LaECE_0 with the
reference toolkit's conventions (25 bins, IoU >= 0 matching, per class), ECE against the matched flag
at IoU 0.5 (15 bins). ``ratio`` is calibrated / raw LaECE_0. A second table gives, per size and
head, the lowest kept-set LaECE_0 that a map fitted on the test split's own IoU targets reaches
(in-sample: what the eval split itself allows a map of each family).

Run from the repository root (about 2 minutes per full-demo run on 2 cores)::

    PYTHONPATH=. python3 benchmarks/measure_targets.py [--limits 64 128 0] [--per-class] [--doc]

``--doc`` writes the table to ``docs/generated/targets_demo.md`` (embedded in docs/targets.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _fig(v, ci) -> str:
    if v is None:
        return "n/a"
    return f"{v:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")


def _rows(label: str, limit: int | None, result) -> list[str]:
    """One Markdown row per head of a run: its map, the kept set, LaECE_0 and ECE raw -> calibrated, mAP."""
    out = []
    for head in result.heads:
        h = result.head(head)
        o0, o1 = h.eval.operating_before[0], h.eval.operating_after[0]
        ratio = f"{o1.laece0 / o0.laece0:.2f}" if o0.laece0 and o1.laece0 is not None else "n/a"
        same = (
            "unchanged"
            if h.eval.map_identical
            else f"{h.eval.map50_95_before:.4f} → {h.eval.map50_95_after:.4f}"
        )
        out.append(
            f"| {limit or 'full'} | {head} | {label} | {h.calibrator.method} | {o0.boxes} → "
            f"{o1.boxes} | "
            f"{_fig(o0.laece0, o0.laece0_ci)} | {_fig(o1.laece0, o1.laece0_ci)} | {ratio} | "
            f"{_fig(o0.ece, o0.ece_ci)} | {_fig(o1.ece, o1.ece_ci)} | {same} |"
        )
    return out


def in_sample_bound(run_dir: Path, limit: int | None) -> list[str]:
    """What the eval split itself allows: every map of the ``--target iou`` choice (and, per class,
    ``class-isotonic`` with each class's own curve) fitted **on the eval split's own boxes** to their
    IoU targets (in-sample: a
    lower bound for a map fitted on other images), at fit floors 0 and 0.125; the lowest kept-set
    LaECE_0 at 0.25 per head, against the raw scores'."""
    import polars as pl

    from det_calib.calibrators import registry
    from det_calib.data.box_view import BoxView
    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.evaluation.operating import laece0_targets
    from det_calib.record.run_result import RunResult
    from det_calib.selection.cross_validation import fit_calibrator

    result = RunResult.read(run_dir / "calibration.json")
    st = result.settings
    split = load_split(load_data_yaml(result.data), st.eval_split, limit=limit)
    boxes = pl.read_parquet(run_dir / "boxes.parquet")
    rows = []
    for head in result.heads:
        v = BoxView.from_boxes(boxes, head=head, split=st.eval_split)
        lt = laece0_targets(v, split.gt)
        best = {}
        for method in [
            m
            for m in registry.methods()
            if m != "none" and (m in registry.global_methods("iou") or m == "class-isotonic")
        ]:
            for floor in (0.0, 0.125):
                keep = v.conf >= floor
                try:
                    # each class's own curve (1 pseudo-box toward the global)
                    if registry.method_spec(method).per_class:
                        cal = registry.make_calibrator(
                            method, shrinkage=1.0, fit_min_conf=floor
                        ).fit(
                            v.logit[keep],
                            lt.target[keep],
                            classes=v.cls[keep],
                            groups=v.image_id[keep],
                        )
                    else:
                        cal = fit_calibrator(
                            method,
                            v.logit[keep],
                            lt.target[keep],
                            fit_min_conf=floor,
                            in_range=True,
                        )
                except Exception:  # a degenerate fit is no bound
                    continue
                la = lt.laece(cal.predict_proba(v.logit, classes=v.cls), threshold=0.25)
                kind = "per class" if registry.method_spec(method).per_class else "ranking maps"
                if kind not in best or la < best[kind][0]:
                    best[kind] = (la, f"{method}@{floor:g}")
        raw = lt.laece(v.conf, threshold=0.25)
        for kind, (la, name) in sorted(best.items(), reverse=True):
            rows.append(
                f"| {limit or 'full'} | {head} | {kind} | {name} | {raw:.4f} | {la:.4f} | "
                f"{la / raw:.2f} |"
            )
    return rows


def measure(limit: int | None, per_class: bool, tmp: Path, bounds: list[str]) -> list[str]:
    """The runs of one demo size: ``--target iou`` (capturing), then the others on its boxes."""
    from det_calib import calibrate

    common = {"run_val": False, "report": False, "progress": False, "limit": limit}
    first = tmp / f"iou_{limit}"
    rows = _rows("iou", limit, calibrate(out=first, target="iou", **common).result)
    bounds += in_sample_bound(first, limit)
    rows += _rows(
        "correct (default)",
        limit,
        calibrate(out=tmp / f"correct_{limit}", boxes=str(first), **common).result,
    )
    if per_class:
        rows += _rows(
            "iou, --per-class",
            limit,
            calibrate(
                out=tmp / f"iou_pc_{limit}",
                boxes=str(first),
                target="iou",
                per_class=True,
                **common,
            ).result,
        )
    return rows


HEADER = (
    "| images | head | --target | deployed map | kept at 0.25 raw → cal | LaECE_0 raw | LaECE_0 "
    "calibrated | "
    "ratio | ECE raw | ECE calibrated | mAP50-95 |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


BOUND_HEADER = (
    "In-sample bound: maps fitted to the IoU targets of the eval split itself (the figures no map "
    "fitted "
    "on the fit split can be expected to beat), kept-set LaECE_0 at 0.25:\n\n"
    "| images | head | maps | best (method@fit floor) | LaECE_0 raw | LaECE_0 in-sample | ratio |\n"
    "|---|---|---|---|---|---|---|"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--limits", type=int, nargs="+", default=[0], help="images per split (0: the full demo)"
    )
    ap.add_argument("--per-class", action="store_true", help="also --target iou --per-class")
    ap.add_argument("--doc", action="store_true", help="write docs/generated/targets_demo.md")
    args = ap.parse_args()
    rows: list[str] = []
    bounds: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.limits:
            rows += measure(n or None, args.per_class, Path(tmp), bounds)
    text = HEADER + "\n" + "\n".join(rows) + "\n\n" + BOUND_HEADER + "\n" + "\n".join(bounds) + "\n"
    print(text)
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table(
            "targets_demo",
            text,
            note="Kept set: conf > 0.25 on the demo's test split; intervals "
            "95% image bootstrap (ECE bias-corrected percentile, LaECE_0 estimate ± 1.96 SD).",
        )


if __name__ == "__main__":
    main()
