"""The calibration report of a run, and the comparison of two runs.

>>> from det_calib.report import write_report, compare_runs
>>> write_report("runs/calib")  # doctest: +SKIP
>>> compare_runs("runs/calib:nms", "runs/calib:e2e", out_dir="runs/cmp")  # doctest: +SKIP

:mod:`det_calib.report.plots` is the only module of det_calib that imports matplotlib.
"""

from __future__ import annotations

from .render import compare_runs, write_report

__all__ = ["write_report", "compare_runs"]
