"""Shifted copies of the demo's test split: the test images under a corruption at a severity.

The corruption protocol used for detectors (ImageNet-C, and its detection version COCO-C),
at demo scale: four kinds, five severities each, applied to the rendered test images; the
labels are those of the test split (a corruption moves no object). Each image's corruption is
drawn from a seed derived from ``(kind, severity, index)``, so a shifted split is the same on
every machine for the same numpy and OpenCV versions.

- ``blur``: Gaussian blur, sigma 1, 1.5, 2.5, 3.5, 5 px
- ``noise``: additive Gaussian noise, SD 10, 18, 28, 40, 56 (of 255)
- ``contrast``: pixels pulled toward the image mean, contrast 0.55, 0.4, 0.28, 0.18, 0.1
- ``jpeg``: JPEG re-encoding at quality 30, 18, 10, 6, 3

The demo's own photometric variation already holds mild blur (sigma up to 2) and noise (SD up
to 12), so severity 1 stays close to the clean distribution and 5 is far from it.

Examples:
    >>> import numpy as np
    >>> img = np.zeros((32, 32, 3), np.uint8); img[:, 16:] = 200
    >>> out = _corrupt(img, "contrast", 5, index=0)
    >>> int(out.min()), int(out.max())  # 100 -+ 0.1 * 100
    (90, 110)
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import numpy as np

from det_calib.errors import InputError

CORRUPTIONS: tuple[str, ...] = ("blur", "noise", "contrast", "jpeg")
"""The corruption kinds."""
_SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)
SHIFT_VERSION = 1
"""Version of the corruption definitions (part of the cache folder's name)."""

_LEVELS: dict[str, tuple[float, ...]] = {
    "blur": (1.0, 1.5, 2.5, 3.5, 5.0),
    "noise": (10.0, 18.0, 28.0, 40.0, 56.0),
    "contrast": (0.55, 0.4, 0.28, 0.18, 0.1),
    "jpeg": (30, 18, 10, 6, 3),
}


def _check_shift(kind: str, severity: int) -> None:
    """Raise :class:`InputError` unless ``kind`` is one of :data:`CORRUPTIONS` and ``severity`` 1..5."""
    if kind not in CORRUPTIONS:
        raise InputError(
            f"Expected a corruption kind among {', '.join(CORRUPTIONS)}, but got {kind!r}"
        )
    if (
        isinstance(severity, bool)
        or not isinstance(severity, (int, np.integer))
        or severity not in _SEVERITIES
    ):
        raise InputError(f"Expected a severity among 1..{_SEVERITIES[-1]}, but got {severity!r}")


def split_name(kind: str, severity: int, base: str = "test") -> str:
    """Name of a shifted split: ``test-blur-3``.

    >>> split_name("blur", 3)
    'test-blur-3'
    """
    _check_shift(kind, severity)
    return f"{base}-{kind}-{int(severity)}"


def _corrupt(img: np.ndarray, kind: str, severity: int, *, index: int) -> np.ndarray:
    """The uint8 BGR image ``img`` under corruption ``kind`` at ``severity`` (1..5); ``index``
    seeds the noise of the image."""
    import cv2

    _check_shift(kind, severity)
    level = _LEVELS[kind][int(severity) - 1]
    x = img.astype(np.float32)
    if kind == "blur":
        x = cv2.GaussianBlur(x, (0, 0), float(level))
    elif kind == "noise":
        digest = hashlib.sha256(
            f"shapes-shift-v{SHIFT_VERSION}/{kind}/{severity}/{index}".encode()
        ).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        x = x + rng.normal(0.0, level, size=x.shape).astype(np.float32)
    elif kind == "contrast":
        mean = x.mean(axis=(0, 1), keepdims=True)
        x = (x - mean) * float(level) + mean
    else:
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, int(level)])
        if not ok:
            raise OSError("JPEG encoding failed")
        return cv2.imdecode(buf, cv2.IMREAD_COLOR)
    return np.clip(np.round(x), 0, 255).astype(np.uint8)


def write_shifted_split(
    src_root: Path, dst_root: Path, kind: str, severity: int, *, base: str = "test"
) -> int:
    """Write ``dst_root/images/<base>-<kind>-<severity>`` (and its labels) from the images of
    split ``base`` under ``src_root``; returns the number of images.

    The split is written into a temporary folder and renamed into place, so an interrupted run
    never leaves a half-written split under its final name.
    """
    import cv2

    name = split_name(kind, severity, base)
    images = sorted((src_root / "images" / base).glob("*.png"))
    if not images:
        raise InputError(f"no images of split `{base}` under {src_root}")
    dst_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=dst_root))
    try:
        (tmp / "images").mkdir()
        (tmp / "labels").mkdir()
        for i, path in enumerate(images):
            img = cv2.imread(str(path), cv2.IMREAD_COLOR)
            if img is None:
                raise OSError(f"could not read {path}")
            out = tmp / "images" / path.name
            if not cv2.imwrite(str(out), _corrupt(img, kind, severity, index=i)):
                raise OSError(f"could not write {out}")
            label = src_root / "labels" / base / f"{path.stem}.txt"
            shutil.copyfile(label, tmp / "labels" / label.name)
        for sub in ("images", "labels"):
            final = dst_root / sub / name
            final.parent.mkdir(exist_ok=True)
            if final.exists():
                shutil.rmtree(final)
            (tmp / sub).rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return len(images)
