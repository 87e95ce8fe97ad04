"""Deploy a calibration into an exported engine, or as the raw threshold that needs no code.

Two ways, beside the calibrated ``.pt`` (:mod:`det_calib.deploy.fold`):

- :func:`write_calibrated_export`: the export with the calibration appended to its graph after
  the class scores, in stock operators only (``Clip``, ``Log``, ``Sub``, ``Mul``, ``Add``,
  ``Relu``, ``ReduceSum``, ``Gather``, ``Sigmoid``; the OpenVINO opset equivalents), so that
  Ultralytics and the plain runtime (``onnxruntime``, ``openvino``) run it with no det_calib
  installed. The engine's probability ``p`` is read back as a logit exactly as
  :func:`det_calib.capture.exported.logit_of_prob` reads it (clipped to float32's ``(0, 1)``), the head's
  calibrator in its deployment form (:mod:`det_calib.deploy.fold`: affine per class, or ReLU hinges per
  class) maps it, and a ``Sigmoid`` gives the calibrated score. Nothing before the scores
  changes (an INT8 engine keeps its quantised graph). On per-anchor outputs ``(B, 4 + nc,
  anchors)`` every class channel gets its own map before Ultralytics' NMS, as the folded ``.pt``
  does; on top-k row outputs ``(B, max_det, 6)`` (one-to-one head) each row's map is gathered by
  its class, after the engine's top-k (a per-class map then does not re-rank the top-k). A segment
  model's ``output0`` keeps its 32 mask coefficients after the scores, and its protos (``output1``).
  A size-conditioned map (``size-platt``) goes in too: ``a z + b`` as above plus ``c`` times each box's log
  area relative to its image, read from the box channels of the same output
  (:mod:`det_calib.deploy.size_export`); it has no equivalent raw threshold.
- :func:`reexport_calibrated`: for the formats whose graph det_calib does not edit (LiteRT, NCNN,
  TensorRT), the head's calibrator folded into the ``.pt`` the engine was exported from
  (:func:`det_calib.deploy.fold.write_run_checkpoint`) and that checkpoint exported again by
  Ultralytics with the engine's own export arguments (its metadata's ``args``: ``quantize``,
  ``data``, ``fraction``, ...). An FP32 engine computes the map on its own logit, as the graph
  formats do on the logit read back from its score; a quantised engine quantises the folded layer
  and its output again (see ``docs/engines_mobile.md`` for what that costs on the demo).
- :func:`_equivalent_raw_threshold`: for a global monotone map, the raw ``conf`` that keeps
  exactly the boxes whose calibrated score is above a calibrated threshold: the float32 value
  ``t`` with ``calibrated(p) > c`` exactly when ``p > t`` for every float32 engine score ``p``
  (Ultralytics compares ``conf > t`` in float32).
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from det_calib.calibrators import registry
from det_calib.calibrators.base import LogitCalibrator
from det_calib.capture.exported import (
    P_CEILING,
    P_FLOOR,
    ExportInfo,
    export_format,
    is_export,
    logit_of_prob,
    read_export,
)
from det_calib.codec import Record, decode
from det_calib.deploy.export_layout import check_output_layout, map_name, score_layout, score_step
from det_calib.deploy.posthoc import load_calibrators
from det_calib.deploy.reexport import reexport_calibrated
from det_calib.deploy.size_export import onnx_log_area, openvino_log_area, size_platt_terms
from det_calib.errors import InputError
from det_calib.io import atomic_path, write_json
from det_calib.numeric import sigmoid
from det_calib.record.calibrator_record import calibrator_of
from det_calib.record.checked_json import read_json_file
from det_calib.record.run_result import RunResult, read_calibrators

_log = logging.getLogger(__name__)

_GRAPH_FORMATS = ("onnx", "openvino")
"""The formats whose graph det_calib appends the calibration to; the others are calibrated by exporting the
calibrated checkpoint, or deployed at the equivalent raw threshold."""


@dataclass(frozen=True)
class DeployedMap:
    """A calibrator's deployment form per class, as tables the graph gathers from.

    ``map_c(z) = c0[c] + s0[c] * z + sum_j coef[c, j] * relu(z - x[c, j])``; an affine map has
    no hinges (``x``, ``coef`` of width 0).
    """

    c0: np.ndarray  # (nc,)
    s0: np.ndarray  # (nc,)
    x: np.ndarray  # (nc, K)
    coef: np.ndarray  # (nc, K)

    def __call__(self, z: Any, cls: Any) -> np.ndarray:
        """The map in float64 on logits ``z`` of classes ``cls``."""
        z, cls = np.asarray(z, dtype=np.float64), np.asarray(cls, dtype=np.int64)
        y = self.c0[cls] + self.s0[cls] * z
        if self.x.shape[1]:
            y = y + (self.coef[cls] * np.maximum(z[..., None] - self.x[cls], 0.0)).sum(-1)
        return y


def _deployed_map(calibrator: LogitCalibrator, nc: int) -> DeployedMap:
    """The per-class tables of a fitted calibrator (:func:`det_calib.deploy.fold._affine_params`,
    :func:`det_calib.deploy.fold._pwl_maps`).

    Raises:
        InputError: A calibrator with neither an affine nor a piecewise-linear form.
    """
    from det_calib.deploy.fold import affine_tensors, hinge_tensors

    ab = affine_tensors(calibrator, nc)
    if ab is not None:
        a, b = (t.numpy().astype(np.float64) for t in ab)
        return DeployedMap(b, a, np.zeros((nc, 0)), np.zeros((nc, 0)))
    maps = hinge_tensors(calibrator, nc)
    if maps is None:
        raise InputError(
            f"cannot deploy a {map_name(calibrator)} map into an export: no affine or "
            "piecewise-linear form"
        )
    parts = [m.hinges() for m in maps]
    k = max(p[2].size for p in parts)
    x, coef = np.zeros((nc, k)), np.zeros((nc, k))
    for c, (_, _, xc, cc) in enumerate(parts):
        x[c, : xc.size], coef[c, : cc.size] = xc, cc
    return DeployedMap(np.array([p[0] for p in parts]), np.array([p[1] for p in parts]), x, coef)


def calibrated_probs(calibrator: LogitCalibrator, p: Any, cls: Any, nc: int) -> np.ndarray:
    """What the calibrated export computes for engine probabilities ``p`` of classes ``cls``, in float64."""

    return sigmoid(_deployed_map(calibrator, nc)(logit_of_prob(p), cls))


# ------------------------------------------------------------------------ equivalent threshold
def _equivalent_raw_threshold(
    calibrator: LogitCalibrator, conf: float, *, cls: int = 0, nc: int | None = None
) -> float:
    """The raw engine ``conf`` keeping exactly the boxes whose calibrated score is above ``conf``.

    Returns the float32 value ``t`` (as a float) with ``calibrated(p) > conf`` exactly when
    ``p > t`` for every float32 score ``p`` of class ``cls`` (every class for a global map):
    the boundary found in logit space by bisection, then stepped float32 by float32.

    >>> from det_calib.calibrators.temperature import TemperatureScaler
    >>> t = TemperatureScaler(); t.temperature_ = 2.0
    >>> round(_equivalent_raw_threshold(t, 0.25), 6)  # sigmoid(2 logit(0.25)) = 0.1
    0.1
    """
    nc = nc or cls + 1
    m = _deployed_map(calibrator, nc)
    target = float(np.log(conf) - np.log1p(-conf))

    def cal(p: np.float32) -> float:
        return float(m(logit_of_prob(np.float32(p)), cls))

    lo, hi = -100.0, 100.0
    for _ in range(200):  # the map is increasing: bisect map(z) = logit(conf)
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(m(np.float64(mid), cls)) <= target else (lo, mid)
    t = np.float32(1.0 / (1.0 + np.exp(-lo)))
    t = np.clip(t, np.float32(0.0), np.float32(P_CEILING))
    while t > 0 and cal(t) > target:
        t = np.nextafter(t, np.float32(0.0))
    while t < P_CEILING and cal(np.nextafter(t, np.float32(1.0))) <= target:
        t = np.nextafter(t, np.float32(1.0))
    return float(t)


def _equivalent_raw_thresholds(
    calibrator: LogitCalibrator, confs: Any, nc: int, *, per_class: bool
) -> list[dict]:
    """``[{"conf", "raw_conf", "raw_conf_per_class"}]`` per calibrated threshold: the one raw conf
    of a global map (``raw_conf_per_class`` None), or one per class of a per-class map (``raw_conf`` None)."""
    out = []
    for c in confs:
        if per_class:
            out.append(
                {
                    "conf": float(c),
                    "raw_conf": None,
                    "raw_conf_per_class": [
                        _equivalent_raw_threshold(calibrator, c, cls=k, nc=nc) for k in range(nc)
                    ],
                }
            )
        else:
            out.append(
                {
                    "conf": float(c),
                    "raw_conf": _equivalent_raw_threshold(calibrator, c, nc=nc),
                    "raw_conf_per_class": None,
                }
            )
    return out


# ---------------------------------------------------------------------------- the graph, ONNX
def _onnx_nodes(m: DeployedMap, src: str, info: ExportInfo, nc: int, size: tuple | None = None):
    """Nodes and initializers turning the engine output ``src`` into the calibrated output; ``size``:
    ``(c, image input, it is float16)`` of a size map (:mod:`det_calib.deploy.size_export`)."""
    # optional extra `onnx` ('det_calib[onnx]'), checked (ExportInfo.require_runtime) before any call
    from onnx import (  # optional extra `onnx`: pip install 'det_calib[onnx]'
        TensorProto,
        helper,
        numpy_helper,
    )

    nodes, inits = [], []

    def const(name: str, value: Any, dtype=np.float32) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), f"det_calib/{name}"))
        return f"det_calib/{name}"

    def node(op: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(
            helper.make_node(op, inputs, [f"det_calib/{name}"], name=f"det_calib/{name}", **attrs)
        )
        return f"det_calib/{name}"

    layout = score_layout(info)
    axis, (lo, hi) = layout.axis, layout.scores
    box = node(
        "Slice",
        [
            src,
            const("s0", [0], np.int64),
            const("s1", [4], np.int64),
            const("ax", [axis], np.int64),
        ],
        "box",
    )
    p = node(
        "Slice",
        [src, const("p0", [lo], np.int64), const("p1", [hi], np.int64), "det_calib/ax"],
        "p",
    )
    q = node("Clip", [p, const("lo", P_FLOOR), const("hi", P_CEILING)], "q")
    one_minus = node("Sub", [const("one", 1.0), q], "one_minus_q")
    z = node("Sub", [node("Log", [q], "log_q"), node("Log", [one_minus], "log_1mq")], "z")
    k = m.x.shape[1]
    if info.rows:  # tables gathered by each row's class: (B, N) indices
        cls = node(
            "Slice",
            [src, const("c0i", [5], np.int64), const("c1i", [6], np.int64), "det_calib/ax"],
            "cls",
        )
        idx = node(
            "Cast",
            [node("Squeeze", [cls, "det_calib/ax"], "cls_sq")],
            "cls_idx",
            to=TensorProto.INT64,
        )

        def table(name: str, v: np.ndarray) -> str:
            g = node("Gather", [const(name, v), idx], f"{name}_g", axis=0)
            return node("Unsqueeze", [g, "det_calib/ax"], f"{name}_u") if v.ndim == 1 else g

        c0, s0 = table("c0", m.c0), table("s0t", m.s0)
        x, coef = (table("x", m.x), table("coef", m.coef)) if k else (None, None)
        zk = z
    else:  # per-anchor class channels: (1, nc, 1) and (1, nc, 1, K)
        c0, s0 = const("c0", m.c0.reshape(1, nc, 1)), const("s0t", m.s0.reshape(1, nc, 1))
        x = const("x", m.x.reshape(1, nc, 1, k)) if k else None
        coef = const("coef", m.coef.reshape(1, nc, 1, k)) if k else None
        zk = node("Unsqueeze", [z, const("last", [-1], np.int64)], "z_k") if k else z
    y = node("Add", [c0, node("Mul", [s0, z], "s0z")], "affine")
    if k:
        hinge = node("Relu", [node("Sub", [zk, x], "z_minus_x")], "hinge")
        summed = node(
            "ReduceSum",
            [node("Mul", [hinge, coef], "hinge_coef"), const("red", [-1], np.int64)],
            "hinge_sum",
            keepdims=1 if info.rows else 0,
        )
        y = node("Add", [y, summed], "mapped")
    if size is not None:  # + c log(relative area), read from the boxes of the same output
        la = onnx_log_area(node, const, src, size[1], rows=info.rows, half_image=size[2])
        y = node(
            "Add", [y, node("Mul", [const("size_c", size[0]), la], "size_term")], "mapped_sized"
        )
    s = node("Sigmoid", [y], "calibrated")
    parts = [box, s] + ([cls] if info.rows else [])
    if (
        layout.extra_size != 0
    ):  # the task's channels after the scores (and the class of a row), as they were
        parts.append(
            node(
                "Slice",
                [
                    src,
                    const("e0", [layout.extra], np.int64),
                    const("e1", [np.iinfo(np.int64).max], np.int64),
                    "det_calib/ax",
                ],
                "task_extra",
            )
        )
    return nodes, inits, parts, axis


def _write_onnx(
    info: ExportInfo, m: DeployedMap, nc: int, out: Path, record: dict, size_c: float | None
) -> Path:
    # optional extra `onnx` ('det_calib[onnx]'), checked (ExportInfo.require_runtime) before any call
    import onnx  # optional extra `onnx`: pip install 'det_calib[onnx]'
    from onnx import TensorProto, helper  # the same optional extra `onnx`

    model = onnx.load(str(info.model_file))
    graph = model.graph
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < 13:
        raise InputError(
            f"{info.path} uses ONNX opset {opset}; the calibrated export needs opset 13 or later "
            "(export with opset=13 or higher)"
        )
    elem = graph.output[0].type.tensor_type.elem_type
    dims = graph.output[0].type.tensor_type.shape.dim
    check_output_layout(
        info, len(graph.output), dims[score_layout(info).axis].dim_value if len(dims) == 3 else None
    )
    if elem not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        raise InputError(
            f"{info.path}: the output is {TensorProto.DataType.Name(elem)}, not float32 or float16"
        )
    name = graph.output[0].name
    raw = f"det_calib/raw_{name}"
    for n in graph.node:
        n.output[:] = [raw if o == name else o for o in n.output]
    half = elem == TensorProto.FLOAT16  # an FP16 engine: the map runs in float32 between two casts
    pre = (
        [
            helper.make_node(
                "Cast", [raw], ["det_calib/raw_f32"], name="det_calib/raw_f32", to=TensorProto.FLOAT
            )
        ]
        if half
        else []
    )
    image = graph.input[0]
    size = (
        None
        if size_c is None
        else (size_c, image.name, image.type.tensor_type.elem_type == TensorProto.FLOAT16)
    )
    nodes, inits, parts, axis = _onnx_nodes(m, "det_calib/raw_f32" if half else raw, info, nc, size)
    cat = "det_calib/output_f32" if half else name
    nodes.append(helper.make_node("Concat", parts, [cat], name="det_calib/output", axis=axis))
    if half:
        nodes.append(
            helper.make_node(
                "Cast", [cat], [name], name="det_calib/output_f16", to=TensorProto.FLOAT16
            )
        )
    graph.node.extend(pre + nodes)
    graph.initializer.extend(inits)
    helper.set_model_props(
        model, {**{p.key: p.value for p in model.metadata_props}, "det_calib": json.dumps(record)}
    )
    onnx.checker.check_model(model)
    with atomic_path(out) as tmp:
        onnx.save(model, str(tmp))
    return out


# ------------------------------------------------------------------------ the graph, OpenVINO
def _ov_output(
    m: DeployedMap, src: Any, info: ExportInfo, nc: int, size: tuple | None = None
) -> Any:
    """The calibrated output of an OpenVINO model output ``src`` (opset13 ops); ``size``: ``(c, image input)``."""
    # optional extra `openvino` ('det_calib[openvino]'), checked (ExportInfo.require_runtime) before any call
    import openvino.opset13 as ops  # optional extra `openvino`: pip install 'det_calib[openvino]'

    def c(v: Any, dtype=np.float32) -> Any:
        return ops.constant(np.asarray(v, dtype=dtype))

    layout = score_layout(info)
    axis, (lo, hi) = layout.axis, layout.scores

    def sl(a: int, b: int) -> Any:
        return ops.slice(
            src, c([a], np.int64), c([b], np.int64), c([1], np.int64), c([axis], np.int64)
        )

    box, p = sl(0, 4), sl(lo, hi)
    q = ops.clamp(p, P_FLOOR, P_CEILING)
    z = ops.subtract(ops.log(q), ops.log(ops.subtract(c(1.0), q)))
    k = m.x.shape[1]
    if info.rows:
        cls = sl(5, 6)
        idx = ops.convert(ops.squeeze(cls, c([axis], np.int64)), "i64")

        def table(v: np.ndarray) -> Any:
            g = ops.gather(c(v), idx, c(0, np.int64))
            return ops.unsqueeze(g, c([axis], np.int64)) if v.ndim == 1 else g

        c0, s0 = table(m.c0), table(m.s0)
        x, coef = (table(m.x), table(m.coef)) if k else (None, None)
        zk = z
    else:
        c0, s0 = c(m.c0.reshape(1, nc, 1)), c(m.s0.reshape(1, nc, 1))
        x = c(m.x.reshape(1, nc, 1, k)) if k else None
        coef = c(m.coef.reshape(1, nc, 1, k)) if k else None
        zk = ops.unsqueeze(z, c([-1], np.int64)) if k else z
    y = ops.add(c0, ops.multiply(s0, z))
    if k:
        hinge = ops.relu(ops.subtract(zk, x))
        y = ops.add(
            y, ops.reduce_sum(ops.multiply(hinge, coef), c([-1], np.int64), keep_dims=info.rows)
        )
    if size is not None:  # + c log(relative area) (det_calib.deploy.size_export)
        y = ops.add(y, ops.multiply(c(size[0]), openvino_log_area(src, size[1], rows=info.rows)))
    parts = [box, ops.sigmoid(y)] + ([cls] if info.rows else [])
    if (
        layout.extra_size != 0
    ):  # the task's channels after the scores (and the class of a row), as they were
        parts.append(sl(layout.extra, np.iinfo(np.int64).max))
    return ops.concat(parts, axis)


def _write_openvino(
    info: ExportInfo, m: DeployedMap, nc: int, out: Path, record: dict, size_c: float | None
) -> Path:
    # optional extra `openvino` ('det_calib[openvino]'), checked (ExportInfo.require_runtime) before any call
    import openvino as ov  # optional extra `openvino`: pip install 'det_calib[openvino]'
    import yaml

    core = ov.Core()
    xml = info.model_file
    model = core.read_model(str(xml), str(xml.with_suffix(".bin")))
    shape, axis = model.outputs[0].get_partial_shape(), score_layout(info).axis
    check_output_layout(
        info,
        len(model.outputs),
        shape[axis].get_length() if shape.rank.is_static and shape[axis].is_static else None,
    )
    result = model.get_results()[
        0
    ]  # output0: boxes and scores (a segment model's protos are output1)
    size = None if size_c is None else (size_c, model.get_parameters()[0].output(0))
    new = _ov_output(m, result.input_value(0), info, nc, size)
    result.input(0).replace_source_output(new.output(0))
    model.validate_nodes_and_infer_types()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    ov.save_model(model, str(tmp / xml.name), compress_to_fp16=False)
    meta_file = info.path / "metadata.yaml" if info.path.is_dir() else xml.parent / "metadata.yaml"
    meta = yaml.safe_load(meta_file.read_text()) if meta_file.is_file() else {}
    meta["det_calib"] = record
    (tmp / "metadata.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


# -------------------------------------------------------------------------------------- entry
def _calibrated_export_name(export: str | Path) -> str | None:
    """The file or folder name :func:`_write_run_export` writes for ``export`` in a run folder; None for a
    format whose graph det_calib does not edit (see :func:`reexport_calibrated`).

    >>> _calibrated_export_name("best.onnx"), _calibrated_export_name("best_int8_openvino_model")
    ('calibrated.onnx', 'calibrated_openvino_model')
    >>> _calibrated_export_name("best_int8.tflite") is None
    True
    """
    fmt = export_format(export)
    if fmt not in _GRAPH_FORMATS:
        return None
    return "calibrated.onnx" if fmt == "onnx" else "calibrated_openvino_model"


def deployed_file(model: str | Path) -> str | None:
    """The name of a run's calibrated model: ``calibrated.pt``, or for an export :func:`_calibrated_export_name`
    (None: a LiteRT, NCNN or TensorRT run writes no calibrated engine itself).

    >>> deployed_file("best.pt"), deployed_file("best.onnx"), deployed_file("best_ncnn_model")
    ('calibrated.pt', 'calibrated.onnx', None)
    """

    return _calibrated_export_name(model) if is_export(model) else "calibrated.pt"


def write_calibrated_export(
    export: str | Path,
    out: str | Path,
    calibrators: dict[str, LogitCalibrator],
    *,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write ``out``: the export with its head's calibrator appended after the class scores.

    Args:
        export: An Ultralytics ``.onnx`` or ``*_openvino_model`` export.
        out: The calibrated ``.onnx`` file, or ``*_openvino_model`` folder (Ultralytics finds the
            format by that suffix).
        calibrators: Head -> fitted calibrator; the export's own head must be there (others are ignored).
        metadata: Plain values recorded under ``det_calib`` in the export's metadata.

    Returns:
        ``out``.

    Raises:
        InputError: Not an export, no calibrator for its head, a runtime or its library missing, an output
            whose channels are not the task's layout.
    """

    info = read_export(export)
    if info.format not in _GRAPH_FORMATS:
        raise InputError(
            f"det_calib does not edit a {info.format_name} graph: re-export the "
            "calibrated "
            "checkpoint (det-calib apply --model EXPORT --source SOURCE.pt ...)"
        )
    if info.head not in calibrators:
        raise InputError(
            f"no calibrator for the `{info.head}` head the export {info.path.name} carries "
            f"(have: {', '.join(calibrators) or 'none'})"
        )
    cal = calibrators[info.head]
    nc = len(info.names)
    if (
        cal.uses_size
    ):  # size-platt: a z + b in the tables, c times the log relative area added (size_export)
        a, b, size_c = size_platt_terms(cal)
        m = DeployedMap(np.full(nc, b), np.full(nc, a), np.zeros((nc, 0)), np.zeros((nc, 0)))
    else:
        m, size_c = _deployed_map(cal, nc), None
    record = {
        "calibrator": cal.to_dict(),
        "head": info.head,
        "source_export": str(info.path.resolve()),
        **(metadata or {}),
    }
    out = Path(out)
    info.require_runtime()  # onnx or openvino: the library that edits the graph
    if info.format == "onnx":
        return _write_onnx(info, m, nc, out, record, size_c)
    if not out.name.endswith("_openvino_model"):
        raise InputError(
            f"Expected `out` to be a folder named *_openvino_model (Ultralytics reads the format "
            f"from it), but got {out.name}"
        )
    return _write_openvino(info, m, nc, out, record, size_c)


def _write_run_export(
    export: str | Path,
    folder: Path,
    calibrators: dict[str, LogitCalibrator],
    *,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """The run's calibrated export, :func:`_calibrated_export_name` in ``folder``."""
    out = write_calibrated_export(
        export, folder / _calibrated_export_name(export), calibrators, metadata=metadata
    )
    _log.info("wrote calibrated export %s", out)
    return out


# --------------------------------------------------------------------------- the run's record
_ENGINE_FILE = "engine.json"
"""The run-folder file recording the engine a run calibrated (written for exports only)."""


@dataclass(frozen=True)
class EngineRecord(Record):
    """What ``engine.json`` holds: the engine a run calibrated and its three deployments.

    Attributes:
        engine: ``"onnx fp32"``, ``"openvino int8"``, ``"litert int8"``, ... (``"pytorch"`` for a ``.pt``).
        format, precision, head, imgsz: Of the export (:class:`~det_calib.capture.exported.ExportInfo`).
        source: The export's path.
        calibrated_export: Name of the calibrated export in the run folder (None where the run writes none:
            a LiteRT, NCNN or TensorRT engine, calibrated by :func:`reexport_calibrated`).
        equivalent_thresholds: Head -> :func:`_equivalent_raw_thresholds` at the run's ``--conf``.
        score_step: The step of the engine's scores when its output is quantised (every captured conf is
            a whole multiple of it: an INT8 output), else None (:func:`score_step`).
    """

    engine: str
    format: str
    precision: str
    head: str
    imgsz: list[int]
    source: str
    calibrated_export: str | None
    equivalent_thresholds: dict[str, list[dict]]
    score_step: float | None = None

    def summary_lines(self) -> list[str]:
        """What ``calibrate`` prints about the engine: its calibrated export and equivalent thresholds."""
        lines = []
        for head, eqs in self.equivalent_thresholds.items():
            src = Path(self.source).name
            if self.calibrated_export is not None:
                lines.append(
                    f"[{head}] engine {self.engine} ({src}): calibrated export "
                    f"{self.calibrated_export} (the calibration in its graph)"
                )
            elif self.precision == "int8":
                lines.append(
                    f"[{head}] engine {self.engine} ({src}): no calibrated engine (a quantised "
                    "engine "
                    "re-exported from the calibrated checkpoint does not keep the map): deploy the "
                    "raw "
                    "engine at the threshold below"
                )
            else:
                lines.append(
                    f"[{head}] engine {self.engine} ({src}): no calibrated engine written "
                    "(det_calib does "
                    f"not edit a {self.format} graph); det-calib apply --model {src} --source "
                    "SOURCE.pt "
                    "--calibration RUN/calibration.json --out OUT re-exports the calibrated "
                    "checkpoint"
                )
            if not eqs:
                lines.append(
                    f"[{head}]   no equivalent raw threshold: the map reads each box's size"
                )
            if self.score_step is not None:
                lines.append(
                    f"[{head}]   its scores are quantised: whole multiples of {self.score_step:.6g}"
                )
            for e in eqs:
                if e["raw_conf"] is not None:
                    lines.append(
                        f"[{head}]   or, with no code: raw conf > {e['raw_conf']:.6g} on the raw "
                        "engine keeps "
                        f"exactly the calibrated set at conf {e['conf']:g}"
                    )
                else:
                    lines.append(
                        f"[{head}]   a per-class map: raw conf per class at calibrated "
                        f"{e['conf']:g}: " + ", ".join(f"{t:.4g}" for t in e["raw_conf_per_class"])
                    )
        return lines

    @classmethod
    def read(cls, path: str | Path) -> EngineRecord:
        def parse(d: Any) -> EngineRecord:
            try:
                return decode(cls, d)
            except InputError as e:
                raise InputError(f"not a det_calib engine record ({e})") from None

        return read_json_file(path, parse, what="engine record")


def run_equivalent_thresholds(
    calibrators: dict[str, LogitCalibrator], methods: dict[str, str], confs: Any, nc: int
) -> dict[str, list[dict]]:
    """Head -> the raw conf keeping each calibrated ``conf`` threshold's set (per class for a per-class map)."""

    return {
        h: []
        if cal.uses_size
        else _equivalent_raw_thresholds(
            cal, confs, nc, per_class=registry.method_spec(methods[h]).per_class
        )
        for h, cal in calibrators.items()
    }


def engine_record(run_dir: str | Path) -> EngineRecord | None:
    """The engine record of a run folder (its ``engine.json``, read and checked); None for a run that
    calibrated no export (a ``.pt``, or a file of detections)."""
    f = Path(run_dir) / _ENGINE_FILE
    return EngineRecord.read(f) if f.is_file() else None


def write_run_engine(
    export: str | Path,
    folder: Path,
    result: Any,
    records: dict[str, Any],
    metadata: dict[str, Any] | None = None,
) -> EngineRecord:
    """A run on an export: write its calibrated export (the calibrators of ``records``, head ->
    calibrator record; a format det_calib can edit only) and ``engine.json`` into ``folder`` (whose
    ``boxes.parquet`` is read for :func:`score_step`)."""
    import polars as pl

    calibrators = {h: calibrator_of(r) for h, r in records.items()}
    info = read_export(export)
    if info.format in _GRAPH_FORMATS:
        _write_run_export(export, folder, calibrators, metadata=metadata)
    step = None
    if (folder / "boxes.parquet").is_file():
        step = score_step(
            pl.read_parquet(folder / "boxes.parquet", columns=["conf"])["conf"].to_numpy()
        )
    methods = {
        h: r.calibrator.method for h, r in result.results.items() if r.calibrator is not None
    }
    rec = EngineRecord(
        engine=info.engine,
        format=info.format,
        precision=info.precision,
        head=info.head,
        imgsz=list(info.imgsz),
        source=str(info.path.resolve()),
        calibrated_export=_calibrated_export_name(export),
        equivalent_thresholds=run_equivalent_thresholds(
            calibrators, methods, result.settings.conf_thresholds, len(info.names)
        ),
        score_step=step,
    )
    write_json(folder / _ENGINE_FILE, rec.to_dict())
    return rec


def _threshold_words(eq: list[dict]) -> list[str]:
    out = []
    for e in eq:
        if e["raw_conf"] is not None:
            out.append(
                f"calibrated conf > {e['conf']:g} keeps what conf > {e['raw_conf']:.6g} keeps on "
                "the raw "
                "export (no code needed)"
            )
        else:
            out.append(
                f"calibrated conf > {e['conf']:g}: a per-class map; raw conf per class "
                + ", ".join(f"{t:.4g}" for t in e["raw_conf_per_class"])
            )
    return out


def apply_to_export(
    export: str | Path, calibration: str | Path, out: str | Path, source: str | Path | None = None
) -> list[str]:
    """``det-calib apply`` on an export: write the calibrated export, return the lines to print
    (what was written, and the equivalent raw threshold of each calibrated ``--conf``).

    A LiteRT, NCNN or TensorRT export needs ``source``, the ``.pt`` it was exported from
    (:func:`reexport_calibrated`); without it, one line says so with the equivalent threshold. A quantised
    (INT8) one gets that line whatever ``source``: its re-export quantises the folded map again, and on the
    demo the result is far from the calibrated scores (``benchmarks/measure_engines_mobile.py``).
    """

    info = read_export(export)
    records = read_calibrators(calibration)
    if info.head not in records:
        raise InputError(
            f"{calibration} has no calibrator for the `{info.head}` head the export carries "
            f"(it has: {', '.join(records) or 'none'})"
        )
    calibrators = load_calibrators(calibration)
    run = RunResult.read(calibration)
    eq = run_equivalent_thresholds(
        {info.head: calibrators[info.head]},
        {info.head: records[info.head].method},
        run.settings.conf_thresholds,
        len(info.names),
    )[info.head]
    if info.format not in _GRAPH_FORMATS and info.precision == "int8":
        raise InputError(
            f"no calibrated {info.engine} engine: quantising the calibrated checkpoint again does "
            "not "
            "keep the map (docs/engines_mobile.md); deploy the raw engine instead: "
            + "; ".join(_threshold_words(eq))
        )
    if info.format in _GRAPH_FORMATS and source is not None:
        raise InputError(
            f"`source` is the .pt of an engine det_calib re-exports (LiteRT, NCNN, TensorRT); "
            f"{info.format_name} {info.path.name} is calibrated in its own graph: drop it"
        )
    suffix = info.path.suffix if info.path.is_file() else ""
    if suffix and Path(out).suffix.lower() != suffix.lower():
        raise InputError(
            f"`out` {out} would hold an export in {info.format_name}: name it with {suffix}"
        )
    if info.format not in _GRAPH_FORMATS and source is None:
        raise InputError(
            f"det_calib does not edit a {info.format_name} graph: pass --source, the .pt "
            f"{info.path.name} was exported from, to re-export it calibrated; or deploy the raw "
            "engine: " + "; ".join(_threshold_words(eq))
        )
    if info.format in _GRAPH_FORMATS:
        path = write_calibrated_export(
            export, out, calibrators, metadata={"calibration": str(calibration)}
        )
    else:
        path = reexport_calibrated(export, source, calibration, out)
    lines = [f"wrote {path} ({info.engine}, {info.head}: {records[info.head].method})"]
    if Path(run.model).resolve() != info.path.resolve():
        lines.append(
            f"note: {calibration} was fitted on {run.model}, not on this export: an export scores "
            "differently (calibrate the export itself: det-calib calibrate --model EXPORT)"
        )
    return lines + _threshold_words(eq)
