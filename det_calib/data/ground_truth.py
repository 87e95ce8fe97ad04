# Long file: the dataset readers (data.yaml splits, YOLO txt and COCO JSON labels, image sizes, the
# eval half) build one Split and share its checks; apart they would re-check each other.
"""Datasets: resolve a ``data.yaml`` split to images, read YOLO txt or COCO JSON ground truth.

Ground truth comes out as a polars table with one row per annotation:

=========  =======  ========================================================
image_id   int64    index of the image in the split's image list
x1..y2     float64  box corners in original image pixels
cls        int32    class id (model/data.yaml numbering)
crowd      bool     COCO ``iscrowd`` (always False for YOLO txt labels)
=========  =======  ========================================================
"""

from __future__ import annotations

import ast
import contextlib
import functools
import glob
import importlib.util
import json
import logging
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.errors import InputError

_log = logging.getLogger(__name__)


def image_suffixes() -> set[str]:
    """The image formats Ultralytics' loader reads (its own list, so both skip the same files)."""
    return {f".{x.lower()}" for x in _ultralytics_img_formats()}


@functools.cache
def _ultralytics_img_formats() -> frozenset[str]:
    """``ultralytics.data.utils.IMG_FORMATS``, read from its source where Ultralytics is not imported
    (importing it imports torch, which a run reusing boxes never needs); imported where the source
    does not hold it as a literal."""
    if "ultralytics" not in sys.modules and (found := _img_formats_in_source()) is not None:
        return found
    from ultralytics.data.utils import IMG_FORMATS

    return frozenset(IMG_FORMATS)


def _img_formats_in_source() -> frozenset[str] | None:
    """The literal ``IMG_FORMATS = {...}`` of the installed ``ultralytics/data/utils.py`` (None where
    it holds none)."""
    spec = importlib.util.find_spec("ultralytics")  # finds the package, imports nothing
    if spec is None or not spec.submodule_search_locations:
        return None
    source = Path(spec.submodule_search_locations[0]) / "data" / "utils.py"
    with contextlib.suppress(OSError, SyntaxError, ValueError):
        for node in ast.parse(source.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
                "IMG_FORMATS"
            ]:
                return frozenset(ast.literal_eval(node.value))
    return None


_GT_SCHEMA = {
    "image_id": pl.Int64,
    "x1": pl.Float64,
    "y1": pl.Float64,
    "x2": pl.Float64,
    "y2": pl.Float64,
    "cls": pl.Int32,
    "crowd": pl.Boolean,
}


@dataclass
class Split:
    """One split of a dataset: its images (readable ones only), their sizes and ground truth.

    Attributes:
        name: Split name as in data.yaml (``calib``, ``test``...).
        images: Paths of the readable images, in a fixed (sorted) order; ``image_id`` indexes it.
        sizes: (n, 2) int array of (width, height) per image.
        gt: Ground-truth table (see module docstring).
        corrupt: Images left out (counted and listed in the report): those that could not be
            read, and those whose label file has a malformed line (as Ultralytics leaves out a
            "corrupt image/label").
        root: Folder the image names are relative to.
        bad_labels: ``"<file>:<line>: <reason>"`` for each malformed label file (its image is in
            :attr:`corrupt`).
    """

    name: str
    images: list[Path]
    sizes: np.ndarray
    gt: pl.DataFrame
    corrupt: list[str] = field(default_factory=list)
    root: Path | None = None
    bad_labels: list[str] = field(default_factory=list)

    @classmethod
    def of_folder(cls, images: Path, *, limit: int | None = None) -> Split:
        """The images of a folder (its subfolders too) as a split ``images`` without ground truth:
        the readable ones among the first ``limit`` in path order (``check`` on unlabelled images).

        Raises:
            InputError: Not a folder, no image in it, or none readable.
        """
        if not images.is_dir():
            raise InputError(f"`images` {images} is not a folder")
        files = sorted(p for p in images.rglob("*") if p.suffix.lower() in image_suffixes())
        if not files:
            raise InputError(
                f"no images in {images} (looked for {', '.join(sorted(image_suffixes()))})"
            )
        files = files[:limit] if limit else files
        files, sizes, corrupt = _image_sizes(files)
        if not files:
            raise InputError(f"no readable images in {images} ({len(corrupt)} unreadable)")
        return cls(
            name="images",
            images=files,
            sizes=sizes,
            gt=pl.DataFrame(schema=_GT_SCHEMA),
            corrupt=corrupt,
            root=images,
        )

    def image_names(self) -> list[str]:
        """Image identifiers: paths relative to :attr:`root` where possible."""
        out = []
        for p in self.images:
            try:
                out.append(str(p.relative_to(self.root)) if self.root else str(p))
            except ValueError:
                out.append(str(p))
        return out

    def gt_counts(self, n_classes: int) -> list[int]:
        """Non-crowd ground-truth boxes per class id ``0..n_classes-1`` (a run records them as
        ``gt_counts``)."""
        cls = self.gt.filter(~pl.col("crowd"))["cls"].to_numpy().astype(np.int64)
        return np.bincount(cls[(cls >= 0) & (cls < n_classes)], minlength=n_classes).tolist()

    def halves(self, *, seed: int = 0) -> tuple[Split, Split]:
        """Deterministic image-level half/half split (fit, eval) of this split, named
        ``<name>[fit-half]`` and ``<name>[eval-half]`` (:meth:`half_of` reads them back)."""
        rng = np.random.default_rng(seed)
        perm = rng.permutation(len(self.images))
        half = len(perm) // 2
        if half == 0:
            raise InputError(
                f"split `{self.name}` has {len(self.images)} image(s): too few to halve"
            )
        a, b = np.sort(perm[:half]), np.sort(perm[half:])
        return self.subset(a, self.name + _HALVES[0]), self.subset(b, self.name + _HALVES[1])

    @staticmethod
    def half_of(name: str) -> tuple[str, int | None]:
        """The split a split named ``name`` was taken from, and which of its halves it is (0: the
        fit half, 1: the eval half, as :meth:`halves` names them; None: the whole split).

        >>> Split.half_of("val[eval-half]"), Split.half_of("test")
        (('val', 1), ('test', None))
        """
        for half, suffix in enumerate(_HALVES):
            if name.endswith(suffix):
                return name.removesuffix(suffix), half
        return name, None

    def subset(self, ids: np.ndarray, name: str | None = None) -> Split:
        """The split restricted to images ``ids`` (renumbered 0..len(ids)-1)."""
        ids = np.asarray(ids, dtype=np.int64)
        remap = np.full(len(self.images), -1, dtype=np.int64)
        remap[ids] = np.arange(len(ids))
        gt = self.gt.filter(pl.col("image_id").is_in(ids.tolist()))
        gt = gt.with_columns(pl.Series("image_id", remap[gt["image_id"].to_numpy()]))
        return Split(
            name=name or self.name,
            images=[self.images[i] for i in ids],
            sizes=self.sizes[ids],
            gt=gt,
            corrupt=list(self.corrupt),
            root=self.root,
            bad_labels=list(self.bad_labels),
        )


@dataclass
class Dataset:
    """A parsed ``data.yaml``."""

    yaml_path: Path
    root: Path
    names: list[str]
    splits: dict[str, list[Path]]  # split name -> image folders / list files as written in the yaml

    @property
    def nc(self) -> int:
        return len(self.names)


def load_data_yaml(path: str | Path) -> Dataset:
    """Parse a YOLO ``data.yaml``.

    ``path`` (the dataset root) is resolved relative to the yaml's folder when relative; without
    it the yaml's folder is the root. Split values may be a folder, a ``.txt`` list of images, or
    a list of those.

    Raises:
        InputError: The file is missing, not YAML, or lacks ``names``.
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise InputError(f"data.yaml not found: {path}")
    try:
        d = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise InputError(f"cannot parse {path} as YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(d, dict):
        raise InputError(
            f"{path} is not a data.yaml (expected a mapping with `names` and split keys)"
        )
    names = d.get("names")
    if isinstance(names, dict):
        try:
            by_id = {int(k): v for k, v in names.items()}
        except (TypeError, ValueError):
            raise InputError(f"{path}: `names` keys must be integers 0..nc-1") from None
        keys = sorted(by_id)
        if keys != list(range(len(keys))):
            raise InputError(f"{path}: `names` keys must be 0..{len(keys) - 1}, got {keys}")
        names = [str(by_id[k]) for k in keys]
    elif isinstance(names, list):
        names = [str(n) for n in names]
    else:
        raise InputError(f"{path}: missing `names` (the class names)")
    root = _dataset_root(d.get("path"), path)
    splits: dict[str, list[Path]] = {}
    for key, val in d.items():
        if key in ("path", "names", "nc", "download", "yaml_file", "channels") or val is None:
            continue
        vals = val if isinstance(val, list) else [val]
        if not all(isinstance(v, str) for v in vals):
            continue
        splits[key] = [_split_path(root, v) for v in vals]
    return Dataset(yaml_path=_absolute(path), root=root, names=names, splits=splits)


def _absolute(path: str | Path) -> Path:
    """``path`` made absolute against the current folder, ``.`` and ``..`` folded as written, and
    symlinks left as they are: a label file is found beside the image path the user gave, never
    beside the file a symlink points to (a subset of symlinked images carries labels of its own)."""
    return Path(os.path.abspath(path))


def _dataset_root(value: object, yaml_path: Path) -> Path:
    """The dataset root: ``path:`` as Ultralytics finds it, trying the yaml's folder first.

    A relative ``path:`` is tried against the yaml's folder, the current folder and Ultralytics'
    datasets folder, in that order; without ``path:`` the root is the yaml's folder. Symlinks
    are not followed (:func:`_absolute`).
    """
    if not value:
        return _absolute(yaml_path.parent)
    p = Path(str(value))
    if p.is_absolute():
        return _absolute(p)
    candidates = [yaml_path.parent / p, Path.cwd() / p]
    if not any(c.exists() for c in candidates):  # Ultralytics' datasets folder (it imports torch)
        try:
            from ultralytics.utils import DATASETS_DIR

            candidates.append(Path(DATASETS_DIR) / p)
        except ImportError:  # pragma: no cover
            pass
    return _absolute(next((c for c in candidates if c.exists()), candidates[0]))


def _split_path(root: Path, value: str) -> Path:
    """A split entry against the root; ``../x`` falls back to ``x`` as Ultralytics does (Roboflow
    exports write ``../valid/images`` relative to the yaml). Symlinks are not followed."""
    p = Path(value)
    if p.is_absolute():
        return _absolute(p)
    full = _absolute(root / p)
    if not full.exists() and value.startswith("../"):
        alt = _absolute(root / value[3:])
        if alt.exists():
            return alt
    return full


def list_images(sources: list[Path], *, split: str) -> list[Path]:
    """Image files of a split, found as Ultralytics' dataset finds them, sorted as it sorts them.

    A folder is searched recursively (``**/*.*``: hidden files and folders are passed over, as
    :func:`glob.glob` does); a ``.txt`` file lists one image a line, a line starting with ``./``
    relative to the list's folder and any other relative line relative to the current folder
    (Ultralytics' rule); a single image file is the split itself. Only files of Ultralytics' image
    formats count, whatever the case of their extension (``.JPG``). Paths are kept as given: no
    symlink is followed (:func:`_absolute`). In the order of Ultralytics' sort of the paths as
    written, so that ``--limit`` keeps the same first images.
    """
    found: list[str] = []
    suffixes = image_suffixes()
    for src in sources:
        if src.is_dir():
            found += glob.glob(os.path.join(glob.escape(str(src)), "**", "*.*"), recursive=True)
        elif src.is_file() and src.suffix.lower() == ".txt":
            listed = src.read_text(encoding="utf-8-sig").strip().splitlines()
            found += [
                str(src.parent / line[2:]) if line.startswith("./") else line
                for line in (x.strip() for x in listed)
                if line
            ]
        elif src.is_file() and src.suffix.lower() in suffixes:
            found.append(str(src))
        else:
            raise InputError(f"image folder of split `{split}` not found: {src}")
    files = [
        _absolute(f) for f in sorted(f for f in found if os.path.splitext(f)[1].lower() in suffixes)
    ]
    if not files:
        raise InputError(
            f"split `{split}` has no images (looked in {', '.join(map(str, sources))})"
        )
    return list(dict.fromkeys(files))  # an image listed twice counts once


def label_path(image: Path) -> Path:
    """YOLO label file of an image: the last ``/images/`` in the path becomes ``/labels/``."""
    parts = list(image.parts)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            break
    return Path(*parts).with_suffix(".txt")


def _image_sizes(images: list[Path]) -> tuple[list[Path], np.ndarray, list[str]]:
    """Read image headers to get (width, height); drop unreadable images.

    Headers only, no pixel decode (the capture decodes every image anyway): PIL's ``verify``
    checks each file's structure, as Ultralytics' dataset check does. A file PIL cannot read, or a
    JPEG without its end marker (truncated), is decided by Ultralytics' own image reader (what
    its predictor reads with): kept when it decodes the file, skipped otherwise.

    Returns:
        (readable images, (n, 2) sizes, corrupt image paths). A warning names each of the first
        :data:`_MAX_LISTED_WARNINGS` corrupt images, one more counts the rest.
    """
    from PIL import Image

    good, sizes, bad = [], [], []
    for p in images:
        try:
            with Image.open(p) as im:  # one open: size, format and EXIF come from the header
                w, h = im.size
                if _orientation(im) in (5, 6, 7, 8):  # EXIF rotation by 90 degrees:
                    w, h = h, w  # Ultralytics reads the image rotated, labels refer to that frame
                fmt = im.format
                im.verify()
            complete = fmt != "JPEG" or _jpeg_has_end_marker(p)
        except Exception:  # formats PIL can't open but Ultralytics' reader (OpenCV) can
            complete = False
        if not complete:  # Ultralytics' reader decides (imported only here: it imports torch)
            from ultralytics.utils.patches import imread

            arr = imread(p) if p.is_file() else None
            if arr is None:
                bad.append(str(p))
                continue
            h, w = arr.shape[:2]
        good.append(p)
        sizes.append((w, h))
    _warn_unreadable(bad, len(images))
    return good, np.asarray(sizes, dtype=np.int64).reshape(-1, 2), bad


def _orientation(im) -> int | None:
    """EXIF orientation from the header. (PIL's ``getexif`` on a PNG decodes the whole image to
    look for an EXIF chunk after the pixels; here only one before them counts.)"""
    if im.format != "PNG":
        return im.getexif().get(0x0112)
    raw = im.info.get("exif")
    if not raw:
        return None
    from PIL import Image

    exif = Image.Exif()
    exif.load(raw)
    return exif.get(0x0112)


def _jpeg_has_end_marker(path: Path) -> bool:
    """Whether a JPEG file ends with its end-of-image marker (a truncated file does not)."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        if f.tell() < 2:
            return False
        f.seek(-2, 2)
        return f.read() == b"\xff\xd9"


LABEL_TOLERANCE = 0.01
"""How far a normalised label value may lie outside [0, 1]: Ultralytics' own tolerance (1%)."""


def _number(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def check_label_line(tokens: list[str], *, nc: int) -> tuple[list[float] | None, str | None]:
    """Parse and check one YOLO label line.

    A line is ``cls cx cy w h`` (normalised centre and size) or a segmentation polygon
    ``cls x1 y1 x2 y2 x3 y3 ...`` (three points or more), which becomes its bounding box as in
    Ultralytics.

    Args:
        tokens: The line split on whitespace (not empty).
        nc: Number of classes; ids must be integers in ``0..nc-1``.

    Returns:
        ``(box, None)`` with ``box = [cls, cx, cy, w, h]``, or ``(None, reason)`` for a malformed
        line: a wrong number of values, a value that is not a number or not finite, a class id
        out of range, a value outside [0, 1] by more than :data:`LABEL_TOLERANCE`, a width or
        height that is zero or negative.
    """
    n = len(tokens)
    if n >= 8 and n % 2 == 0:
        return (
            None,
            f"polygon with an odd number of coordinates ({n - 1}; x y pairs expected), got {n} "
            "values",
        )
    if n != 5 and not (n >= 7 and n % 2 == 1):
        return (
            None,
            f"expected 5 values `cls cx cy w h` or a polygon `cls x1 y1 x2 y2 x3 y3 ...`, got {n}",
        )
    v = [_number(t) for t in tokens]
    for t, x in zip(tokens, v):
        if x is None:
            return None, f"`{t}` is not a number"
        if not np.isfinite(x):
            return None, f"non-finite value `{t}`"
    c = v[0]
    if c != int(c):
        return None, f"class id {tokens[0]} is not an integer"
    if not 0 <= c < nc:
        return None, f"class id {tokens[0]} out of range 0..{nc - 1}"
    if n == 5:
        for name, x, t in (("width", v[3], tokens[3]), ("height", v[4], tokens[4])):
            if x <= 0:
                return None, f"{name} {t} is {'zero' if x == 0 else 'negative'}"
    for k, (t, x) in enumerate(zip(tokens[1:], v[1:])):
        if not -LABEL_TOLERANCE <= x <= 1 + LABEL_TOLERANCE:
            where = "" if n == 5 else f"polygon point {k // 2 + 1} outside the image: "
            return (
                None,
                f"{where}value {t} outside [0, 1] (normalised coordinates, tolerance "
                f"{LABEL_TOLERANCE:g})",
            )
    if n == 5:
        return v, None
    xs, ys = v[1::2], v[2::2]
    x1, x2, y1, y2 = min(xs), max(xs), min(ys), max(ys)
    if x2 <= x1 or y2 <= y1:
        return None, f"polygon has zero {'width' if x2 <= x1 else 'height'}"
    return [c, (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], None


_LineCheck = Callable[..., tuple[list[float] | None, str | None]]
"""``check(tokens, nc=nc) -> (box, reason)``: a label line's ``[cls, cx, cy, w, h]`` or why it is
malformed (:func:`check_label_line`; a task's own check for pose or OBB lines)."""


def read_label_file(
    path: Path, *, nc: int, check_line: _LineCheck | None = None
) -> tuple[np.ndarray, str | None]:
    """Read one YOLO label file, checking every line (with ``check_line``, default
    :func:`check_label_line`).

    Exact duplicate lines are dropped, as Ultralytics does. A file that mixes box lines and
    polygon lines is malformed (Ultralytics drops it too).

    Returns:
        ``(boxes, problem)``: ``boxes`` is a (n, 5) float64 array ``cls cx cy w h`` (normalised),
        ``problem`` None, or ``"<file>:<line>: <reason>"`` for the first malformed line (then
        ``boxes`` is empty).
    """
    empty = np.zeros((0, 5), dtype=np.float64)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        return empty, f"{path}: not UTF-8 text"
    rows, seen, first_kind = [], set(), None
    for k, line in enumerate(text.splitlines(), start=1):
        tokens = line.split()
        if not tokens:
            continue
        box, reason = (check_line or check_label_line)(tokens, nc=nc)
        if reason is None:
            kind = "box" if len(tokens) == 5 else "polygon"
            first_kind = first_kind or (kind, k)
            if kind != first_kind[0]:
                reason = (
                    f"a {kind} line in a file of {first_kind[0]} lines (line {first_kind[1]}): "
                    "mixed files are dropped by Ultralytics"
                )
        if reason is not None:
            return empty, f"{path}:{k}: {reason}"
        key = tuple(map(float, tokens))
        if key not in seen:
            seen.add(key)
            rows.append(box)
    return (np.asarray(rows, dtype=np.float64).reshape(-1, 5), None)


def _scan_yolo_labels(
    images: list[Path], *, nc: int, split: str, check_line: _LineCheck | None = None
) -> tuple[list[np.ndarray], list[tuple[int, str]]]:
    """Read and check the YOLO label file of every image, each file once.

    An image without a label file is a background image (no boxes). An image whose label file
    has a malformed line is reported, not read: the caller leaves the image out, as Ultralytics
    does (treating it as background would count the detections on its objects as wrong).

    Returns:
        ``(boxes, bad)``: per image a (n, 5) array ``cls cx cy w h`` (normalised), and
        ``(image index, "<file>:<line>: <reason>")`` for each image with a malformed label file.

    Raises:
        InputError: No label file exists for any of the images.
    """
    boxes, bad, found = [], [], 0
    empty = np.zeros((0, 5), dtype=np.float64)
    for i, img in enumerate(images):
        lp = label_path(img)
        if not lp.is_file():
            boxes.append(empty)
            continue
        found += 1
        arr, problem = read_label_file(lp, nc=nc, check_line=check_line)
        boxes.append(arr)
        if problem is not None:
            bad.append((i, problem))
    if found == 0:
        raise InputError(
            f"split `{split}` has no labels: no label file found for any of its {len(images)} "
            "images "
            f"(expected e.g. {label_path(images[0])})"
        )
    if found < len(images):
        _log.info(
            "split `%s`: %d of %d images have no label file (background images)",
            split,
            len(images) - found,
            len(images),
        )
    return boxes, bad


def _gt_from_boxes(boxes: list[np.ndarray], sizes: np.ndarray) -> pl.DataFrame:
    """Ground-truth table in pixels from per-image normalised ``cls cx cy w h`` arrays."""
    n = np.array([len(b) for b in boxes], dtype=np.int64)
    if n.sum() == 0:
        return pl.DataFrame(schema=_GT_SCHEMA)
    arr = np.concatenate(boxes)
    ids = np.repeat(np.arange(len(boxes), dtype=np.int64), n)
    w, h = sizes[ids, 0], sizes[ids, 1]
    cx, cy, bw, bh = arr[:, 1] * w, arr[:, 2] * h, arr[:, 3] * w, arr[:, 4] * h
    return pl.DataFrame(
        {
            "image_id": ids,
            "x1": cx - bw / 2,
            "y1": cy - bh / 2,
            "x2": cx + bw / 2,
            "y2": cy + bh / 2,
            "cls": arr[:, 0].astype(np.int32),
            "crowd": np.zeros(len(arr), dtype=bool),
        },
        schema=_GT_SCHEMA,
    )


def _read_yolo_labels(
    images: list[Path], sizes: np.ndarray, *, nc: int, split: str
) -> pl.DataFrame:
    """YOLO txt labels of ``images`` as a ground-truth table in pixels (strict).

    :func:`load_split` leaves out images with a malformed label file instead; this function,
    given a fixed image list, refuses them.

    Raises:
        InputError: No label file exists for any image, or a line is malformed (the message names
            the file and line).
    """
    boxes, bad = _scan_yolo_labels(images, nc=nc, split=split)
    if bad:
        raise InputError(f"malformed label: {bad[0][1]}")
    return _gt_from_boxes(boxes, sizes)


def _read_coco_gt(
    path: str | Path, images: list[Path], *, names: list[str], root: Path | None = None
) -> tuple[pl.DataFrame, np.ndarray]:
    """COCO JSON ground truth for ``images``, class ids mapped by category name.

    An image is found in the JSON by its path relative to ``root`` (the split folder), else by
    its file name when that is unique in the JSON.

    Returns:
        ``(gt, found)``: the ground-truth table (``image_id`` indexes ``images``) and the indices
        of the images the JSON lists; images it doesn't list have no ground truth and must be
        left out, not treated as empty.

    Raises:
        InputError: Unreadable JSON, an annotated category the model doesn't know, or no image
            of the split in the file.
    """
    import contextlib
    import io

    from pycocotools.coco import COCO

    path = Path(path)
    if not path.is_file():
        raise InputError(f"COCO annotation file not found: {path}")
    try:
        json.loads(path.read_text())
        with contextlib.redirect_stdout(io.StringIO()):
            coco = COCO(str(path))
    except Exception as e:
        raise InputError(
            f"cannot read COCO annotations {path}: {str(e).splitlines()[0] if str(e) else e}"
        ) from None
    index = {n: i for i, n in enumerate(names)}
    used = {a["category_id"] for a in coco.dataset.get("annotations", [])}
    cat_map = {}
    for cat in coco.loadCats(coco.getCatIds()):
        if cat["name"] in index:
            cat_map[cat["id"]] = index[cat["name"]]
        elif cat["id"] in used:  # unused categories (e.g. a parent class) are fine
            raise InputError(
                f"COCO category `{cat['name']}` (id {cat['id']}) is not a class of the model "
                f"(classes: {names})"
            )
    ids = coco_image_ids(coco, images, root=root, path=path)
    found = np.array([k for k, i in enumerate(ids) if i is not None], dtype=np.int64)
    if len(found) == 0:
        raise InputError(f"none of the split's images is listed in {path}")
    rows = []
    for k in found:
        for a in coco.loadAnns(coco.getAnnIds(imgIds=[ids[k]])):
            x, y, w, h = a["bbox"]
            rows.append(
                (int(k), x, y, x + w, y + h, cat_map[a["category_id"]], bool(a.get("iscrowd", 0)))
            )
    gt = (
        pl.DataFrame(rows, schema=_GT_SCHEMA, orient="row")
        if rows
        else pl.DataFrame(schema=_GT_SCHEMA)
    )
    return gt, found


def coco_image_ids(coco, images: list[Path], *, root: Path | None, path: Path) -> list[int | None]:
    """The COCO image id of each image (None where the JSON does not list it), found by its path
    relative to ``root``, else by its file name when that is unique in the JSON.

    Raises:
        InputError: A file name the JSON lists more than once, with no relative path to decide.
    """
    by_path, by_name = {}, {}
    for img in coco.dataset.get("images", []):
        by_path[Path(img["file_name"]).as_posix()] = img["id"]
        by_name.setdefault(Path(img["file_name"]).name, []).append(img["id"])
    ids = []
    for p in images:
        rel = (
            p.relative_to(root).as_posix() if root is not None and p.is_relative_to(root) else None
        )
        if rel is not None and rel in by_path:
            ids.append(by_path[rel])
            continue
        hits = by_name.get(p.name, [])
        if len(hits) > 1:
            raise InputError(
                f"image name `{p.name}` is ambiguous in {path} ({len(hits)} images): "
                "use paths relative to the split folder"
            )
        ids.append(hits[0] if hits else None)
    return ids


def load_split(
    data: Dataset,
    split: str,
    *,
    coco_gt: str | Path | None = None,
    limit: int | None = None,
    check_line: _LineCheck | None = None,
) -> Split:
    """Images, sizes and ground truth of one split of a dataset.

    Every label file is read once and every line checked (:func:`check_label_line`). An image
    whose label file has a malformed line is left out with a warning naming the file and line,
    as Ultralytics leaves it out of training and validation; it is listed in ``corrupt`` and
    ``bad_labels``. Its image is not decoded.

    Args:
        data: Parsed data.yaml.
        split: Split key in the yaml.
        coco_gt: Optional COCO JSON with the ground truth instead of YOLO txt labels.
        limit: Keep only the first ``limit`` images (sorted order); for quick runs.
        check_line: The check of each YOLO label line (default :func:`check_label_line`; pose
            and OBB labels have their own).

    Raises:
        InputError: The split is not in the yaml, has no images, no label file at all, or no
            usable image (every one unreadable or with a malformed label file).
    """
    if split not in data.splits:
        raise InputError(
            f"split `{split}` not in {data.yaml_path} (splits: {', '.join(sorted(data.splits))})"
        )
    images = list_images(data.splits[split], split=split)
    if limit is not None:
        images = images[:limit]
    skipped: list[str] = []
    bad_labels: list[str] = []
    if coco_gt is None:
        boxes, bad = _scan_yolo_labels(images, nc=data.nc, split=split, check_line=check_line)
        if bad:
            images, boxes, skipped, bad_labels = _drop_malformed(split, images, boxes, bad)
        listed = images
        images, sizes, corrupt = _image_sizes(images)
        if len(images) < len(listed):
            readable = set(images)
            boxes = [b for p, b in zip(listed, boxes) if p in readable]
    else:
        images, sizes, corrupt = _image_sizes(images)
    if not images:
        raise InputError(f"split `{split}` has no readable images ({len(corrupt)} corrupt)")
    sources = data.splits[split]
    root = sources[0] if len(sources) == 1 and sources[0].is_dir() else data.root
    corrupt = skipped + corrupt
    if coco_gt is not None:
        gt, found = _read_coco_gt(coco_gt, images, names=data.names, root=root)
        if len(found) < len(images):
            warnings.warn(
                f"split `{split}`: {len(images) - len(found)} of {len(images)} images are not in "
                f"{coco_gt}; left out",
                stacklevel=2,
            )
            sp = Split(name=split, images=images, sizes=sizes, gt=gt, corrupt=corrupt, root=root)
            return sp.subset(found)
    else:
        gt = _gt_from_boxes(boxes, sizes)
    return Split(
        name=split,
        images=images,
        sizes=sizes,
        gt=gt,
        corrupt=corrupt,
        root=root,
        bad_labels=bad_labels,
    )


def _drop_malformed(split: str, images: list[Path], boxes: list, bad: list[tuple[int, str]]):
    """Leave out the images whose label file has a malformed line (``bad``: ``(index, problem)``),
    with the warnings of :func:`_warn_bad_labels`; returns the kept ``images`` and ``boxes``, the
    skipped image paths and the problems. Raises InputError when no image is left."""
    _warn_bad_labels(
        split, [images[i] for i, _ in bad], [b for _, b in bad], len(images), stacklevel=4
    )
    drop = {i for i, _ in bad}
    skipped = [str(images[i]) for i in sorted(drop)]
    bad_labels = [b for _, b in bad]
    keep = [i for i in range(len(images)) if i not in drop]
    if not keep:
        raise InputError(
            f"split `{split}` has no usable images: the label files of all {len(images)} are "
            "malformed "
            f"(first: {bad[0][1]})"
        )
    return [images[i] for i in keep], [boxes[i] for i in keep], skipped, bad_labels


_MAX_LISTED_WARNINGS = 3
"""Malformed label files (and unreadable images) named one warning each, per split; the rest are
counted in one more warning, so that a dataset of thousands prints a few lines, not thousands."""


def _warn_bad_labels(
    split: str, images: list[Path], problems: list[str], total: int, *, stacklevel: int = 3
) -> None:
    for img, problem in zip(images[:_MAX_LISTED_WARNINGS], problems):
        warnings.warn(
            f"split `{split}`: skipping image {img}: malformed label {problem}",
            stacklevel=stacklevel,
        )
    if len(problems) > _MAX_LISTED_WARNINGS:
        warnings.warn(
            f"split `{split}`: ... and {len(problems) - _MAX_LISTED_WARNINGS:,} more files with "
            "malformed labels "
            f"({len(problems):,} of {total:,} images left out); all listed in calibration.json "
            "(bad_labels, "
            "corrupt_images) and in Split.bad_labels",
            stacklevel=stacklevel,
        )


def _warn_unreadable(bad: list[str], total: int) -> None:
    for p in bad[:_MAX_LISTED_WARNINGS]:
        warnings.warn(f"skipping unreadable image {p}", stacklevel=3)
    if len(bad) > _MAX_LISTED_WARNINGS:
        warnings.warn(
            f"... and {len(bad) - _MAX_LISTED_WARNINGS:,} more unreadable images ({len(bad):,} of "
            f"{total:,} left out); all listed in calibration.json (corrupt_images)",
            stacklevel=3,
        )


def check_class_names(
    model_names: list[str], data_names: list[str], *, data_path: str | Path
) -> None:
    """Raise InputError unless the model's class names equal the dataset's, id for id."""
    if list(model_names) == list(data_names):
        return
    if len(model_names) != len(data_names):
        raise InputError(
            f"class names differ: the model has {len(model_names)} classes, {data_path} has "
            f"{len(data_names)}"
        )
    i = next(k for k, (a, b) in enumerate(zip(model_names, data_names)) if a != b)
    raise InputError(
        f"class names differ at id {i}: the model says `{model_names[i]}`, {data_path} says "
        f"`{data_names[i]}`",
        param=(),
    )


_HALVES = ("[fit-half]", "[eval-half]")
"""Suffixes of the halves :meth:`Split.halves` names (``val[fit-half]``, ``val[eval-half]``)."""
