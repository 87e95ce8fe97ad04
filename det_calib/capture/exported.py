"""Exported detectors (ONNX, OpenVINO): read them, and capture their boxes and scores.

An export has no raw logits to read: its graph ends in the class probabilities
``sigmoid(z)`` (float32), so the logit of a box is recovered from the engine's own probability,
``z = log(p) - log(1 - p)`` in float64. That is exact to the engine's float32 rounding of
``p``, which limits it at the top: the spacing of float32 just below 1 is ``2**-24``, so the
recovered logit is off by more than 1e-3 from ``z ~ 9.7`` (``p > 0.99994``) and the engine's
probability is exactly 1.0 from ``z ~ 16.64``. Such a box gets the logit of the largest float32
below 1 (:data:`_LOGIT_CEILING`, 16.636): a lower bound of its true logit, and the same clip
the calibrated export (:mod:`det_calib.deploy.calibrated_export`) applies in its graph, so a box's calibrated
score is the same whether det_calib or the engine computes it. Those boxes all sit in the
top ECE bin; a capture that had any logs how many.

:func:`load_export` reads an export's metadata (format, the head it carries, ``imgsz``, class
names, precision) without running it; :class:`ExportCapturer` runs it through Ultralytics' own
predictor of its task (``DetectionPredictor``, ``SegmentationPredictor``, ``PosePredictor``,
``OBBPredictor``: ``AutoBackend`` loading, letterbox, NMS or top-k rows) and returns the same box
table as :class:`det_calib.capture.predictor.Capturer` (a pose or OBB model's ``kpts`` / ``xywhr``
column included), so matching, fitting, selection, metrics, thresholds and the report work unchanged.
:mod:`det_calib.deploy.export_layout` says where an export's output holds the class scores.
:func:`make_capturer` picks the right one for a model path; an ensemble member that is an export opens
an :class:`ExportCapturer` and calls its :meth:`ExportCapturer.predict_image` per image
(``{head: (xyxy, conf, cls, logit)}``).

Which head an export carries: Ultralytics 8.4 exports the one-to-many branch with raw anchors
(``end2end: false`` in the metadata; NMS runs in Ultralytics after the engine) unless exported
with ``nms=False`` (the one-to-one NMS-free branch, its top-k rows in the graph: head ``e2e``)
or ``nms=True`` (the one-to-many branch with NMS in the graph: head ``nms``, rows).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from det_calib.capture.family_registry import family_of, family_with_head
from det_calib.capture.image_source import progress_bar, read_ahead
from det_calib.capture.options import CaptureOptions
from det_calib.capture.predictor import (
    Capturer,
    ImageBoxes,
    check_task,
    kept_logits,
    model_capturer,
    nms_max_time_img,
)
from det_calib.errors import InputError, first_line
from det_calib.tasks import get_task

if TYPE_CHECKING:  # pragma: no cover
    from det_calib.capture.predictor import ImageBoxes

_log = logging.getLogger(__name__)

_RUNTIMES = {
    "onnx": (("onnxruntime", "onnx"), "onnx"),
    "openvino": (("openvino",), "openvino"),
    "litert": (("ai_edge_litert",), "litert"),
    "ncnn": (("ncnn",), "ncnn"),
    "tensorrt": (("tensorrt",), "tensorrt"),
}
"""Export format -> (the Python modules running it, and writing it where det_calib edits its graph; the det_calib
extra that installs them)."""

_FORMAT_NAMES = {
    "onnx": "ONNX (.onnx)",
    "openvino": "OpenVINO (*_openvino_model/)",
    "litert": "LiteRT (.tflite)",
    "ncnn": "NCNN (*_ncnn_model/)",
    "tensorrt": "TensorRT (.engine)",
}
"""Each export format det_calib reads, as the messages name it."""

P_CEILING = float(np.nextafter(np.float32(1.0), np.float32(0.0)))
"""The largest float32 below 1 (``1 - 2**-24``): an engine probability of 1.0 is read as this."""
P_FLOOR = float(np.finfo(np.float32).tiny)
"""The smallest normal float32: an engine probability of 0 (only in ``all_logits``) is read as this."""
_LOGIT_CEILING = math.log(P_CEILING) - math.log1p(-P_CEILING)
"""The logit given to a box the engine scores exactly 1.0 (16.6355, a lower bound of its true logit)."""


def export_format(model: Any) -> str | None:
    """The format of the export at path ``model`` (``"onnx"``, ``"openvino"``, ``"litert"``, ``"ncnn"``,
    ``"tensorrt"``), else None.

    >>> export_format("best.onnx"), export_format("best_openvino_model"), export_format("best.pt")
    ('onnx', 'openvino', None)
    >>> export_format("best_int8.tflite"), export_format("best_ncnn_model"), export_format("best.engine")
    ('litert', 'ncnn', 'tensorrt')
    """
    if not isinstance(model, (str, Path)):
        return None
    p = Path(model)
    suffix = p.suffix.lower()
    by_suffix = {
        ".onnx": "onnx",
        ".tflite": "litert",
        ".engine": "tensorrt",
        ".xml": "openvino",
        ".param": "ncnn",
    }
    if suffix in by_suffix:
        return by_suffix[suffix]
    if p.name.endswith("_openvino_model") or (p.is_dir() and any(p.glob("*.xml"))):
        return "openvino"
    if p.name.endswith("_ncnn_model") or (p.is_dir() and any(p.glob("*.param"))):
        return "ncnn"
    return None


def is_export(model: Any) -> bool:
    """Whether ``model`` names an exported detector det_calib can run (:func:`export_format`)."""
    return export_format(model) is not None


def _require_runtime(fmt: str) -> None:
    """Raise a one-line :class:`InputError` naming the extra to install when ``fmt``'s runtime is missing."""
    modules, extra = _RUNTIMES[fmt]
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a module blocked or broken in this environment
            found = False
        if not found:
            raise InputError(
                f"a {fmt} export needs `{module}`, which is not installed: "
                f"pip install 'det_calib[{extra}]'"
            )


@dataclass(frozen=True)
class ExportInfo:
    """What an export's Ultralytics metadata says about it.

    Attributes:
        path: The export (``.onnx``, ``.tflite`` or ``.engine`` file; ``*_openvino_model`` or ``*_ncnn_model``
            folder).
        format: Its format (``"onnx"``, ``"openvino"``, ``"litert"``, ``"ncnn"``, ``"tensorrt"``).
        head: The head it carries: ``"nms"`` (one-to-many) or ``"e2e"`` (one-to-one).
        rows: Its output is ``(B, max_det, 6)`` rows (top-k or NMS in the graph) rather than
            ``(B, 4 + nc, anchors)`` per-anchor class scores.
        imgsz: ``(h, w)`` it was exported at.
        names: Class names, id order.
        precision: ``"fp32"``, ``"fp16"`` or ``"int8"`` (from the export arguments).
        dynamic: Exported with dynamic input shapes.
        batch: Its batch size.
        task: ``"detect"``; ``"segment"``, ``"pose"`` or ``"obb"``: the task's extra channels follow the class
            scores (:mod:`det_calib.deploy.export_layout`; a segment model's prototype masks are a second output).
        payload_shape: The shape of each box's payload (a pose model's ``(K, ndim)``, its metadata's
            ``kpt_shape``), else None.
    """

    path: Path
    format: str
    head: str
    rows: bool
    imgsz: tuple[int, int]
    names: list[str]
    precision: str
    dynamic: bool
    batch: int
    task: str = "detect"
    payload_shape: tuple[int, int] | None = None

    def require_runtime(self) -> None:
        """Raise a one-line :class:`InputError` naming the extra to install when the runtime of the
        export's format (what runs it, and writes it where det_calib edits its graph) is missing."""
        _require_runtime(self.format)

    @property
    def engine(self) -> str:
        """A label such as ``"openvino int8"``."""
        return f"{self.format} {self.precision}"

    @property
    def format_name(self) -> str:
        """The format as the messages name it, such as ``"LiteRT (.tflite)"``."""
        return _FORMAT_NAMES[self.format]

    @property
    def model_file(self) -> Path:
        """The file holding the graph (the export itself, or the ``.xml`` / ``.param`` of an OpenVINO / NCNN folder)."""
        if self.path.is_file():
            return self.path
        return next(iter(sorted(self.path.glob("*.param" if self.format == "ncnn" else "*.xml"))))


def read_export(model: str | Path, *, tasks: Sequence[str] | None = None) -> ExportInfo:
    """Read an export's metadata (no runtime needed).

    Args:
        model: The export.
        tasks: The tasks accepted (default: the registered tasks, :data:`det_calib.tasks.TASKS`; the capture and
            the calibrated export pass none: every registered task).

    Raises:
        InputError: Not found, damaged (a truncated ``.tflite``, an NCNN folder without its ``.bin``), not
            an Ultralytics export (no metadata), or of a task det_calib does not calibrate.
    """
    from ultralytics.nn.backends.base import BaseBackend

    fmt = export_format(model)
    path = Path(model)
    if fmt is None:
        raise InputError(
            f"model {path} is not an export det_calib reads: {', '.join(_FORMAT_NAMES.values())}"
        )
    if not path.exists():
        raise InputError(f"model not found: {path}")
    _check_files(path, fmt)
    meta = BaseBackend.read_metadata(path)
    if not meta:
        if fmt in (
            "litert",
            "tensorrt",
        ):  # the metadata sits in the file itself (a zip entry at its end, a header)
            raise InputError(
                f"cannot read the {_FORMAT_NAMES[fmt]} export {path}: no Ultralytics metadata in it "
                "(truncated or damaged, or not made by Ultralytics' `export`)"
            )
        raise InputError(
            f"{path} has no Ultralytics metadata: det_calib reads exports made by Ultralytics' "
            "`export`"
        )
    return _info_from_metadata(path, fmt, meta, tasks)


def _check_files(path: Path, fmt: str) -> None:
    """One line for an export whose files are missing or cut short (what a runtime would load silently or crash on)."""
    if fmt == "openvino" and path.is_dir() and not any(path.glob("*.xml")):
        raise InputError(f"{path} holds no OpenVINO model (.xml)")
    if fmt == "ncnn":
        params = [path] if path.is_file() else sorted(path.glob("*.param"))
        if not params:
            raise InputError(f"{path} holds no NCNN model (.param)")
        weights = params[0].with_suffix(".bin")
        if not weights.is_file() or weights.stat().st_size == 0:
            raise InputError(
                f"the NCNN export {path} has {params[0].name} but no weights {weights.name} beside "
                "it"
            )
    if fmt == "litert":
        if not path.is_file():
            raise InputError(f"{path} is not a file: a LiteRT export is one .tflite file")
        with open(path, "rb") as f:
            head = f.read(8)
        if head[4:8] != b"TFL3":  # the flatbuffer file identifier of every .tflite model
            raise InputError(f"{path} is not a LiteRT (.tflite) model: no TFL3 identifier")


def _literal(v: Any) -> Any:
    import ast

    return ast.literal_eval(v) if isinstance(v, str) else v


def _info_from_metadata(
    path: Path, fmt: str, meta: dict, tasks: Sequence[str] | None = None
) -> ExportInfo:

    task = meta.get("task", "detect")
    check_task(task, tasks)
    shape = _literal(get_task(task).metadata_shape(meta))
    args = _literal(meta.get("args")) or {}
    nms_arg = args.get("nms")
    end2end = bool(_literal(meta.get("end2end", False))) or bool(nms_arg)
    head = "e2e" if end2end and nms_arg is not True else "nms"
    family = family_of(str(meta.get("head", "")))
    if (
        family is not None
    ):  # a model family's export (RT-DETR): its head, rows of (box, score, class) already
        head, end2end = family.heads[0], True
    names = _literal(meta.get("names")) or {}
    imgsz = _literal(meta.get("imgsz")) or [640, 640]
    imgsz = (int(imgsz), int(imgsz)) if isinstance(imgsz, int) else (int(imgsz[0]), int(imgsz[-1]))
    precision = (
        "int8"
        if args.get("int8") or args.get("quantize") == 8
        else ("fp16" if args.get("half") or args.get("quantize") == 16 else "fp32")
    )
    return ExportInfo(
        path=path,
        format=fmt,
        head=head,
        rows=end2end,
        imgsz=imgsz,
        names=[str(names[k]) for k in sorted(names)],
        precision=precision,
        dynamic=bool(args.get("dynamic", False)),
        batch=int(meta.get("batch", 1)),
        task=task,
        payload_shape=None if shape is None else (int(shape[0]), int(shape[1])),
    )


class ExportedDetector:
    """An export standing where a loaded ``YOLO`` model stands in a run (names, task, heads, imgsz).

    Args:
        model: Path of the export.
        tasks: The tasks accepted (:func:`read_export`).
    """

    def __init__(self, model: str | Path, *, tasks: Sequence[str] | None = None) -> None:
        self.info = read_export(model, tasks=tasks)
        self.info.require_runtime()
        self.names = dict(enumerate(self.info.names))
        self.task = self.info.task
        self.hooks = get_task(self.task)
        self.payload_shape = self.info.payload_shape  # a pose model's (K, ndim), else None

    @property
    def heads(self) -> list[str]:
        return [self.info.head]

    @property
    def imgsz(self) -> int:
        return int(max(self.info.imgsz))


def load_export(model: str | Path, *, tasks: Sequence[str] | None = None) -> ExportedDetector:
    """Read and check an export: metadata, task (in ``tasks``, as :func:`read_export`), runtime installed (see
    :class:`ExportedDetector`)."""
    return ExportedDetector(model, tasks=tasks)


def export_fingerprint(model: str | Path) -> str:
    """``sha256:`` of an export's files (a single-file export; the ``.xml`` or ``.param``, ``.bin`` and
    metadata of a folder)."""
    p = Path(model)
    kept = (".xml", ".bin", ".yaml", ".onnx", ".param")
    files = [p] if p.is_file() else sorted(f for f in p.iterdir() if f.suffix in kept)
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()


def logit_of_prob(p: Any) -> np.ndarray:
    """The logit of float32 engine probabilities, in float64, with 0 and 1 clipped to
    :data:`P_FLOOR` and :data:`P_CEILING` (see the module notes).

    >>> logit_of_prob(np.float32([0.5, 0.25, 1.0])).round(4).tolist()
    [0.0, -1.0986, 16.6355]
    """
    q = np.clip(np.asarray(p, dtype=np.float64), P_FLOOR, P_CEILING)
    return np.log(q) - np.log1p(-q)


def _predictor_class(task: str = "detect"):
    """Ultralytics' predictor of ``task`` (detect, segment, pose, obb), keeping each kept box's row or
    anchor, the raw output and, for a segment model, each box's mask (as RLE counts)."""
    import torch
    from ultralytics.engine.results import Results
    from ultralytics.utils import nms, ops

    hooks = get_task(task)
    base = hooks.predictor_class()

    class CapturePredictor(base):
        """Ultralytics' predictor of the task, keeping each kept box's row or anchor and the raw output; for
        a segment model the masks of ``predict(retina_masks=True)``, as RLE counts. A pose model's keypoints
        and an OBB model's angle ride along as ``det[:, 6:]`` (the NMS arguments of ``DetectionPredictor``;
        OBB: rotated NMS), built into ``Results`` by the task's own ``construct_result``."""

        def postprocess(self, preds, img, orig_imgs, **kwargs):
            protos = None
            if (
                hooks.prototypes
            ):  # as SegmentationPredictor.postprocess: (boxes, scores, coefficients), protos
                protos = preds[0][1] if isinstance(preds[0], tuple) else preds[1]
            preds = preds[0] if isinstance(preds, (list, tuple)) else preds
            dets, keep = nms.non_max_suppression(
                preds,
                self.args.conf,
                self.args.iou,
                self.args.classes,
                self.args.agnostic_nms,
                max_det=self.args.max_det,
                **hooks.nms_args(len(self.model.names)),
                end2end=getattr(self.model, "end2end", False),
                return_idxs=True,
                max_time_img=nms_max_time_img(None, preds.shape[0]),
            )
            self.captured, self.masks = (preds, keep), []
            if not isinstance(orig_imgs, list):
                orig_imgs = ops.convert_torch2numpy_batch(orig_imgs)[..., ::-1]
            if protos is None:
                return self.construct_results(dets, img, orig_imgs)
            return self.construct_results(dets, img, orig_imgs, protos)

        def construct_result(self, pred, img, orig_img, img_path, proto=None):
            if proto is None:
                return super().construct_result(pred, img, orig_img, img_path)
            # SegmentationPredictor.construct_result with retina_masks=True, its empty-mask filter recorded
            pred[:, :4] = ops.scale_boxes(img.shape[2:], pred[:, :4], orig_img.shape)
            filled, counts = hooks.rebuild_payload(
                proto, pred[:, 6:], pred[:, :4], orig_img.shape[:2]
            )
            self.masks.append((filled, counts))
            return Results(
                orig_img,
                path=img_path,
                names=self.model.names,
                boxes=pred[torch.from_numpy(filled).to(pred.device)][:, :6],
            )

    return CapturePredictor


class ExportCapturer(Capturer):
    """An export prepared once for capture; the same interface and box table as
    :class:`det_calib.capture.predictor.Capturer`.

    Each image goes through Ultralytics' predictor of the export's task on the export (its
    ``AutoBackend``, letterbox and NMS or top-k rows), one image per call, as ``predict`` runs
    it; the boxes and confs are ``predict``'s, and so are a pose model's keypoints and an OBB
    model's rotated boxes (its box columns: their axis-aligned hull). The logit of each box is recovered from its conf
    (:func:`logit_of_prob`); with ``all_logits`` (per-anchor exports only) every class's from
    the engine's class probabilities at the box's anchor.

    Args:
        model: Path of the export.
        options, **kw: A :class:`~det_calib.capture.options.CaptureOptions`, or its fields by name, as
            :class:`~det_calib.capture.predictor.Capturer`. The export has one head (its
            :attr:`ExportInfo.head`); ``iou`` is unused by row exports; ``imgsz`` must be the
            export's size (a static export runs at no other), default it; ``batch`` and
            ``workers`` are accepted for the interface (an export is captured one image at a
            time); ``all_logits`` needs a per-anchor export.
    """

    def __init__(
        self,
        model: str | Path | ExportedDetector,
        options: CaptureOptions | None = None,
        /,
        **kw: Any,
    ) -> None:
        opts = self.options = CaptureOptions.of(options, **kw)
        det = model if isinstance(model, ExportedDetector) else load_export(model)
        self.info = det.info
        head, heads, imgsz = opts.head, opts.heads, opts.imgsz
        want = (
            [head]
            if head
            else (
                det.heads
                if heads in (None, "auto")
                else [heads]
                if isinstance(heads, str)
                else list(heads)
            )
        )
        missing = [h for h in want if h not in det.heads]
        if missing:
            raise InputError(
                f"the {self.info.engine} export {self.info.path.name} carries only the "
                f"`{self.info.head}` head, not `{missing[0]}`"
            )
        if opts.all_logits and self.info.rows:
            raise InputError(
                "`all_logits` needs an export with per-anchor class scores; this one outputs top-k "
                "rows"
            )
        size = self.info.imgsz
        if imgsz is not None and not self.info.dynamic and int(imgsz) != max(size):
            raise InputError(
                f"Expected argument `imgsz` to be the export's size {max(size)}, but got {imgsz}"
            )
        self.heads = (self.info.head,)
        self.conf, self.iou, self.max_det, self.batch = (
            float(opts.conf),
            float(opts.iou),
            int(opts.max_det),
            1,
        )
        self.all_logits = opts.all_logits
        self.names = list(self.info.names)
        self.nc = len(self.names)
        self.task = self.info.task
        self.hooks = get_task(self.task)
        self.payload_shape = (
            self.info.payload_shape
        )  # (K, ndim) of a pose model, for its `kpts` column
        if self.hooks.shaped and self.payload_shape is None:
            raise InputError(
                f"the {self.task} export {self.info.path.name} records no `kpt_shape` in its "
                "metadata"
            )
        self.imgsz = (
            [int(imgsz), int(imgsz)] if imgsz is not None and self.info.dynamic else list(size)
        )
        overrides = dict(
            model=str(self.info.path),
            task=self.task,
            mode="predict",
            retina_masks=True,
            conf=self.conf,
            iou=self.iou,
            max_det=self.max_det,
            imgsz=self.imgsz,
            verbose=False,
            save=False,
            half=False,
            batch=1,
            device="" if opts.device is None else opts.device,
        )
        if (
            self.info.format == "ncnn"
        ):  # before Ultralytics' load, which ignores NCNN's return codes
            _check_ncnn_loads(self.info.model_file)
        try:
            family = family_with_head(
                self.info.head
            )  # a model family's export runs its own stock predictor
            predictor = _predictor_class(self.task) if family is None else family.predictor_class()
            self.predictor = predictor(overrides=overrides)
            self.predictor.setup_model(str(self.info.path))
        except Exception as e:  # a damaged file, a runtime that cannot load it
            raise InputError(
                f"cannot load the {self.info.format} export {self.info.path}: {first_line(e)}"
            ) from None

    @property
    def settings(self) -> dict:
        """The capture settings that change its output (as :attr:`det_calib.capture.predictor.Capturer.settings`)."""
        return self.options.settings(imgsz=self.imgsz, batch=self.batch)

    def _capture(
        self, paths: list[str], sizes: np.ndarray, out: dict, desc: str, progress: bool
    ) -> int:
        """:meth:`Capturer._capture` through the engine's predictor, one image at a time."""
        bar = progress_bar(len(paths), f"{desc} [{self.info.engine}]", enabled=progress)
        n_bad = 0
        source = read_ahead(paths, depth=2)
        try:
            for pos, im0 in source:
                bar.update(1)
                if im0 is None:
                    n_bad += 1
                    _log.warning("cannot read image %s: skipped", paths[pos])
                    continue
                sizes[pos] = (im0.shape[1], im0.shape[0])
                out[self.info.head][pos] = self._one(im0)
        finally:
            source.close()
            bar.close()
        n_top = sum(int((v[1] >= 1.0).sum()) for v in out[self.info.head].values())
        if n_top:
            _log.info(
                "%d box(es) scored exactly 1.0 by the engine: logit read as %.4f (a lower bound)",
                n_top,
                _LOGIT_CEILING,
            )
        return n_bad

    def predict_image(self, im0: np.ndarray) -> dict[str, tuple[np.ndarray, ...]]:
        """One BGR image, as single-image ``predict`` on the export: ``{head: (xyxy, conf, cls, logit)}``
        (the per-image form an ensemble member returns)."""
        return {self.info.head: self._one(im0)[:4]}

    def _one(self, im0: np.ndarray) -> ImageBoxes:
        """One image through the predictor: its boxes (a segment model's with their masks; a pose model's with
        ``Results.keypoints.data``; an OBB model's as the hull ``Results.obb.xyxy`` with ``Results.obb.xywhr``)."""
        import torch

        res = self.predictor(source=im0, stream=False)[0]
        b = self.hooks.result_boxes(res)
        conf = b.conf.cpu().numpy().astype(np.float32)
        cls = b.cls.cpu().numpy().astype(np.int32)
        masks = getattr(self.predictor, "masks", None)
        filled, segm = masks[0] if masks else (None, None)  # a segment model's
        lg = None
        if self.all_logits:
            preds, keep = self.predictor.captured
            k = keep[0].long().view(-1)
            if filled is not None:  # the boxes the empty-mask filter kept
                k = k[torch.from_numpy(filled).to(k.device)]
            probs = preds[0, 4 : 4 + self.nc][:, k].T.float().cpu().numpy()
            lg = kept_logits(self, logit_of_prob(probs).astype(np.float32))
        return ImageBoxes(
            b.xyxy.cpu().numpy().astype(np.float64),
            conf,
            cls,
            logit_of_prob(conf),
            lg,
            segm,
            self.hooks.result_payload(res, self.payload_shape),
        )


@contextlib.contextmanager
def _stderr_silenced():
    """File descriptor 2 sent to /dev/null for the duration (what a C library writes there included)."""
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _check_ncnn_loads(param: Path) -> None:
    """NCNN reports a damaged ``.param`` or a short ``.bin`` by a return code that a loader may ignore (the net
    then runs on missing weights): load the pair once more and read the codes."""
    # optional extra `ncnn` (pip install 'det_calib[ncnn]'), checked (ExportInfo.require_runtime) before any call
    import ncnn  # optional extra `ncnn`: pip install 'det_calib[ncnn]'

    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    with _stderr_silenced():  # NCNN prints its own complaints on the C stderr
        bad = (
            ("param", param)
            if net.load_param(str(param)) != 0
            else (
                ("bin", param.with_suffix(".bin"))
                if net.load_model(str(param.with_suffix(".bin"))) != 0
                else None
            )
        )
        net.clear()
    if bad:
        raise InputError(
            f"cannot load the ncnn export {param.parent}: NCNN rejects its .{bad[0]} file "
            f"{bad[1].name} (truncated or damaged)"
        )


def make_capturer(model: Any, options: CaptureOptions | None = None, /, **kw: Any):
    """:class:`ExportCapturer` for an export (path or :class:`ExportedDetector`), else
    :class:`det_calib.capture.predictor.Capturer` (a registered model family's capturer for its models:
    :mod:`det_calib.capture.family_registry`), with the same options."""
    if isinstance(model, ExportedDetector) or is_export(model):
        return ExportCapturer(model, options, **kw)

    return model_capturer(model, options, **kw)
