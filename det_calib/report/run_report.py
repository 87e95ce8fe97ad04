"""The calibration report of one run (``write_report``): report.html, report.md, figures/.

Numbers come from the run's :class:`~det_calib.record.run_result.RunResult` as the pipeline computed them;
curves (reliability bins, histograms, precision/recall against the threshold) are recomputed from
``boxes.parquet`` with :mod:`det_calib.metrics` and :mod:`det_calib.evaluation.kept_set`. Where a curve can
be summarised by a number the run also holds (the ECE), the two are compared and a mismatch is
reported in the page, since it means the two files do not come from the same run.

The page is :data:`det_calib.report.sections.SECTIONS` (the report's entries) written from one
:class:`~det_calib.report.context.ReportContext` whose subjects are the run's heads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from det_calib.record.run_folder import BOXES_FILE, CALIBRATION_FILE, Run, load_run
from det_calib.record.run_result import RunResult

from .common import consistency_warnings
from .context import ReportContext
from .page import Page
from .plots import drawn_in_children, figure_workers
from .sections import PageDraft, build_page, draft_page, subject

__all__ = ["ReportDraft", "draft_report", "write_report"]


def _report_context(
    run: Run, *, folder: Path | None = None, reference: str | Path | None = None
) -> ReportContext:
    """What the report's sections read: each head of ``run`` (its eval boxes and reliability bins), and
    the warnings where boxes.parquet and calibration.json disagree or a head has no boxes."""
    subjects = tuple(subject(run, h, name=h) for h in run.heads)
    warnings_ = []
    for s in subjects:
        if s.hb.n == 0:
            warnings_.append(
                f"Head {s.head}: {BOXES_FILE} has no boxes on split {s.hb.split}; figures are "
                "empty."
            )
        warnings_ += consistency_warnings(run, s.head, s.hb, *s.bins)
    return ReportContext("report", subjects, tuple(warnings_), folder=folder, reference=reference)


def write_report(
    run_dir: str | Path,
    *,
    out_dir: str | Path | None = None,
    shown_dir: str | Path | None = None,
    boxes: pl.DataFrame | None = None,
    reference: str | Path | None = None,
) -> dict[str, Path]:
    """Write the calibration report of a run: ``report.html``, ``report.md`` and ``figures/*.png``.

    ``report.html`` is self-contained (figures embedded as PNG data URIs, inline CSS, no script);
    ``report.md`` references the PNGs in ``figures/``. The sections are those of
    :data:`det_calib.report.sections.SECTIONS` for the report, in that order; each head's verdict
    (its kept-set ECE against its sampling floor, the boxes kept with precision and recall, mAP;
    :mod:`det_calib.report.verdict`) opens the page, then each head's reliability diagram of the
    kept boxes. Every file is written atomically.

    Args:
        run_dir: A run directory holding ``calibration.json`` and ``boxes.parquet``.
        out_dir: Where to write; default ``run_dir``.
        shown_dir: The run folder named in the report's text, when ``run_dir`` is a staging
            folder that will be moved there; default ``run_dir``.
        boxes: The run's box table, when the caller holds it: not read a second time into memory.
        reference: Another run (``RUN[:HEAD]``) of the detector, beside this one in the Engines section.

    Returns:
        Written paths: ``"html"`` (report.html), ``"md"`` (report.md) and, per figure, its path
        relative to ``out_dir`` (``"figures/<name>.png"``).

    Raises:
        InputError: ``run_dir`` or one of its files is missing or corrupt.

    Example:
        >>> paths = write_report("runs/calib")  # doctest: +SKIP
        >>> paths["html"]  # doctest: +SKIP
        PosixPath('runs/calib/report.html')
    """
    run = load_run(run_dir, boxes=boxes)
    out = Path(out_dir) if out_dir is not None else Path(run_dir)
    if shown_dir is not None:
        run = dataclasses.replace(run, run_dir=Path(shown_dir))
    ctx = _report_context(run, folder=Path(run_dir), reference=reference)
    with drawn_in_children(figure_workers()):  # on a machine of many cores: see figure_workers
        page = build_page(ctx)
    return _write(page, run, out)


@dataclass
class ReportDraft:
    """A run's report while the run is still being verified (``calibrate`` runs its Ultralytics val beside
    it): every section but those that read the verification is written (:func:`draft_report`);
    :meth:`write` writes those from the complete record, in their places, and the files. The page is
    the one :func:`write_report` of the complete run's folder gives."""

    run: Run
    ctx: ReportContext
    draft: PageDraft
    out: Path

    def write(self, complete: RunResult) -> dict[str, Path]:
        """Write the report (as :func:`write_report` returns it), the checked sections from ``complete``."""
        done = dataclasses.replace(self.run, result=complete)
        ctx = dataclasses.replace(
            self.ctx, subjects=tuple(dataclasses.replace(s, run=done) for s in self.ctx.subjects)
        )
        with drawn_in_children(figure_workers()):
            page = self.draft.complete(ctx)
        return _write(page, self.run, self.out)


def draft_report(
    run_dir: str | Path,
    result: RunResult,
    *,
    shown_dir: str | Path,
    boxes: pl.DataFrame | None = None,
) -> ReportDraft:
    """The report of the run being written in ``run_dir`` (its ``boxes.parquet`` written, its record
    ``result`` as a reader of its ``calibration.json`` will see it, not yet written), every section
    but the checked ones (:class:`ReportDraft`); ``shown_dir``: the run folder the report names."""
    run = dataclasses.replace(
        load_run(run_dir, boxes=boxes, result=result), run_dir=Path(shown_dir)
    )
    ctx = _report_context(run, folder=Path(run_dir))
    with drawn_in_children(figure_workers()):  # the figures drawn while the run's checks finish
        draft = draft_page(ctx)
    return ReportDraft(run, ctx, draft, Path(run_dir))


def _write(page: Page, run: Run, out: Path) -> dict[str, Path]:
    r = run.result
    title = f"Confidence calibration report: {Path(r.model or 'model').name}"
    subtitle = (
        f"Run {run.run_dir} · data {r.data or 'n/a'} · heads {', '.join(run.heads)} · "
        f"created {r.created or 'n/a'}"
    )
    footer = f"det_calib {r.det_calib_version} · {CALIBRATION_FILE} + {BOXES_FILE} of {run.run_dir}"
    return page.write(out, "report", title, subtitle=subtitle, footer=footer)
