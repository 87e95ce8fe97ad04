"""The size term of a size-conditioned map (``size-platt``) inside a calibrated ONNX or OpenVINO export.

``size-platt`` scores a box ``sigmoid(a z + b + c log(box area / image area))``
(:class:`~det_calib.calibrators.size.SizePlattScaler`): it reads the box, which the class conv cannot
see, so it cannot fold into a checkpoint. An export's output carries the boxes beside the scores, so
the graph can compute it: :func:`det_calib.deploy.calibrated_export.write_calibrated_export` appends
the affine part ``a z + b`` exactly as for Platt, and adds ``c`` times the term built here before
the ``Sigmoid``.

The box's area relative to its **image**, not to the network input: the engine sees the image
letterboxed (scaled by ``r``, padded with Ultralytics' grey 114 to the export's square), and the
run measured the box in the image's own pixels (``log_area`` of its corners over ``w * h``). The
graph finds the image's rectangle inside the input from the padding itself: the rows and columns
at the edges whose every pixel is the pad value (114/255, within half a grey level) are padding,
the rest is the image (``r w`` by ``r h`` input pixels). The box is clipped to that rectangle (as
Ultralytics' ``scale_boxes`` clips it to the image) and its area divided by the rectangle's:
``(r^2 box area) / (r^2 w h)``, the run's relative area. An input that is not letterboxed (an image
resized to the input, even stretched) has no padding and its relative area is read against the
whole input, which is again right: a relative area does not change under scaling.

Exact where ``r w`` and ``r h`` are whole pixels (the demo's 320x320, 384x288 and 288x384 images at
320); otherwise the letterbox rounds the image to whole pixels while ``scale_boxes`` uses ``r w``
unrounded, a difference under half a pixel per side. An image whose outermost rows or columns are
themselves exactly grey 114 would be read as padded there (a synthetic border; not a photograph).

Nodes: ``Sub``, ``Abs``, ``Greater``, ``Less``, ``Cast``, ``ReduceSum``, ``CumSum``, ``Shape``,
``Gather``, ``Slice``, ``Min``, ``Max``, ``Relu``, ``Div``, ``Mul``, ``Log``, ``Unsqueeze`` (the
OpenVINO opset13 equivalents): stock operators, run with det_calib absent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from det_calib.calibrators.base import MIN_REL_AREA, LogitCalibrator
from det_calib.capture.exported import logit_of_prob
from det_calib.deploy.export_layout import map_name
from det_calib.errors import InputError
from det_calib.numeric import sigmoid

__all__ = ["onnx_log_area", "openvino_log_area", "size_platt_terms"]

_PAD_VALUE = 114 / 255
"""Ultralytics' letterbox padding (grey 114) as the network input sees it."""

_PAD_TOL = 0.5 / 255  # half a grey level: a pixel of 113 or 115 is not padding


def size_platt_terms(calibrator: LogitCalibrator) -> tuple[float, float, float]:
    """``(a, b, c)`` of a size-conditioned map the export can carry: ``a z + b + c log_area``.

    Raises:
        InputError: A map that reads the box's size in another form.
    """
    try:
        return float(calibrator.a_), float(calibrator.b_), float(calibrator.c_)
    except AttributeError:
        raise InputError(
            f"cannot put a {map_name(calibrator)} map into an export: the graph carries the "
            "size-conditioned map a z + b + c log(relative area) (size-platt) only"
        ) from None


def _sized_probs(calibrator: LogitCalibrator, p: Any, log_area: Any) -> np.ndarray:
    """What the calibrated export computes for engine probabilities ``p`` of boxes of relative size
    ``log_area`` (broadcastable), in float64: the map on the logit read back from ``p``."""

    a, b, c = size_platt_terms(calibrator)
    return sigmoid(a * logit_of_prob(p) + b + c * np.asarray(log_area, dtype=np.float64))


def _reference_log_area(xyxy: Any, image_rect: Any) -> np.ndarray:
    """``log(box area / rectangle area)`` of input-pixel corners ``xyxy`` (``(..., 4)``) clipped to the image's
    rectangle ``(x0, y0, x1, y1)`` in the input: what the graph computes, in float64 (tests)."""
    b = np.asarray(xyxy, dtype=np.float64)
    x0, y0, x1, y1 = (float(v) for v in image_rect)
    w = np.clip(np.clip(b[..., 2], x0, x1) - np.clip(b[..., 0], x0, x1), 0, None)
    h = np.clip(np.clip(b[..., 3], y0, y1) - np.clip(b[..., 1], y0, y1), 0, None)
    return np.log(np.maximum(w * h / max((x1 - x0) * (y1 - y0), 1.0), MIN_REL_AREA))


# ---------------------------------------------------------------------------------------- ONNX
def _once(const: Callable[..., str]) -> Callable[..., str]:
    """``const`` that adds each named initializer once (a name asked again gives the first one)."""
    made: dict[str, str] = {}

    def once(name: str, value: Any, dtype: Any = np.float32) -> str:
        if name not in made:
            made[name] = const(name, value, dtype)
        return made[name]

    return once


def _onnx_image_rect(
    node: Callable[..., str], const: Callable[..., str], image: str, half_image: bool
) -> dict[str, tuple[str, str]]:
    """``{"y": (y0, y1), "x": (x0, x1)}``: the image's rectangle in the input ``image`` (``(B, 1, 1)``
    tensors): the edge lines whose every pixel is the padding left out."""
    # optional extra `onnx` ('det_calib[onnx]'), checked (ExportInfo.require_runtime) before the export is built
    from onnx import TensorProto  # optional extra `onnx`: pip install 'det_calib[onnx]'

    img = node("Cast", [image], "size/image_f32", to=TensorProto.FLOAT) if half_image else image
    off = node(
        "Cast",
        [
            node(
                "Greater",
                [
                    node(
                        "Abs",
                        [node("Sub", [img, const("size/pad", _PAD_VALUE)], "size/dev")],
                        "size/absdev",
                    ),
                    const("size/tol", _PAD_TOL),
                ],
                "size/not_pad_b",
            )
        ],
        "size/not_pad",
        to=TensorProto.FLOAT,
    )
    shape = node("Cast", [node("Shape", [img], "size/shape_i")], "size/shape", to=TensorProto.FLOAT)
    lo_hi = {}
    for name, reduce_axes, dim in (("y", [1, 3], 2), ("x", [1, 2], 3)):
        count = node(
            "ReduceSum",
            [off, const(f"size/{name}_axes", reduce_axes, np.int64)],
            f"size/{name}_count",
            keepdims=0,
        )  # (B, H) or (B, W): non-padding pixels per row / column
        half = const("size/half_line", 0.5)
        used = node(
            "Cast",
            [node("Greater", [count, half], f"size/{name}_used_b")],
            f"size/{name}_used",
            to=TensorProto.FLOAT,
        )
        ax, red = const(f"size/{name}_ax1", 1, np.int64), const(f"size/{name}_ax", [1], np.int64)
        edges = []
        for rev in (0, 1):  # leading, then trailing padding: the lines before the first used one
            run = node("CumSum", [used, ax], f"size/{name}_cum{rev}", reverse=rev)
            pad = node(
                "Cast",
                [node("Less", [run, half], f"size/{name}_pad{rev}_b")],
                f"size/{name}_pad{rev}",
                to=TensorProto.FLOAT,
            )
            edges.append(
                node("ReduceSum", [pad, red], f"size/{name}_edge{rev}", keepdims=1)
            )  # (B, 1)
        full = node(
            "Gather", [shape, const(f"size/{name}_dim", dim, np.int64)], f"size/{name}_full", axis=0
        )
        last = const("size/last", [-1], np.int64)
        lo = node("Unsqueeze", [edges[0], last], f"size/{name}_lo")  # (B, 1, 1)
        hi = node(
            "Unsqueeze",
            [node("Sub", [full, edges[1]], f"size/{name}_hi2"), last],
            f"size/{name}_hi",
        )
        lo_hi[name] = (lo, hi)
    return lo_hi


def onnx_log_area(
    node: Callable[..., str],
    const: Callable[..., str],
    src: str,
    image: str,
    *,
    rows: bool,
    half_image: bool,
) -> str:
    """The log relative area of each box of the output ``src`` (per-anchor ``(B, 4 + nc, A)`` of
    centre-size boxes, or rows ``(B, N, 6+)`` of corners), read against the image's rectangle in the
    input ``image`` ``(B, 3, H, W)``: a tensor ``(B, 1, A)`` or ``(B, N, 1)`` named by the return.

    ``node(op, inputs, name, **attrs)`` and ``const(name, value, dtype)`` add a node and an
    initializer and return their output names (those of :mod:`det_calib.deploy.calibrated_export`).
    """
    const = _once(const)
    lo_hi = _onnx_image_rect(node, const, image, half_image)
    axis = -1 if rows else 1

    def channel(i: int) -> str:
        return node(
            "Slice",
            [
                src,
                const(f"size/c{i}a", [i], np.int64),
                const(f"size/c{i}b", [i + 1], np.int64),
                const(f"size/c{i}ax", [axis], np.int64),
            ],
            f"size/ch{i}",
        )

    ch = [channel(i) for i in range(4)]
    if rows:  # corners
        corners = ch
    else:  # centre and size, as Ultralytics' xywh2xyxy: centre -+ size / 2
        half = [node("Mul", [ch[i], const("size/half_f", 0.5)], f"size/half{i}") for i in (2, 3)]
        corners = [
            node("Sub", [ch[0], half[0]], "size/x1"),
            node("Sub", [ch[1], half[1]], "size/y1"),
            node("Add", [ch[0], half[0]], "size/x2"),
            node("Add", [ch[1], half[1]], "size/y2"),
        ]

    def side(a: str, b: str, name: str) -> tuple[str, str]:
        lo, hi = lo_hi[name]
        clip = [
            node("Max", [node("Min", [v, hi], f"size/{name}{i}_min"), lo], f"size/{name}{i}_clip")
            for i, v in enumerate((a, b))
        ]
        length = node(
            "Relu", [node("Sub", [clip[1], clip[0]], f"size/{name}_len_raw")], f"size/{name}_len"
        )
        extent = node(
            "Max",
            [node("Sub", [hi, lo], f"size/{name}_ext_raw"), const("size/one_px", 1.0)],
            f"size/{name}_ext",
        )
        return length, extent

    (wl, we), (hl, he) = side(corners[0], corners[2], "x"), side(corners[1], corners[3], "y")
    rel = node(
        "Div",
        [node("Mul", [wl, hl], "size/area"), node("Mul", [we, he], "size/image_area")],
        "size/rel",
    )
    return node(
        "Log",
        [node("Max", [rel, const("size/min_rel", MIN_REL_AREA)], "size/rel_floor")],
        "size/log_area",
    )


# ------------------------------------------------------------------------------------ OpenVINO
def openvino_log_area(src: Any, image: Any, *, rows: bool) -> Any:
    """:func:`onnx_log_area` in OpenVINO opset13 ops, on the output ``src`` and the input ``image``."""
    # optional extra `openvino` ('det_calib[openvino]'), checked (ExportInfo.require_runtime) before the export
    # is built
    import openvino.opset13 as ops  # optional extra `openvino`: pip install 'det_calib[openvino]'

    def c(v: Any, dtype=np.float32) -> Any:
        return ops.constant(np.asarray(v, dtype=dtype))

    img = image if image.get_element_type().get_type_name() == "f32" else ops.convert(image, "f32")
    off = ops.convert(ops.greater(ops.abs(ops.subtract(img, c(_PAD_VALUE))), c(_PAD_TOL)), "f32")
    shape = ops.convert(ops.shape_of(img), "f32")
    lo_hi = {}
    for name, reduce_axes, dim in (("y", [1, 3], 2), ("x", [1, 2], 3)):
        used = ops.convert(
            ops.greater(ops.reduce_sum(off, c(reduce_axes, np.int64), keep_dims=False), c(0.5)),
            "f32",
        )
        edges = [
            ops.reduce_sum(
                ops.convert(ops.less(ops.cumsum(used, c(1, np.int64), reverse=rev), c(0.5)), "f32"),
                c([1], np.int64),
                keep_dims=True,
            )
            for rev in (False, True)
        ]
        full = ops.gather(shape, c(dim, np.int64), c(0, np.int64))
        last = c([-1], np.int64)
        lo_hi[name] = (
            ops.unsqueeze(edges[0], last),
            ops.unsqueeze(ops.subtract(full, edges[1]), last),
        )
    axis = -1 if rows else 1

    def channel(i: int) -> Any:
        return ops.slice(
            src, c([i], np.int64), c([i + 1], np.int64), c([1], np.int64), c([axis], np.int64)
        )

    ch = [channel(i) for i in range(4)]
    if rows:
        corners = ch
    else:
        half = [ops.multiply(ch[i], c(0.5)) for i in (2, 3)]
        corners = [
            ops.subtract(ch[0], half[0]),
            ops.subtract(ch[1], half[1]),
            ops.add(ch[0], half[0]),
            ops.add(ch[1], half[1]),
        ]

    def side(a: Any, b: Any, name: str) -> tuple[Any, Any]:
        lo, hi = lo_hi[name]
        ca, cb = (ops.maximum(ops.minimum(v, hi), lo) for v in (a, b))
        return ops.relu(ops.subtract(cb, ca)), ops.maximum(ops.subtract(hi, lo), c(1.0))

    (wl, we), (hl, he) = side(corners[0], corners[2], "x"), side(corners[1], corners[3], "y")
    rel = ops.divide(ops.multiply(wl, hl), ops.multiply(we, he))
    return ops.log(ops.maximum(rel, c(MIN_REL_AREA)))
