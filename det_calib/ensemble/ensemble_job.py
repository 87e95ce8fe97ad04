"""``det-calib ensemble``: several detectors fused, then calibrated, as ``calibrate`` calibrates one.

The job: load the members (:mod:`det_calib.ensemble.members`) and check each against the data;
capture every member on the fit and eval splits (each image decoded once for all members);
per ensemble head, calibrate each member on its own boxes (``calibrate``'s fit, choice and
evaluation, for the side-by-side figures and the ``calibrate-then-fuse`` order), choose the
fusion (order and score rule; ``auto``, the default) on the fit split's folds
(:mod:`det_calib.ensemble.fusion_choice`), fuse the members' boxes per image and class
(:mod:`det_calib.ensemble.fusion`), and run ``calibrate``'s label → fit → evaluate step on the
fused boxes (the temperature always fitted and reported, COCO mAP of the fused boxes raw and
calibrated, the kept-set shift). Both fusion orders under every score rule are scored in one
table (the choice's figures on the fit split beside each cell's on the eval split). The output
folder has ``calibrate``'s contract (``calibration.json``, ``boxes.parquet`` of the fused boxes
with ``logit`` the logit of the fused raw score, ``report.html``), plus ``members.parquet``
(every member's boxes, for ``ensemble --boxes``), so ``compare``, ``report`` and ``thresholds`` read it as any run.
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib import demo, metrics
from det_calib.calibrators import TemperatureScaler
from det_calib.calibrators.base import LogitCalibrator
from det_calib.capture.parts import data_fingerprint
from det_calib.capture.predictor import auto_workers
from det_calib.data.box_table import CAPTURE_COLUMNS, SCHEMA, validate_boxes
from det_calib.data.box_view import BoxView
from det_calib.data.ground_truth import Split, check_class_names, load_data_yaml
from det_calib.ensemble.ensemble_record import (
    ORDERS,
    EnsembleHead,
    EnsembleRecord,
    FusionRow,
    FusionSettingsRecord,
    MemberFigures,
    MemberRecord,
    ensemble_of,
)
from det_calib.ensemble.ensemble_summary import ensemble_lines
from det_calib.ensemble.fusion import SCORE_RULES, weighted_boxes_fusion
from det_calib.ensemble.fusion_choice import (
    FusionCandidate,
    choose,
    image_folds,
    out_of_fold,
    usable_index,
)
from det_calib.ensemble.fusion_settings import FusionSettings
from det_calib.ensemble.member_boxes import reuse_members
from det_calib.ensemble.members import (
    MEMBER_LOADERS,
    MemberSpec,
    capture_members,
    demo_members,
    head_plan,
    member_heads,
    member_specs,
)
from det_calib.errors import DegenerateFitError, InputError
from det_calib.evaluation.map_check import coco_maps
from det_calib.io import check_output_dir
from det_calib.job import clock
from det_calib.job.inputs import Inputs, load_splits
from det_calib.job.settings import Settings
from det_calib.matching.one_to_one import match_boxes
from det_calib.metrics.operating_point import kept_ece
from det_calib.pipeline.fitting import fit_head
from det_calib.pipeline.head_steps import calibrate_head, evaluate
from det_calib.pipeline.outputs import write_run_outputs
from det_calib.record.run_result import HeadResult, RunResult, ValCheck, package_version

_log = logging.getLogger(__name__)

_MEMBERS_FILE = "members.parquet"
EPS = 1e-9
"""Fused scores are kept in [EPS, 1 - EPS] so that their logit is finite."""


_FUSION_FIELDS = {f.name for f in fields(FusionSettings)}


@dataclass
class EnsembleRun:
    """What :func:`ensemble` produced: the folder, the typed result, the fused boxes, the files."""

    out_dir: Path
    result: RunResult
    boxes: pl.DataFrame
    files: dict[str, Path] = field(default_factory=dict)
    source: str = ""

    @property
    def record(self) -> EnsembleRecord:
        return ensemble_of(self.result)


# ---------------------------------------------------------------------------------------- members
def _resolve_members(
    models: Sequence[str | Path], data: str | Path | None, fs: FusionSettings
) -> tuple[list[MemberSpec], str, Path]:
    """The member specs, how they were chosen (in words), and the data.yaml."""
    if not models and not fs.snapshots:
        if data is not None:
            raise InputError(
                "give the members (`model` twice or more, `snapshots`, or one `model` with `view`) "
                "with `data`, or neither (the embedded demo ensemble)"
            )

        if fs.view:
            return (
                member_specs([demo.demo_model()], views=fs.view),
                "test-time views of the shipped model",
                demo.demo_data_yaml(),
            )
        specs, source = demo_members()
        return specs, source, demo.demo_data_yaml()
    if data is None:
        raise InputError(
            "give `data` with the members (or neither, for the embedded demo ensemble)"
        )
    specs = member_specs(models, snapshots=fs.snapshots, views=fs.view)
    kinds = sorted({m.kind for m in specs})
    return specs, f"{len(specs)} members given ({', '.join(kinds)})", Path(data)


def _load_members(
    specs: Sequence[MemberSpec], names: list[str], data: Path, s: Settings, workers: int
) -> tuple[list[Any], dict[str, list[str]]]:
    """Open every member (its file's loader) with the heads it runs; check its class names."""
    have = [member_heads(sp) for sp in specs]
    plan = head_plan(specs, have, s.head)
    members = []
    for i, sp in enumerate(specs):
        need = sorted({plan[h][i] for h in plan}, key=["nms", "e2e"].index)
        loader = MEMBER_LOADERS[sp.path.suffix]
        m = loader(
            sp,
            need,
            conf=s.conf_floor,
            iou=s.nms_iou,
            max_det=s.max_det,
            imgsz=s.imgsz,
            device=s.device,
            workers=workers,
        )
        try:
            check_class_names(m.names, names, data_path=data)
        except InputError as e:
            raise InputError(f"member {sp.name}: {e}") from None
        members.append(m)
    return members, plan


def capture_workers(device: str | None) -> int:
    """Capture threads for ``device`` (as ``calibrate`` runs them); a bad device is one line."""
    from ultralytics.utils.torch_utils import select_device

    try:
        return auto_workers(select_device("" if device is None else device, verbose=False))
    except (ValueError, RuntimeError, AssertionError) as e:
        raise InputError(f"bad device {device!r}: {e}") from None


@clock.stage("capture")
def capture_all(
    members: Sequence[Any],
    plan: dict[str, list[str]],
    splits: Sequence[Split],
    s: Settings,
    workers: int,
) -> tuple[dict[str, list[list[pl.DataFrame]]], dict[str, float]]:
    """Ensemble head -> per member ``[fit table, eval table]`` (``head`` set to the ensemble head),
    and the capture's CPU seconds per image (of the threads running the members: all members, and
    each; image decoding, shared by all, not included)."""
    per_split = []
    spent = np.zeros(len(members))
    for sp in splits:
        _log.info("capturing %d members on `%s` (%d images)", len(members), sp.name, len(sp.images))
        heads = [sorted({plan[h][i] for h in plan}) for i in range(len(members))]
        per_split.append(
            capture_members(
                members,
                sp.images,
                heads,
                split=sp.name,
                image_names=sp.image_names(),
                progress=s.progress,
                workers=workers,
                seconds=spent,
            )
        )
    n_img = max(sum(len(sp.images) for sp in splits), 1)
    cost = {
        "capture": float(spent.sum() / n_img),
        **{f"member {i}": float(t / n_img) for i, t in enumerate(spent)},
    }
    out: dict[str, list[list[pl.DataFrame]]] = {}
    for h, runs in plan.items():
        out[h] = [
            [
                per_split[k][i]
                .filter(pl.col("head") == runs[i])
                .with_columns(pl.lit(h).alias("head"))
                for k in range(len(splits))
            ]
            for i in range(len(members))
        ]
    return out, cost


# ---------------------------------------------------------------------------------------- fusion
@dataclass
class Fusions:
    """The fusions of one head's member tables, each made once: every score rule reads the same fusion
    (the clusters and the sums do not depend on the rule, only how the fused score is read from them).

    Attributes:
        made: (the tables' ids, split, score column) -> (the tables, their rows, the fusion, its seconds).
        seconds: What the last table :func:`fuse_tables` made costs on its own: its fusion's seconds (made
            then or before) and its own.
    """

    made: dict = field(default_factory=dict)
    seconds: float = 0.0


def fuse_tables(
    tables: Sequence[pl.DataFrame],
    split: Split,
    *,
    head: str,
    score: str,
    fs: FusionSettings,
    max_det: int,
    column: str = "conf",
    cache: Fusions | None = None,
) -> pl.DataFrame:
    """The fused boxes of the members' tables on one split (capture columns plus ``members``, the
    number of members present in each fused box); ``column``: the member score fused (``conf``
    raw, ``calibrated`` each member's calibrated conf). ``cache``: where the fusion is kept for the
    other score rules of the same tables."""
    key = (tuple(id(t) for t in tables), split.name, column)
    hit = None if cache is None else cache.made.get(key)
    t0 = time.perf_counter()
    if hit is None:
        n = len(tables)
        cols = ["image_id", "x1", "y1", "x2", "y2", "img_w", "img_h", "cls", column]
        both = pl.concat(
            [
                t.select(cols).with_columns(pl.lit(i, dtype=pl.Int64).alias("member"))
                for i, t in enumerate(tables)
            ]
        )
        xy = both.select("x1", "y1", "x2", "y2").to_numpy()
        f = weighted_boxes_fusion(
            xy,
            both[column].to_numpy(),
            both["cls"].to_numpy(),
            groups=both["image_id"].to_numpy(),
            members=both["member"].to_numpy(),
            n_members=n,
            weights=fs.weights(n),
            iou_thr=fs.fusion_iou,
            skip_box_thr=fs.fusion_skip,
        )
        hit = (
            tuple(tables),
            both,
            f,
            time.perf_counter() - t0,
        )  # the tables held: the key's ids stay theirs
        if cache is not None:
            cache.made[key] = hit
        t0 = time.perf_counter()
    _, both, f, fusing = hit
    table = _fused_table(f, f.scores(score), split, head=head, sizes=both, max_det=max_det)
    if cache is not None:
        cache.seconds = fusing + time.perf_counter() - t0
    return table


def _fused_table(
    f: Any, sc: np.ndarray, split: Split, *, head: str, sizes: pl.DataFrame, max_det: int
) -> pl.DataFrame:
    """A capture table of fused boxes (at most ``max_det`` per image, by fused score)."""
    sc = np.clip(sc, EPS, 1 - EPS)
    size = sizes.group_by("image_id").agg(pl.col("img_w").first(), pl.col("img_h").first())
    names = split.image_names()
    df = pl.DataFrame(
        {
            "image_id": f.group.astype(np.int64),
            "x1": f.boxes[:, 0],
            "y1": f.boxes[:, 1],
            "x2": f.boxes[:, 2],
            "y2": f.boxes[:, 3],
            "cls": f.label.astype(np.int32),
            "conf": sc,
            "logit": np.log(sc) - np.log1p(-sc),
            "members": f.stats["members"].astype(np.int32),
        }
    )
    df = (
        df.join(size, on="image_id", how="left")
        .sort(
            ["image_id", "conf", "cls", "x1", "y1"], descending=[False, True, False, False, False]
        )
        .filter(pl.int_range(pl.len()).over("image_id") < max_det)
    )
    df = df.with_columns(
        pl.Series("image", [names[i] for i in df["image_id"].to_list()], dtype=pl.String),
        pl.lit(split.name).alias("split"),
        pl.lit(head).alias("head"),
    )
    return df.select([pl.col(c).cast(SCHEMA[c]) for c in CAPTURE_COLUMNS] + [pl.col("members")])


# ---------------------------------------------------------------------------------------- one head
def _member_figures(name: str, hr: HeadResult) -> MemberFigures:
    """A member's (or the ensemble's) figures from its ``calibrate`` head result."""
    e = hr.eval
    return MemberFigures(
        name=name,
        method=hr.calibrator.method if hr.calibrator else "none",
        map50_95=e.map50_95_before,
        map50=e.map50_before,
        operating_before=list(e.operating_before),
        operating_after=list(e.operating_after),
        temperature=hr.temperature_fit.temperature if hr.temperature_fit else None,
        class_kept_ece={c.cls: c.kept_ece_after for c in hr.per_class},
        calibrator=hr.calibrator,
    )


def _fuse_split(
    members: list[list[pl.DataFrame]],
    split: Split,
    k: int,
    head: str,
    order: str,
    score: str,
    fs: FusionSettings,
    s: Settings,
    cache: Fusions | None = None,
) -> pl.DataFrame:
    """The members' tables of split ``k`` (0 fit, 1 eval) fused under (``order``, ``score``)."""
    column = "conf" if order == ORDERS[0] else "calibrated"
    return fuse_tables(
        [m[k] for m in members],
        split,
        head=head,
        score=score,
        fs=fs,
        max_det=s.max_det,
        column=column,
        cache=cache,
    )


@dataclass
class Cell:
    """One fusion (order, score rule) of a head: its fit split fused and labelled, the fused
    score's calibrator chosen on it, and (when chosen among) its CV figures. The eval split is
    fused and labelled on first use (:meth:`eval_boxes`), so that a head holds one cell's eval
    boxes at a time, not ten. ``seconds``: the wall time of its fusion (the splits fused so far; a fusion
    another cell made counted as if made for this one). ``fusions``: the head's fusions it reads."""

    order: str
    score: str
    fit_boxes: pl.DataFrame
    choice: Any
    seconds: float
    fuse_eval: Callable[[], pl.DataFrame] = field(repr=False)
    candidate: FusionCandidate | None = None
    fusions: Fusions | None = field(default=None, repr=False)
    _eval_boxes: pl.DataFrame | None = field(default=None, init=False, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return self.order, self.score

    def eval_boxes(self, ev: Split, s: Settings) -> pl.DataFrame:
        """The eval split's fused boxes, labelled (fused and labelled once)."""
        if self._eval_boxes is None:
            t0 = time.perf_counter()
            fused = self.fuse_eval()
            self.seconds += (
                time.perf_counter() - t0 if self.fusions is None else self.fusions.seconds
            )
            self._eval_boxes = match_boxes(fused, ev.gt, iou=s.iou, loc_iou=s.loc_iou)
        return self._eval_boxes


def _fusion_cell(
    members: list[list[pl.DataFrame]],
    splits: tuple[Split, Split],
    head: str,
    order: str,
    score: str,
    fs: FusionSettings,
    s: Settings,
    cache: Fusions | None = None,
) -> Cell:
    """Fuse the members' fit tables under (``order``, ``score``), label them, fit their calibrator;
    the eval tables are fused when the cell's eval boxes are first asked for. ``cache``: the fusions
    the cells of one head share (:func:`fuse_tables`)."""
    t0 = time.perf_counter()
    fused = _fuse_split(members, splits[0], 0, head, order, score, fs, s, cache)
    seconds = time.perf_counter() - t0 if cache is None else cache.seconds
    fb = match_boxes(fused, splits[0].gt, iou=s.iou, loc_iou=s.loc_iou)
    fuse_eval = functools.partial(
        _fuse_split, members, splits[1], 1, head, order, score, fs, s, cache
    )
    return Cell(order, score, fb, fit_head(fb, s, splits[0].gt), seconds, fuse_eval, fusions=cache)


def _member_floor(cal: LogitCalibrator) -> float:
    v = cal.params.get("fit_min_conf", 0.0) if cal.params else 0.0
    return float(v) if isinstance(v, (int, float)) else 0.0


def _choose_fusion(
    cells: Sequence[Cell],
    members: list[list[pl.DataFrame]],
    member_cals: Sequence[Any],
    fit: Split,
    head: str,
    fs: FusionSettings,
    s: Settings,
) -> Cell:
    """The cell chosen on the fit split's folds (:mod:`det_calib.ensemble.fusion_choice`); every
    cell's ``candidate`` is filled in with its CV figures and verdict."""
    thr, n_img = min(s.conf), len(fit.images)
    for c in cells:
        m = _fused_map(c.fit_boxes, fit, s)
        c.candidate = FusionCandidate(
            c.order, c.score, c.choice.method, c.choice.floor, float(m["map50_95"])
        )
    for r in range(s.cv_repeats):
        folds = image_folds(n_img, s.cv_folds, s.seed + r)
        oof_members, fused = (
            [],
            Fusions(),
        )  # this assignment's out-of-fold member scores, fused once for every rule
        if any(c.order == ORDERS[1] for c in cells):
            for t, cal in zip((m[0] for m in members), member_cals, strict=True):
                try:
                    p = out_of_fold(t, cal.method, _member_floor(cal), folds, seed=s.seed)
                except (
                    DegenerateFitError
                ):  # a fold cannot refit this member's map: its whole-split map
                    p = t["calibrated"].to_numpy()
                oof_members.append(t.with_columns(pl.Series("calibrated", p, dtype=pl.Float64)))
        for c in cells:
            cd = c.candidate
            if cd.error is not None:
                continue
            try:
                fb = (
                    c.fit_boxes
                    if c.order == ORDERS[0]
                    else match_boxes(
                        fuse_tables(
                            oof_members,
                            fit,
                            head=head,
                            score=c.score,
                            fs=fs,
                            max_det=s.max_det,
                            column="calibrated",
                            cache=fused,
                        ),
                        fit.gt,
                        iou=s.iou,
                        loc_iou=s.loc_iou,
                    )
                )
                p = out_of_fold(fb, cd.method, cd.floor, folds, seed=s.seed)
            except (DegenerateFitError, InputError) as e:
                cd.error = str(e).splitlines()[0]
                continue
            use = usable_index(fb)
            p, y, img = p[use], fb["correct"].to_numpy()[use], fb["image_id"].to_numpy()[use]
            cd.cv_scores.append(kept_ece(p, y, threshold=thr, n_bins=s.ece_bins))
            if r == 0:
                cd.oof = (p, y, img)
    chosen = choose(
        [c.candidate for c in cells], orders=ORDERS, threshold=thr, n_bins=s.ece_bins, seed=s.seed
    )
    _log.info(
        "%s head: fusion chosen on the fit split's folds: %s, %s (%s)",
        head,
        chosen.order,
        chosen.score,
        chosen.verdict,
    )
    return next(c for c in cells if c.candidate is chosen)


def _fusion_row(cell: Cell, splits: tuple[Split, Split], s: Settings) -> FusionRow:
    """One cell of the fusion table: its calibrator (fitted on the fit split) scored on the eval
    split: mAP, kept-set ECE as fused and calibrated; and its CV figures when it was a candidate."""
    eb = cell.eval_boxes(splits[1], s)
    choice = cell.choice
    raw = BoxView.from_boxes(eb, geometry=False)
    thr = min(s.conf)
    scored = raw.scored(choice.calibrator)
    k0, k1 = raw.kept(thr), scored.kept(thr)
    e1 = metrics.ece(k1.conf, k1.correct, n_bins=s.ece_bins) if k1.n else None
    m = _fused_map(eb, splits[1], s)
    # the run's kept-set interval (OperatingPoints): every eval image drawn, the kept boxes of those drawn
    ci = (
        tuple(
            metrics.bootstrap_ci(
                functools.partial(kept_ece, threshold=thr, n_bins=s.ece_bins),
                scored.image_id,
                scored.conf,
                scored.correct,
                estimate=e1,
                n_boot=s.n_boot,
                seed=s.seed,
            )
        )
        if k1.n > 1
        else None
    )
    fit_view = BoxView.from_boxes(cell.fit_boxes, geometry=False)
    t = TemperatureScaler(kind="sigmoid").fit(fit_view.logit, fit_view.correct)
    cd = cell.candidate
    cv = (
        {}
        if cd is None
        else {
            "fit_map50_95": _finite(cd.fit_map50_95),
            "cv_kept_ece": _finite(cd.cv_mean),
            "cv_diff_se": _finite(cd.diff_se),
            "verdict": cd.verdict,
            "chosen": cd.verdict.startswith("chosen"),
        }
    )
    return FusionRow(
        order=cell.order,
        score=cell.score,
        method=choice.method,
        map50_95=m["map50_95"],
        map50=m["map50"],
        kept_fused=k0.n,
        kept_ece_fused=metrics.ece(k0.conf, k0.correct, n_bins=s.ece_bins) if k0.n else None,
        kept_calibrated=k1.n,
        kept_ece_calibrated=e1,
        kept_ece_calibrated_ci=ci,
        temperature=float(t.temperature_),
        **cv,
    )


def _fused_map(boxes: pl.DataFrame, split: Split, s: Settings) -> dict[str, float]:
    """COCO mAP of fused boxes by their ``conf`` (``--map-engine``: the engine the run's mAP check uses)."""

    return coco_maps(
        boxes,
        split.gt,
        split.sizes,
        [boxes["conf"].to_numpy()],
        max_dets=s.max_det,
        engine=s.map_engine,
    )[0]


def _finite(v: float) -> float | None:
    return float(v) if v is not None and np.isfinite(v) else None


@dataclass
class _HeadOut:
    result: HeadResult
    record: EnsembleHead
    fused: list[pl.DataFrame]
    members: list[pl.DataFrame]
    fusion_seconds: float


def ensemble_head(
    inputs: Inputs,
    splits: tuple[Split, Split],
    head: str,
    names: list[str],
    captured: list[list[pl.DataFrame]],
    s: Settings,
    fs: FusionSettings,
) -> _HeadOut:
    """One ensemble head: every member calibrated on its own, the fusion chosen (when the settings
    leave it to ``auto``), the fused boxes calibrated, the table."""
    fit, ev = splits
    figures, member_tables, cals = [], [], []
    for i, tabs in enumerate(captured):
        _log.info(
            "%s head, member %d/%d (%s): fit and evaluate on its own boxes",
            head,
            i + 1,
            len(captured),
            names[i],
        )
        hr, t = calibrate_head(inputs, (fit, ev), head, s, tabs)
        figures.append(_member_figures(names[i], hr))
        cals.append(hr.calibrator)
        member_tables.append(t)
    keys = fs.candidates()
    cells: dict[tuple[str, str], Cell] = {}
    fused = (
        Fusions()
    )  # each split's fusion of raw and of calibrated member scores, read by every score rule
    if len(keys) > 1:
        for order, score in keys:
            _log.info("%s head: fusion candidate %s with %s", head, order, score)
            cells[(order, score)] = _fusion_cell(
                member_tables, splits, head, order, score, fs, s, fused
            )
        cell = _choose_fusion(list(cells.values()), member_tables, cals, fit, head, fs, s)
    else:
        cell = _fusion_cell(member_tables, splits, head, *keys[0], fs, s, fused)
        cells[cell.key] = cell
    chosen, eb = cell.key, cell.eval_boxes(ev, s)
    fusion_seconds = cell.seconds  # both splits fused now
    _log.info(
        "%s head: %d + %d fused boxes (%s, %s); fit and evaluate",
        head,
        cell.fit_boxes.height,
        eb.height,
        *chosen,
    )
    # the chosen cell is labelled and its calibrator chosen already: evaluated as it is
    _log.info("%s head: %s", head, cell.choice.words())
    hr, tables = evaluate(inputs, (fit, ev), cell.fit_boxes, eb, cell.choice, s, labelled=True)
    hr = HeadResult(
        **{
            **{f.name: getattr(hr, f.name) for f in fields(HeadResult)},
            "ultralytics_val": ValCheck.not_run(
                ev.name,
                "an ensemble is not one checkpoint, so Ultralytics "
                "val cannot run it; mAP is COCO mAP (--map-engine) on "
                "the fused boxes",
            ),
        }
    )
    rows = []
    if fs.fusion_table or len(keys) > 1:
        for order in ORDERS:
            for score in SCORE_RULES:
                _log.info("%s head: fusion table, %s with %s", head, order, score)
                # a cell is let go once its row is made (the chosen one's boxes are in `tables`)
                c = cells.pop((order, score), None) or _fusion_cell(
                    member_tables, splits, head, order, score, fs, s, fused
                )
                rows.append(_fusion_row(c, splits, s))
    kept = (
        BoxView.from_boxes(tables[1], extra=("members",), geometry=False)
        .scored(cell.choice.calibrator, recorded=True)
        .kept(min(s.conf))
    )
    agree = {
        int(k): int(v)
        for k, v in zip(*np.unique(kept.extra["members"], return_counts=True), strict=True)
    }
    rec = EnsembleHead(
        members=figures,
        ensemble=_member_figures("ensemble", hr),
        agreement=agree,
        table=rows,
        member_calibrators=cals,
        order=chosen[0],
        score=chosen[1],
    )
    return _HeadOut(
        hr,
        rec,
        tables,
        [
            t.with_columns(pl.lit(i, dtype=pl.Int32).alias("member"))
            for i in range(len(member_tables))
            for t in member_tables[i]
        ],
        fusion_seconds,
    )


# ---------------------------------------------------------------------------------------- job
def _settings(
    settings: Settings | None, fusion: FusionSettings | None, options: dict[str, Any]
) -> tuple[Settings, FusionSettings]:
    fo = {k: options.pop(k) for k in list(options) if k in _FUSION_FIELDS}
    if fusion is not None and fo:
        raise InputError("pass either `fusion` or fusion keyword options, not both")
    fs = fusion or FusionSettings(**fo)
    for name in ("view", "snapshots", "weight"):
        v = getattr(fs, name)
        setattr(fs, name, tuple(v) if isinstance(v, (list, tuple)) else (v,))
    fs.validate()
    return Settings.of_call(settings, options, fusion_choice=True), fs


def _check_fit_images(fit: Split, s: Settings, fs: FusionSettings) -> None:
    """The choice of fusion (more than one candidate) and ``--method auto`` cross-validate over the
    fit split's images in ``cv_folds`` groups: fewer images is refused before the captures."""
    choices = [
        w
        for w, on in (
            ("the choice of fusion", len(fs.candidates()) > 1),
            ("--method auto's choice", s.method == "auto"),
        )
        if on
    ]
    if choices and len(fit.images) < s.cv_folds:
        raise InputError(
            f"the fit split `{fit.name}` has {len(fit.images)} images, fewer than the {s.cv_folds} "
            f"folds {' and '.join(choices)} cross-validate{'s' if len(choices) == 1 else ''} "
            "over (`cv_folds`): fit on more images "
            "(`limit`), or lower `cv_folds`"
        )


def _open_members(
    specs: Sequence[MemberSpec], ds: Any, data: Path, s: Settings
) -> tuple[list[Any], dict[str, list[str]], int]:
    """Every member's detector opened for the capture: the members, the plan (head -> each member's
    head), the capture threads (the device's lookup imports Ultralytics and torch)."""
    workers = capture_workers(s.device)
    members, plan = _load_members(specs, ds.names, data, s, workers)
    return members, plan, workers


def _members_boxes(
    specs: Sequence[MemberSpec],
    opened: tuple[list[Any], dict[str, list[str]], int],
    splits: tuple[Split, Split],
    s: Settings,
) -> tuple[
    dict[str, list[list[pl.DataFrame]]], dict[str, list[str]], list[MemberRecord], dict[str, float]
]:
    """Every member's boxes on both splits (:func:`capture_all`): head -> per member its two tables; the
    plan (head -> each member's head); the member records; the capture's cost."""
    members, plan, workers = opened
    captured, cost = capture_all(members, plan, splits, s, workers)
    member_recs = [
        MemberRecord(
            name=sp.name,
            path=str(sp.path.resolve()),
            kind=sp.kind,
            flip=sp.flip,
            scale=sp.scale,
            head=sp.head,
            fingerprint=m.fingerprint,
            imgsz=list(m.imgsz),
            heads={h: plan[h][i] for h in plan},
        )
        for i, (sp, m) in enumerate(zip(specs, members, strict=True))
    ]
    return captured, plan, member_recs, cost


def ensemble(
    models: Sequence[str | Path] = (),
    data: str | Path | None = None,
    *,
    out: str | Path = "det_calib_ensemble",
    settings: Settings | None = None,
    fusion: FusionSettings | None = None,
    **options: Any,
) -> EnsembleRun:
    """Fuse several detectors' boxes, calibrate the fused score, write ``calibrate``'s output folder.

    Args:
        models: Member checkpoints (``a.pt``, or ``a.pt:e2e`` to run that head); with one, give
            ``view`` (test-time views). None of them and no ``data``: the embedded demo ensemble
            (the shipped seed members when present, else the shipped model's test-time views).
        data: ``data.yaml``.
        out: Output folder (replaced whole when the run succeeds).
        settings: ``calibrate``'s :class:`~det_calib.job.settings.Settings` (or its fields as options).
        fusion: :class:`FusionSettings` (or its fields as options: ``view``, ``fusion_score``...).

    Raises:
        InputError: Fewer than two members, a missing file, a member whose class names are not
            the data's, a member without the head asked for, bad options (one line).
    """
    s, fs = _settings(settings, fusion, dict(options))
    if s.detections:
        raise InputError(
            "`detections` is one engine's file of boxes, and an ensemble runs its members: "
            "calibrate that file with det-calib calibrate --detections"
        )
    t_start = time.time()
    clock.begin()
    # the ensemble's stages (coarser than calibrate's): model load (the members resolved and opened, or
    # their boxes of an earlier run read, and the data read and checked), capture, fusion (each head's
    # members' fits and figures charge their own stages), outputs (the report's own stage)
    with clock.stage("model load"):
        specs, source, data = _resolve_members(list(models), data, fs)
        fs.validate(len(specs))
        ds = load_data_yaml(data)
        fit, ev = load_splits(ds, s)
        check_output_dir(Path(out))
        reused = reuse_members(s.boxes, specs, (fit, ev), s) if s.boxes else None
        opened = None if reused else _open_members(specs, ds, Path(data), s)
        _check_fit_images(fit, s, fs)  # the members' own refusals first, then before their captures
    captured, plan, member_recs, cost = reused or _members_boxes(specs, opened, (fit, ev), s)
    inputs = Inputs(
        model=specs[0].path,
        data=Path(data),
        yolo=None,
        ds=ds,
        heads=list(plan),
        imgsz=max(member_recs[0].imgsz),
    )
    with clock.stage(
        "fusion"
    ):  # the members' own fits and figures, and the fused boxes', charge their stages
        outs = {
            h: ensemble_head(
                inputs, (fit, ev), h, [m.name for m in member_recs], captured.pop(h), s, fs
            )
            for h in list(plan)
        }
    n_img = len(fit.images) + len(ev.images)
    cost["fusion"] = sum(o.fusion_seconds for o in outs.values()) / max(n_img, 1)
    record = EnsembleRecord(
        members=member_recs,
        heads={h: o.record for h, o in outs.items()},
        source=source,
        seconds_per_image=cost,
        fusion=FusionSettingsRecord(
            method="wbf",
            iou=fs.fusion_iou,
            score=fs.fusion_score,
            order=fs.fusion_order,
            skip=fs.fusion_skip,
            weights=fs.weights(len(specs)).tolist(),
            max_det=s.max_det,
        ),
    )
    result = RunResult(
        model=f"ensemble of {len(specs)}: " + ", ".join(m.name for m in member_recs),
        data=str(Path(data).resolve()),
        class_names=list(ds.names),
        heads=list(plan),
        settings=s.recorded(imgsz=inputs.imgsz, fit_split=fit.name, eval_split=ev.name),
        results={h: o.result for h, o in outs.items()},
        corrupt_images=sorted(set(fit.corrupt) | set(ev.corrupt)),
        det_calib_version=package_version(),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        gt_counts={sp.name: sp.gt_counts(len(ds.names)) for sp in (fit, ev)},
        sections={"ensemble": record},
    )
    boxes = validate_boxes(pl.concat([t for o in outs.values() for t in o.fused], how="vertical"))
    member_boxes = pl.concat([t for o in outs.values() for t in o.members], how="vertical")
    # calibrate's output folder (no calibrated.pt: an ensemble is not one checkpoint), plus members.parquet
    files = write_run_outputs(
        Path(out),
        result,
        boxes,
        inputs,
        (fit, ev),
        s,
        t_start,
        _fingerprints(result, (fit, ev), s),
        beside={_MEMBERS_FILE: member_boxes},
        more=ensemble_lines(result),
    )
    return EnsembleRun(out_dir=Path(out), result=result, boxes=boxes, files=files, source=source)


def _fingerprints(result: RunResult, splits: Sequence[Split], s: Settings) -> dict[str, Any]:
    """What ``boxes.parquet`` and ``members.parquet`` of an ensemble run record about their capture."""
    import hashlib

    rec = ensemble_of(result)
    joined = "|".join(f"{m.fingerprint}:{m.flip}:{m.scale}:{m.head}" for m in rec.members)
    return {
        "format": 1,
        "model": "ensemble:" + hashlib.sha256(joined.encode()).hexdigest(),
        "members": [
            {
                **m.spec_dict(),
                "fingerprint": m.fingerprint,
                "imgsz": m.imgsz,
                "heads": m.heads,
                "name": m.name,
            }
            for m in rec.members
        ],
        "splits": {
            sp.name: data_fingerprint(sp.images, names=sp.image_names(), coco_gt=s.coco_gt)
            for sp in splits
        },
        "heads": list(result.heads),
        "settings": s.capture_settings(result.settings.imgsz, batch=1),
    }
