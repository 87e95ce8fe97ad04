"""The ``det-calib ensemble`` subcommand: its options (``calibrate``'s, and the fusion's) and call."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

ENSEMBLE_SKIPPED = ("boxes", "batch", "run_val")
"""``calibrate`` options that ``ensemble`` defines its own way (``--boxes``: an ensemble run's folder) or
has not: members run one image per forward pass (``--batch``), and an ensemble is not one checkpoint
that Ultralytics val could check (``--no-val``)."""


def add_ensemble_parser(sub: Any) -> None:
    """Add ``det-calib ensemble`` to the subcommands."""
    from det_calib.cli import add_settings_options
    from det_calib.ensemble.ensemble_job import FusionSettings
    from det_calib.pipeline import SETTINGS_FIELDS, Settings

    e = sub.add_parser(
        "ensemble", help="fuse several detectors (checkpoints, snapshots, test-time views), calibrate the fused score",
        description="Captures every member on the fit and eval splits, fuses their boxes per image and class "
        "(weighted boxes fusion), labels the fused boxes and calibrates their score as `calibrate` does. With no "
        "arguments: the embedded demo ensemble (the shipped seed members when present, else test-time views of the "
        "shipped model).")
    e.add_argument("--model", dest="models", action="append", default=[], metavar="MODEL[:HEAD]",
                   help="a member checkpoint (repeatable; MODEL:e2e runs that head); one --model with --view: "
                        "its test-time views")
    e.add_argument("--data", type=Path, help="data.yaml (default: the demo dataset)")
    add_settings_options(e, Settings, only=[k for k in SETTINGS_FIELDS if k not in ENSEMBLE_SKIPPED])
    e.add_argument("--boxes", help="reuse the member boxes of an earlier ensemble run (its folder) instead of "
                   "capturing: other fusion and calibration settings in seconds")
    add_settings_options(e, FusionSettings)
    e.add_argument("--out", type=Path, default=Path("det_calib_ensemble"),
                   help="output folder (default det_calib_ensemble)")


def run_ensemble(args: argparse.Namespace) -> int:
    """Run ``det-calib ensemble`` and print its summary."""
    from det_calib.cli import settings_from_args
    from det_calib.ensemble.ensemble_job import FusionSettings, ensemble
    from det_calib.pipeline import Settings

    s = settings_from_args(args, Settings)
    s.boxes = args.boxes
    run = ensemble(args.models, args.data, out=args.out, settings=s, fusion=settings_from_args(args, FusionSettings))
    summary = run.files.get("summary")
    print(summary.read_text(encoding="utf-8").rstrip("\n") if summary else "")
    main_files = [p.name for k, p in run.files.items() if not k.startswith("figures/")]
    print(f"wrote {', '.join(sorted(main_files))} (and figures/) to {run.out_dir}")
    return 0


def flag_names() -> dict[str, str]:
    """Field name -> option, for the error lines (``fusion_iou`` -> ``--fusion-iou``)."""
    from det_calib.cli import flag_names as names
    from det_calib.ensemble.ensemble_job import FusionSettings

    return {**names(FusionSettings), "models": "--model", "boxes": "--boxes"}
