"""Risk-controlled thresholds of a run folder (:func:`control_run`): one head's calibrated boxes and its
images' objects read, thresholds certified on the fit split for the risks the user chose (the method:
:mod:`det_calib.thresholds.risk_control`), checked on the eval split and written into ``thresholds.json``
under ``heads.<head>.risk_control``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.errors import InputError
from det_calib.io import write_json
from det_calib.record.run_result import RunResult
from det_calib.thresholds.criteria import Fallback
from det_calib.thresholds.grid_counts import check_grid
from det_calib.thresholds.risk_control import (
    ImageCounts,
    RiskTargets,
    control,
    figures,
    image_counts,
)
from det_calib.thresholds.run_head import load_head, tune_run
from det_calib.thresholds.thresholds_file import THRESHOLDS_FILE, not_certified, read_thresholds

__all__ = ["SplitObjects", "control_run"]


@dataclass(frozen=True)
class SplitObjects:
    """The objects of every image of a split (crowd regions left out).

    Attributes:
        n_images: Images of the split (``image_id`` runs over ``0 .. n_images - 1``).
        image_id: (k,) image of each object.
        cls: (k,) class of each object.
    """

    n_images: int
    image_id: np.ndarray
    cls: np.ndarray

    def per_image(self, c: int | None = None) -> np.ndarray:
        """(n_images,) objects per image, of class ``c`` (None: all)."""
        sel = self.image_id if c is None else self.image_id[self.cls == c]
        return np.bincount(sel.astype(np.int64), minlength=self.n_images).astype(np.float64)


def _split_objects(
    data: str | Path | None,
    split: str,
    *,
    coco_gt: str | Path | None = None,
    limit: int | None = None,
) -> SplitObjects:
    """Read a split's objects from the run's dataset (``data.yaml``), in the order the box table's
    ``image_id`` indexes."""
    if not data or not Path(data).is_file():
        raise InputError(
            f"the run's dataset `data` ({data or None}) is not readable: per-image risks need "
            "each image's objects"
        )
    sp = load_split(load_data_yaml(data), split, coco_gt=coco_gt, limit=limit)
    gt = sp.gt.filter(~pl.col("crowd"))
    return SplitObjects(len(sp.images), gt["image_id"].to_numpy(), gt["cls"].to_numpy())


def _counts(
    boxes: pl.DataFrame, score: np.ndarray, objects: SplitObjects, grid: np.ndarray, c: int | None
) -> ImageCounts:
    sel = np.ones(boxes.height, dtype=bool) if c is None else boxes["cls"].to_numpy() == c
    return image_counts(
        score[sel],
        boxes["correct"].to_numpy()[sel],
        boxes["image_id"].to_numpy()[sel],
        objects.per_image(c),
        grid=grid,
    )


def _control_boxes(
    fit: pl.DataFrame,
    fit_score: np.ndarray,
    fit_objects: SplitObjects,
    targets: RiskTargets,
    *,
    class_names: Sequence[str] = (),
    per_class: bool = False,
    fallback: Fallback = "global",
    eval_boxes: pl.DataFrame | None = None,
    eval_score: np.ndarray | None = None,
    eval_objects: SplitObjects | None = None,
    grid: np.ndarray | None = None,
) -> dict[str, Any]:
    """Certify thresholds on one head's fit boxes (columns ``image_id``, ``cls``, ``correct``; crowd-ignored
    boxes dropped) for ``targets``; figures on the eval split at the chosen thresholds.

    Returns:
        ``{"params", "global", "per_class"}``: each row as :func:`~det_calib.thresholds.risk_control.control`
        returns it, with ``eval`` figures, and per class ``cls``, ``name`` and ``fallback``.
    """
    grid = check_grid(grid)
    g = _row(fit, fit_score, fit_objects, targets, grid, None, eval_boxes, eval_score, eval_objects)
    rows = []
    if per_class:
        classes = sorted(set(fit["cls"].to_list()) | set(np.unique(fit_objects.cls).tolist()))
        for c in classes:
            r = _row(
                fit,
                fit_score,
                fit_objects,
                targets,
                grid,
                int(c),
                eval_boxes,
                eval_score,
                eval_objects,
            )
            r = {
                "cls": int(c),
                "name": class_names[c] if c < len(class_names) else str(c),
                **r,
                "fallback": None,
            }
            if not r["certified"]:
                r["fallback"] = "global" if (fallback == "global" and g["certified"]) else "drop"
                r["threshold"] = g["threshold"] if r["fallback"] == "global" else 1.0
                r.update(
                    _figures(
                        fit,
                        fit_score,
                        fit_objects,
                        grid,
                        int(c),
                        eval_boxes,
                        eval_score,
                        eval_objects,
                        r["threshold"],
                    )
                )
            rows.append(r)
    return {"params": targets.params(), "global": g, "per_class": rows}


def _row(
    fit, fit_score, fit_objects, targets, grid, c, eval_boxes, eval_score, eval_objects
) -> dict[str, Any]:
    r = control(_counts(fit, fit_score, fit_objects, grid, c), targets)
    if eval_boxes is not None and eval_objects is not None:
        r["eval"] = figures(_counts(eval_boxes, eval_score, eval_objects, grid, c), r["threshold"])
    return r


def _figures(
    fit, fit_score, fit_objects, grid, c, eval_boxes, eval_score, eval_objects, thr
) -> dict[str, Any]:
    """The fit (and eval) figures of class ``c`` at ``thr`` (a fallback's threshold)."""
    out = {"fit": figures(_counts(fit, fit_score, fit_objects, grid, c), thr)}
    if eval_boxes is not None and eval_objects is not None:
        out["eval"] = figures(_counts(eval_boxes, eval_score, eval_objects, grid, c), thr)
    return out


def control_run(
    run_dir: str | Path,
    targets: RiskTargets,
    *,
    head: str = "nms",
    per_class: bool = False,
    fallback: Fallback = "global",
    grid: np.ndarray | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """Risk-controlled thresholds of one head of a run, written into its ``thresholds.json``.

    Reads the head as :func:`~det_calib.thresholds.run_head.load_head` does (the run's calibrated
    scores) and each image's objects from the run's dataset. The thresholds are searched on the grid at
    or above the calibrated capture floor. With ``fp_cap`` left at 300 it becomes the run's ``max_det``.

    Raises:
        InputError: Bad targets, unreadable run or dataset, or no threshold certified globally ("a
            target no threshold can reach on the calibration images").
    """
    run_dir = Path(run_dir)
    rh = load_head(run_dir, head=head, count_gt=False)
    run = RunResult.read(run_dir / "calibration.json")
    max_det = run.settings.max_det
    if targets.fp_cap == 300.0 and isinstance(max_det, int) and max_det > 0:
        targets = RiskTargets(**{**targets.__dict__, "fp_cap": float(max_det)})
    g = check_grid(grid)
    g = g[g >= rh.score_floor]
    limit = _images_limit(run, head)
    fit_obj = _split_objects(run.data, rh.fit_split, coco_gt=run.settings.coco_gt, limit=limit[0])
    ev_obj = (
        _split_objects(run.data, rh.eval_split, coco_gt=run.settings.coco_gt, limit=limit[1])
        if rh.eval is not None
        else None
    )
    out = _control_boxes(
        rh.fit,
        rh.fit_score,
        fit_obj,
        targets,
        class_names=rh.class_names,
        per_class=per_class,
        fallback=fallback,
        eval_boxes=rh.eval,
        eval_score=rh.eval_score,
        eval_objects=ev_obj,
        grid=g,
    )
    if not out["global"]["certified"]:
        raise InputError(_not_reached(out["global"], targets, fit_obj.n_images, rh.fit_split))
    path = run_dir / THRESHOLDS_FILE
    doc = read_thresholds(path) if path.is_file() else tune_run(run_dir, head=head, write=False)
    if head not in doc["heads"]:
        doc = tune_run(run_dir, head=head, write=False)
    doc["heads"][head]["risk_control"] = out
    if write:
        write_json(path, doc)
    return doc


def _images_limit(run: Any, head: str) -> tuple[int | None, int | None]:
    """The fit and eval image counts the run records (its ``--limit``), else None."""
    h = run.head(head)

    def n(part: Any) -> int | None:
        v = getattr(part, "images", None)
        return int(v) if isinstance(v, int) and v > 0 else None

    return n(h.fit), n(h.eval)


def _not_reached(g: dict[str, Any], t: RiskTargets, n_images: int, split: str) -> str:
    what = (
        ", ".join(f"{k} ({v.replace('_', ' ')})" for k, v in g["flags"].items() if v)
        or "the targets jointly"
    )
    kind = "at delta " + f"{t.delta:g}" if t.guarantee == "probability" else "in expectation"
    hint = (
        f"; fp_cap is {t.fp_cap:g} (pass --fp-cap if fewer false positives per image can be "
        "assumed)"
        if "fp" in g["flags"] and g["flags"]["fp"]
        else ""
    )
    return f"no threshold certifies {what} {kind} on the {n_images} images of `{split}`{hint}"


def risk_lines(doc: dict[str, Any], *, head: str = "nms") -> list[str]:
    """A short text table of one head's risk-controlled thresholds (what the CLI prints)."""
    rc = doc["heads"][head]["risk_control"]
    p = rc["params"]
    prec = "precision per image >=" if p.get("precision_unit") == "image" else "precision >="
    asked = ", ".join(
        f"{k} {v:g}"
        for k, v in (
            (prec, p["target_precision"]),
            ("recall >=", p["target_recall"]),
            ("FP/image <=", p["max_fp_per_image"]),
        )
        if v is not None
    )
    kind = (
        f"with probability >= {1 - p['delta']:g} over the fit images"
        if p["guarantee"] == "probability"
        else "in expectation over fit and new images (conformal risk control)"
        + (
            f"; precision with probability >= {1 - p['delta']:g} over the fit images (it has no "
            "in-expectation form)"
            if p["target_precision"] is not None
            else ""
        )
    )
    per_image = p.get("precision_unit") == "image"
    pk = "precision_per_image" if per_image else "precision"
    splits = doc.get("splits", {})
    lines = [
        f"head {head}: {asked}, {kind}",
        f"{'':<16} {'':>9} {'plug-in':>9}  {'on ' + str(splits.get('fit', 'fit')):^32}  "
        f"{'on ' + str(splits.get('eval', 'eval')):^32}".rstrip(),
        f"{'class':<16} {'threshold':>9} {'threshold':>9}  "
        + 2 * f"{'P/image' if per_image else 'P':>10} {'recall/img':>10} {'FP/img':>10}  "
        + "note",
    ]

    def f(x: Any, w: int) -> str:
        return f"{'n/a':>{w}}" if x is None else f"{x:{w}.3f}"

    for r in [{"name": "(global)", **rc["global"]}, *rc["per_class"]]:
        fit, ev = r["fit"], r.get("eval") or {}
        note = "" if r["certified"] else not_certified(r)
        lines.append(
            f"{r['name'][:16]:<16} {r['threshold']:9.3f} {f(r['plug_in_threshold'], 9)}  "
            f"{f(fit[pk], 10)} {f(fit['recall_per_image'], 10)} {f(fit['fp_per_image'], 10)}  "
            f"{f(ev.get(pk), 10)} {f(ev.get('recall_per_image'), 10)} "
            f"{f(ev.get('fp_per_image'), 10)}  {note}".rstrip()
        )
    lines.append(
        "plug-in: the threshold the fit split's own figures choose, without the guarantee; "
        "recall/img and FP/img: means over the images"
        + ("; P/image: the mean precision of the images that keep a box" if per_image else "")
    )
    g = rc["global"]["threshold"]
    if rc["per_class"]:
        low = min(r["threshold"] for r in rc["per_class"])
        lines.append(
            "deploy, each class at its own threshold: thr = class_thresholds(doc, head="
            f"'{head}', criterion='risk_control'); det_calib.filter_results(YOLO('calibrated.pt')"
            ".predict(src, conf=min(thr.values())), thr)"
            + (
                f" (the lowest is {low:.3f}: predicting at the global {g:.3f} would drop the "
                "boxes of the classes certified below it)"
                if low < g
                else ""
            )
        )
    else:
        lines.append(
            f"deploy: YOLO('calibrated.pt').predict(src, conf={g:.3f}) keeps the boxes whose conf "
            "is above the certified threshold"
        )
    return lines
