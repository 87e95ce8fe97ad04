# Long file: the one bit-exact capture of every YOLO detect head through Ultralytics' own steps (letterbox,
# forward, NMS, both heads, payloads, the logit store); splitting it would spread one exact path over modules.
"""Capture raw per-box class logits exactly as Ultralytics' ``predict`` sees the boxes.

The only module (with :mod:`det_calib.deploy.fold` and :mod:`det_calib.evaluation.map_check`) that imports
Ultralytics. :class:`Capturer` builds the network as the predictor builds it (Ultralytics'
``fuse()`` and ``AutoBackend``, so the same weights, device and memory format), reads each image
with Ultralytics' ``imread``, letterboxes it on its own with Ultralytics' ``LetterBox`` (as
``predict`` does for one image), runs the network once, and decodes every requested head from
that one pass with Ultralytics' own decode, NMS / top-k and box scaling. For every kept box it
reads the pre-sigmoid class scores of the head output at the box's anchor. With ``batch=1`` the
captured boxes and confs are bit-identical to ``model.predict(image, conf=floor)`` run on one
image at a time (``predict`` given a list letterboxes the whole list to one shape instead).

Head modes:

- ``nms``: the one-to-many branch (``cv2``/``cv3``) + NMS; Ultralytics' default (``nms=None``),
  and the only branch of the other YOLO detect heads (YOLOv5u, v8, v9, 11, 12; docs/heads.md).
- ``e2e``: the one-to-one NMS-free branch (``one2one_cv2``/``one2one_cv3``; YOLO26, YOLOv10),
  selected with ``nms=False``. Its output rows are the top ``max_det`` (anchor, class) pairs;
  they are mapped back to anchors through the head's own ``get_topk_index`` on the same scores.

``Detect.fuse()`` deletes the branch not in use; to decode both from one pass, the network is
fused twice (once per branch, by Ultralytics) and the fused one-to-one branch joins the other.
"""

from __future__ import annotations

import copy
import logging
import math
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import polars as pl

if TYPE_CHECKING:
    import torch

from det_calib.capture.family_registry import family_of
from det_calib.capture.image_source import SharedImages, auto_workers, image_lists
from det_calib.capture.options import CaptureOptions, resolve_batch
from det_calib.data.box_table import CAPTURE_COLUMNS, HEAD_LABEL, HEADS, LOGITS_ROW, SCHEMA, Head
from det_calib.errors import InputError, first_line
from det_calib.tasks import get_task
from det_calib.validation import check_choice

_log = logging.getLogger(__name__)

_NMS_TIME_LIMIT = math.inf
"""Seconds Ultralytics' NMS may spend on one forward pass of a det_calib capture or val (its own
budget is ``2.0 + 0.05 * batch``): none. Past its budget Ultralytics' ``non_max_suppression``
warns ``NMS time limit ... exceeded`` and returns no boxes for the batch's remaining images, so on
a slow or busy CPU the boxes, and any mAP computed from them, would depend on the clock."""


class ImageBoxes(NamedTuple):
    """One image's kept boxes of one head, as the capture holds them before building its table."""

    xyxy: np.ndarray  # (n, 4) float, image pixels
    conf: np.ndarray  # (n,) float32
    cls: np.ndarray  # (n,) int32
    logit: np.ndarray  # (n,) logit of cls
    logits: (
        np.ndarray | None
    )  # (n, nc) every class's logit (``all_logits``; (n,) their rows in a store), else None
    segm: list[bytes | None] | None = (
        None  # each box's mask as RLE counts (segment models; None without masks)
    )
    extra: np.ndarray | None = (
        None  # (n, K, ndim) keypoints (pose) or (n, 5) xywhr (OBB), else None
    )


def kept_logits(cap: Any, lg: np.ndarray) -> np.ndarray | None:
    """An image's ``(n, nc)`` class logits as a capturer ``cap`` keeps them: None without ``all_logits``; with
    a :class:`~det_calib.thresholds.class_sets.LogitStore` (``cap.logit_store``) their ``(n,)`` rows there."""
    if not cap.all_logits:
        return None
    store = getattr(cap, "logit_store", None)
    return lg if store is None else store.append(lg)


def capture_schema(payload: dict[str, pl.DataType] | None = None) -> dict[str, pl.DataType]:
    """The columns of a capture's table: :data:`~det_calib.data.box_table.CAPTURE_COLUMNS`, and the
    task's payload column and its type (:attr:`det_calib.tasks.contract.Task.payload_schema`; none
    for a detector)."""
    return {**{c: SCHEMA[c] for c in CAPTURE_COLUMNS}, **(payload or {})}


class _TopK:
    """The anchors of the NMS-free decode's output rows, as the head's own ``postprocess`` chose them in one
    forward pass: its ``get_topk_index`` is wrapped on this head (a worker's own copy) until :meth:`close`,
    and the last call's anchor indices ``(B, k)`` are kept in :attr:`anchors` (None where no decode ran
    one). The capture reads each e2e row's logits at its anchor from them instead of running the head's
    top-k again on the same scores."""

    def __init__(self, head: Any) -> None:
        self.head, self.anchors = head, None
        own = head.get_topk_index

        def kept(scores, max_det):
            out = own(scores, max_det)
            self.anchors = out[2]
            return out

        head.get_topk_index = kept

    def close(self) -> None:
        del self.head.get_topk_index


def nms_max_time_img(time_limit: float | None, batch: int) -> float:
    """Ultralytics' ``max_time_img`` argument for a wall-clock ``time_limit`` on a batch of ``batch``
    images (``non_max_suppression`` stops after ``2.0 + max_time_img * batch`` seconds); None:
    det_calib's budget, :data:`_NMS_TIME_LIMIT` (none).

    >>> nms_max_time_img(None, 16), nms_max_time_img(3.0, 4), nms_max_time_img(0.0, 4)
    (inf, 0.25, -0.5)
    """
    limit = _NMS_TIME_LIMIT if time_limit is None else float(time_limit)
    return (limit - 2.0) / max(int(batch), 1)


def load_detector(model, *, tasks: Sequence[str] | None = None):
    """Load an Ultralytics detector and check that it is one.

    Args:
        model: Path to a ``.pt`` file, or an ``ultralytics.YOLO`` instance.
        tasks: The model tasks accepted; by default the registered ones (:data:`det_calib.tasks.TASKS`).

    Returns:
        The ``ultralytics.YOLO`` model.

    Raises:
        InputError: Missing or unreadable file, or a model whose task is not in ``tasks``.
    """
    import torch
    from ultralytics import YOLO

    if not isinstance(model, (str, Path)):
        yolo = model
    else:
        path = Path(model)
        if path.suffix not in (".pt", ".yaml", ".yml"):
            raise InputError(
                f"model must be a PyTorch .pt checkpoint (or a model .yaml), got {path}"
            )
        if path.suffix == ".pt" and not path.is_file():
            raise InputError(f"model file not found: {path}")
        if path.suffix == ".pt":
            with path.open("rb") as f:
                head = f.read(2)
            if head[:2] != b"PK" and head[:1] != b"\x80":  # torch.save: a zip, or a legacy pickle
                raise InputError(
                    f"cannot load model {path}: not a PyTorch checkpoint (torch.save writes a zip "
                    f"archive; this file starts with {head!r})"
                )
        try:
            yolo = YOLO(str(path))
        except Exception as e:
            raise InputError(f"cannot load model {path}: {first_line(e)}") from None
    check_task(getattr(yolo, "task", None), tasks)
    if not isinstance(getattr(yolo, "model", None), torch.nn.Module):
        raise InputError(
            "only PyTorch (.pt) models can be captured: exported formats have no raw logits"
        )
    if not available_heads(yolo):
        raise InputError(
            f"the model's last layer is {type(_detect_head(yolo)).__name__}, not a YOLO Detect "
            "head with a "
            "classification branch (cv3) nor a registered model family's head: det_calib supports "
            "the YOLO detect "
            "heads (YOLOv5u, v8 to 12, 26) and RT-DETR"
        )
    return yolo


def check_task(task: str | None, tasks: Sequence[str] | None = None) -> None:
    """Raise a one-line :class:`InputError` unless ``task`` is in ``tasks`` (by default a registered task:
    :func:`det_calib.tasks.get_task`)."""
    if tasks is None:
        get_task(task)
    elif task not in tasks:
        raise InputError(
            f"model task is `{task}`: det_calib calibrates {', '.join(tasks[:-1])} and {tasks[-1]} "
            "models"
        )


def _detect_head(yolo) -> torch.nn.Module:
    """The ``Detect`` head module of a loaded model."""
    return yolo.model.model[-1]


def available_heads(yolo) -> list[str]:
    """Head modes the model has: ``["nms", "e2e"]`` for YOLO26/YOLOv10, ``["nms"]`` for the other YOLO heads, a
    registered family's heads for its models (``["detr"]`` for an RT-DETR: :mod:`det_calib.capture.family_registry`)."""
    family = family_of(yolo)
    if family is not None:
        return list(family.heads)
    head = _detect_head(yolo)
    heads: list[str] = []
    if getattr(head, "cv3", None) is not None:
        heads.append("nms")
    if getattr(head, "one2one_cv3", None) is not None:
        heads.append("e2e")
    return heads


def default_imgsz(yolo) -> int:
    """The image size the model was trained at (its checkpoint's ``imgsz``), else 640."""
    args = getattr(yolo, "overrides", {}) or {}
    train_args = (getattr(yolo, "ckpt", None) or {}).get("train_args", {}) or {}
    v = train_args.get("imgsz", args.get("imgsz", 640))
    return int(v if isinstance(v, (int, float)) else max(v))


_HEAD_WORDS = {"nms": "one-to-many", "e2e": "one-to-one (NMS-free)"}
"""How a missing YOLO head mode is named in :func:`resolve_heads`' message (another head: its report label)."""


def resolve_heads(
    yolo, *, head: str | None = None, heads: Sequence[str] | str | None = None
) -> tuple[str, ...]:
    """The head modes to capture, checked against the model.

    Args:
        yolo: Loaded detector.
        head: One head mode (the single-head form).
        heads: Several head modes, or ``"auto"`` for every head the model has. At most one of
            ``head`` and ``heads`` may be given; with neither, the model's first head (``nms`` for a YOLO
            detect head).

    Returns:
        Head modes in the order ``nms``, ``e2e``.

    Raises:
        InputError: Both or an unknown head mode given, or the model lacks a requested head.
    """
    if head is not None and heads is not None:
        raise InputError("give `head` or `heads`, not both")
    have = available_heads(yolo)
    if heads == "auto":
        want = list(have)
    elif heads is not None:
        want = [heads] if isinstance(heads, str) else list(heads)
    else:
        want = [head or (have[0] if have else "nms")]
    name = "heads" if heads is not None else "head"
    for h in want:
        check_choice(h, HEADS, name)
        if h not in have:
            raise InputError(
                f"the model has no {_HEAD_WORDS.get(h, HEAD_LABEL[h])} head "
                f"for `head` {h}; it has: {', '.join(have)}"
            )
    if not want:
        raise InputError(f"Expected argument `{name}` to name at least one head, but got {heads!r}")
    return tuple(h for h in HEADS if h in want)


def _fused_network(yolo, heads: tuple[str, ...], device: torch.device):
    """A private copy of the network, fused and wrapped as Ultralytics' predictor does it, keeping
    every branch in ``heads``; returns the ``AutoBackend``.

    ``Detect.fuse()`` deletes the branch not in use. For both heads the model is copied twice,
    each copy fused by Ultralytics' own ``fuse()`` for one branch, and the fused one-to-one
    branch of the second is put into the first: every convolution then has exactly the weights
    ``predict(nms=None)`` and ``predict(nms=False)`` run with.
    """
    from ultralytics.nn.autobackend import AutoBackend

    def fused(end2end: bool) -> torch.nn.Module:
        net = copy.deepcopy(yolo.model).float().eval()
        net.model[-1].end2end = end2end
        return net.fuse(verbose=False)

    net = fused(heads == ("e2e",))
    if len(heads) == 2:
        other = fused(True).model[-1]
        head = net.model[-1]
        for name in tuple(head._modules):
            if name.startswith("one2one_"):
                setattr(head, name, getattr(other, name))
        head.end2end = False
    # Ultralytics' backend as the predictor builds it (device, dtype, the memory format it picks
    # for this device: channels-last on x86 CPUs changes the convolution kernels and their rounding)
    backend = AutoBackend(model=net, device=device, fp16=False, fuse=False, verbose=False)
    backend.eval()
    return backend


class Capturer:
    """A detector prepared once for capture: load, fuse, and run any number of image lists.

    Every image is pre-processed exactly as ``model.predict`` pre-processes it alone (its own
    letterbox: the long side to ``imgsz``, the short side padded to the stride), the network
    runs once per batch, and each requested head is decoded from the same neck features: the
    one-to-many branch through Ultralytics' NMS (``predict(nms=None)``) and the one-to-one branch
    through its top-k (``predict(nms=False)``). With ``batch=1`` (the default on a CPU) the boxes,
    confs and logits are bit-identical to ``model.predict`` run on one image at a time. With
    ``batch > 1`` only images with the same letterboxed shape share a forward pass: no image is
    padded for its neighbours, but batched convolution rounds differently from a batch of one
    (class logits differ by ~1e-5 on CPU), so use it where throughput matters: on a CUDA device
    the default batch is :data:`~det_calib.capture.options.CUDA_BATCH` (what it changes:
    ``benchmarks/bench_batch.py``, docs/speed.md).

    On a CPU where Ultralytics runs torch on one thread (it uses ``cpu_count - 1`` threads, at
    most 8: one thread on a machine with two cores), a prediction leaves the other cores idle.
    ``workers`` then captures that many images at once, in threads, each with its own copy of the
    fused network (torch releases the GIL inside its operators). Every image is still one forward
    pass with the thread count ``predict`` uses, so the table is the same for any ``workers``.

    On a CPU, a capture of at least :data:`~det_calib.capture.traced_body.MIN_IMAGES` images runs
    the network's body (every layer before the head) as one TorchScript graph, shared by the
    workers, each input shape checked bit for bit against Ultralytics' own forward pass before the
    graph runs it (:mod:`det_calib.capture.traced_body`): the same table, for less CPU.

    Args:
        model: ``.pt`` path or ``ultralytics.YOLO`` detector.
        options: A :class:`~det_calib.capture.options.CaptureOptions` (heads, conf floor, NMS IoU,
            ``max_det``, ``imgsz``, ``batch``, device, ``all_logits``, ``workers``).
        **kw: Options given by name instead (or on top of ``options``): the fields of
            :class:`~det_calib.capture.options.CaptureOptions`. ``workers`` None (default): one
            per CPU core when the device is a CPU and torch runs one thread per operator, else 1
            (see :func:`auto_workers`); more than 1 needs ``batch=1``.

    Attributes:
        trace: Whether a capture of many images traces the body (default: on a CPU); False runs
            the eager network.
        traced: The :class:`~det_calib.capture.traced_body.TracedBody` of the first traced
            capture (every later capture reuses it), or None.

    Raises:
        InputError: Bad model, head, conf, batch or workers; unknown device.
    """

    def __init__(self, model, options: CaptureOptions | None = None, /, **kw: Any) -> None:
        from ultralytics.data.augment import LetterBox
        from ultralytics.utils.checks import check_imgsz
        from ultralytics.utils.torch_utils import select_device

        from det_calib.capture import traced_body

        opts = self.options = CaptureOptions.of(options, **kw)
        yolo = load_detector(model)
        if (family := family_of(yolo)) is not None:
            raise InputError(
                f"this step captures YOLO detect heads, not a model of family `{family.name}` "
                "(det_calib.capture.predictor.model_capturer captures those)"
            )
        self.heads = resolve_heads(yolo, head=opts.head, heads=opts.heads)
        self.conf, self.iou = float(opts.conf), float(opts.iou)
        self.max_det = int(opts.max_det)
        self.all_logits = opts.all_logits
        self.payload = (
            opts.payload
        )  # a segment model's masks rasterised (False: segm null, the same boxes)
        self.nc = len(yolo.names)
        self.names = [yolo.names[k] for k in sorted(yolo.names)]
        self.task = yolo.task
        self.hooks = get_task(self.task)
        self.payload_shape = self.hooks.head_shape(
            _detect_head(yolo)
        )  # the payload's shape: (K, ndim) of a pose model
        try:
            self.device = select_device("" if opts.device is None else opts.device, verbose=False)
        except (
            ValueError,
            RuntimeError,
            AssertionError,
        ) as e:  # Ultralytics' errors for an unknown device
            raise InputError(f"bad device {opts.device!r}: {first_line(e)}") from None
        self.batch = resolve_batch(opts.batch, self.device)  # None: 16 on CUDA, 1 elsewhere
        workers = opts.workers
        if workers is None:
            workers = auto_workers(self.device, self.batch)
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise InputError(
                f"Expected argument `workers` to be a positive integer or None, but got {workers!r}"
            )
        if workers > 1 and self.batch > 1:
            raise InputError(
                f"Expected argument `workers` to be 1 with `batch` {self.batch}: parallel workers "
                "capture one image per forward pass (batch 1)"
            )
        self.workers = workers
        self.nms_time_limit = (
            _NMS_TIME_LIMIT  # a finite budget only to test what Ultralytics' NMS does past it
        )
        if (
            "nms" in self.heads
        ):  # as the predictor's warmup: Ultralytics' NMS then runs torchvision's kernel, whose
            import torchvision  # noqa: F401  order among tied scores differs from its own fallback's
        # one fused network per worker: a forward pass toggles the head's decode mode (see _run); the
        # others are copies of the first (the same weights as a fresh fuse, without fusing again)
        first = _fused_network(yolo, self.heads, self.device)
        self.backends = [first] + [copy.deepcopy(first) for _ in range(workers - 1)]
        self.backend = self.backends[0]
        self.net = self.backend.model  # the fused DetectionModel
        for backend in self.backends:
            h = backend.model.model[-1]
            if "e2e" in self.heads:  # as the predictor sets it before a run (set_head_attr)
                h.max_det, h.agnostic_nms = max(self.max_det, 300), False
        stride = max(int(self.net.stride.max()), 32)
        self.imgsz = check_imgsz(opts.imgsz or default_imgsz(yolo), stride=stride, min_dim=2)
        self._letterbox = LetterBox(self.imgsz, auto=True, stride=stride)
        # on a CPU the body runs as a TorchScript graph, checked bit for bit per input shape (traced_body)
        self.trace = self.device.type == "cpu"
        self.traced: traced_body.TracedBody | None = None

    @property
    def settings(self) -> dict:
        """The capture settings that change its output (recorded with captured parts)."""
        return self.options.settings(imgsz=self.imgsz, batch=self.batch)

    def __call__(
        self,
        images: Sequence[str | Path],
        *,
        split: str = "",
        image_names: Sequence[str] | None = None,
        image_ids: Sequence[int] | None = None,
        progress: bool = True,
    ) -> pl.DataFrame:
        """Capture ``images``; see :func:`capture` for the arguments and the table. Every capturer's call
        (this class's, a model family's :class:`~det_calib.capture.family_capture.PredictorCapturer`, an
        export's :class:`~det_calib.capture.exported.ExportCapturer`): the images listed, each one's boxes
        captured by :meth:`_capture`, the unreadable ones counted in one warning, the table built."""
        paths, names, ids = image_lists(images, image_names, image_ids)
        # per head, per image position: numpy arrays of that image's boxes (small; no tensors kept)
        out: dict[str, dict[int, tuple[np.ndarray, ...]]] = {h: {} for h in self.heads}
        sizes = np.zeros((len(paths), 2), dtype=np.int32)  # (w, h) of the images read
        n_bad = self._capture(paths, sizes, out, f"capture {split or 'images'}", progress)
        if n_bad:
            warnings.warn(
                f"skipped {n_bad} of {len(paths)} images (unreadable by OpenCV)", stacklevel=2
            )
        return self._table(out, sizes, names, ids, split)

    def _capture(
        self, paths: list[str], sizes: np.ndarray, out: dict, desc: str, progress: bool
    ) -> int:
        """Each image's boxes into ``out[head][position]`` and its ``(w, h)`` into ``sizes``, under a
        progress bar labelled ``desc``; returns how many images were unreadable."""
        import torch

        from det_calib.capture import traced_body

        if self.trace and self.traced is None and len(paths) >= traced_body.MIN_IMAGES:
            self.traced = traced_body.TracedBody(self.net, (self.batch, 3, *self.imgsz))
        # the images read ahead, drawn by whichever worker asks next (one worker: in order)
        feed = SharedImages(
            paths,
            depth=2 * self.batch * self.workers,
            desc=f"{desc} [{'+'.join(self.heads)}]",
            progress=progress,
            batch=self.batch,
        )
        try:
            if self.workers == 1 or len(paths) == 1:
                return self._stream(
                    self.backend,
                    iter(feed.next, None),
                    paths,
                    sizes,
                    out,
                    feed.bar,
                    threading.Event(),
                )
            return self._parallel(feed, paths, sizes, out)
        except (torch.OutOfMemoryError, MemoryError):
            raise InputError(
                f"out of memory running the model with batch {self.batch}: lower `batch`"
            ) from None
        finally:
            feed.close()

    def _parallel(self, feed: SharedImages, paths: list[str], sizes: np.ndarray, out: dict) -> int:
        """:meth:`_stream` in ``workers`` threads, one network each, drawing images from one ``feed``."""
        from concurrent.futures import ThreadPoolExecutor

        stop = threading.Event()

        def work(backend) -> int:
            try:
                return self._stream(
                    backend, iter(feed.next, None), paths, sizes, out, feed.bar, stop
                )
            except BaseException:
                stop.set()  # the other workers stop at their next image
                raise

        with ThreadPoolExecutor(
            max_workers=self.workers, thread_name_prefix="det_calib-capture"
        ) as pool:
            futures = [pool.submit(work, backend) for backend in self.backends]
            try:
                return sum(f.result() for f in futures)
            finally:
                stop.set()

    def _stream(
        self,
        backend,
        source,
        paths: list[str],
        sizes: np.ndarray,
        out: dict,
        bar,
        stop: threading.Event,
    ) -> int:
        """Capture the ``(position, image or None)`` items of ``source`` with one network, images of
        the same letterboxed shape ``batch`` at a time; returns how many images were unreadable."""
        pending: dict[
            tuple, list[tuple[int, np.ndarray]]
        ] = {}  # letterboxed shape -> [(position, image)]
        n_bad = 0
        for pos, im0 in source:
            if stop.is_set():
                return n_bad
            if im0 is None:
                n_bad += 1
                _log.warning("cannot read image %s: skipped", paths[pos])
                bar.update(1)
                continue
            sizes[pos] = (im0.shape[1], im0.shape[0])
            lb = self._letterbox(image=im0)
            del im0  # only the letterboxed image waits for its batch
            group = pending.setdefault(lb.shape, [])
            group.append((pos, lb))
            if len(group) >= self.batch:
                self._run(backend, pending.pop(lb.shape), sizes, out)
                bar.update(self.batch)
            elif sum(len(g) for g in pending.values()) >= 4 * self.batch:  # bound what waits
                key = max(pending, key=lambda k: len(pending[k]))
                bar.update(len(pending[key]))
                self._run(backend, pending.pop(key), sizes, out)
        for key in list(pending):
            bar.update(len(pending[key]))
            self._run(backend, pending.pop(key), sizes, out)
        return n_bad

    def _run(
        self, backend, group: list[tuple[int, np.ndarray]], sizes: np.ndarray, out: dict
    ) -> None:
        """One forward pass of ``backend`` over same-shape letterboxed images; every head decoded from it."""
        import torch

        with torch.inference_mode():
            positions = [p for p, _ in group]
            # as DetectionPredictor.preprocess: uint8 HWC BGR -> float CHW RGB in [0, 1]
            stack = group[0][1][None] if len(group) == 1 else np.stack([im for _, im in group])
            x = (
                torch.from_numpy(stack)
                .to(backend.device)
                .permute(0, 3, 1, 2)
                .contiguous()
                .flip(1)
                .float()
                .div_(255)
            )
            group.clear()
            head = backend.model.model[-1]
            # the NMS-free decode's top-k (its rows' anchors), kept as the head's postprocess computed it
            topk = _TopK(head)
            try:
                y, raw = backend(x) if self.traced is None else self.traced.forward(backend, x)
                self._decode(head, topk, y, raw, x, positions, sizes, out)
            finally:
                topk.close()

    def _decode(self, head, topk: _TopK, y, raw, x, positions: list[int], sizes, out: dict) -> None:
        """Every head of one forward pass decoded (the output ``y`` of the head's mode, the branches'
        ``raw`` tensors), its kept boxes stored in ``out`` per head and image position."""
        from ultralytics.utils import nms

        protos = None
        if isinstance(
            y, (list, tuple)
        ):  # a Segment head: (boxes, class scores and mask coefficients; protos)
            y, protos = y
        branches = (
            {"nms": raw.get("one2many", raw), "e2e": raw.get("one2one")}
            if "one2one" in raw
            else {"nms": raw}
        )
        for h in self.heads:
            e2e = h == "e2e"
            if head.end2end != e2e:  # the head the forward pass did not decode: decode it here
                head.end2end = e2e
                try:
                    y = head._inference(branches[h])
                    y = head.postprocess(y.permute(0, 2, 1)) if e2e else y
                finally:
                    head.end2end = not e2e
            # as the predictor: nc=0 for a detector; a segment model's mask coefficients, a pose model's
            # keypoints and an OBB model's angle ride along as det[:, 6:]; OBB boxes stay xywh (rotated NMS)
            dets, keep = nms.non_max_suppression(
                y,
                self.conf,
                self.iou,
                None,
                False,
                max_det=self.max_det,
                **self.hooks.nms_args(self.nc),
                end2end=e2e,
                return_idxs=True,
                max_time_img=nms_max_time_img(
                    self.nms_time_limit, len(positions)
                ),  # unbounded: see _NMS_TIME_LIMIT
            )
            scores = branches[h]["scores"]  # (B, nc, anchors), pre-sigmoid
            if e2e:  # output rows are (anchor, class) pairs of the top-k: back to anchors
                anchor_of_row = topk.anchors
                if anchor_of_row is None:  # a head whose decode ran no top-k of its own
                    _, _, anchor_of_row = head.get_topk_index(
                        scores.sigmoid().permute(0, 2, 1), head.max_det
                    )
            for b, (pos, det, k) in enumerate(zip(positions, dets, keep)):
                k = k.long().view(-1)
                w, hh = sizes[pos]
                out[h][pos] = self._image_boxes(
                    det,
                    anchor_of_row[b, k] if e2e else k,
                    scores[b],
                    None if protos is None else protos[b],
                    x.shape[2:],
                    (int(hh), int(w)),
                )

    def _image_boxes(
        self,
        det: torch.Tensor,
        anchors: torch.Tensor,
        scores: torch.Tensor,
        protos,
        lb_shape,
        im_shape: tuple[int, int],
    ) -> ImageBoxes:
        """One image's kept rows ``det`` (their ``anchors``; the head's pre-sigmoid ``scores`` (nc,
        anchors)) in the image of shape ``im_shape`` (h, w), as the task's predictor returns them."""
        import torch

        segm = None  # an OBB model's xywh + angle: the axis-aligned hull in the box columns
        xyxy, extra = self.hooks.decode(
            det, lb_shape, im_shape, self.payload_shape
        )  # in place, as the predictor
        if (
            protos is not None
        ):  # the masks predict(retina_masks=True) builds; it drops boxes with none
            filled, segm = self.hooks.rebuild_payload(
                protos, det[:, 6:], xyxy, im_shape, rasterise=self.payload
            )  # without payload: the same boxes, decided without rasterising their masks
            kept = torch.from_numpy(filled).to(det.device)
            det, anchors, xyxy = det[kept], anchors[kept], xyxy[kept]
        cls = det[:, 5].cpu().numpy().astype(np.int32)
        lg = scores[:, anchors].T.float().cpu().numpy()  # (n, nc)
        z = lg[np.arange(len(cls)), cls]
        return ImageBoxes(
            xyxy.cpu().numpy(), det[:, 4].cpu().numpy(), cls, z, kept_logits(self, lg), segm, extra
        )

    def _table(
        self, out: dict, sizes: np.ndarray, names: list[str], ids: np.ndarray, split: str
    ) -> pl.DataFrame:
        frames = []
        hooks = get_task(getattr(self, "task", "detect"))
        for h in self.heads:
            per = out[h]
            order = sorted(per)
            counts = np.array([len(per[p][1]) for p in order], dtype=np.int64)
            pos = np.repeat(np.array(order, dtype=np.int64), counts)

            def cat(j: int, dt, per=per, order=order) -> np.ndarray:
                return (
                    np.concatenate([per[p][j] for p in order]).astype(dt)
                    if order
                    else np.zeros(0, dt)
                )

            xyxy = cat(0, np.float64).reshape(-1, 4)
            cols = {
                "image": (
                    pl.Series("image", names, dtype=pl.String).gather(pos)
                    if len(pos)
                    else pl.Series([], dtype=pl.String)
                ),
                "image_id": ids[pos],
                "split": pl.repeat(split, len(pos), dtype=pl.String, eager=True),
                "head": pl.repeat(h, len(pos), dtype=pl.String, eager=True),
                "x1": xyxy[:, 0],
                "y1": xyxy[:, 1],
                "x2": xyxy[:, 2],
                "y2": xyxy[:, 3],
                "img_w": sizes[pos, 0],
                "img_h": sizes[pos, 1],
                "cls": cat(2, np.int32),
                "conf": cat(1, np.float64),
                "logit": cat(3, np.float64),
            }
            if hooks.payload:
                cols[hooks.payload] = hooks.payload_series(
                    [per[p] for p in order], self.payload_shape
                )
            df = pl.DataFrame(cols, schema=capture_schema(hooks.payload_schema))
            if (
                self.all_logits and getattr(self, "logit_store", None) is not None
            ):  # each box's row in the store
                df = df.with_columns(pl.Series(LOGITS_ROW, cat(4, np.int64), dtype=pl.Int64))
            elif self.all_logits:
                lg = (
                    np.concatenate([per[p][4] for p in order])
                    if order
                    else np.zeros((0, self.nc), np.float32)
                )
                lists = pl.Series("logits", lg, dtype=pl.Array(pl.Float32, self.nc)).cast(
                    pl.List(pl.Float32)
                )
                df = df.with_columns(lists)
            frames.append(df)
        return pl.concat(frames) if len(frames) > 1 else frames[0]


def model_capturer(model, options: CaptureOptions | None = None, /, **kw: Any):
    """The capturer of a ``.pt`` detector: a :class:`Capturer`, or a registered model family's capturer for its
    models (RT-DETR captures through its own predictor: :mod:`det_calib.capture.family_registry`)."""
    yolo = load_detector(model)
    family = family_of(yolo)
    return Capturer(yolo, options, **kw) if family is None else family.capturer(yolo, options, **kw)


def capture(
    model,
    images: Sequence[str | Path],
    *,
    head: Head | None = None,
    heads: Sequence[Head] | Literal["auto"] | None = None,
    conf: float = 0.001,
    iou: float = 0.7,
    max_det: int = 300,
    imgsz: int | None = None,
    batch: int | None = None,
    device: str | None = None,
    split: str = "",
    image_names: Sequence[str] | None = None,
    image_ids: Sequence[int] | None = None,
    all_logits: bool = False,
    progress: bool = True,
    workers: int | None = None,
) -> pl.DataFrame:
    """Run the detector over ``images`` and return one row per output box with its raw logit.

    One forward pass per image serves every head in ``heads``: the table holds the boxes of
    each, head after head (``nms`` first), images in input order within a head. With the
    default batch on a CPU (1) each head's boxes, confs and logits are bit-identical to
    ``model.predict(image, conf=conf, nms=None)`` / ``(..., nms=False)`` run on one image at a
    time, which is what a deployment sees; see :class:`Capturer` for ``batch > 1``.

    Args:
        model: ``.pt`` path or ``ultralytics.YOLO`` detector.
        images: Image paths.
        head: ``"nms"`` (one-to-many head + NMS, Ultralytics' default) or ``"e2e"`` (NMS-free
            one-to-one head, ``nms=False``).
        heads: Several heads at once, e.g. ``("nms", "e2e")``, or ``"auto"`` for every head the
            model has. Give ``head`` or ``heads``; with neither, ``"nms"``.
        conf: Conf floor passed to Ultralytics (it keeps ``conf > floor``).
        iou: NMS IoU threshold (Ultralytics' predict default 0.7; unused by ``e2e``).
        max_det: Maximum boxes per image and head.
        imgsz: Inference size; default the model's training size.
        batch: Maximum images per forward pass (same letterboxed shape only); 1 is exact. None
            (default): 16 on a CUDA device, 1 elsewhere (:func:`~det_calib.capture.options.resolve_batch`).
        device: Torch device string (``"cpu"``, ``"0"``...); Ultralytics' default when None.
        split: Value of the ``split`` column.
        image_names: Values of the ``image`` column (default: the paths).
        image_ids: Values of the ``image_id`` column (default: the position in ``images``);
            a shard of a split passes the images' positions in the whole split.
        all_logits: Also return all nc class logits of each box in a ``logits`` list column.
        progress: Show a progress bar.
        workers: Images captured at once (threads); the table does not depend on it. None: one
            per core where torch runs single-threaded on a CPU, see :func:`auto_workers`.

    Returns:
        Box table with the capture columns of :mod:`det_calib.data.box_table` (no match columns).

    Raises:
        InputError: The model lacks a requested head, bad arguments, or no images were given.
    """
    options = CaptureOptions(
        head=head,
        heads=heads,
        conf=conf,
        iou=iou,
        max_det=max_det,
        imgsz=imgsz,
        batch=batch,
        device=device,
        all_logits=all_logits,
        workers=workers,
    )
    capturer = model_capturer(model, options)
    return capturer(
        images, split=split, image_names=image_names, image_ids=image_ids, progress=progress
    )
