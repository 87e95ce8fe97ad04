"""What every report section reads: the subjects of the page (heads of one run, or compared runs).

A section is a function ``section(page, ctx)`` (:data:`det_calib.report.sections.SectionFn`): it adds
its blocks to ``page`` from ``ctx``, a :class:`ReportContext`. The run's report has one
:class:`Subject` per head of the run; the comparison one per compared run (or head of a run), so the
same section function writes both pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from det_calib.record.run_folder import HeadBoxes, Run

__all__ = ["PageKind", "ReportContext", "Subject"]

PageKind = Literal["report", "compare"]
"""``report``: the report of one run (``write_report``); ``compare``: runs side by side (``compare_runs``)."""


@dataclass(frozen=True)
class Subject:
    """One head of one run as a page shows it: a head of the report, a column of the comparison.

    Attributes:
        name: How the page names it (the head in a report; the run's label in a comparison).
        letter: Its letter in a comparison's tables (A, B, ...); "" in a report.
        run: The run.
        head: The head of ``run``.
        hb: The head's eval-split boxes (crowd-matched boxes dropped).
        bins: Reliability bins of all those boxes, raw and calibrated (None: no boxes or no calibrator),
            binned as the run's ECE.
        words: The deployed calibrator with its parameters, in words.
        note: Why this head was picked, when the comparison chose it (else "").
    """

    name: str
    letter: str
    run: Run
    head: str
    hb: HeadBoxes
    bins: tuple[Any, Any]
    words: str
    note: str = ""

    @property
    def title(self) -> str:
        """``name (deployed calibrator)``: the subject in a comparison's tables."""
        return f"{self.name} ({self.words})"

    @property
    def result(self) -> Any:
        """The head's record in the run's calibration.json (:class:`~det_calib.record.run_result.HeadResult`)."""
        return self.run.head(self.head)

    @property
    def low(self) -> float | None:
        """The run's lowest ``--conf`` (where the per-class kept-set ECE is measured)."""
        thr = self.run.settings.conf_thresholds
        return min(thr) if thr else None


@dataclass(frozen=True)
class ReportContext:
    """Everything a section reads.

    Attributes:
        kind: Which page is being written.
        subjects: The heads shown, in order (one run's heads for a report; the compared runs).
        warnings: Where a run's boxes.parquet and calibration.json disagree (computed once).
        folder: Where the run's files are now (a report only; a staging folder while ``calibrate``
            writes the run, which ``run.run_dir`` does not name).
        reference: Another run (``RUN[:HEAD]``) shown beside this one in the Engines section (a report only).
    """

    kind: PageKind
    subjects: tuple[Subject, ...]
    warnings: tuple[str, ...] = ()
    folder: Path | None = None
    reference: str | Path | None = None

    @property
    def compared(self) -> bool:
        """True for a comparison of runs."""
        return self.kind == "compare"

    @property
    def run(self) -> Run:
        """The run of a report (the first run of a comparison)."""
        return self.subjects[0].run

    @property
    def heads(self) -> list[str]:
        return [s.head for s in self.subjects]

    @property
    def hbs(self) -> dict[str, HeadBoxes]:
        """Each head's eval boxes (a report: heads are distinct)."""
        return {s.head: s.hb for s in self.subjects}

    @property
    def bins(self) -> dict[str, tuple[Any, Any]]:
        """Each head's reliability bins, raw and calibrated (a report)."""
        return {s.head: s.bins for s in self.subjects}
