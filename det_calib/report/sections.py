"""The sections of the report pages, in page order: the one list that ``write_report``, ``compare_runs``
and the tests read.

A section is one function ``section(page, ctx)`` (:data:`SectionFn`): it adds its level-2 heading
and its blocks to the :class:`~det_calib.report.page.Page` from the
:class:`~det_calib.report.context.ReportContext` (the heads of a run, or the compared runs), or
nothing when the page has nothing for it to show. Adding a section is that function and one entry
in :data:`SECTIONS` (docs/report_sections.md).

>>> [s.title for s in _sections_of("compare")][:3]
['Summary', 'Calibrators compared', 'Engines']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from det_calib.record.run_folder import Run

from .calibrators_section import calibrators_section, deployed_words
from .common import bins_of
from .context import PageKind, ReportContext, Subject
from .document import Fig, Heading
from .engines_section import engines_section
from .map_section import map_section
from .matching_section import matching_section
from .page import Page
from .per_class_section import per_class_section
from .reliability_section import reliability_section
from .settings_section import settings_section
from .shift_section import threshold_shift_section
from .size_section import size_section
from .summary_section import summary_section
from .thresholds_section import conf_thresholds_section

__all__ = ["PageDraft", "Section", "build_page", "draft_page", "subject"]

_SectionFn = Callable[[Page, ReportContext], None]
"""The one signature of a section: add blocks to the page from the context."""

_BOTH: frozenset[PageKind] = frozenset({"report", "compare"})
_REPORT: frozenset[PageKind] = frozenset({"report"})


@dataclass(frozen=True)
class Section:
    """One section of the report pages.

    Attributes:
        title: Its level-2 heading, or the start of each of them (``Calibrators compared: A``,
            ``Engines (nms head)``): a section's headings start with its title.
        build: The function that writes it.
        pages: The pages it is on (``report``, ``compare``).
        optional: Written only when the run has what it shows (an ``--method auto`` run's
            candidates, an export, a thresholds.json, an ensemble); the others are on every page.
        checked: It reads what a run records last (its Ultralytics val checks, the detection
            change, the run time): while ``calibrate`` still verifies the run, it is written after
            the others (:class:`PageDraft`).
    """

    title: str
    build: _SectionFn
    pages: frozenset[PageKind] = _BOTH
    optional: bool = False
    checked: bool = False

    def heads(self, heading: str) -> bool:
        """Whether a level-2 heading is this section's."""
        return heading == self.title or heading.startswith((self.title + ":", self.title + " ("))


_SECTIONS: tuple[Section, ...] = (
    Section(
        "Summary", summary_section, checked=True
    ),  # a per-class map's lead names its val figures
    Section("Calibrators compared", calibrators_section, optional=True),
    Section("Engines", engines_section, optional=True),
    Section("Matching", matching_section, pages=_REPORT, optional=True),
    Section("Reliability", reliability_section),
    Section("Per-class calibration", per_class_section),
    Section("Reliability by size", size_section, optional=True),
    Section("Threshold shift", threshold_shift_section, pages=_REPORT),
    Section("Conf thresholds", conf_thresholds_section, optional=True),
    Section("mAP verification", map_section, pages=_REPORT, checked=True),
    Section("Settings", settings_section, checked=True),  # the run time
)
"""Every section, in the order of the pages (a run's own sections come before Settings:
:func:`_page_sections`)."""


def _sections_of(kind: PageKind) -> list[Section]:
    """The sections of one page, in order."""
    return [s for s in _SECTIONS if kind in s.pages]


def _page_sections(ctx: ReportContext) -> list[Section]:
    """The sections of ``ctx``'s page: :func:`_sections_of` its kind, and on a run's report the parts
    its record's own sections name (:mod:`det_calib.record.run_sections`: an ensemble run's Ensemble
    section), in the record's order, before the last section (Settings)."""
    out = _sections_of(ctx.kind)
    own = [] if ctx.compared else map(importlib.import_module, ctx.run.result.section_reports())
    return [
        *out[:-1],
        *(Section(m.TITLE, m.section, pages=_REPORT, optional=True) for m in own),
        out[-1],
    ]


def _section_of(heading: str) -> Section | None:
    """The section a level-2 heading belongs to (None: none)."""
    return next((s for s in _SECTIONS if s.heads(heading)), None)


def build_page(ctx: ReportContext) -> Page:
    """Write every section of ``ctx.kind``'s page, in order.

    Raises:
        ValueError: A section wrote a level-2 heading that is not its own, or none while it is not
            optional (a defect of the section, not of the run).
    """
    page = Page()
    for s in _page_sections(ctx):
        _build_section(page, s, ctx)
    return page


@dataclass
class PageDraft:
    """A page without the sections that read what a run records last (:attr:`Section.checked`: its
    Ultralytics val checks, the run time): :func:`draft_page` writes the others while ``calibrate``
    still verifies the run, :meth:`complete` the checked ones from the complete record, in their
    places; the page is the one :func:`build_page` of the complete run writes."""

    page: Page
    later: list[tuple[int, Section]]  # (where its blocks go, section), in page order

    def complete(self, ctx: ReportContext) -> Page:
        """The page with the checked sections written from ``ctx`` (the complete run's)."""
        page, parts = self.page, []
        for at, s in self.later:
            parts.append((at, Page()))
            _build_section(parts[-1][1], s, ctx)
        for at, part in reversed(
            parts
        ):  # from the last, so that the earlier places stay where they are
            page.blocks[at:at] = part.blocks
            for name, png in part.figures.items():
                if name in page.figures:
                    raise ValueError(f"duplicate figure name {name}")
                page.figures[name] = png
        page.figures = {
            b.name: page.figures[b.name] for b in page.blocks if isinstance(b, Fig)
        }  # page order
        return page


def draft_page(ctx: ReportContext) -> PageDraft:
    """Every section of ``ctx.kind``'s page but the checked ones (:class:`PageDraft`).

    Raises:
        ValueError: As :func:`build_page`.
    """
    page = Page()
    later: list[tuple[int, Section]] = []
    for s in _page_sections(ctx):
        if s.checked:
            later.append((len(page.blocks), s))
        else:
            _build_section(page, s, ctx)
    return PageDraft(page, later)


def _build_section(page: Page, s: Section, ctx: ReportContext) -> None:
    """One section into ``page``, its headings checked."""
    start = len(page.blocks)
    s.build(page, ctx)
    h2 = [b.text for b in page.blocks[start:] if isinstance(b, Heading) and b.level == 2]
    if any(not s.heads(t) for t in h2) or (not h2 and not s.optional):
        raise ValueError(f"section {s.title!r} wrote the headings {h2}")


def subject(run: Run, head: str, *, name: str, letter: str = "", note: str = "") -> Subject:
    """A head of a run as the sections see it: its eval boxes read once, binned once (as the run's
    ECE), its deployed calibrator in words."""
    hb = run.eval_boxes(head)
    n_bins = run.settings.ece_bins
    bins = (
        bins_of(hb.conf, hb.correct, n_bins) if hb.n else None,
        bins_of(hb.conf_after, hb.correct, n_bins) if hb.n else None,
    )
    return Subject(name, letter, run, head, hb, bins, deployed_words(run, head), note)
