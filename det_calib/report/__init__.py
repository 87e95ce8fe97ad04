"""The calibration report of a run, and the comparison of two or more runs.

>>> from det_calib.report import write_report, compare_runs
>>> write_report("runs/calib")  # doctest: +SKIP
>>> compare_runs("runs/calib:nms", "runs/calib:e2e", out_dir="runs/cmp")  # doctest: +SKIP

- :mod:`~det_calib.record.run_folder` — a run directory read as a :class:`~det_calib.record.RunResult` and its boxes
- :mod:`~det_calib.report.run_report` — the report of one run
- :mod:`~det_calib.report.compare` — two or more runs (or heads) side by side
- :mod:`~det_calib.report.common` — number formats, wording, page writing
- :mod:`~det_calib.report.document` — HTML and Markdown from one list of blocks
- :mod:`~det_calib.report.plots` — the figures (matplotlib is imported only under ``det_calib.report``)
- :mod:`~det_calib.report.thresholds_section` — the "Conf thresholds" section (per-class thresholds of
  :mod:`det_calib.thresholds.per_class`) and its comparison table
"""

from __future__ import annotations

from .compare import compare_runs
from .run_report import write_report

__all__ = ["write_report", "compare_runs"]
