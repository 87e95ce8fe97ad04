"""``det-calib thresholds`` on a box task's run folder: per-class conf thresholds tuned
(:func:`~det_calib.thresholds.run_head.tune_run`) or the risks the user chose certified
(:func:`~det_calib.thresholds.risk_run.control_run`), and conformal class sets on request
(:func:`~det_calib.thresholds.class_sets.run_class_sets`), all written into the run's
``thresholds.json``; the lines the command prints.

>>> lines = thresholds_command("runs/calib", head="nms", target_recall=0.8)  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from det_calib.thresholds.class_sets import check_class_logits, run_class_sets
from det_calib.thresholds.criteria import Fallback, Unit
from det_calib.thresholds.risk_control import RiskTargets
from det_calib.thresholds.risk_run import control_run, risk_lines
from det_calib.thresholds.run_head import tune_run
from det_calib.thresholds.thresholds_file import (
    DEFAULT_TARGET_PRECISION,
    THRESHOLDS_FILE,
    summary_lines,
)

__all__ = ["thresholds_command"]


def thresholds_command(
    run_dir: str | Path,
    *,
    head: str = "nms",
    target_precision: float | None = None,
    delta: float = 0.1,
    unit: Unit = "image",
    fallback: Fallback = "global",
    n_boot: int = 1000,
    seed: int = 0,
    target_recall: float | None = None,
    max_fp_per_image: float | None = None,
    fp_cap: float = 300.0,
    guarantee: Literal["probability", "expectation"] = "probability",
    precision_unit: Literal["image", "pooled"] = "image",
    per_class: bool = False,
    class_sets: float | None = None,
) -> list[str]:
    """Tune ``head``'s thresholds of the run in ``run_dir`` (or, with ``target_recall`` or
    ``max_fp_per_image``, certify the risks asked for) and write them into its ``thresholds.json``;
    with ``class_sets`` (alpha), its conformal class sets at ``1 - alpha`` too. Returns what the
    command prints.

    ``target_precision`` None: not asked for (tuning targets :data:`DEFAULT_TARGET_PRECISION`; risk
    control then certifies only the risks asked for). ``class_sets`` is checked before any work (the
    run must keep per-class logits).
    """
    if class_sets is not None:
        check_class_logits(run_dir, alpha=class_sets)  # before any work: one line and exit 2
    if target_recall is not None or max_fp_per_image is not None or precision_unit == "pooled":
        targets = RiskTargets(
            precision=target_precision,
            recall=target_recall,
            max_fp=max_fp_per_image,
            delta=delta,
            guarantee=guarantee,
            fp_cap=fp_cap,
            precision_unit=precision_unit,
        )
        doc = control_run(run_dir, targets, head=head, per_class=per_class, fallback=fallback)
        lines = risk_lines(doc, head=head)
    else:
        doc = tune_run(
            run_dir,
            head=head,
            target_precision=(
                DEFAULT_TARGET_PRECISION if target_precision is None else float(target_precision)
            ),
            delta=delta,
            unit=unit,
            fallback=fallback,
            n_boot=n_boot,
            seed=seed,
        )
        lines = summary_lines(doc, head=head)
    if class_sets is not None:
        cs = run_class_sets(run_dir, head=head, alpha=class_sets)
        lines.append(
            f"class sets at 1 - {cs['alpha']:g}: eval coverage {cs['coverage']:.3f}, mean size "
            f"{cs['mean_size']:.2f}"
        )
    return [*lines, f"wrote {Path(run_dir) / THRESHOLDS_FILE}"]
