"""A seeded, COCO-shaped synthetic calibration set: a dataset on disk and its capture parts.

What a COCO-sized validation set looks like to the post-capture job, without a forward pass:
``n_classes`` classes (80 by default) with a long-tailed class frequency, about 7 ground-truth
boxes per image (Poisson), and for each of the two heads (``nms``, ``e2e``) up to ``max_det``
boxes per image down to the capture floor (0.001): a few boxes on each object (the best one
usually of its class and well placed, with a high logit), and many low-score boxes elsewhere and
of other classes, as a detector's output at conf 0.001 is. About 200 boxes per image and head,
so a split of 5,000 images holds about a million boxes per head.

The set is written through the project's own writers: image files (one small JPEG written once
and copied, so a split of 5,000 images takes seconds), YOLO label files, a ``data.yaml`` with a
``calib`` and a ``test`` split, an untrained detector checkpoint with the class names (its file
fingerprints the boxes; no forward pass ever runs it) and one capture part per split
(:func:`det_calib.capture.parts.write_part`, with the metadata a capture records), so that
``det-calib calibrate --model M --data D --boxes PARTS`` reads it as it reads ``det-calib
capture`` output. ``benchmarks/bench_scale.py`` times the job on it; the tests use small ones.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.capture.parts import ModelFacts, data_fingerprint, model_fingerprint, write_part
from det_calib.capture.predictor import load_detector
from det_calib.data.box_table import CAPTURE_COLUMNS, SCHEMA
from det_calib.data.ground_truth import load_data_yaml, load_split

__all__ = ["SyntheticSet", "write_coco_shaped"]

_SPLITS = ("calib", "test")
_SIZES = ((640, 480), (640, 427), (500, 375), (480, 640))
"""Image sizes (width, height), COCO's most common ones; image ``i`` has size ``SIZES[i % 4]``."""


@dataclass(frozen=True)
class SyntheticSet:
    """Where :func:`write_coco_shaped` put the set."""

    root: Path
    data: Path
    model: Path
    parts: Path
    boxes: dict[str, dict[str, int]]
    """Split -> head -> boxes written."""


def _jpeg(w: int, h: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (w, h), (114, 114, 114)).save(buf, format="JPEG", quality=50)
    return buf.getvalue()


def _write_model(path: Path, names: list[str], *, cfg: str = "yolo26n.yaml") -> Path:
    """An untrained two-head detector with these class names, saved as a ``.pt`` checkpoint."""
    import tempfile

    import yaml
    from ultralytics import YOLO
    from ultralytics.nn.tasks import yaml_model_load

    spec = yaml_model_load(cfg)
    spec["nc"] = len(names)
    with tempfile.TemporaryDirectory() as tmp:
        y = Path(tmp) / cfg  # the file name carries the model scale
        y.write_text(
            yaml.safe_dump({k: v for k, v in spec.items() if k not in ("yaml_file", "scale")})
        )
        yolo = YOLO(str(y))
    yolo.model.names = dict(enumerate(names))
    path.parent.mkdir(parents=True, exist_ok=True)
    yolo.save(str(path))
    return path


def _gt(
    rng: np.random.Generator, n_img: int, freq: np.ndarray, sizes: np.ndarray, per_image: float
):
    """Ground truth: image id, class, xyxy in pixels; COCO-like box sizes (log-uniform area)."""
    n = rng.poisson(per_image, size=n_img)
    img = np.repeat(np.arange(n_img), n)
    cls = rng.choice(len(freq), size=len(img), p=freq)
    w_img, h_img = sizes[img, 0].astype(float), sizes[img, 1].astype(float)
    area = np.exp(rng.uniform(np.log(12 * 12), np.log(0.5 * w_img * h_img)))
    aspect = np.exp(rng.normal(0.0, 0.5, size=len(img)))
    bw = np.minimum(np.sqrt(area * aspect), w_img - 2)
    bh = np.minimum(area / bw, h_img - 2)
    x1 = rng.uniform(0, w_img - bw)
    y1 = rng.uniform(0, h_img - bh)
    return img, cls, np.column_stack([x1, y1, x1 + bw, y1 + bh])


def _jitter(rng, boxes: np.ndarray, scale: np.ndarray, w_img, h_img) -> np.ndarray:
    bw, bh = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    d = (
        rng.normal(0.0, 1.0, size=(len(boxes), 4))
        * scale[:, None]
        * np.column_stack([bw, bh, bw, bh])
    )
    out = boxes + d
    out[:, [0, 2]] = np.clip(out[:, [0, 2]], 0, w_img[:, None])
    out[:, [1, 3]] = np.clip(out[:, [1, 3]], 0, h_img[:, None])
    out[:, 2] = np.maximum(out[:, 2], out[:, 0] + 1)
    out[:, 3] = np.maximum(out[:, 3], out[:, 1] + 1)
    return out


def _head_boxes(
    rng,
    head: str,
    n_img: int,
    gt,
    sizes: np.ndarray,
    freq: np.ndarray,
    *,
    conf_floor: float,
    max_det: int,
    background: float,
) -> dict[str, np.ndarray]:
    """One head's boxes on one split: per object a few candidates, plus background boxes."""
    g_img, g_cls, g_box = gt
    nc = len(freq)
    dup = 3 if head == "nms" else 1  # the one-to-many head + NMS keeps more near-duplicates
    k = rng.integers(1, dup + 2, size=len(g_img))
    src = np.repeat(np.arange(len(g_img)), k)
    first = np.r_[True, src[1:] != src[:-1]]
    img = g_img[src]
    w_img, h_img = sizes[img, 0].astype(float), sizes[img, 1].astype(float)
    scale = np.where(
        first, rng.uniform(0.01, 0.12, size=len(src)), rng.uniform(0.05, 0.35, size=len(src))
    )
    box = _jitter(rng, g_box[src], scale, w_img, h_img)
    wrong = rng.uniform(size=len(src)) < np.where(first, 0.08, 0.3)
    cls = np.where(wrong, rng.choice(nc, size=len(src), p=freq), g_cls[src])
    # logits: well-placed boxes of the right class high, the others low; the e2e head a little timid
    quality = np.where(wrong, -2.5, 2.0 - 18.0 * scale)
    logit = (
        quality
        + rng.normal(0.0, 1.6 if head == "nms" else 1.3, size=len(src))
        - (0.3 if head == "e2e" else 0.0)
    )
    # background: low-score boxes anywhere, of any class
    n_bg = rng.poisson(background, size=n_img)
    b_img = np.repeat(np.arange(n_img), n_bg)
    bw_img, bh_img = sizes[b_img, 0].astype(float), sizes[b_img, 1].astype(float)
    bw = bw_img * np.exp(rng.uniform(np.log(0.03), np.log(0.6), size=len(b_img)))
    bh = bh_img * np.exp(rng.uniform(np.log(0.03), np.log(0.6), size=len(b_img)))
    bx, by = rng.uniform(0, bw_img - bw), rng.uniform(0, bh_img - bh)
    b_box = np.column_stack([bx, by, bx + bw, by + bh])
    b_cls = rng.choice(nc, size=len(b_img), p=freq)
    b_logit = np.log(conf_floor / (1 - conf_floor)) + rng.exponential(1.6, size=len(b_img))
    img = np.concatenate([img, b_img])
    box = np.round(np.concatenate([box, b_box]) * 8) / 8  # a 1/8-pixel grid, as float32 outputs are
    cls = np.concatenate([cls, b_cls])
    logit = np.concatenate([logit, b_logit])
    conf = (1.0 / (1.0 + np.exp(-logit.astype(np.float32)))).astype(np.float32)
    keep = conf >= conf_floor
    img, box, cls, logit, conf = img[keep], box[keep], cls[keep], logit[keep], conf[keep]
    # per image, highest conf first, at most max_det (the capture's order and its cap)
    order = np.lexsort((-conf, img))
    img, box, cls, logit, conf = img[order], box[order], cls[order], logit[order], conf[order]
    start = np.searchsorted(img, img, side="left")
    keep = (np.arange(len(img)) - start) < max_det
    return {
        "image_id": img[keep],
        "box": box[keep],
        "cls": cls[keep],
        "logit": logit[keep].astype(np.float32),
        "conf": conf[keep],
    }


def _class_freq(nc: int, rng: np.random.Generator) -> np.ndarray:
    """A long tail: frequency of the class of rank r about 1 / (r + 3), classes in random order."""
    f = 1.0 / (np.arange(nc) + 3.0)
    f = f[rng.permutation(nc)]
    return f / f.sum()


def write_coco_shaped(
    root: str | Path,
    n_images: int,
    *,
    n_classes: int = 80,
    seed: int = 0,
    gt_per_image: float = 7.3,
    background: float = 190.0,
    max_det: int = 300,
    conf_floor: float = 0.001,
    bad_label_files: int = 0,
) -> SyntheticSet:
    """Write the synthetic set: ``n_images`` images in each of the ``calib`` and ``test`` splits.

    Args:
        root: Folder (created): ``data.yaml``, ``images/``, ``labels/``, ``model.pt``, ``parts/``.
        n_images: Images per split.
        n_classes: Classes (80 as COCO; 1,000 for an LVIS-sized set).
        seed: Everything is drawn from ``np.random.default_rng(seed)``.
        gt_per_image: Mean ground-truth boxes per image (COCO val2017: 7.3).
        background: Mean low-score background boxes per image and head.
        max_det, conf_floor: The capture's cap and floor (Ultralytics val's 300 and 0.001).
        bad_label_files: Label files of the ``calib`` split given a line with a class id out of range
            (their images are left out of the run with a warning; no parts are written for such a
            set, as no capture would succeed on it).
    """
    root = Path(root)
    rng = np.random.default_rng(seed)
    names = [f"class{i:04d}" if n_classes > 100 else f"class{i:02d}" for i in range(n_classes)]
    freq = _class_freq(n_classes, rng)
    jpegs = {s: _jpeg(*s) for s in _SIZES}
    sizes = np.array([_SIZES[i % len(_SIZES)] for i in range(n_images)], dtype=np.int64)
    gts = {}
    for split in _SPLITS:
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        gts[split] = _gt(rng, n_images, freq, sizes, gt_per_image)
        lines = _label_lines(gts[split], sizes, n_images)
        if split == "calib":
            for i in range(min(bad_label_files, n_images)):
                lines[i].append(f"{n_classes + 3} 0.5 0.5 0.1 0.1")
        _write_images_and_labels(root, split, lines, sizes, jpegs)
    data = root / "data.yaml"
    data.write_text(
        "path: .\ncalib: images/calib\ntest: images/test\nnames:\n"
        + "".join(f"  {i}: {n}\n" for i, n in enumerate(names))
    )
    model = _write_model(root / "model.pt", names)
    if bad_label_files:
        return SyntheticSet(root, data, model, root / "parts", {})
    written = _write_parts(
        root,
        data,
        model,
        rng,
        gts,
        sizes,
        freq,
        n_images=n_images,
        conf_floor=conf_floor,
        max_det=max_det,
        background=background,
    )
    return SyntheticSet(root, data, model, root / "parts", written)


def _label_lines(
    gt: tuple[np.ndarray, np.ndarray, np.ndarray], sizes: np.ndarray, n_images: int
) -> list[list[str]]:
    """The YOLO label lines (``cls cx cy w h``, normalised) of each image of a split's ground truth."""
    g_img, g_cls, g_box = gt
    w, h = sizes[g_img, 0], sizes[g_img, 1]
    cx, cy = (g_box[:, 0] + g_box[:, 2]) / 2 / w, (g_box[:, 1] + g_box[:, 3]) / 2 / h
    bw, bh = (g_box[:, 2] - g_box[:, 0]) / w, (g_box[:, 3] - g_box[:, 1]) / h
    lines: list[list[str]] = [[] for _ in range(n_images)]
    for i, c, a, b, d, e in zip(
        g_img.tolist(), g_cls.tolist(), cx.tolist(), cy.tolist(), bw.tolist(), bh.tolist()
    ):
        lines[i].append(f"{c} {a:.6f} {b:.6f} {d:.6f} {e:.6f}")
    return lines


def _capture_frame(
    b: dict[str, np.ndarray], split: str, head: str, image_names: list[str], sizes: np.ndarray
) -> pl.DataFrame:
    """One head's boxes of one split (``b`` from :func:`_head_boxes`) as the capture's columns."""

    n = len(b["cls"])
    ids = b["image_id"]
    return pl.DataFrame(
        {
            "image": np.asarray(image_names, dtype=object)[ids].tolist(),
            "image_id": ids,
            "split": [split] * n,
            "head": [head] * n,
            "x1": b["box"][:, 0],
            "y1": b["box"][:, 1],
            "x2": b["box"][:, 2],
            "y2": b["box"][:, 3],
            "img_w": sizes[ids, 0],
            "img_h": sizes[ids, 1],
            "cls": b["cls"],
            "conf": b["conf"].astype(np.float64),
            "logit": b["logit"].astype(np.float64),
        },
        schema={c: SCHEMA[c] for c in CAPTURE_COLUMNS},
    )


def _write_images_and_labels(
    root: Path,
    split: str,
    lines: list[list[str]],
    sizes: np.ndarray,
    jpegs: dict[tuple[int, int], bytes],
) -> None:
    """Each image of a split (the JPEG of its size) and its label file."""
    for i in range(len(lines)):
        (root / "images" / split / f"{i:06d}.jpg").write_bytes(jpegs[tuple(sizes[i])])
        (root / "labels" / split / f"{i:06d}.txt").write_text("".join(s + "\n" for s in lines[i]))


def _write_parts(
    root: Path,
    data: Path,
    model: Path,
    rng: np.random.Generator,
    gts: dict,
    sizes: np.ndarray,
    freq: np.ndarray,
    *,
    n_images: int,
    conf_floor: float,
    max_det: int,
    background: float,
) -> dict[str, dict[str, int]]:
    """Both heads' boxes of each split, drawn and written as one capture part per split, with the
    metadata a capture at the run's defaults records; returns the boxes written per split and head."""

    written: dict[str, dict[str, int]] = {}
    ds = load_data_yaml(data)
    # what a capture at the run's defaults records (Settings.capture_settings, job/settings.py:
    # NMS IoU 0.7, one image per pass, the model's input size 640), so that `calibrate --boxes`
    # takes them
    settings = {
        "conf": float(conf_floor),
        "iou": 0.7,
        "max_det": int(max_det),
        "imgsz": 640,
        "batch": 1,
    }
    model_fp = model_fingerprint(model)
    facts = ModelFacts.of(load_detector(model)).record()  # as a capture records them
    for split in _SPLITS:
        sp = load_split(ds, split)
        image_names = sp.image_names()
        frames = []
        written[split] = {}
        for head in ("nms", "e2e"):
            b = _head_boxes(
                rng,
                head,
                n_images,
                gts[split],
                sizes,
                freq,
                conf_floor=conf_floor,
                max_det=max_det,
                background=background,
            )
            written[split][head] = len(b["cls"])
            frames.append(_capture_frame(b, split, head, image_names, sizes))
        write_part(
            pl.concat(frames),
            root / "parts" / split / "part-all.parquet",
            model=model_fp,
            data=data_fingerprint(sp.images, names=image_names),
            split=split,
            heads=["nms", "e2e"],
            settings=settings,
            n_images=n_images,
            image_ids=range(n_images),
            part="all",
            facts=facts,
        )
    return written
