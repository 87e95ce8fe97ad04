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

import json
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.errors import InputError

log = logging.getLogger(__name__)

def _image_suffixes() -> set[str]:
    """The image formats Ultralytics' loader reads (its own list, so both skip the same files)."""
    from ultralytics.data.utils import IMG_FORMATS

    return {f".{x.lower()}" for x in IMG_FORMATS}

GT_SCHEMA = {
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
        corrupt: Images that could not be read (skipped, counted in the report).
        root: Folder the image names are relative to.
    """

    name: str
    images: list[Path]
    sizes: np.ndarray
    gt: pl.DataFrame
    corrupt: list[str] = field(default_factory=list)
    root: Path | None = None

    def image_names(self) -> list[str]:
        """Image identifiers: paths relative to :attr:`root` where possible."""
        out = []
        for p in self.images:
            try:
                out.append(str(p.relative_to(self.root)) if self.root else str(p))
            except ValueError:
                out.append(str(p))
        return out

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
        raise InputError(f"{path} is not a data.yaml (expected a mapping with `names` and split keys)")
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
    return Dataset(yaml_path=path.resolve(), root=root, names=names, splits=splits)


def _dataset_root(value: object, yaml_path: Path) -> Path:
    """The dataset root: ``path:`` as Ultralytics resolves it, trying the yaml's folder first.

    A relative ``path:`` is tried against the yaml's folder, the current folder and Ultralytics'
    datasets folder, in that order; without ``path:`` the root is the yaml's folder.
    """
    if not value:
        return yaml_path.parent.resolve()
    p = Path(str(value))
    if p.is_absolute():
        return p
    candidates = [yaml_path.parent / p, Path.cwd() / p]
    try:
        from ultralytics.utils import DATASETS_DIR

        candidates.append(Path(DATASETS_DIR) / p)
    except ImportError:  # pragma: no cover
        pass
    return next((c.resolve() for c in candidates if c.exists()), candidates[0].resolve())


def _split_path(root: Path, value: str) -> Path:
    """A split entry resolved against the root; ``../x`` falls back to ``x`` as Ultralytics does
    (Roboflow exports write ``../valid/images`` relative to the yaml)."""
    p = Path(value)
    if p.is_absolute():
        return p
    full = (root / p).resolve()
    if not full.exists() and value.startswith("../"):
        alt = (root / value[3:]).resolve()
        if alt.exists():
            return alt
    return full


def list_images(sources: list[Path], *, split: str) -> list[Path]:
    """Image files of a split (folders searched recursively, ``.txt`` lists read), sorted."""
    files: list[Path] = []
    suffixes = _image_suffixes()
    for src in sources:
        if src.is_dir():
            files += [p for p in src.rglob("*") if p.suffix.lower() in suffixes]
        elif src.is_file() and src.suffix == ".txt":
            for line in src.read_text().splitlines():
                line = line.strip()
                if line:
                    p = Path(line)
                    files.append(p if p.is_absolute() else src.parent / p)
        elif src.is_file() and src.suffix.lower() in suffixes:
            files.append(src)
        else:
            raise InputError(f"image folder of split `{split}` not found: {src}")
    if not files:
        raise InputError(f"split `{split}` has no images (looked in {', '.join(map(str, sources))})")
    return sorted(set(files))


def label_path(image: Path) -> Path:
    """YOLO label file of an image: the last ``/images/`` in the path becomes ``/labels/``."""
    parts = list(image.parts)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            break
    return Path(*parts).with_suffix(".txt")


def image_sizes(images: list[Path]) -> tuple[list[Path], np.ndarray, list[str]]:
    """Read image headers (fully verified) to get (width, height); drop unreadable images.

    Returns:
        (readable images, (n, 2) sizes, corrupt image paths). A warning names each corrupt image.
    """
    import cv2
    from PIL import Image

    good, sizes, bad = [], [], []
    for p in images:
        try:
            with Image.open(p) as im:
                im.verify()
            with Image.open(p) as im:
                w, h = im.size
                im.load()  # decodes: catches truncated files that verify() passes
                if im.getexif().get(0x0112) in (5, 6, 7, 8):  # EXIF rotation by 90 degrees:
                    w, h = h, w  # Ultralytics reads the image rotated, labels refer to that frame
        except Exception:
            # formats PIL can't open but OpenCV can (Ultralytics reads with OpenCV)
            arr = cv2.imread(str(p)) if p.is_file() else None
            if arr is None:
                warnings.warn(f"skipping unreadable image {p}", stacklevel=2)
                bad.append(str(p))
                continue
            h, w = arr.shape[:2]
        good.append(p)
        sizes.append((w, h))
    return good, np.asarray(sizes, dtype=np.int64).reshape(-1, 2), bad


def _label_box(values: list[str]) -> list[float]:
    """``cls cx cy w h`` from a label line; a segmentation polygon ``cls x1 y1 x2 y2 ...`` (more
    than 5 values, an even number of coordinates) becomes its bounding box, as Ultralytics does."""
    v = [float(x) for x in values]
    if len(v) == 5:
        return v
    if len(v) >= 7 and (len(v) - 1) % 2 == 0:
        xs, ys = v[1::2], v[2::2]
        x1, x2, y1, y2 = min(xs), max(xs), min(ys), max(ys)
        return [v[0], (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]
    raise ValueError("bad label line")


def read_yolo_labels(images: list[Path], sizes: np.ndarray, *, nc: int, split: str) -> pl.DataFrame:
    """YOLO txt labels of ``images`` as a ground-truth table in pixels.

    Raises:
        InputError: No label file exists for any image, a line is malformed, or a class id is
            outside 0..nc-1.
    """
    rows_id, rows_box, rows_cls = [], [], []
    found = 0
    for i, img in enumerate(images):
        lp = label_path(img)
        if not lp.is_file():
            continue
        found += 1
        lines = [ln.split() for ln in lp.read_text().splitlines() if ln.strip()]
        if not lines:
            continue
        try:
            arr = np.array([_label_box(v) for v in lines], dtype=np.float64)
        except ValueError:
            raise InputError(f"malformed label file {lp}: expected `cls cx cy w h` (or a polygon) per line") from None
        cls = arr[:, 0]
        if (cls != np.round(cls)).any() or (cls < 0).any() or (cls >= nc).any():
            bad = cls[(cls != np.round(cls)) | (cls < 0) | (cls >= nc)][0]
            raise InputError(f"class id {bad:g} out of range 0..{nc - 1} in {lp}")
        w, h = sizes[i]
        cx, cy, bw, bh = arr[:, 1] * w, arr[:, 2] * h, arr[:, 3] * w, arr[:, 4] * h
        rows_box.append(np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], 1))
        rows_cls.append(cls.astype(np.int32))
        rows_id.append(np.full(len(arr), i, dtype=np.int64))
    if 0 < found < len(images):
        log.info("split `%s`: %d of %d images have no label file (background images)", split, len(images) - found,
                 len(images))
    if found == 0:
        raise InputError(
            f"split `{split}` has no labels: no label file found for any of its {len(images)} images "
            f"(expected e.g. {label_path(images[0])})"
        )
    if not rows_id:
        return pl.DataFrame(schema=GT_SCHEMA)
    box = np.concatenate(rows_box)
    return pl.DataFrame(
        {
            "image_id": np.concatenate(rows_id),
            "x1": box[:, 0],
            "y1": box[:, 1],
            "x2": box[:, 2],
            "y2": box[:, 3],
            "cls": np.concatenate(rows_cls),
            "crowd": np.zeros(len(box), dtype=bool),
        },
        schema=GT_SCHEMA,
    )


def read_coco_gt(
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
        raise InputError(f"cannot read COCO annotations {path}: {str(e).splitlines()[0] if str(e) else e}") from None
    index = {n: i for i, n in enumerate(names)}
    used = {a["category_id"] for a in coco.dataset.get("annotations", [])}
    cat_map = {}
    for cat in coco.loadCats(coco.getCatIds()):
        if cat["name"] in index:
            cat_map[cat["id"]] = index[cat["name"]]
        elif cat["id"] in used:  # unused categories (e.g. a parent class) are fine
            raise InputError(
                f"COCO category `{cat['name']}` (id {cat['id']}) is not a class of the model (classes: {names})"
            )
    by_path, by_name = {}, {}
    for img in coco.dataset.get("images", []):
        by_path[Path(img["file_name"]).as_posix()] = img["id"]
        by_name.setdefault(Path(img["file_name"]).name, []).append(img["id"])
    ids = []
    for p in images:
        rel = p.relative_to(root).as_posix() if root is not None and p.is_relative_to(root) else None
        if rel is not None and rel in by_path:
            ids.append(by_path[rel])
            continue
        hits = by_name.get(p.name, [])
        if len(hits) > 1:
            raise InputError(f"image name `{p.name}` is ambiguous in {path} ({len(hits)} images): "
                             "use paths relative to the split folder")
        ids.append(hits[0] if hits else None)
    found = np.array([k for k, i in enumerate(ids) if i is not None], dtype=np.int64)
    if len(found) == 0:
        raise InputError(f"none of the split's images is listed in {path}")
    rows = []
    for k in found:
        for a in coco.loadAnns(coco.getAnnIds(imgIds=[ids[k]])):
            x, y, w, h = a["bbox"]
            rows.append((int(k), x, y, x + w, y + h, cat_map[a["category_id"]], bool(a.get("iscrowd", 0))))
    gt = pl.DataFrame(rows, schema=GT_SCHEMA, orient="row") if rows else pl.DataFrame(schema=GT_SCHEMA)
    return gt, found


def load_split(
    data: Dataset, split: str, *, coco_gt: str | Path | None = None, limit: int | None = None
) -> Split:
    """Images, sizes and ground truth of one split of a dataset.

    Args:
        data: Parsed data.yaml.
        split: Split key in the yaml.
        coco_gt: Optional COCO JSON with the ground truth instead of YOLO txt labels.
        limit: Keep only the first ``limit`` images (sorted order); for quick runs.
    """
    if split not in data.splits:
        raise InputError(f"split `{split}` not in {data.yaml_path} (splits: {sorted(data.splits)})")
    images = list_images(data.splits[split], split=split)
    if limit is not None:
        images = images[:limit]
    images, sizes, corrupt = image_sizes(images)
    if not images:
        raise InputError(f"split `{split}` has no readable images ({len(corrupt)} corrupt)")
    sources = data.splits[split]
    root = sources[0] if len(sources) == 1 and sources[0].is_dir() else data.root
    if coco_gt is not None:
        gt, found = read_coco_gt(coco_gt, images, names=data.names, root=root)
        if len(found) < len(images):
            warnings.warn(
                f"split `{split}`: {len(images) - len(found)} of {len(images)} images are not in {coco_gt}; left out",
                stacklevel=2,
            )
            sp = Split(name=split, images=images, sizes=sizes, gt=gt, corrupt=corrupt, root=root)
            return sp.subset(found)
    else:
        gt = read_yolo_labels(images, sizes, nc=data.nc, split=split)
    return Split(name=split, images=images, sizes=sizes, gt=gt, corrupt=corrupt, root=root)


def check_class_names(model_names: list[str], data_names: list[str], *, data_path: str | Path) -> None:
    """Raise InputError unless the model's class names equal the dataset's, id for id."""
    if list(model_names) == list(data_names):
        return
    if len(model_names) != len(data_names):
        raise InputError(
            f"class names differ: the model has {len(model_names)} classes, {data_path} has {len(data_names)}"
        )
    i = next(k for k, (a, b) in enumerate(zip(model_names, data_names)) if a != b)
    raise InputError(
        f"class names differ at id {i}: the model says `{model_names[i]}`, {data_path} says `{data_names[i]}`"
    )


def half_split(split: Split, *, seed: int = 0) -> tuple[Split, Split]:
    """Deterministic image-level half/half split (fit, eval) of one split."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(split.images))
    half = len(perm) // 2
    if half == 0:
        raise InputError(f"split `{split.name}` has {len(split.images)} image(s): too few to halve")
    a, b = np.sort(perm[:half]), np.sort(perm[half:])
    return split.subset(a, f"{split.name}[fit-half]"), split.subset(b, f"{split.name}[eval-half]")


def write_split_yaml(data: Dataset, split: Split, folder: Path) -> Path:
    """Write ``folder/data.yaml`` whose ``val`` is exactly the images of ``split``.

    Ultralytics' validator only resolves the standard split keys relative to the dataset root,
    and cannot take a subset (a half split, ``--limit``, corrupt images left out); a list file of
    absolute image paths serves all of these.
    """
    folder = Path(folder)
    lst = folder / "images.txt"
    lst.write_text("\n".join(str(p.resolve()) for p in split.images) + "\n")
    lines = [f"path: {folder}", f"train: {lst}", f"val: {lst}", "names:"]
    lines += [f"  {i}: {json.dumps(n)}" for i, n in enumerate(data.names)]
    yml = folder / "data.yaml"
    yml.write_text("\n".join(lines) + "\n")
    return yml
