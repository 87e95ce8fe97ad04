"""A run's map where det_calib is not: ``portable_map.json``, its ONNX graph, the per-class raw thresholds.

Every calibrator of the registry is a map of the box's logit per class: affine (``none``, temperature,
Platt, per-class temperature and Platt), piecewise linear (spline, isotonic, per class or not), or affine
with a term in the box's size (``size-platt``). :func:`portable_map` writes it as a small JSON of numbers
that :func:`det_calib.deploy.portable_apply.calibrated_score` (pure Python, ``math`` only: copy the file)
applies to an engine's ``(score, class)``; :func:`map_onnx` builds the same map as an ONNX graph
(``score`` float32 ``[N]``, ``class`` int64 ``[N]``, for a size map ``log_area`` float32 ``[N]``; out
``calibrated`` float32 ``[N]``, computed in float64) to chain after an engine's output; and
:func:`raw_thresholds` gives, per class, the raw score above which a box's calibrated score is above a
calibrated conf, written as JSON and as a DeepStream ``[class-attrs-N]`` block (:func:`deepstream_block`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from det_calib.calibrators.base import LogitCalibrator
from det_calib.errors import InputError
from det_calib.io import write_bytes, write_text
from det_calib.record.calibrator_record import calibrator_of
from det_calib.thresholds.thresholds_file import class_thresholds

__all__ = ["portable_head", "raw_thresholds", "write_portable_outputs"]

_EPS = 1e-6
"""Scores are clipped to ``[EPS, 1 - EPS]`` before their logit (as ``calibrate --detections`` reads them)."""
_FORMAT = "det_calib.PortableMap"


def _map_entries(cal: LogitCalibrator, method: str, n_classes: int) -> list[dict[str, Any]]:
    """One map per class (one entry when the map is shared)."""
    if method == "none":
        return [{"kind": "identity"}]
    if getattr(cal, "uses_size", False):
        return [{"kind": "size-affine", "a": float(cal.a_), "b": float(cal.b_), "c": float(cal.c_)}]
    affine = cal.affine_params(n_classes)
    if affine is not None:
        a, b = (np.asarray(v, dtype=np.float64) for v in affine)
        out = [
            {"kind": "affine", "a": float(ai), "b": float(bi)} for ai, bi in zip(a, b, strict=True)
        ]
    else:
        hinges = cal.hinge_maps(n_classes)
        if hinges is None:
            raise InputError(
                f"the `{method}` map is neither affine nor piecewise linear: no portable form"
            )
        out = [
            {
                "kind": "piecewise",
                "x": h.x.tolist(),
                "y": h.y.tolist(),
                "left_slope": float(h.tail_slope),
                "right_slope": float(h.right_slope),
            }
            for h in hinges
        ]
    return out if cal.per_class else out[:1]


def portable_head(cal: LogitCalibrator, method: str, n_classes: int) -> dict[str, Any]:
    """One head's entry of ``portable_map.json``: the method, its own parameters, the maps per class."""
    params = {} if method == "none" else cal.to_dict()
    return {
        "method": method,
        "per_class": bool(cal.per_class),
        "uses_size": bool(getattr(cal, "uses_size", False)),
        "parameters": params,
        "maps": _map_entries(cal, method, n_classes),
    }


def _portable_map(
    calibrators: dict[str, tuple[LogitCalibrator, str]], class_names: Sequence[str]
) -> dict[str, Any]:
    """``portable_map.json`` of a run's heads (head -> ``(calibrator, method)``)."""
    n = len(class_names)
    return {
        "format": _FORMAT,
        "version": 1,
        "eps": _EPS,
        "class_names": list(class_names),
        "heads": {h: portable_head(cal, m, n) for h, (cal, m) in calibrators.items()},
    }


# ---------------------------------------------------------------------------------------- the ONNX map
def _hinge_table(maps: list[dict[str, Any]]) -> tuple[np.ndarray, ...]:
    """Per class ``(c0, s0, knots, coef)``: ``t = c0 + s0 z + sum_j coef_j relu(z - knot_j)``, padded."""
    rows = []
    for m in maps:
        x, y = np.asarray(m["x"], dtype=np.float64), np.asarray(m["y"], dtype=np.float64)
        slopes = np.concatenate(
            [[m["left_slope"]], np.diff(y) / np.diff(x) if x.size > 1 else [], [m["right_slope"]]]
        )
        rows.append((y[0] - m["left_slope"] * x[0], m["left_slope"], x, np.diff(slopes)))
    k = max(r[2].size for r in rows)
    knots = np.zeros((len(rows), k))
    coef = np.zeros((len(rows), k))
    for i, (_, _, x, c) in enumerate(rows):
        knots[i, : x.size], coef[i, : c.size] = x, c
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), knots, coef


def map_onnx(
    head: dict[str, Any], *, eps: float = _EPS, opset: int = 17, double: bool = False
) -> bytes:
    """The ONNX graph of one head's map (see the module's docstring for its inputs and output).

    ``double``: ``score``, ``log_area`` and ``calibrated`` in float64 instead of an engine's float32 (a
    float32 score near 1 holds its logit to a few digits only: 0.99999 is 0.99998999 +- 6e-8)."""
    from onnx import (  # optional extra `onnx`: pip install 'det_calib[onnx]'
        TensorProto,
        helper,
        numpy_helper,
    )

    io = TensorProto.DOUBLE if double else TensorProto.FLOAT

    maps = head["maps"]
    kind = maps[0]["kind"]
    nodes, inits = [], []

    def const(name: str, value: Any) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float64), name))
        return name

    def node(op: str, ins: list[str], out: str, **kw: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], **kw))
        return out

    inputs = [
        helper.make_tensor_value_info("score", io, ["N"]),
        helper.make_tensor_value_info("class", TensorProto.INT64, ["N"]),
    ]
    if kind == "identity":
        node("Identity", ["score"], "calibrated")
    else:
        p = node("Cast", ["score"], "p64", to=TensorProto.DOUBLE)
        p = node("Clip", [p, const("eps", eps), const("one_m_eps", 1 - eps)], "p_clip")
        q = node("Sub", [const("one", 1.0), p], "q")
        z = node("Sub", [node("Log", [p], "log_p"), node("Log", [q], "log_q")], "z")
        cls = "class" if len(maps) > 1 else node("Mul", ["class", "zero_i"], "cls0")
        if len(maps) == 1:
            inits.append(numpy_helper.from_array(np.zeros((), dtype=np.int64), "zero_i"))
        if kind in ("affine", "size-affine"):
            a = node("Gather", [const("a", [m["a"] for m in maps]), cls], "a_c", axis=0)
            b = node("Gather", [const("b", [m["b"] for m in maps]), cls], "b_c", axis=0)
            t = node("Add", [node("Mul", [a, z], "az"), b], "t_ab")
            if kind == "size-affine":
                inputs.append(helper.make_tensor_value_info("log_area", io, ["N"]))
                s = node("Cast", ["log_area"], "s64", to=TensorProto.DOUBLE)
                t = node("Add", [t, node("Mul", [const("c", maps[0]["c"]), s], "cs")], "t_size")
        else:
            c0, s0, knots, coef = _hinge_table(maps)
            base = node(
                "Add",
                [
                    node("Gather", [const("c0", c0), cls], "c0_c", axis=0),
                    node("Mul", [node("Gather", [const("s0", s0), cls], "s0_c", axis=0), z], "s0z"),
                ],
                "t_lin",
            )
            zz = node("Unsqueeze", [z, "axis1"], "z_col")
            inits.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"))
            d = node(
                "Relu",
                [
                    node(
                        "Sub",
                        [zz, node("Gather", [const("knots", knots), cls], "knots_c", axis=0)],
                        "z_minus",
                    )
                ],
                "hinge",
            )
            h = node(
                "ReduceSum",
                [
                    node(
                        "Mul",
                        [d, node("Gather", [const("coef", coef), cls], "coef_c", axis=0)],
                        "weighted",
                    ),
                    "axis1",
                ],
                "hinge_sum",
                keepdims=0,
            )
            t = node("Add", [base, h], "t_pw")
        node("Cast", [node("Sigmoid", [t], "cal64")], "calibrated", to=io)
    graph = helper.make_graph(
        nodes,
        "det_calib_portable_map",
        inputs,
        [helper.make_tensor_value_info("calibrated", io, ["N"])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="det_calib"
    )
    model.ir_version = min(model.ir_version, 8)  # onnxruntime releases of the last years read IR 8
    return model.SerializeToString()


# --------------------------------------------------------------------------------------- raw thresholds
def _inverse(m: dict[str, Any], t: float) -> float:
    """The logit ``z`` a map sends to ``t`` (maps are strictly increasing)."""
    if m["kind"] == "affine":
        return (t - m["b"]) / m["a"]
    x, y = m["x"], m["y"]
    if t <= y[0]:
        return x[0] + (t - y[0]) / m["left_slope"]
    if t >= y[-1]:
        return x[-1] + (t - y[-1]) / m["right_slope"]
    return float(np.interp(t, y, x))


def raw_thresholds(
    head: dict[str, Any], conf: float | Sequence[float], n_classes: int
) -> list[float] | None:
    """Per class, the raw score whose calibrated score is ``conf`` (one conf, or one per class: the
    ``thresholds`` command's tuned ones): a box of that class has a calibrated score above its conf
    exactly when its raw score is above it. None for a size map (the threshold depends on the box's size)."""
    maps = head["maps"]
    confs = (
        [float(conf)] * n_classes if isinstance(conf, (int, float)) else [float(c) for c in conf]
    )
    if maps[0]["kind"] == "size-affine":
        return None
    if maps[0]["kind"] == "identity":
        return confs
    out = []
    for c, cc in enumerate(confs):
        if not 0 < cc < 1:  # a class that keeps every box (0) or none (1) keeps them raw too
            out.append(cc)
            continue
        z = _inverse(maps[c] if len(maps) > 1 else maps[0], math.log(cc) - math.log1p(-cc))
        out.append(1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z)))
    return out


def tuned_deepstream(
    folder: str | Path, *, head: str = "nms", criterion: str = "target_precision"
) -> Path:
    """The ``thresholds`` command's tuned per-class thresholds of a run (``thresholds.json``, on the
    calibrated score) as raw-score thresholds in a DeepStream block, ``deepstream_<head>_<criterion>.txt``
    in the run's folder (its ``portable_map.json`` gives the map; a run of a file of detections writes one).

    >>> tuned_deepstream("runs/trt_file")  # doctest: +SKIP
    PosixPath('runs/trt_file/deepstream_nms_target_precision.txt')
    """

    folder = Path(folder)
    pmap_path = folder / "portable_map.json"
    if not pmap_path.is_file():
        raise InputError(
            f"no portable_map.json in {folder}: it is written by `calibrate --detections`"
        )
    pmap = json.loads(pmap_path.read_text(encoding="utf-8"))
    if head not in pmap["heads"]:
        raise InputError(f"Expected `head` one of {sorted(pmap['heads'])}, but got {head!r}")
    tuned = class_thresholds(folder / "thresholds.json", head=head, criterion=criterion)
    n = len(pmap["class_names"])
    raw = raw_thresholds(pmap["heads"][head], [tuned.get(c, 1.0) for c in range(n)], n)
    if raw is None:
        raise InputError(f"the {head} head's map reads the box's size: no per-class raw threshold")
    return write_text(
        folder / f"deepstream_{head}_{criterion}.txt",
        _deepstream_block(
            raw,
            comment=(
                f"det_calib: raw scores of the {criterion} thresholds tuned by `det-calib "
                f"thresholds` ({head} head, "
                f"{pmap['heads'][head]['method']} map)"
            ),
        ),
    )


def _deepstream_block(thresholds: Sequence[float], *, comment: str = "") -> str:
    """DeepStream's ``nvinfer`` config lines: ``[class-attrs-all]`` (the lowest) and one
    ``[class-attrs-N] pre-cluster-threshold=`` per class (parsed back by :mod:`configparser`)."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += ["[class-attrs-all]", f"pre-cluster-threshold={min(thresholds):.9g}", ""]
    for c, r in enumerate(thresholds):
        lines += [f"[class-attrs-{c}]", f"pre-cluster-threshold={r:.9g}", ""]
    return "\n".join(lines)


def write_portable_outputs(
    folder: Path, result: Any, *, conf: Sequence[float] = (0.25,)
) -> list[str]:
    """Write ``portable_map.json``, ``portable_map_<head>.onnx`` (where onnx is installed),
    ``raw_thresholds.json`` and ``deepstream_<head>.txt`` (at the first ``conf``) for a run's result;
    the summary's lines."""

    names = list(result.class_names)
    cals = {
        h: (calibrator_of(r.calibrator), r.calibrator.method)
        for h, r in result.results.items()
        if r.calibrator is not None
    }
    pmap = _portable_map(cals, names)
    write_text(folder / "portable_map.json", json.dumps(pmap, indent=1) + "\n")
    written = ["portable_map.json"]
    doc: dict[str, Any] = {
        "format": "det_calib.RawThresholds",
        "version": 1,
        "class_names": names,
        "heads": {},
    }
    for h, head in pmap["heads"].items():
        try:
            write_bytes(folder / f"portable_map_{h}.onnx", map_onnx(head))
            written.append(f"portable_map_{h}.onnx")
        except ImportError:  # onnx is the optional extra `onnx`
            pass
        per_conf = {f"{c:g}": raw_thresholds(head, c, len(names)) for c in conf}
        doc["heads"][h] = {"method": head["method"], "raw_thresholds": per_conf}
        first = per_conf[f"{conf[0]:g}"]
        if first is not None:
            write_text(
                folder / f"deepstream_{h}.txt",
                _deepstream_block(
                    first,
                    comment=(
                        f"det_calib: raw scores whose calibrated score is {conf[0]:g} ({h} head, "
                        f"{head['method']} map);\n"
                        "append to the nvinfer config file: gst-nvinfer reads the [class-attrs-*] "
                        "groups"
                    ),
                ),
            )
            written.append(f"deepstream_{h}.txt")
    write_text(folder / "raw_thresholds.json", json.dumps(doc, indent=1) + "\n")
    written.append("raw_thresholds.json")
    return [f"the map where det_calib is not: {', '.join(written)} (docs/detections.md)"]
