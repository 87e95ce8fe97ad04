"""Deploying an ensemble run: load it, predict on new images, get the fused, calibrated boxes.

Plain Ultralytics cannot load an ensemble as one checkpoint (``YOLO(...)`` loads one network;
its fusion and the calibrator of the fused score live outside it), so det_calib does it:

>>> from det_calib.ensemble import load_ensemble                        # doctest: +SKIP
>>> ens = load_ensemble("det_calib_ensemble")                           # doctest: +SKIP
>>> results = ens.predict(["img1.png", "img2.png"], conf=0.25)          # doctest: +SKIP
>>> results[0].boxes.conf                                               # doctest: +SKIP

:meth:`EnsembleModel.predict` returns Ultralytics ``Results`` (``boxes.xyxy``, ``boxes.conf`` the
calibrated fused conf, ``boxes.cls``), :meth:`EnsembleModel.predict_json` the same as plain
dicts. Each image is run through every member exactly as the run captured it, fused with the
run's fusion settings and scored by the run's calibrator of the fused score, so on the run's own
images the boxes are the run's ``boxes.parquet`` (``calibrated`` column; tested).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from det_calib.calibrators.base import LogitCalibrator
from det_calib.data.box_view import BoxView, kept_mask, with_calibrated
from det_calib.ensemble.ensemble_job import (
    EPS,
    ORDERS,
    FusionSettings,
    capture_all,
    capture_workers,
    fuse_tables,
)
from det_calib.ensemble.ensemble_record import ensemble_of
from det_calib.ensemble.fusion import weighted_boxes_fusion
from det_calib.ensemble.members import MEMBER_LOADERS, MemberSpec
from det_calib.errors import InputError
from det_calib.record.calibrator_record import calibrator_of
from det_calib.record.run_result import RunResult
from det_calib.validation import check_choice


@dataclass
class EnsembleModel:
    """An ensemble run ready to predict: the members loaded, the fusion and calibrators of the run."""

    run_dir: Path
    result: Any
    members: list[Any]
    calibrators: dict[str, LogitCalibrator]
    member_calibrators: dict[str, list[Any]]
    workers: int = 1

    @property
    def heads(self) -> list[str]:
        return list(self.result.heads)

    @property
    def names(self) -> dict[int, str]:
        return dict(enumerate(self.result.class_names))

    def _head(self, head: str | None) -> str:
        h = head or self.heads[0]
        return check_choice(h, self.heads, "head")

    def fuse_image(self, im0: np.ndarray, *, head: str | None = None) -> dict[str, np.ndarray]:
        """The fused boxes of one BGR image: ``xyxy``, ``conf`` (fused raw score), ``calibrated``,
        ``cls``, ``members`` (members present), best calibrated first, at most ``max_det``."""

        h = self._head(head)
        rec = ensemble_of(self.result)
        fz = rec.fusion
        fusion_order, rule = rec.fusion_of(h)
        xy, sc, cl, mem = [], [], [], []
        for i, (m, mr) in enumerate(zip(self.members, rec.members, strict=True)):
            b, conf, c, z = m.predict(im0, 0)[mr.heads[h]]
            if fusion_order != "fuse-then-calibrate":
                conf = (
                    BoxView(
                        logit=z.astype(np.float64),
                        conf=conf.astype(np.float64),
                        correct=None,
                        cls=c,
                        image_id=np.zeros(len(c), np.int64),
                    )
                    .scored(self.member_calibrators[h][i])
                    .conf
                )
            xy.append(b)
            sc.append(np.asarray(conf, np.float64))
            cl.append(c)
            mem.append(np.full(len(c), i))
        f = weighted_boxes_fusion(
            np.concatenate(xy),
            np.concatenate(sc),
            np.concatenate(cl),
            groups=None,
            members=np.concatenate(mem),
            n_members=len(self.members),
            weights=np.asarray(fz.weights),
            iou_thr=fz.iou,
            skip_box_thr=fz.skip,
        )
        s = np.clip(f.scores(rule), EPS, 1 - EPS)
        order = np.lexsort((f.boxes[:, 1], f.boxes[:, 0], f.label, -s))[: fz.max_det]
        s, lab = s[order], f.label[order].astype(np.int64)
        z = np.log(s) - np.log1p(-s)
        cal = (
            BoxView(logit=z, conf=s, correct=None, cls=lab, image_id=np.zeros(len(lab), np.int64))
            .scored(self.calibrators[h])
            .conf
        )
        return {
            "xyxy": f.boxes[order],
            "conf": s,
            "calibrated": cal,
            "cls": lab,
            "members": f.stats["members"][order].astype(np.int64),
        }

    def predict(
        self,
        source: str | Path | Sequence[str | Path],
        *,
        head: str | None = None,
        conf: float = 0.25,
    ) -> list[Any]:
        """Ultralytics ``Results`` of each image: the fused boxes whose calibrated conf is above ``conf``.

        Args:
            source: An image path, a folder of images, or a list of paths.
            head: The ensemble head (default the run's first).
            conf: Keep boxes with calibrated conf above this (0: every fused box).
        """
        import torch
        from ultralytics.engine.results import Results

        out = []
        for path, im0 in self._images(source):
            f = self.fuse_image(im0, head=head)
            keep = kept_mask(f["calibrated"], conf)
            data = np.column_stack([f["xyxy"][keep], f["calibrated"][keep], f["cls"][keep]]).astype(
                np.float32
            )
            out.append(
                Results(
                    orig_img=im0, path=str(path), names=self.names, boxes=torch.from_numpy(data)
                )
            )
        return out

    def predict_json(
        self,
        source: str | Path | Sequence[str | Path],
        *,
        head: str | None = None,
        conf: float = 0.25,
    ) -> list[dict[str, Any]]:
        """The same boxes as :meth:`predict`, as plain dicts (``image``, ``boxes``: ``xyxy``, ``conf``
        calibrated, ``raw`` fused score, ``cls``, ``name``, ``members``), in float64."""
        out = []
        for path, im0 in self._images(source):
            f = self.fuse_image(im0, head=head)
            keep = np.flatnonzero(kept_mask(f["calibrated"], conf))
            out.append(
                {
                    "image": str(path),
                    "boxes": [
                        {
                            "xyxy": [float(v) for v in f["xyxy"][i]],
                            "conf": float(f["calibrated"][i]),
                            "raw": float(f["conf"][i]),
                            "cls": int(f["cls"][i]),
                            "name": self.names[int(f["cls"][i])],
                            "members": int(f["members"][i]),
                        }
                        for i in keep
                    ],
                }
            )
        return out

    def _images(
        self, source: str | Path | Sequence[str | Path]
    ) -> Iterable[tuple[Path, np.ndarray]]:
        import cv2
        from ultralytics.utils.patches import imread

        if isinstance(source, (str, Path)):
            p = Path(source)
            paths = (
                sorted(
                    q for q in p.rglob("*") if q.suffix.lower() in (".jpg", ".jpeg", ".png", ".bmp")
                )
                if p.is_dir()
                else [p]
            )
        else:
            paths = [Path(q) for q in source]
        if not paths:
            raise InputError(f"no images in {source}")
        for p in paths:
            im0 = imread(str(p), cv2.IMREAD_COLOR)
            if im0 is None:
                raise InputError(f"cannot read image {p}")
            yield p, im0

    def fused_boxes(self, split: Any, s: Any, heads: Sequence[str] | None = None) -> dict[str, Any]:
        """Head -> the fused raw boxes of a split (a capture table plus ``members``), as the run made
        its own: every member captured (each image decoded once for all), each member's calibrator
        applied first under ``calibrate-then-fuse``, fused with the run's settings; ``calibrated``
        is left to the caller (the fused score's calibrator, :attr:`calibrators`). The members'
        capture charges the clock's ``capture`` stage
        (:func:`~det_calib.ensemble.ensemble_job.capture_all`).

        Args:
            split: A :class:`~det_calib.data.ground_truth.Split` (its images, in order).
            s: Capture settings (``progress``; the rest are the run's).
            heads: Ensemble heads (default every head of the run).
        """

        rec = ensemble_of(self.result)
        fz = rec.fusion
        use = list(heads) if heads else self.heads
        plan = {h: [mr.heads[h] for mr in rec.members] for h in use}
        captured, _ = capture_all(self.members, plan, [split], s, self.workers)
        fs = FusionSettings(fusion_iou=fz.iou, fusion_skip=fz.skip, weight=tuple(fz.weights))
        out = {}
        for h in use:
            order, rule = rec.fusion_of(h)
            tabs = [m[0] for m in captured[h]]
            column = "conf"
            if order != ORDERS[0]:
                tabs = [
                    with_calibrated(t, c)
                    for t, c in zip(tabs, self.member_calibrators[h], strict=True)
                ]
                column = "calibrated"
            out[h] = fuse_tables(
                tabs, split, head=h, score=rule, fs=fs, max_det=fz.max_det, column=column
            )
        return out


def _open_run_members(result: Any, *, device: str | None = None, workers: int = 1) -> list[Any]:
    """The members of an ensemble run (its ``RunResult``), opened from the paths it recorded with
    the heads, view and input size it ran, each checked against its recorded fingerprint.

    Raises:
        InputError: A member file missing, of a kind no loader reads, or changed since the run.
    """

    st = result.settings
    members = []
    for mr in ensemble_of(result).members:
        spec = MemberSpec(
            Path(mr.path), mr.kind, mr.flip, 1.0, mr.head
        )  # imgsz as recorded (scale applied)
        if not spec.path.exists():
            raise InputError(f"member {mr.path} of the ensemble run is missing")
        loader = MEMBER_LOADERS.get(spec.path.suffix)
        if loader is None:
            raise InputError(f"member {mr.path}: no loader for `{spec.path.suffix}` files")
        heads = sorted(set(mr.heads.values()), key=["nms", "e2e"].index)
        m = loader(
            spec,
            heads,
            conf=st.conf_floor,
            iou=st.nms_iou,
            max_det=st.max_det,
            imgsz=max(mr.imgsz) if mr.imgsz else None,
            device=device,
            workers=workers,
        )
        if m.fingerprint != mr.fingerprint:
            raise InputError(
                f"member {mr.path} changed since the run ({m.fingerprint[:15]}..., the run "
                "captured "
                f"{mr.fingerprint[:15]}...)"
            )
        members.append(m)
    return members


def load_ensemble(
    run_dir: str | Path, *, device: str | None = None, workers: int | None = 1
) -> EnsembleModel:
    """Load an ensemble run folder (``det-calib ensemble --out RUN``) for prediction.

    The members are opened from the paths the run recorded, each checked against its recorded
    fingerprint (:func:`_open_run_members`); the fused score's calibrator and (for
    ``calibrate-then-fuse``) each member's are the run's.

    Args:
        run_dir: The ensemble run folder.
        device: Torch device of the members.
        workers: Capture threads of :meth:`EnsembleModel.fused_boxes` (``predict`` runs one image at a
            time); None: as many as ``calibrate`` runs on ``device``.

    Raises:
        InputError: Not an ensemble run, a member file missing or changed since the run.
    """

    run_dir = Path(run_dir)
    result = RunResult.read(run_dir / "calibration.json")
    rec = ensemble_of(result)
    if rec is None:
        raise InputError(
            f"{run_dir} is not an ensemble run (its calibration.json has no `ensemble`)"
        )
    if workers is None:
        workers = capture_workers(device)
    members = _open_run_members(result, device=device, workers=workers)
    cals = {h: calibrator_of(result.head(h).calibrator) for h in result.heads}
    member_cals = {
        h: [calibrator_of(c) for c in rec.heads[h].member_calibrators] for h in result.heads
    }
    return EnsembleModel(run_dir, result, members, cals, member_cals, workers)
