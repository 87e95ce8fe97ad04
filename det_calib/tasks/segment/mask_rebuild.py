"""Instance masks of a segment model's boxes, rebuilt as Ultralytics' predictor builds them.

A Segment head (YOLOv8/YOLO11 ``Segment``, YOLO26 ``Segment26``) gives each box 32 mask
coefficients and each image a stack of prototype masks (``protos``, 32 x H/4 x W/4 of the
letterboxed input). A box's mask is ``coefficients @ protos``, upsampled to the image, thresholded
at 0 and cropped to the box. This module calls Ultralytics' own
``ultralytics.utils.ops.process_mask_native``, what ``SegmentationPredictor`` uses with
``retina_masks=True``, so a mask rebuilt here equals ``Results.masks.data`` of that box, pixel for
pixel, at the original image size (pycocotools' ``segm`` protocol wants masks there).

Two facts of the predictor a capture must follow to keep its boxes those of ``predict``:

* with ``retina_masks=True`` the box a mask is cropped to is the final box (scaled to the image and
  clipped), ``Results.boxes.xyxy``; without it the mask is cropped at the letterboxed size first.
* ``Results`` drops every box whose mask is empty (``masks.amax((-2, -1)) > 0``), so such boxes
  are not among ``predict``'s boxes.

Masks leave as pycocotools compressed RLE ``counts`` (bytes), one per box, at the image's size:
what :mod:`det_calib.tasks.segment.matching` and the ground truth's ``segm`` column hold.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["filled_boxes", "kept_mask_rles"]

_CHUNK = 64
"""Boxes rebuilt at once (bounds the memory of the (boxes, H, W) stack)."""


def _rebuild_masks(protos, coefficients, boxes, image_shape: tuple[int, int]) -> np.ndarray:
    """Binary masks of boxes at the image's size, as the predictor builds them with ``retina_masks``.

    Args:
        protos: (32, mh, mw) prototype masks of the image (the head's second output, one image).
        coefficients: (n, 32) mask coefficients of the boxes.
        boxes: (n, 4) final ``xyxy`` boxes in image pixels (``Results.boxes.xyxy``).
        image_shape: ``(height, width)`` of the original image.

    Returns:
        (n, height, width) uint8 array of 0/1.
    """
    import torch
    from ultralytics.utils.ops import process_mask_native

    protos = torch.as_tensor(protos)
    coefficients = torch.as_tensor(coefficients).reshape(-1, protos.shape[0]).to(protos.device)
    boxes = torch.as_tensor(boxes, dtype=torch.float32).reshape(-1, 4).to(protos.device)
    h, w = (int(v) for v in image_shape)
    out = np.zeros((len(coefficients), h, w), dtype=np.uint8)
    for lo in range(0, len(coefficients), _CHUNK):
        m = process_mask_native(
            protos, coefficients[lo : lo + _CHUNK], boxes[lo : lo + _CHUNK], (h, w)
        )
        out[lo : lo + _CHUNK] = m.cpu().numpy()
    return out


def _encode_masks(masks: np.ndarray) -> list[bytes]:
    """pycocotools compressed RLE ``counts`` of each mask of an (n, H, W) stack."""
    from pycocotools import mask as mask_utils

    masks = np.asarray(masks, dtype=np.uint8)
    if masks.ndim != 3:
        raise ValueError(f"Expected masks of shape (n, H, W), but got shape {masks.shape}")
    if not len(masks):
        return []
    rles = mask_utils.encode(np.asfortranarray(masks.transpose(1, 2, 0)))
    return [r["counts"] for r in rles]


def _mask_rles(protos, coefficients, boxes, image_shape: tuple[int, int]) -> list[bytes]:
    """:func:`rebuild_masks` then :func:`encode_masks`, a chunk of boxes at a time."""
    out: list[bytes] = []
    for lo in range(0, len(boxes), _CHUNK):
        out += _encode_masks(
            _rebuild_masks(
                protos, coefficients[lo : lo + _CHUNK], boxes[lo : lo + _CHUNK], image_shape
            )
        )
    return out


def kept_mask_rles(
    protos, coefficients, boxes, image_shape: tuple[int, int]
) -> tuple[np.ndarray, list[bytes]]:
    """The predictor's empty-mask filter and the RLE counts of the boxes it keeps.

    ``Results`` drops every box whose mask (``retina_masks=True``: at the image size, cropped to
    the final box) is empty; a capture drops the same boxes, so its boxes are ``predict``'s.

    Args:
        protos, coefficients, boxes, image_shape: As :func:`rebuild_masks`.

    Returns:
        ``(keep, counts)``: a bool per box (its mask has a pixel), and the compressed RLE counts
        of the kept boxes' masks, in box order.
    """
    keep = np.zeros(len(boxes), dtype=bool)
    out: list[bytes] = []
    for lo in range(0, len(boxes), _CHUNK):
        masks = _rebuild_masks(
            protos, coefficients[lo : lo + _CHUNK], boxes[lo : lo + _CHUNK], image_shape
        )
        filled = masks.reshape(len(masks), -1).max(1, initial=0) > 0
        keep[lo : lo + len(masks)] = filled
        out += _encode_masks(masks[filled])
    return keep, out


_MARGIN = 1e-3
"""How far from 0 a prototype-resolution mask logit must be for :func:`filled_boxes` to decide from it
alone (far above the rounding of a 32-term float32 product; nearer values go to the exact rebuild)."""


def _reads(
    out_size: int, mask_size: int, factor: int, offset: int, cropped: int
) -> tuple[np.ndarray, np.ndarray]:
    """For each output pixel along one axis, the first and last prototype index its bilinear chain reads
    (``F.interpolate`` by ``factor``, the letterbox crop ``[offset, offset + cropped)``, ``F.interpolate`` to
    ``out_size``, ``align_corners=False``): a source index within ``1e-4`` of a whole pixel is read both ways,
    against the interpolation's float32 rounding."""
    i = np.arange(out_size, dtype=np.float64)
    src = np.maximum((i + 0.5) * cropped / out_size - 0.5, 0.0)
    k0 = np.clip(np.floor(src - 1e-4), 0, cropped - 1) + offset
    k1 = np.clip(np.floor(src + 1e-4) + 1, 0, cropped - 1) + offset
    if factor == 1:
        return k0.astype(np.int64), k1.astype(np.int64)
    p0 = np.floor(np.maximum((k0 + 0.5) / factor - 0.5, 0.0))  # exact: factor is 2 or 4
    p1 = np.minimum(np.floor(np.maximum((k1 + 0.5) / factor - 0.5, 0.0)) + 1, mask_size - 1)
    return p0.astype(np.int64), p1.astype(np.int64)


def _box_rectangle_any(flags: np.ndarray, r0, r1, c0, c1) -> np.ndarray:
    """Whether each ``flags[n]`` (n, R, C) has a True in rows ``[r0[n], r1[n]]`` and columns ``[c0[n], c1[n]]``."""
    return np.array(
        [flags[n, r0[n] : r1[n] + 1, c0[n] : c1[n] + 1].any() for n in range(len(flags))],
        dtype=bool,
    )


def filled_boxes(protos, coefficients, boxes, image_shape: tuple[int, int]) -> np.ndarray:
    """Whether each box's mask (as :func:`rebuild_masks` builds it) has a pixel, without rasterising masks
    at the image's size.

    A mask pixel is a bilinear blend, with non-negative weights, of a few prototype-resolution values
    ``coefficients @ protos``. A box none of whose pixels can read a value above ``-MARGIN`` has an empty
    mask; a box with a pixel whose every value read is above ``MARGIN`` has a filled one. The values each
    pixel reads are taken as wide as the interpolation's rounding could make them (:func:`_reads`), so both
    rules are sufficient. The boxes neither decides (a mask edge near the box's pixels) have each of their
    pixels blended in float64 (:func:`_weights`); a box whose pixels all stay within ``MARGIN`` of zero or
    below is rebuilt exactly. The result is :func:`kept_mask_rles`' ``keep``, bit for bit.

    Args:
        protos, coefficients, boxes, image_shape: As :func:`rebuild_masks`.

    Returns:
        (n,) bool.
    """
    import torch

    protos = torch.as_tensor(protos)
    c, mh, mw = protos.shape
    coefficients = torch.as_tensor(coefficients).reshape(-1, c).to(protos.device)
    n = len(coefficients)
    h, w = (int(v) for v in image_shape)
    out = np.zeros(n, dtype=bool)
    xyxy = torch.as_tensor(boxes, dtype=torch.float32).reshape(-1, 4).cpu().numpy()
    # the pixels crop_mask keeps: columns x1 <= j < x2, rows y1 <= i < y2
    c0 = np.clip(np.ceil(xyxy[:, 0]), 0, None).astype(np.int64)
    c1 = np.minimum(np.ceil(xyxy[:, 2]).astype(np.int64) - 1, w - 1)
    r0 = np.clip(np.ceil(xyxy[:, 1]), 0, None).astype(np.int64)
    r1 = np.minimum(np.ceil(xyxy[:, 3]).astype(np.int64) - 1, h - 1)
    sel = np.flatnonzero((c1 >= c0) & (r1 >= r0))
    if not len(sel):
        return out
    row_axis, col_axis = (h, mh, *_axis(h, w, mh, mw)), (w, mw, *_axis(w, h, mw, mh))
    rows0, rows1 = _reads(*row_axis)
    cols0, cols1 = _reads(*col_axis)
    logits = (coefficients[sel] @ protos.float().view(c, -1)).view(len(sel), mh, mw).cpu().numpy()
    # surely empty: nothing any kept pixel reads is above -MARGIN
    maybe = _box_rectangle_any(
        logits > -_MARGIN, rows0[r0[sel]], rows1[r1[sel]], cols0[c0[sel]], cols1[c1[sel]]
    )
    # surely filled: some kept pixel reads only values above MARGIN (windows of the widest read, from its first)
    kr, kc = int((rows1 - rows0).max()) + 1, int((cols1 - cols0).max()) + 1
    lo = _window_min(logits, kr, kc)
    start_r, start_c = np.minimum(rows0, mh - kr), np.minimum(cols0, mw - kc)
    realised = np.zeros(lo.shape[1:], dtype=bool)  # windows some output pixel reads
    realised[np.ix_(np.unique(start_r), np.unique(start_c))] = True
    sure = _box_rectangle_any(
        (lo > _MARGIN) & realised,
        start_r[r0[sel]],
        start_r[r1[sel]],
        start_c[c0[sel]],
        start_c[c1[sel]],
    )
    out[sel[sure]] = True
    ry, rx = _weights(*row_axis), _weights(*col_axis)
    for m in np.flatnonzero(
        maybe & ~sure
    ):  # each pixel's blend in float64, the box's pixels and what they read
        b = sel[m]
        p0, p1, q0, q1 = rows0[r0[b]], rows1[r1[b]] + 1, cols0[c0[b]], cols1[c1[b]] + 1
        v = (
            ry[r0[b] : r1[b] + 1, p0:p1]
            @ logits[m, p0:p1, q0:q1].astype(np.float64)
            @ rx[c0[b] : c1[b] + 1, q0:q1].T
        )
        out[b] = (v > _MARGIN).any() or (
            (v > -_MARGIN).any()
            and bool(_rebuild_masks(protos, coefficients[b : b + 1], xyxy[b : b + 1], (h, w)).any())
        )
    return out


def _axis(size: int, other: int, mask_size: int, mask_other: int) -> tuple[int, int, int]:
    """``process_mask_native``'s geometry along one axis of an image ``size`` x ``other`` (prototypes
    ``mask_size`` x ``mask_other``): the upsampling factor, then the offset and length of the letterbox crop of
    the upsampled masks."""
    import math

    gain = min(4 * mask_size / size, 4 * mask_other / other)
    pad = (4 * mask_size - max(round(size * gain), 1)) | (
        4 * mask_other - max(round(other * gain), 1)
    )
    f = 4 // math.gcd(4, pad | pad // 2)
    g = min(f * mask_size / size, f * mask_other / other)
    length = max(round(size * g), 1)
    return f, round((f * mask_size - length) / 2 - 0.1), length


def _window_min(x: np.ndarray, kr: int, kc: int) -> np.ndarray:
    """The minimum of each ``kr`` x ``kc`` window (stride 1) of each (R, C) array of ``x`` (n, R, C)."""
    r = x[:, : x.shape[1] - kr + 1].copy()
    for i in range(1, kr):
        np.minimum(r, x[:, i : i + r.shape[1]], out=r)
    out = r[:, :, : r.shape[2] - kc + 1].copy()
    for j in range(1, kc):
        np.minimum(out, r[:, :, j : j + out.shape[2]], out=out)
    return out


@functools.lru_cache(maxsize=16)
def _weights(out_size: int, mask_size: int, factor: int, offset: int, cropped: int) -> np.ndarray:
    """(out_size, mask_size) float64: each output pixel's bilinear weights on the prototype pixels along one
    axis, the two interpolations of :func:`rebuild_masks` composed (``align_corners=False``, sources clamped
    at 0 and at the last pixel)."""

    def linear(n_out: int, n_in: int, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = np.maximum((np.arange(n_out) + 0.5) * scale - 0.5, 0.0)
        lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
        return lo, np.minimum(lo + 1, n_in - 1), (src - lo)[:, None]

    up = np.eye(mask_size)
    if factor > 1:  # the first interpolation, by ``factor``
        lo, hi, lam = linear(factor * mask_size, mask_size, 1 / factor)
        up = (1 - lam) * up[lo] + lam * up[hi]
    lo, hi, lam = linear(
        out_size, cropped, cropped / out_size
    )  # the second, from the letterbox crop
    out = (1 - lam) * up[offset + lo] + lam * up[offset + hi]
    out.flags.writeable = False  # cached: shared by every image of this size
    return out
