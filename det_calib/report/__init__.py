"""The calibration report of a run, and the comparison of two or more runs.

>>> from det_calib.report import write_report, compare_runs
>>> write_report("runs/calib")  # doctest: +SKIP
>>> compare_runs("runs/calib:nms", "runs/calib:e2e", out_dir="runs/cmp")  # doctest: +SKIP

- :mod:`~det_calib.report.run_report` — the report of one run (``write_report``)
- :mod:`~det_calib.report.compare` — two or more runs (or heads) side by side (``compare_runs``)
- :mod:`~det_calib.report.text_summary` — a run's summary in plain text (``summary_text``; ``summary.txt``)
- :mod:`~det_calib.report.sections` — ``SECTIONS``, every section of both pages in order, and ``build_page``
- :mod:`~det_calib.report.context` — ``ReportContext``, what every section reads (the heads, or the compared runs)
- :mod:`~det_calib.report.page` — ``Page``, the page builder (blocks, figures, atomic writing)
- ``*_section`` modules — one section each, the function ``section(page, ctx)`` that writes it on both pages
- :mod:`~det_calib.report.separation` — what the intervals of compared runs tell apart
- :mod:`~det_calib.report.common` — number formats, wording, data helpers
- :mod:`~det_calib.report.document` — HTML and Markdown from one list of blocks
- :mod:`~det_calib.report.plots` — the figures (matplotlib is imported only under ``det_calib.report``)

Adding a section: one function and one entry in ``SECTIONS`` (docs/report_sections.md).
"""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "f3": "common",
    "f4": "common",
    "fci": "common",
    "fint": "common",
    "num": "common",
    "compare_runs": "compare",
    "ReportContext": "context",
    "Bullets": "document",
    "Heading": "document",
    "Para": "document",
    "Table": "document",
    "Page": "page",
    "ClassPanel": "plots",
    "compare_reliability": "plots",
    "confidence_histograms": "plots",
    "per_class_grid": "plots",
    "reliability_figure": "plots",
    "threshold_figure": "plots",
    "draft_report": "run_report",
    "write_report": "run_report",
    "bin_label": "size_section",
    "summary_text": "text_summary",
}

__all__ = [
    "Bullets",
    "ClassPanel",
    "Heading",
    "Page",
    "Para",
    "ReportContext",
    "Table",
    "bin_label",
    "compare_reliability",
    "compare_runs",
    "confidence_histograms",
    "draft_report",
    "f3",
    "f4",
    "fci",
    "fint",
    "num",
    "per_class_grid",
    "reliability_figure",
    "summary_text",
    "threshold_figure",
    "thresholds_section",
    "write_report",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)


# lazy: a command that writes no report (and text_summary, which reads record_words) loads no matplotlib
