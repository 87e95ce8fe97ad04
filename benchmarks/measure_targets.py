"""What each ``--target`` costs the other: kept-set LaECE_0 and kept-set ECE on the demo, both targets.

For each ``--limit`` asked (default: the full demo), one ``calibrate --target iou`` captures the
demo's calib and test splits (both heads); ``--target correct`` (the default) and, with
``--per-class``, ``--target iou --per-class`` run on the same boxes (``--boxes``: no second forward
pass). Every figure is the run's own (``calibration.json``): the boxes kept at conf 0.25 on the
test split, raw -> calibrated, with the run's 95% image-bootstrap intervals; LaECE_0 with the
reference toolkit's conventions (25 bins, IoU >= 0 matching, per class), ECE against the matched flag
at IoU 0.5 (15 bins). ``ratio`` is calibrated / raw LaECE_0.

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
        same = "unchanged" if h.eval.map_identical else f"{h.eval.map50_95_before:.4f} → {h.eval.map50_95_after:.4f}"
        out.append(f"| {limit or 'full'} | {head} | {label} | {h.calibrator.method} | {o0.boxes} → {o1.boxes} | "
                   f"{_fig(o0.laece0, o0.laece0_ci)} | {_fig(o1.laece0, o1.laece0_ci)} | {ratio} | "
                   f"{_fig(o0.ece, o0.ece_ci)} | {_fig(o1.ece, o1.ece_ci)} | {same} |")
    return out


def measure(limit: int | None, per_class: bool, tmp: Path) -> list[str]:
    """The runs of one demo size: ``--target iou`` (capturing), then the others on its boxes."""
    from det_calib import calibrate

    common = {"run_val": False, "report": False, "progress": False, "limit": limit}
    first = tmp / f"iou_{limit}"
    rows = _rows("iou", limit, calibrate(out=first, target="iou", **common).result)
    rows += _rows("correct (default)", limit,
                  calibrate(out=tmp / f"correct_{limit}", boxes=str(first), **common).result)
    if per_class:
        rows += _rows("iou, --per-class", limit, calibrate(out=tmp / f"iou_pc_{limit}", boxes=str(first),
                                                            target="iou", per_class=True, **common).result)
    return rows


HEADER = ("| images | head | --target | deployed map | kept at 0.25 raw → cal | LaECE_0 raw | LaECE_0 calibrated | "
          "ratio | ECE raw | ECE calibrated | mAP50-95 |\n|---|---|---|---|---|---|---|---|---|---|---|")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limits", type=int, nargs="+", default=[0], help="images per split (0: the full demo)")
    ap.add_argument("--per-class", action="store_true", help="also --target iou --per-class")
    ap.add_argument("--doc", action="store_true", help="write docs/generated/targets_demo.md")
    args = ap.parse_args()
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.limits:
            rows += measure(n or None, args.per_class, Path(tmp))
    text = HEADER + "\n" + "\n".join(rows) + "\n"
    print(text)
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table("targets_demo", text, note="Kept set: conf > 0.25 on the demo's test split; intervals "
                        "95% image bootstrap (ECE bias-corrected percentile, LaECE_0 estimate ± 1.96 SD).")


if __name__ == "__main__":
    main()
