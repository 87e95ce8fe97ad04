"""Deterministic generator of the ``shapes`` demo detection dataset.

Every image is rendered from a seed derived from ``(seed, split, index)``, so a split can be
regenerated image by image, in any order, and always gives the same pixels and labels for the
same numpy and OpenCV versions. Labels are Ultralytics YOLO txt files
(``cls cx cy w h``, normalised); boxes are the tight box of each object's *visible* pixels
(COCO style), so border truncation and occlusion shrink the box, and objects with less than
``MIN_VISIBLE`` of their area visible are left unlabelled.

Examples:
    >>> from det_calib.demo.shapes import render_image
    >>> img, labels = render_image(0, "test", 3)
    >>> img.shape[2], labels.shape[1]
    (3, 5)
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_log = logging.getLogger(__name__)

CLASS_NAMES: tuple[str, ...] = (
    "circle",
    "ellipse",
    "square",
    "rectangle",
    "triangle",
    "hexagon",
    "star",
    "cross",
)
"""Labelled classes. Confusable pairs: circle/ellipse, square/rectangle, hexagon/circle."""

_DISTRACTORS: tuple[str, ...] = ("pentagon", "blob", "line", "arc", "scribble")
"""Unlabelled objects drawn to provoke false positives (a pentagon looks like a hexagon)."""

SPLIT_SIZES: dict[str, int] = {"train": 1600, "calib": 400, "test": 400}
"""Images per split of the full dataset."""

_FIXTURE_SIZE = 12
_IMAGE_SIZES: tuple[tuple[int, int], ...] = ((320, 320), (384, 288), (288, 384))
"""(width, height) choices; non-square sizes exercise letterboxing."""

_MIN_VISIBLE = 0.35
_EMPTY_FRACTION = 0.08
GENERATOR_VERSION = 1


def _rng(seed: int, split: str, index: int) -> np.random.Generator:
    digest = hashlib.sha256(f"shapes-v{GENERATOR_VERSION}/{seed}/{split}/{index}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


# ----------------------------------------------------------------------------- backgrounds
def _background(rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    import cv2

    kind = rng.choice(["flat", "gradient", "noise", "stripes", "checker", "clouds"])
    base = rng.uniform(20, 235, size=3)
    if kind == "flat":
        img = np.broadcast_to(base, (h, w, 3)).copy()
    elif kind == "gradient":
        other = rng.uniform(20, 235, size=3)
        ang = rng.uniform(0, 2 * np.pi)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        t = xx * np.cos(ang) + yy * np.sin(ang)
        t = (t - t.min()) / max(float(np.ptp(t)), 1.0)
        img = base * (1 - t[..., None]) + other * t[..., None]
    elif kind == "noise":
        img = base + rng.normal(0, rng.uniform(10, 45), size=(h, w, 3))
    elif kind == "stripes":
        other = rng.uniform(20, 235, size=3)
        ang = rng.uniform(0, np.pi)
        period = rng.uniform(6, 40)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        t = 0.5 + 0.5 * np.sin(2 * np.pi * (xx * np.cos(ang) + yy * np.sin(ang)) / period)
        img = base * (1 - t[..., None]) + other * t[..., None]
    elif kind == "checker":
        other = rng.uniform(20, 235, size=3)
        cell = int(rng.integers(8, 48))
        yy, xx = np.mgrid[0:h, 0:w]
        t = ((xx // cell + yy // cell) % 2).astype(np.float32)
        img = base * (1 - t[..., None]) + other * t[..., None]
    else:  # clouds: upsampled low-resolution noise
        small = rng.normal(0, 1, size=(int(rng.integers(3, 9)), int(rng.integers(3, 9)), 3))
        up = cv2.resize(small.astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)
        img = base + up * rng.uniform(15, 50)
    return np.clip(img, 0, 255).astype(np.float32)


# ----------------------------------------------------------------------------- shapes
def _regular_polygon(n: int, r: float, rot: float, star: bool = False) -> np.ndarray:
    if star:
        k = np.arange(2 * n)
        radii = np.where(k % 2 == 0, r, r * 0.45)
        ang = rot + np.pi * k / n
        return np.stack([radii * np.cos(ang), radii * np.sin(ang)], 1)
    ang = rot + 2 * np.pi * np.arange(n) / n
    return np.stack([r * np.cos(ang), r * np.sin(ang)], 1)


def _rotate(pts: np.ndarray, rot: float) -> np.ndarray:
    c, s = np.cos(rot), np.sin(rot)
    return pts @ np.array([[c, s], [-s, c]])


def _outline(name: str, size: float, rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """Polygon (centred at 0) of an object of ``size`` pixels across; flag: draw as polyline."""
    r = size / 2
    rot = rng.uniform(0, 2 * np.pi)
    if name == "circle":
        return _regular_polygon(64, r, 0.0), False
    if name == "ellipse":
        ratio = rng.uniform(0.5, 0.8)
        return _rotate(_regular_polygon(64, r, 0.0) * [1.0, ratio], rot), False
    if name == "square":
        return _regular_polygon(4, r, rot), False
    if name == "rectangle":
        ratio = rng.uniform(0.45, 0.78)
        pts = np.array([[-1, -ratio], [1, -ratio], [1, ratio], [-1, ratio]], dtype=float) * r
        return _rotate(pts, rot), False
    if name == "triangle":
        return _regular_polygon(3, r, rot), False
    if name == "hexagon":
        return _regular_polygon(6, r, rot), False
    if name == "pentagon":
        return _regular_polygon(5, r, rot), False
    if name == "star":
        return _regular_polygon(5, r, rot, star=True), False
    if name == "cross":
        a, b = r, r * rng.uniform(0.25, 0.4)
        pts = np.array(
            [
                [-b, -a],
                [b, -a],
                [b, -b],
                [a, -b],
                [a, b],
                [b, b],
                [b, a],
                [-b, a],
                [-b, b],
                [-a, b],
                [-a, -b],
                [-b, -b],
            ]
        )
        return _rotate(pts, rot), False
    if name == "blob":
        n = 24
        ang = 2 * np.pi * np.arange(n) / n
        radii = r * (
            0.6 + 0.4 * np.abs(np.convolve(rng.normal(size=n + 4), np.ones(5) / 5, "valid")[:n])
        )
        return np.stack([radii * np.cos(ang), radii * np.sin(ang)], 1), False
    if name == "line":
        return _rotate(np.array([[-r, 0.0], [r, 0.0]]), rot), True
    if name == "arc":
        ang = np.linspace(0, rng.uniform(1.5, 4.5), 24)
        return _rotate(np.stack([r * np.cos(ang), r * np.sin(ang)], 1), rot), True
    # scribble: a short random walk
    steps = rng.normal(0, r / 3, size=(8, 2)).cumsum(0)
    return steps - steps.mean(0), True


def _colour(rng: np.random.Generator, bg_mean: np.ndarray) -> np.ndarray:
    """A random colour, usually with enough contrast to the local background, sometimes not."""
    for _ in range(8):
        c = rng.uniform(0, 255, size=3)
        if np.abs(c - bg_mean).mean() > (12 if rng.random() < 0.1 else 40):
            return c
    return c


@dataclass(frozen=True)
class _Object:
    cls: int  # -1 for distractors
    poly: np.ndarray
    polyline: bool
    colour: np.ndarray
    thickness: int
    hollow: bool


# ----------------------------------------------------------------------------- rendering
def render_image(seed: int, split: str, index: int) -> tuple[np.ndarray, np.ndarray]:
    """Render one image.

    Args:
        seed: Dataset seed.
        split: Split name; part of the per-image seed.
        index: Image index within the split.

    Returns:
        ``(image, labels)``: a uint8 BGR image of shape (H, W, 3) and a float array of shape
        (n, 5) with rows ``cls cx cy w h`` normalised to [0, 1].
    """
    r = render_with_owners(seed, split, index)
    return r.image, r.labels


@dataclass(frozen=True)
class Rendered:
    """One rendered image with what its labels were computed from.

    Attributes:
        image: uint8 BGR image, (H, W, 3).
        labels: (n, 5) float64 rows ``cls cx cy w h``, normalised (what :func:`render_image` returns).
        owners: (H, W) int32: index (in drawing order) of the object that owns each pixel (the
            last one drawn over it), -1 for background.
        labelled: (n,) int64: the drawing-order index of the object of each label row, so that
            ``owners == labelled[i]`` is the visible region of label ``i``.
        outlines: The outline of every drawn object (labelled or not), in drawing order: a (k, 2)
            float64 array of the points it was drawn from, in OpenCV's pixel-centre frame (pixel
            ``i`` centred at ``i``; add 0.5 for COCO's pixel-edge frame), possibly outside the image.
    """

    image: np.ndarray
    labels: np.ndarray
    owners: np.ndarray
    labelled: np.ndarray
    outlines: tuple[np.ndarray, ...] = ()


def render_with_owners(seed: int, split: str, index: int) -> Rendered:
    """Render one image as :func:`render_image` does (same random stream, same pixels and labels),
    also returning the pixel owner map the labels were computed from."""
    rng = _rng(seed, split, index)
    w, h = _IMAGE_SIZES[int(rng.integers(len(_IMAGE_SIZES)))]
    img = _background(rng, w, h)
    n_obj = 0 if rng.random() < _EMPTY_FRACTION else int(rng.integers(1, 11))
    n_distract = int(rng.poisson(1.2))
    names = [int(c) for c in rng.integers(0, len(CLASS_NAMES), size=n_obj)]
    names += [-1 - int(d) for d in rng.integers(0, len(_DISTRACTORS), size=n_distract)]
    order = rng.permutation(len(names))
    short = min(w, h)

    ids = np.full((h, w), -1, dtype=np.int32)  # which object owns each pixel (last drawn wins)
    objects: list[_Object] = []
    full_area: list[int] = []
    for k in order:
        cls = names[k]
        name = CLASS_NAMES[cls] if cls >= 0 else _DISTRACTORS[-1 - cls]
        size = float(np.exp(rng.uniform(np.log(8), np.log(0.6 * short))))
        poly, polyline = _outline(name, size, rng)
        # centres may fall slightly outside the image: truncation at borders
        centre = np.array([rng.uniform(-0.1 * w, 1.1 * w), rng.uniform(-0.1 * h, 1.1 * h)])
        poly = poly + centre
        cx, cy = int(np.clip(centre[0], 0, w - 1)), int(np.clip(centre[1], 0, h - 1))
        colour = _colour(rng, img[cy, cx])
        hollow = (not polyline) and size > 24 and rng.random() < 0.15
        thickness = int(rng.integers(1, 4)) if polyline or hollow else -1
        obj = _Object(cls if cls >= 0 else -1, poly, polyline, colour, thickness, hollow)
        mask = np.zeros((h, w), dtype=np.uint8)
        # area of the whole object on an unbounded canvas, to measure truncation
        _draw(mask, obj, 1)
        shift = poly.min(0)
        ext = np.ceil(poly.max(0) - shift).astype(int) + 3
        big = np.zeros((ext[1], ext[0]), dtype=np.uint8)
        _draw(big, _Object(obj.cls, poly - shift + 1, polyline, colour, thickness, hollow), 1)
        full_area.append(int(big.sum()))
        ids[mask > 0] = len(objects)
        objects.append(obj)
        _draw_colour(img, obj, rng)

    labels, labelled = [], []
    for k, obj in enumerate(objects):
        if obj.cls < 0 or full_area[k] == 0:
            continue
        ys, xs = np.nonzero(ids == k)
        if len(xs) == 0 or len(xs) / full_area[k] < _MIN_VISIBLE:
            continue
        x1, x2, y1, y2 = xs.min(), xs.max() + 1, ys.min(), ys.max() + 1
        if x2 - x1 < 4 or y2 - y1 < 4:
            continue
        labels.append([obj.cls, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h])
        labelled.append(k)

    img = _photometric(img, rng)
    return Rendered(
        img,
        np.array(labels, dtype=np.float64).reshape(-1, 5),
        ids,
        np.array(labelled, dtype=np.int64),
        tuple(o.poly for o in objects),
    )


def _draw(canvas: np.ndarray, obj: _Object, value) -> None:
    import cv2

    pts = np.round(obj.poly * 16).astype(np.int32)  # 4 fractional bits
    if obj.polyline or obj.hollow:
        cv2.polylines(
            canvas, [pts], not obj.polyline, value, max(obj.thickness, 1), cv2.LINE_8, shift=4
        )
    else:
        cv2.fillPoly(canvas, [pts], value, cv2.LINE_8, shift=4)


def _draw_colour(img: np.ndarray, obj: _Object, rng: np.random.Generator) -> None:
    import cv2

    pts = np.round(obj.poly * 16).astype(np.int32)
    colour = tuple(float(c) for c in obj.colour)
    if obj.polyline or obj.hollow:
        cv2.polylines(
            img, [pts], not obj.polyline, colour, max(obj.thickness, 1), cv2.LINE_AA, shift=4
        )
        return
    cv2.fillPoly(img, [pts], colour, cv2.LINE_AA, shift=4)
    if rng.random() < 0.3:  # a contrasting outline
        edge = tuple(float(c) for c in rng.uniform(0, 255, size=3))
        cv2.polylines(img, [pts], True, edge, int(rng.integers(1, 3)), cv2.LINE_AA, shift=4)


def _photometric(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    import cv2

    if rng.random() < 0.35:
        k = float(rng.uniform(0.6, 2.0))
        img = cv2.GaussianBlur(img, (0, 0), k)
    gain = (
        rng.uniform(0.6, 1.35, size=3) if rng.random() < 0.5 else np.full(3, rng.uniform(0.6, 1.35))
    )
    img = img * gain + rng.uniform(-30, 30)
    if rng.random() < 0.5:
        img = img + rng.normal(0, rng.uniform(2, 12), size=img.shape)
    img = np.clip(img, 0, 255)
    gamma = rng.uniform(0.7, 1.4)
    img = 255.0 * (img / 255.0) ** gamma
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


# ----------------------------------------------------------------------------- writing
def _write_split(root: Path, split: str, n: int, *, seed: int = 0, ext: str = ".png") -> int:
    """Render ``n`` images of ``split`` into ``root/images/split`` and ``root/labels/split``.

    Returns:
        The number of labelled objects written.
    """
    import cv2

    img_dir, lbl_dir = root / "images" / split, root / "labels" / split
    img_dir.mkdir(parents=True, exist_ok=True)
    lbl_dir.mkdir(parents=True, exist_ok=True)
    count = 0
    for i in range(n):
        img, labels = render_image(seed, split, i)
        stem = f"{split}_{i:05d}"
        if not cv2.imwrite(str(img_dir / f"{stem}{ext}"), img):
            raise OSError(f"could not write {img_dir / (stem + ext)}")
        lines = [f"{int(c)} {x:.6f} {y:.6f} {bw:.6f} {bh:.6f}" for c, x, y, bw, bh in labels]
        (lbl_dir / f"{stem}.txt").write_text("\n".join(lines) + ("\n" if lines else ""))
        count += len(labels)
    return count


def swap_in_split(root: Path, split: str, write: Callable[[Path], object]) -> None:
    """Write a split with ``write(tmp)`` (its ``images/<split>`` and ``labels/<split>`` under ``tmp``, a new
    folder in ``root``), then move both into ``root`` in place of the old ones: an interrupted write
    leaves no half-written split behind."""
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=f".{split}.tmp-", dir=root))
    try:
        write(tmp)
        for kind in ("images", "labels"):
            final = root / kind / split
            final.parent.mkdir(exist_ok=True)
            if final.exists():
                shutil.rmtree(final)
            (tmp / kind / split).rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def generate(
    root: Path, *, seed: int = 0, splits: dict[str, int] | None = None, ext: str = ".png"
) -> None:
    """Render the splits in ``splits`` (default :data:`SPLIT_SIZES`) under ``root``.

    Each split is rendered into a temporary folder and renamed into place, so an interrupted run
    never leaves a half-written split under its final name. Splits already present are replaced.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for split, n in dict(SPLIT_SIZES if splits is None else splits).items():
        _log.info("rendering %d %s images into %s", n, split, root)
        swap_in_split(
            root,
            split,
            lambda tmp, split=split, n=n: _write_split(tmp, split, n, seed=seed, ext=ext),
        )
