"""The members of an ensemble: what they are, how they load, and one capture pass for all of them.

Three kinds of member (:class:`MemberSpec`):

- ``checkpoint``: a detector checkpoint (several trained models, e.g. differing in their seed, or
  in their architecture and head);
- ``snapshot``: a checkpoint of one training run (Ultralytics' ``weights/epochN.pt`` with
  ``save_period``, ``last.pt``, ``best.pt``): the cheap ensemble of one run;
- ``view``: a test-time view of a checkpoint, the image flipped left-right and/or letterboxed at
  another size (``flip``, ``scale:1.2``), so that one ``best.pt`` makes an ensemble.

A member is opened by the loader registered for its file's suffix (:data:`MEMBER_LOADERS`;
``.pt`` and a model ``.yaml``: :class:`TorchMember`, det_calib's own capture). A loader returns
an object with ``heads``, ``names``, ``imgsz``, ``fingerprint`` and ``predict(im0, worker)`` that
gives per head the boxes, confs, classes and raw logits of one decoded BGR image, so another
runtime (an exported model) plugs in by registering its suffix.

:func:`capture_members` decodes each image once and runs every member on it, one image per
forward pass, each member exactly as its single-image ``predict`` (a member's boxes equal its
own :func:`det_calib.capture.capture`, tested).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import polars as pl

from det_calib import demo
from det_calib.capture.family_registry import family_of
from det_calib.capture.image_source import SharedImages
from det_calib.capture.parts import model_fingerprint
from det_calib.capture.predictor import Capturer, available_heads, default_imgsz, load_detector
from det_calib.data.box_table import CAPTURE_COLUMNS, HEADS, SCHEMA
from det_calib.errors import InputError
from det_calib.tasks import get_task

_log = logging.getLogger(__name__)

_KINDS = ("checkpoint", "snapshot", "view")


@dataclass(frozen=True)
class MemberSpec:
    """One member: a model file, seen as it is or through a test-time view.

    Attributes:
        path: The model file.
        kind: ``checkpoint``, ``snapshot`` or ``view``.
        flip: Run on the image flipped left-right (boxes flipped back).
        scale: Letterbox at ``scale`` times the model's image size (rounded to its stride).
        head: The head this member runs for every ensemble head (None: the ensemble's head where
            the member has it, else its own).
    """

    path: Path
    kind: str = "checkpoint"
    flip: bool = False
    scale: float = 1.0
    head: str | None = None

    @property
    def view(self) -> str:
        """The view in words: ``orig``, ``flip``, ``scale:1.2``, ``flip+scale:1.2``."""
        parts = (["flip"] if self.flip else []) + (
            [f"scale:{self.scale:g}"] if self.scale != 1.0 else []
        )
        return "+".join(parts) or "orig"

    @property
    def name(self) -> str:
        base = self.path.name + (f":{self.head}" if self.head else "")
        return base if self.view == "orig" else f"{base} [{self.view}]"


def _parse_view(text: str) -> tuple[bool, float]:
    """``orig``, ``flip``, ``scale:S``, or ``flip+scale:S`` -> (flip, scale).

    >>> _parse_view("flip"), _parse_view("scale:1.25"), _parse_view("flip+scale:0.8")
    ((True, 1.0), (False, 1.25), (True, 0.8))
    """
    flip, scale = False, 1.0
    for tok in str(text).strip().lower().split("+"):
        if tok in ("orig", "original", ""):
            continue
        if tok in ("flip", "hflip", "fliplr"):
            flip = True
            continue
        if tok.startswith("scale:") or tok.startswith("scale="):
            try:
                scale = float(tok[6:])
            except ValueError:
                scale = -1.0
            if not 0.25 <= scale <= 4:
                raise InputError(f"Expected a `view` scale in [0.25, 4], but got {tok!r}")
            continue
        raise InputError(
            f"Expected each `view` to be orig, flip, scale:S or flip+scale:S, but got {text!r}"
        )
    return flip, scale


def _model_arg(text: str | Path) -> tuple[Path, str | None]:
    """``a.pt`` or ``a.pt:e2e`` (the member runs that head) -> (path, head)."""
    s = str(text)
    for h in HEADS:
        if s.endswith(f":{h}"):
            return Path(s[: -len(h) - 1]), h
    base, sep, head = s.rpartition(":")
    if sep and Path(base).suffix in MEMBER_LOADERS and not Path(s).exists():
        raise InputError(
            f"`{head}` in {s} is not a head: MODEL:HEAD names one of {', '.join(HEADS)}"
        )
    return Path(s), None


def _snapshot_paths(folder: str | Path) -> list[Path]:
    """The checkpoints of one training run's ``weights`` folder (``epochN.pt`` by epoch, then ``last.pt``).

    ``best.pt`` is left out: it is one of the epochs. A run folder (holding ``weights/``) works too.
    """
    d = Path(folder)
    if (d / "weights").is_dir():
        d = d / "weights"
    if not d.is_dir():
        raise InputError(f"snapshot folder not found: {d}")

    def epoch(p: Path) -> int:
        digits = "".join(ch for ch in p.stem if ch.isdigit())
        return int(digits) if digits else -1

    found = sorted(d.glob("epoch*.pt"), key=epoch) + [p for p in (d / "last.pt",) if p.is_file()]
    if not found:
        raise InputError(f"no snapshots (epochN.pt, last.pt) in {d}")
    return found


def member_specs(
    models: Sequence[str | Path] = (),
    *,
    snapshots: Sequence[str | Path] = (),
    views: Sequence[str] = (),
) -> list[MemberSpec]:
    """The members given on the command line: each model (and snapshot) under each view.

    With ``views``, every model is seen through each view (``orig`` included only when named);
    the members are then of kind ``view``.

    Raises:
        InputError: Fewer than two members, a bad view, a missing snapshot folder.
    """
    base = [MemberSpec(p, "checkpoint", head=h) for p, h in map(_model_arg, models)]
    for folder in snapshots:
        base += [MemberSpec(p, "snapshot") for p in _snapshot_paths(folder)]
    if views:
        parsed = [_parse_view(v) for v in views]
        out = [
            replace(b, kind="view" if len(base) == 1 else b.kind, flip=f, scale=sc)
            for b in base
            for f, sc in parsed
        ]
    else:
        out = base
    if len({(m.path.resolve(), m.flip, m.scale, m.head) for m in out}) != len(out):
        raise InputError("the same member is given twice (same model, view and head)")
    if len(out) < 2:
        raise InputError(
            f"an ensemble needs at least two members, got {len(out)}: give another `model`, "
            "`snapshots`, "
            "or test-time views of the one model (`view` flip, `view` scale:1.2)"
        )
    return out


_DEMO_VIEWS = ("orig", "flip", "scale:1.2")
"""The test-time views of the demo ensemble where no seed members sit beside the demo detector (a wheel install)."""


def demo_members() -> tuple[list[MemberSpec], str]:
    """The embedded default's members and what they are, in words.

    The seed members (``det_calib/demo/assets/yolo26n_shapes_seed*.pt``, trained by
    ``datasets/shapes/train.py --seed N``) beside the shipped model when there are any (in a checkout
    of the repository; the wheel leaves them out); else the shipped model's test-time views
    :data:`_DEMO_VIEWS`.
    """

    model = demo.demo_model()
    seeds = sorted(model.parent.glob(f"{model.stem}_seed*.pt"))
    if seeds:
        specs = [MemberSpec(model)] + [MemberSpec(p) for p in seeds]
        return (
            specs,
            f"the shipped model and its {len(seeds)} seed member(s) "
            f"({', '.join(p.name for p in seeds)})",
        )
    specs = member_specs([model], views=_DEMO_VIEWS)
    return specs, (
        f"test-time views of the shipped model ({', '.join(_DEMO_VIEWS)}): no seed members beside "
        "it "
        f"(a checkout of the repository has them; datasets/shapes/train.py --seed N writes "
        f"{model.stem}_seedN.pt)"
    )


class Member(Protocol):
    """What the ensemble needs of a loaded member (see the module docstring)."""

    spec: MemberSpec
    heads: tuple[str, ...]
    names: list[str]
    imgsz: Any
    fingerprint: str

    def predict(self, im0: np.ndarray, worker: int) -> dict[str, tuple[np.ndarray, ...]]: ...


@dataclass
class TorchMember:
    """A PyTorch checkpoint (or model yaml) run by det_calib's :class:`~det_calib.capture.Capturer`."""

    spec: MemberSpec
    capturer: Any
    fingerprint: str
    heads: tuple[str, ...] = ()
    names: list[str] = field(default_factory=list)

    @property
    def imgsz(self) -> Any:
        return self.capturer.imgsz

    def predict(self, im0: np.ndarray, worker: int) -> dict[str, tuple[np.ndarray, ...]]:
        """Per head: ``(xyxy, conf, cls, logit)`` of one BGR image, as single-image ``predict``."""
        cap = self.capturer
        im = np.ascontiguousarray(im0[:, ::-1]) if self.spec.flip else im0
        h, w = im0.shape[:2]
        sizes = np.array([[w, h]], dtype=np.int32)
        out: dict[str, dict[int, tuple]] = {hd: {} for hd in cap.heads}
        cap._run(cap.backends[worker], [(0, cap._letterbox(image=im))], sizes, out)
        res = {}
        for hd in cap.heads:
            xyxy, conf, cls, z = out[hd][0][:4]
            if self.spec.flip:
                xyxy = np.stack([w - xyxy[:, 2], xyxy[:, 1], w - xyxy[:, 0], xyxy[:, 3]], 1)
            res[hd] = (xyxy, conf, cls, z)
        return res


def _open_torch_member(
    spec: MemberSpec,
    heads: Sequence[str],
    *,
    conf: float,
    iou: float,
    max_det: int,
    imgsz: int | None,
    device: str | None,
    workers: int,
) -> TorchMember:
    """Load a ``.pt`` (or ``.yaml``) member for capture; ``heads``: the heads it runs."""

    yolo = _load_member_model(spec.path)
    size = imgsz or default_imgsz(yolo)
    if spec.scale != 1.0:
        size = max(32, int(round(size * spec.scale / 32)) * 32)
    cap = Capturer(
        yolo,
        heads=tuple(heads),
        conf=conf,
        iou=iou,
        max_det=max_det,
        imgsz=size,
        batch=1,
        device=device,
        workers=workers,
    )
    fp = model_fingerprint(spec.path) if spec.path.suffix == ".pt" else f"yaml:{spec.path.name}"
    return TorchMember(spec, cap, fp, tuple(cap.heads), list(cap.names))


MEMBER_LOADERS: dict[str, Callable[..., Member]] = {
    ".pt": _open_torch_member,
    ".yaml": _open_torch_member,
    ".yml": _open_torch_member,
}
"""Suffix of a member's file -> its loader ``(spec, heads, *, conf, iou, max_det, imgsz, device, workers)``."""


def member_heads(spec: MemberSpec) -> list[str]:
    """The heads a member's model has (loads it; a missing or bad file is an InputError)."""

    if spec.path.suffix not in MEMBER_LOADERS:
        raise InputError(
            f"member {spec.path}: no loader for `{spec.path.suffix}` files "
            f"(known: {', '.join(MEMBER_LOADERS)})"
        )
    if spec.path.suffix == ".pt" and not spec.path.is_file():
        raise InputError(f"model file not found: {spec.path}")
    return available_heads(_load_member_model(spec.path))


def _load_member_model(path: Path) -> Any:
    """A member's detector (:func:`~det_calib.capture.predictor.load_detector`).

    Raises:
        InputError: A segment, pose or OBB model: the ensemble fuses axis-aligned boxes, and a fused box
            has no mask, keypoints or angle of its own (docs/segment.md and docs/pose_obb.md say why the
            ensemble refuses rather than drops the payload).
    """

    yolo = load_detector(path)
    if (
        family := family_of(yolo)
    ) is not None:  # the members' one decode per image is the YOLO heads'
        raise InputError(
            f"member {path} is a model of family `{family.name}`: det-calib ensemble fuses YOLO "
            "detect heads; calibrate it on its own with `det-calib calibrate`"
        )
    task = get_task(getattr(yolo, "task", None))
    if not task.fusable:  # a fused box has no payload of its own
        raise InputError(
            f"member {path} is {task.words}: det-calib ensemble fuses boxes and cannot fuse "
            f"{task.payload_words}; calibrate {task.words} on its own with `det-calib calibrate`"
        )
    return yolo


def head_plan(
    specs: Sequence[MemberSpec], have: Sequence[Sequence[str]], head: str
) -> dict[str, list[str]]:
    """Ensemble head -> the head each member runs for it.

    ``auto``: the heads every member has (each member runs that head), or, when they share none
    (a YOLOv8 with only its NMS head beside a model with only its one-to-one head), one ensemble
    head ``nms`` for which each member runs the head it has. ``nms``/``e2e``/``both``: those heads;
    a member that lacks one is an error. A member given with ``:head`` runs that head always.
    """
    for spec, hv in zip(specs, have, strict=True):
        if spec.head and spec.head not in hv:
            raise InputError(
                f"member {spec.path.name} has no `{spec.head}` head (it has: {', '.join(hv)})"
            )

    def own(i: int, h: str) -> str | None:
        if specs[i].head:
            return specs[i].head
        return h if h in have[i] else None

    if head == "auto":
        shared = [h for h in HEADS if all(own(i, h) is not None for i in range(len(specs)))]
        if shared:
            return {h: [own(i, h) for i in range(len(specs))] for h in shared}
        return {"nms": [own(i, "nms") or own(i, "e2e") or have[i][0] for i in range(len(specs))]}
    want = list(HEADS) if head == "both" else [head]
    plan = {}
    for h in want:
        runs = []
        for i, spec in enumerate(specs):
            r = own(i, h)
            if r is None:
                raise InputError(
                    f"member {spec.name} has no `{specs[i].head or h}` head (it has: "
                    f"{', '.join(have[i])}); choose `head` auto"
                )
            runs.append(r)
        plan[h] = runs
    return plan


def capture_members(
    members: Sequence[Member],
    images: Sequence[str],
    heads: Sequence[Sequence[str]],
    *,
    split: str,
    image_names: Sequence[str],
    progress: bool = True,
    workers: int = 1,
    seconds: np.ndarray | None = None,
) -> list[pl.DataFrame]:
    """Every member's boxes on ``images``, each image decoded once for all members.

    Args:
        heads: Per member, the heads to keep.
        workers: Images run at once (threads); member ``m`` runs in thread ``w`` on its ``w``-th
            network copy, so the boxes do not depend on it.
        seconds: Optional ``(members,)`` array: each member's thread time is added to it.

    Returns:
        One capture table per member (the columns of :func:`det_calib.capture.capture`).
    """

    n = len(images)
    sizes = np.zeros((n, 2), dtype=np.int32)
    got: list[dict[str, dict[int, tuple]]] = [{h: {} for h in hs} for hs in heads]
    feed = SharedImages(
        [str(p) for p in images],
        depth=2 * workers,
        desc=f"capture {split} [{len(members)} members]",
        progress=progress,
    )
    bar = feed.bar
    spent = np.zeros((workers, len(members)))

    def work(w: int) -> None:
        while True:
            item = feed.next()
            if item is None:
                return
            pos, im0 = item
            if im0 is None:
                _log.warning("cannot read image %s: skipped", images[pos])
                bar.update(1)
                continue
            sizes[pos] = (im0.shape[1], im0.shape[0])
            for m, member in enumerate(members):
                t = time.thread_time()
                res = member.predict(im0, w)
                spent[w, m] += time.thread_time() - t
                for h in heads[m]:
                    got[m][h][pos] = res[h]
            bar.update(1)

    from concurrent.futures import ThreadPoolExecutor

    try:
        with ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="det_calib-ensemble"
        ) as pool:
            for f in [pool.submit(work, w) for w in range(workers)]:
                f.result()
    finally:
        feed.close()
        if seconds is not None:
            seconds += spent.sum(axis=0)
    ids = np.arange(n, dtype=np.int64)
    return [
        _table(got[m], heads[m], sizes, list(image_names), ids, split) for m in range(len(members))
    ]


def _table(
    got: dict[str, dict[int, tuple]],
    heads: Sequence[str],
    sizes: np.ndarray,
    names: list[str],
    ids: np.ndarray,
    split: str,
) -> pl.DataFrame:
    """One member's boxes as a capture table (head after head, images in order)."""

    frames = []
    for h in heads:
        per = got[h]
        order = sorted(per)
        counts = np.array([len(per[p][1]) for p in order], dtype=np.int64)
        pos = np.repeat(np.array(order, dtype=np.int64), counts)

        def cat(j: int, dt: Any, per: dict = per, order: list = order) -> np.ndarray:
            return (
                np.concatenate([per[p][j] for p in order]).astype(dt) if order else np.zeros(0, dt)
            )

        xyxy = cat(0, np.float64).reshape(-1, 4)
        frames.append(
            pl.DataFrame(
                {
                    "image": (
                        pl.Series("image", names, dtype=pl.String).gather(pos)
                        if len(pos)
                        else pl.Series([], dtype=pl.String)
                    ),
                    "image_id": ids[pos],
                    "split": [split] * len(pos),
                    "head": [h] * len(pos),
                    "x1": xyxy[:, 0],
                    "y1": xyxy[:, 1],
                    "x2": xyxy[:, 2],
                    "y2": xyxy[:, 3],
                    "img_w": sizes[pos, 0],
                    "img_h": sizes[pos, 1],
                    "cls": cat(2, np.int32),
                    "conf": cat(1, np.float64),
                    "logit": cat(3, np.float64),
                },
                schema={c: SCHEMA[c] for c in CAPTURE_COLUMNS},
            )
        )
    return pl.concat(frames)
