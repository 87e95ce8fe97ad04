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
what :mod:`det_calib.matching.masks` and the ground truth's ``segm`` column hold.
"""

from __future__ import annotations

import numpy as np

__all__ = ["encode_masks", "kept_mask_rles", "mask_rles", "rebuild_masks"]

CHUNK = 64
"""Boxes rebuilt at once (bounds the memory of the (boxes, H, W) stack)."""


def rebuild_masks(protos, coefficients, boxes, image_shape: tuple[int, int]) -> np.ndarray:
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
    for lo in range(0, len(coefficients), CHUNK):
        m = process_mask_native(protos, coefficients[lo:lo + CHUNK], boxes[lo:lo + CHUNK], (h, w))
        out[lo:lo + CHUNK] = m.cpu().numpy()
    return out


def encode_masks(masks: np.ndarray) -> list[bytes]:
    """pycocotools compressed RLE ``counts`` of each mask of an (n, H, W) stack."""
    from pycocotools import mask as mask_utils

    masks = np.asarray(masks, dtype=np.uint8)
    if masks.ndim != 3:
        raise ValueError(f"Expected masks of shape (n, H, W), but got shape {masks.shape}")
    if not len(masks):
        return []
    rles = mask_utils.encode(np.asfortranarray(masks.transpose(1, 2, 0)))
    return [r["counts"] for r in rles]


def mask_rles(protos, coefficients, boxes, image_shape: tuple[int, int]) -> list[bytes]:
    """:func:`rebuild_masks` then :func:`encode_masks`, a chunk of boxes at a time."""
    out: list[bytes] = []
    for lo in range(0, len(boxes), CHUNK):
        out += encode_masks(rebuild_masks(protos, coefficients[lo:lo + CHUNK], boxes[lo:lo + CHUNK], image_shape))
    return out


def kept_mask_rles(protos, coefficients, boxes, image_shape: tuple[int, int]) -> tuple[np.ndarray, list[bytes]]:
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
    for lo in range(0, len(boxes), CHUNK):
        masks = rebuild_masks(protos, coefficients[lo:lo + CHUNK], boxes[lo:lo + CHUNK], image_shape)
        filled = masks.reshape(len(masks), -1).max(1, initial=0) > 0
        keep[lo:lo + len(masks)] = filled
        out += encode_masks(masks[filled])
    return keep, out
