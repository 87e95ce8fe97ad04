"""The deployed kept-set ECE of a segment model's calibrated.pt, measured through plain Ultralytics (issue 39).

For each size (``--limit 64``, ``--limit 128`` and the full splits by default) this runs the default
command ``det-calib calibrate --model MODEL [--limit N]`` (no ``--data``: the demo seg model's own data), then
predicts with the original model and the run's ``calibrated.pt`` in plain Ultralytics
(``predict(retina_masks=True)`` at ``conf`` = 0.25, a child process that blocks det_calib) over the run's eval
split, matches the kept boxes one-to-one by the run's rule (mask IoU, COCO ``segm``, where the run matched by
masks; box IoU otherwise; ``--match`` overrides) and computes the kept-set ECE of both. The machinery is
``deployed_ece.py``'s, shared with ``measure_pose_obb.py``; its module docstring says each step.

The issue's Done-when line: the calibrated ECE at most 0.85x the raw one on average over the three sizes x
both heads, and no case above 1.05x. ``--doc`` writes the table to docs/generated/segment_deployed_ece.md.

Run from the repository root::

    python3 benchmarks/measure_segment.py --model det_calib/demo/assets/yolo26n_shapes_seg.pt --doc
    python3 benchmarks/measure_segment.py --model M --data D --limits 64 --runs /tmp/seg_runs -- --match box
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deployed_ece import (  # noqa: E402
    Case,
    add_arguments,
    kept_set_figures,
    measure_sizes,
    prediction_table,
    table,
    verdict,
)

__all__ = ["Case", "kept_set_figures", "prediction_table", "table", "verdict"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a segment model (.pt)")
    add_arguments(ap, runs="runs/measure_segment", match=("mask", "box"))
    ap.add_argument(
        "--doc",
        action="store_true",
        help="write docs/generated/segment_deployed_ece.md (segment_deployed_ece_box.md with --match box)",
    )
    args = ap.parse_args()
    cases = measure_sizes(
        args.model, args.data, args.limits, args.runs, args.calibrate_args, args.rerun, args.match
    )
    body = table(cases, args.model, floor=True)
    print(body)
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table("segment_deployed_ece" + ("_box" if args.match == "box" else ""), body)


if __name__ == "__main__":
    main()
