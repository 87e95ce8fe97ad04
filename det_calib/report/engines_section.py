"""Engines side by side: a model's ``.pt`` and its exports, each with its own calibration.

Used by ``det-calib compare`` (when one of the runs is on an export) and by a run's report (the run, and with
``det-calib report RUN --reference OTHER`` the other run next to it). For each run and each
``--conf``: the engine (``pytorch``, ``onnx fp32``, ``openvino int8``, read from the run's
``engine.json`` or, for a ``.pt``, its model path), the boxes kept raw and their mean raw conf,
the kept-set ECE raw and calibrated (the run's own figures), and the equivalent raw threshold
(:func:`det_calib.deploy.calibrated_export._equivalent_raw_threshold`). Against the first run: how the
scores and the kept set move, box by box (same image name, same class, IoU >= 0.7, greedy
by the first run's conf), raw and each under its own calibrator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.data.box_view import kept_mask, usable_rows
from det_calib.deploy.calibrated_export import engine_record, run_equivalent_thresholds
from det_calib.record.calibrator_record import calibrator_of
from det_calib.record.run_folder import Run, load_run

from .common import eval_images_differ, f3, f4, fint, fthr, num, parse_run_spec
from .context import ReportContext
from .document import Heading, Para, Table
from .page import Page

_MATCH_IOU = 0.7
"""IoU at which a box of one engine is the same detection as a box of another (same image and class)."""


def _run_engine_label(run: Run) -> str:
    """The engine a run calibrated: its ``engine.json``, an ensemble's members, else ``pytorch`` (a
    ``.pt``)."""
    rec = _engine_record(run)
    if rec is not None:
        return rec.engine
    ens = run.result.sections.get("ensemble")
    members = getattr(ens, "members", None)
    return f"ensemble of {len(members)}" if members else "ensemble" if ens else "pytorch"


def _engine_record(run: Run) -> Any:
    return engine_record(run.run_dir)


def _equivalent_thresholds(run: Run, head: str) -> list[dict]:
    """The run's equivalent raw thresholds of ``head`` (``engine.json``, else computed from its calibrator)."""

    rec = _engine_record(run)
    if rec is not None and head in rec.equivalent_thresholds:
        return rec.equivalent_thresholds[head]
    record = run.head(head).calibrator
    if record is None:
        return []
    return run_equivalent_thresholds(
        {head: calibrator_of(record)},
        {head: record.method},
        run.settings.conf_thresholds,
        len(run.result.class_names),
    )[head]


@dataclass(frozen=True)
class EngineFigures:
    """One run's figures at one conf threshold (the columns of the engines table)."""

    engine: str
    head: str
    conf: float
    kept_raw: int
    mean_raw_conf: float | None
    ece_raw: float | None
    ece_calibrated: float | None
    kept_calibrated: int
    raw_conf: float | None
    """The equivalent raw threshold (None for a per-class map: see ``raw_conf_per_class``)."""
    raw_conf_per_class: list[float] | None


def engine_figures(run: Run, head: str) -> list[EngineFigures]:
    """Per ``--conf`` of the run: :class:`EngineFigures` of ``head``."""
    hb = run.eval_boxes(head)
    ev = run.head(head).eval
    eq = {float(e["conf"]): e for e in _equivalent_thresholds(run, head)}
    after = hb.conf_after if hb.conf_after is not None else hb.conf
    out = []
    for t in run.settings.conf_thresholds:
        t = float(t)
        o0 = next((o for o in ev.operating_before if num(o.conf) == t), None)
        o1 = next((o for o in ev.operating_after if num(o.conf) == t), None)
        kept = kept_mask(hb.conf, t)
        e = eq.get(t, {})
        out.append(
            EngineFigures(
                engine=_run_engine_label(run),
                head=head,
                conf=t,
                kept_raw=int(kept.sum()),
                mean_raw_conf=float(hb.conf[kept].mean()) if kept.any() else None,
                ece_raw=None if o0 is None else o0.ece,
                ece_calibrated=None if o1 is None else o1.ece,
                kept_calibrated=int(kept_mask(after, t).sum()),
                raw_conf=e.get("raw_conf"),
                raw_conf_per_class=e.get("raw_conf_per_class"),
            )
        )
    return out


@dataclass(frozen=True)
class EngineShift:
    """How one engine's eval boxes move against a reference engine's at one conf threshold."""

    conf: float
    matched: int
    """Reference boxes kept raw at ``conf`` that the other engine also outputs (any conf)."""
    mean_conf_diff: float | None
    """Mean raw conf of the other engine minus the reference's, over those matched boxes."""
    mean_abs_conf_diff: float | None
    kept_both_raw: int
    only_reference_raw: int
    only_other_raw: int
    kept_both_calibrated: int
    only_reference_calibrated: int
    only_other_calibrated: int


def _head_table(run: Run, head: str) -> pl.DataFrame:
    b = usable_rows(run.boxes, head=head, split=run.settings.eval_split)
    cal = b["calibrated"] if "calibrated" in b.columns else b["conf"]
    return b.select("image", "cls", "x1", "y1", "x2", "y2", "conf").with_columns(
        cal.alias("calibrated")
    )


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lt, rb = np.maximum(a[:, None, :2], b[None, :, :2]), np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area = lambda x: np.prod(x[:, 2:] - x[:, :2], axis=1)  # noqa: E731
    return inter / np.maximum(area(a)[:, None] + area(b)[None, :] - inter, 1e-12)


def _match_engines(ref: pl.DataFrame, other: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Row pairs ``(i_ref, j_other)``: same image and class, IoU >= :data:`_MATCH_IOU`, one to one,
    greedy in the reference's descending conf."""
    pairs_i, pairs_j = [], []
    ref_i = ref.with_row_index("_i")
    oth_j = other.with_row_index("_j")
    groups = dict(oth_j.group_by(["image", "cls"]))
    for key, g in ref_i.group_by(["image", "cls"]):
        o = groups.get(key)
        if o is None:
            continue
        g = g.sort("conf", descending=True)
        iou = _iou(
            g.select("x1", "y1", "x2", "y2").to_numpy(), o.select("x1", "y1", "x2", "y2").to_numpy()
        )
        gi, oj = g["_i"].to_numpy(), o["_j"].to_numpy()
        used = np.zeros(o.height, bool)
        for r in range(g.height):
            cand = np.where(~used & (iou[r] >= _MATCH_IOU))[0]
            if cand.size:
                j = cand[np.argmax(iou[r, cand])]
                used[j] = True
                pairs_i.append(int(gi[r]))
                pairs_j.append(int(oj[j]))
    return np.asarray(pairs_i, dtype=np.int64), np.asarray(pairs_j, dtype=np.int64)


def _engine_shift(ref: Run, ref_head: str, other: Run, other_head: str, conf: float) -> EngineShift:
    """:class:`EngineShift` of ``other`` against ``ref`` at ``conf`` (both on the same eval images)."""
    a, b = _head_table(ref, ref_head), _head_table(other, other_head)
    i, j = _match_engines(a, b)
    ca, cb = a["conf"].to_numpy(), b["conf"].to_numpy()
    sa, sb = a["calibrated"].to_numpy(), b["calibrated"].to_numpy()

    def kept_counts(xa: np.ndarray, xb: np.ndarray) -> tuple[int, int, int]:
        both = int((kept_mask(xa[i], conf) & kept_mask(xb[j], conf)).sum())
        return both, int(kept_mask(xa, conf).sum()) - both, int(kept_mask(xb, conf).sum()) - both

    sel = kept_mask(ca[i], conf)
    d = (cb[j] - ca[i])[sel]
    return EngineShift(
        conf,
        int(sel.sum()),
        float(d.mean()) if d.size else None,
        float(np.abs(d).mean()) if d.size else None,
        *kept_counts(ca, cb),
        *kept_counts(sa, sb),
    )


def _threshold_cell(f: EngineFigures) -> str:
    if f.raw_conf is not None:
        return f"raw conf > {f.raw_conf:.6g}"
    if f.raw_conf_per_class:
        return "per class: " + ", ".join(f"{t:.4g}" for t in f.raw_conf_per_class)
    return "n/a"


def engines_section(page: Page, ctx: ReportContext) -> None:
    """The Engines section: a report's run beside its ``reference`` run, or a run on an export alone
    (its engine, calibration and equivalent thresholds); a comparison with an export among its runs:
    every run's engine side by side."""
    if ctx.compared:
        if any(_engine_record(s.run) is not None for s in ctx.subjects):
            _engines(page, [(s.name, s.run, s.head) for s in ctx.subjects])
    else:
        _run_engines(
            page,
            ctx.run,
            ctx.reference,
            folder=ctx.folder if ctx.folder is not None else ctx.run.run_dir,
        )


@dataclass(frozen=True)
class _Shown:
    """A run as a row of the engines table names it (what :func:`eval_images_differ` reads)."""

    name: str
    run: Run
    head: str


def _engines(b: Page, runs: list[tuple[str, Run, str]], *, title: str = "Engines") -> None:
    """The engines table of ``runs`` (``(name, run, head)``) and, against the first, the shift table."""
    from .calibrators_section import deployed_words

    b.add(Heading(2, title, "engines"))
    if len(runs) > 1:  # what sets the runs apart besides their engines, said before the table
        other_images = eval_images_differ([_Shown(*r) for r in runs])
        if other_images:
            b.add(Para(other_images + ".", "warn"))
        if len({head for _, _, head in runs}) > 1:
            b.add(
                Para(
                    "The rows are of different heads ("
                    + ", ".join(f"{name}: {head}" for name, _, head in runs)
                    + "): each head scores its own boxes, so their figures differ for that too.",
                    "warn",
                )
            )
    rows = []
    for name, run, head in runs:
        for f in engine_figures(run, head):
            rows.append(
                [
                    name,
                    f.engine,
                    head,
                    deployed_words(run, head),
                    fthr(f.conf),
                    fint(f.kept_raw),
                    f3(f.mean_raw_conf),
                    f4(f.ece_raw),
                    f4(f.ece_calibrated),
                    fint(f.kept_calibrated),
                    _threshold_cell(f),
                ]
            )
    b.add(
        Table(
            [
                "Run",
                "Engine",
                "Head",
                "Calibration",
                "Conf",
                "Kept raw",
                "Mean raw conf of kept",
                "Kept-set ECE raw",
                "Kept-set ECE calibrated",
                "Kept calibrated",
                "Equivalent raw threshold (keeps the calibrated set)",
            ],
            rows,
            caption="Each engine with its own calibration",
            css="engines",
        )
    )
    b.add(
        Para(
            "Three ways to deploy each engine's calibration: its calibrated model (calibrated.pt, "
            "or for an "
            "export the calibrated export in the run folder, which Ultralytics and the plain "
            "runtime run "
            "without det_calib), or, for a map shared by all classes, the engine's raw scores at "
            "the "
            "equivalent raw threshold: `conf > t` on the raw engine keeps exactly the boxes whose "
            "calibrated "
            "score is above the calibrated conf.",
            "note",
        )
    )
    if len(runs) < 2:
        return
    _, ref, ref_head = runs[0]
    srows = []
    for name, run, head in runs[1:]:
        for t in ref.settings.conf_thresholds:
            s = _engine_shift(ref, ref_head, run, head, float(t))
            srows.append(
                [
                    name,
                    fthr(s.conf),
                    fint(s.matched),
                    f4(s.mean_conf_diff),
                    f4(s.mean_abs_conf_diff),
                    f"{s.kept_both_raw} / {s.only_reference_raw} / {s.only_other_raw}",
                    f"{s.kept_both_calibrated} / {s.only_reference_calibrated} / "
                    f"{s.only_other_calibrated}",
                ]
            )
    b.add(
        Table(
            [
                "Run",
                "Conf",
                f"Boxes of {runs[0][0]} kept raw, matched",
                "Mean raw conf change",
                "Mean absolute raw conf change",
                "Kept raw: both / only first / only this",
                "Kept calibrated: both / only first / only this",
            ],
            srows,
            caption=f"How the scores and the kept set move against {runs[0][0]} ({_run_engine_label(ref)}), box by "
            f"box (same image and class, IoU >= {_MATCH_IOU:g})",
            css="engine-shift",
        )
    )


def _run_engines(b: Page, run: Run, reference: str | Path | None, *, folder: str | Path) -> None:
    """The report's Engines section: with a ``reference`` run, it first and this run next to it
    (each head of this run against the reference's same head, else its first); without one, only
    for a run on an export (its engine, calibration and equivalent thresholds). ``folder`` is where
    the run's files are now (a staging folder while ``calibrate`` writes it)."""
    import dataclasses

    shown = Path(run.run_dir).name
    run = dataclasses.replace(run, run_dir=Path(folder))

    if reference is None:
        if _engine_record(run) is not None:
            _engines(b, [(shown, run, h) for h in run.heads], title="Engines")
        return
    path, head = parse_run_spec(reference)
    ref = load_run(path)
    for h in run.heads:
        rh = head or (h if h in ref.heads else ref.heads[0])
        _engines(
            b,
            [(Path(path).name, ref, rh), (shown, run, h)],
            title="Engines" if len(run.heads) == 1 else f"Engines ({h} head)",
        )
