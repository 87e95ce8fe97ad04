"""The comparison of two or more runs, or heads of runs (``compare_runs``): compare.html, compare.md.

Every number is read from each run's :class:`~det_calib.record.run_result.RunResult` (``calibration.json``)
as ``calibrate`` computed it, intervals included. The only figures computed here are the ones a
run does not store: the intervals of the all-box NLL and Brier score (:mod:`det_calib.report.separation`)
and the reliability curves, binned as the run's ECE is.

The page is written by the same section functions as the report (:data:`det_calib.report.sections.SECTIONS`,
the comparison's entries), from a :class:`~det_calib.report.context.ReportContext` whose subjects
are the compared runs.
"""

from __future__ import annotations

import logging
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from det_calib.errors import InputError
from det_calib.io import write_text
from det_calib.record.run_folder import CALIBRATION_FILE, Run, load_run

from .common import (
    eval_images_differ,
    f3,
    f4,
    fci,
    fthr,
    head_eval,
    op_at,
    parse_run_spec,
    shift_at,
)
from .context import ReportContext, Subject
from .sections import build_page, subject

_log = logging.getLogger(__name__)

__all__ = ["compare_runs"]

_COMPARE_TEXT = "compare.txt"
"""The comparison's side-by-side table in plain text (what ``det-calib compare`` prints)."""


def _resolve(specs: Sequence[str | Path]) -> list[tuple[Run, str, str]]:
    """The runs and the head of each to compare. ``run_dir:head`` picks a head; without one, the
    first head every run has (compare like with like), else the run's first head. A run folder
    named twice (two of its heads) is read once."""
    parsed = [parse_run_spec(s) for s in specs]
    loaded: dict[Path, Run] = {}
    runs = []
    for path, _ in parsed:
        key = path.resolve()
        if key not in loaded:
            loaded[key] = load_run(path)
        runs.append(loaded[key])
    common = [h for h in runs[0].heads if all(h in r.heads for r in runs)]
    out = []
    for (path, head), run in zip(parsed, runs, strict=True):
        note = ""
        if head is None:
            head = next((h for h in common), run.heads[0])
            if len(run.heads) > 1:
                note = f"{path} has heads {', '.join(run.heads)}; comparing {head} (use {path}:<head> to choose)"
                _log.info(note)
        elif head not in run.heads:
            raise InputError(
                f"{path / CALIBRATION_FILE}: no head {head!r}; heads are {', '.join(run.heads)}"
            )
        out.append((run, head, note))
    return out


def _letters(n: int) -> list[str]:
    return [string.ascii_uppercase[i] if i < 26 else f"R{i + 1}" for i in range(n)]


def _labels(picked: list[tuple[Run, str, str]], labels: Sequence[str] | None) -> list[str]:
    n = len(picked)
    if labels is None:
        names = [f"{r.run_dir.name}:{h}" for r, h, _ in picked]
        if len(set(names)) < n:
            names = [f"{x} ({nm})" for x, nm in zip(_letters(n), names, strict=True)]
        return names
    labels = list(labels) if isinstance(labels, (list, tuple)) else labels
    if (
        not isinstance(labels, list)
        or len(labels) != n
        or not all(isinstance(x, str) and x for x in labels)
    ):
        raise InputError(
            f"Expected argument `labels` to be {n} non-empty names, one per run, but got {', '.join(map(str, labels))}"
        )
    if len(set(labels)) != n:
        raise InputError(
            f"Expected argument `labels` to be {n} different names, but got {', '.join(map(str, labels))}"
        )
    return labels


def compare_runs(
    *runs: str | Path,
    out_dir: str | Path,
    labels: Sequence[str] | None = None,
) -> dict[str, Path]:
    """Compare the calibration of two or more runs (models, exports, heads of one run) side by side.

    Each run is a run directory, or ``run_dir:head`` to pick a head of a run with two heads
    (``compare_runs("out:nms", "out:e2e", out_dir="cmp")``); without a head, the first head every
    run has, else the run's first head. Any calibrator of ``calibrate`` (``none`` included) is
    compared; each run is labelled by its name and head and its deployed calibrator with its
    parameters in words. Writes ``compare.html`` (self-contained), ``compare.md`` and
    ``figures/compare_*.png`` into ``out_dir``: first the operating point (per run and ``--conf``,
    the kept set's ECE and LaECE_0, raw and calibrated, with intervals and the sampling floor,
    precision, recall and mAP), saying in words which differences the intervals cannot tell apart;
    then the all-box ECE / LaECE / NLL / Brier with 95% intervals; reliability diagrams of every
    run on one figure (the kept boxes, and all boxes); per-class ECE of every run (a classes x runs
    heatmap, classes matched by name, sparse ones marked); with two runs, the per-class
    differences; when every run folder has a ``thresholds.json`` for its head, the tuned conf
    thresholds side by side; every ``--method auto`` run's candidates. The sections are those of
    :data:`det_calib.report.sections.SECTIONS` for the comparison, the same functions as the
    report's, in the same order, each run's answer line first.

    Args:
        runs: Two or more run directories, each optionally with ``:head``.
        out_dir: Output directory.
        labels: One display name per run; default ``<dir name>:<head>``.

    Returns:
        Written paths: ``"html"`` (compare.html), ``"md"`` (compare.md) and ``"figures/<name>.png"``.

    Classify runs are compared by their task's own run (``det_calib.tasks.classify.report_compare``).

    Raises:
        InputError: Fewer than two runs, a run missing or corrupt, an unknown head, or ``labels``
            not one distinct name per run.
    """
    if len(runs) < 2:
        raise InputError(
            "Expected at least two runs to compare (RUN[:HEAD] RUN[:HEAD] ...), but got "
            f"{len(runs)}"
        )
    picked = _resolve(runs)
    names = _labels(picked, labels)
    subjects = tuple(
        subject(run, head, name=name, letter=x, note=note)
        for name, x, (run, head, note) in zip(names, _letters(len(names)), picked, strict=True)
    )
    page = build_page(ReportContext("compare", subjects))
    files = page.write(
        Path(out_dir),
        "compare",
        "Calibration comparison: " + " vs ".join(names),
        subtitle=", ".join(f"{s.letter} = {s.title}" for s in subjects),
        footer=" vs ".join(str(s.run.run_dir / CALIBRATION_FILE) for s in subjects),
    )
    files["txt"] = write_text(Path(out_dir) / _COMPARE_TEXT, _compare_text(subjects))
    return files


def _pair(a: str, b: str) -> str:
    return a if a == b == "n/a" else f"{a} -> {b}"


def _operating_rows(subjects: Sequence[Subject], t: float) -> list[tuple[str, list[str]]]:
    """The rows of conf threshold ``t``: per subject, the kept set raw -> calibrated."""
    cols = []
    for s in subjects:
        ev = head_eval(s.run, s.head)
        sh = shift_at(s.result.threshold_shift, t)
        cols.append((op_at(ev.operating_before, t), op_at(ev.operating_after, t), sh))

    def of(o: Any, key: str) -> Any:
        return None if o is None else getattr(o, key)

    def count(o: Any, key: str) -> str:
        return "n/a" if of(o, key) is None else f"{of(o, key):,}"

    at = f"kept at conf {fthr(t)}"
    return [
        (
            f"boxes {at}",
            [_pair(count(sh, "kept_before"), count(sh, "kept_after")) for *_, sh in cols],
        ),
        (f"ECE {at}", [_pair(f4(of(o0, "ece")), f4(of(o1, "ece"))) for o0, o1, _ in cols]),
        (
            "  calibrated ECE, 95% interval",
            [fci(of(o1, "ece"), of(o1, "ece_ci")) for _, o1, _ in cols],
        ),
        (
            "  its sampling floor",
            [fci(of(o1, "ece_floor"), of(o1, "ece_floor_range")) for _, o1, _ in cols],
        ),
        (
            f"LaECE_0 {at}",
            [_pair(f4(of(o0, "laece0")), f4(of(o1, "laece0"))) for o0, o1, _ in cols],
        ),
        (
            "  calibrated LaECE_0, 95% interval",
            [fci(of(o1, "laece0"), of(o1, "laece0_ci")) for _, o1, _ in cols],
        ),
        (
            f"precision {at}",
            [
                _pair(f3(of(sh, "precision_before")), f3(of(sh, "precision_after")))
                for *_, sh in cols
            ],
        ),
        (
            f"recall {at}",
            [_pair(f3(of(sh, "recall_before")), f3(of(sh, "recall_after"))) for *_, sh in cols],
        ),
    ]


def _compare_text(subjects: Sequence[Subject]) -> str:
    """The comparison's figures side by side, one column per compared run or head, raw -> calibrated: the
    deployed calibrator; at each conf threshold the boxes kept, their ECE and LaECE_0 (with the calibrated
    figure's 95% image-bootstrap interval and its sampling floor), precision and recall; then the all-box ECE
    and NLL and the COCO mAP50-95. Every figure is the run's own (``calibration.json``)."""
    thresholds = sorted({float(t) for s in subjects for t in s.run.settings.conf_thresholds})
    rows: list[tuple[str, list[str]]] = [
        ("", [s.name for s in subjects]),
        ("deployed calibrator", [s.words for s in subjects]),
    ]
    for t in thresholds:
        rows += _operating_rows(subjects, t)
    evs = [head_eval(s.run, s.head) for s in subjects]
    rows += [
        ("ECE of all boxes", [_pair(f4(e.before.ece), f4(e.after.ece)) for e in evs]),
        ("NLL of all boxes", [_pair(f4(e.before.nll), f4(e.after.nll)) for e in evs]),
        ("COCO mAP50-95", [_pair(f4(e.map50_95_before), f4(e.map50_95_after)) for e in evs]),
    ]
    first = max(len(r[0]) for r in rows)
    widths = [max(len(r[1][i]) for r in rows) for i in range(len(subjects))]
    lines = [
        "  ".join(
            [name.ljust(first), *(c.ljust(w) for c, w in zip(cells, widths, strict=True))]
        ).rstrip()
        for name, cells in rows
    ]
    other_images = eval_images_differ(subjects)
    if other_images:
        lines.append(f"({other_images[0].lower()}{other_images[1:]})")
    lines.append(
        "(raw -> calibrated; intervals: 95% image bootstrap; sampling floor: the ECE a perfectly "
        "calibrated "
        "detector would score on the same kept boxes; overlapping intervals cannot be told apart; "
        "details in "
        "compare.html)"
    )
    return "\n".join(lines) + "\n"
