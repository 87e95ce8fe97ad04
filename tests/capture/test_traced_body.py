"""The capture's traced network body (a CPU capture of many images): the table is the eager capture's bit
for bit, for every head, task and head generation; every input shape is checked against Ultralytics' own
forward pass before the graph runs it; a shape or a model the graph gets wrong, or cannot trace, runs the
eager network; a small capture is not traced at all."""

from __future__ import annotations

import pytest
import torch

from det_calib.capture import traced_body
from det_calib.capture.predictor import Capturer
from det_calib.capture.traced_body import TracedBody

pytest.importorskip("ultralytics")


@pytest.fixture
def traced_always(monkeypatch):
    """Every capture traces, however few its images (the fixture has 12)."""
    monkeypatch.setattr(traced_body, "MIN_IMAGES", 1)


def _pair(model, **kw) -> tuple[Capturer, Capturer]:
    traced, eager = Capturer(model, imgsz=320, **kw), Capturer(model, imgsz=320, **kw)
    eager.trace = False
    return traced, eager


def _shapes(cap: Capturer, images) -> set[tuple[int, ...]]:
    import cv2

    return {(1, 3, *cap._letterbox(image=cv2.imread(str(p))).shape[:2]) for p in images}


def _two_per_shape(cap: Capturer, images) -> list:
    """The first two images of each letterboxed shape, in order: the first of a shape is checked against the
    eager pass, the second runs the graph (an untrained model's many boxes and masks make each image costly)."""
    seen: dict[tuple[int, ...], int] = {}
    out = []
    for p in images:
        shape = next(iter(_shapes(cap, [p])))
        if seen.get(shape, 0) < 2:
            seen[shape] = seen.get(shape, 0) + 1
            out.append(p)
    return out


@pytest.mark.parametrize("workers", [1, 2])
def test_traced_capture_is_the_eager_one_and_runs_the_graph(
    traced_always, demo_model_path, fixture_images, workers
):
    """Both heads of the demo model: the same table, bit for bit; every letterboxed shape checked and passed;
    the body's first layer runs once for the trace and once per shape and worker at most (the check, through
    Ultralytics' forward pass), the head once per image (the graph ran the body of every other image), and
    each branch's class convolutions as often as the first layer (the graph ran them too)."""
    traced, eager = _pair(str(demo_model_path), heads="auto", workers=workers)
    first, heads, cls = [], [], {"cv3": [], "one2one_cv3": []}
    for backend in traced.backends:
        backend.model.model[0].register_forward_hook(lambda m, i, o: first.append(1))
        backend.model.model[-1].register_forward_hook(lambda m, i, o: heads.append(1))
        for name, seen in cls.items():
            getattr(backend.model.model[-1], name)[0].register_forward_hook(
                lambda m, i, o, seen=seen: seen.append(1)
            )
    a = traced(fixture_images, progress=False)
    b = eager(fixture_images, progress=False)
    assert a.height > 100 and a.equals(b)
    shapes = _shapes(traced, fixture_images)
    assert len(shapes) > 1  # the fixture's images letterbox to several shapes
    assert traced.traced is not None and traced.traced.shapes == dict.fromkeys(shapes, True)
    assert eager.traced is None
    assert len(heads) == len(fixture_images)
    assert 1 + len(shapes) <= len(first) <= 1 + len(shapes) * workers < len(fixture_images)
    assert traced.traced.branches == ("one2many", "one2one")
    assert len(cls["cv3"]) == len(cls["one2one_cv3"]) == len(first)


@pytest.mark.parametrize(
    "cfg",
    [
        "yolov8n.yaml",
        "yolo11n.yaml",
        "yolo26n-seg.yaml",
        "yolo11n-seg.yaml",
        "yolo26n-pose.yaml",
        "yolo26n-obb.yaml",
    ],
)
def test_traced_capture_of_every_task_and_head_generation(
    traced_always, make_untrained, fixture_images, cfg
):
    """Legacy heads and the segment, pose and OBB heads (their mask coefficients, keypoints and angles come
    from the branch convolutions the graph runs; the protos and the decode stay eager): the traced table is
    the eager one, bit for bit, every shape passed (two images of each of the fixture's letterboxed shapes:
    one checked, one run by the graph)."""
    yolo = make_untrained(cfg)
    traced, eager = _pair(yolo, heads="auto", workers=1)
    images = _two_per_shape(traced, fixture_images)
    assert _shapes(traced, images) == _shapes(traced, fixture_images) and len(images) < len(
        fixture_images
    )
    a = traced(images, progress=False)
    b = eager(images, progress=False)
    assert a.height > 0 and a.equals(b)
    assert traced.traced.shapes and all(traced.traced.shapes.values())
    assert set(traced.traced.shapes) == _shapes(
        traced, fixture_images
    )  # every shape of the fixture checked


def test_a_shape_the_graph_gets_wrong_runs_eager(traced_always, demo_model_path, fixture_images):
    """A graph whose features differ in the last bit on one shape: that shape fails its check and runs the
    eager network from then on, the other shapes the graph; the table is still the eager one."""
    traced, eager = _pair(str(demo_model_path), heads="auto", workers=1)
    traced.traced = body = TracedBody(traced.net, (1, 3, *traced.imgsz))
    graph, wrong = body.graph, sorted(_shapes(traced, fixture_images))[0]

    def off_by_one_ulp(x):
        out = graph(x)
        if tuple(x.shape) == wrong:
            out = (torch.nextafter(out[0], torch.full_like(out[0], torch.inf)), *out[1:])
        return out

    body.graph = off_by_one_ulp
    a = traced(fixture_images, progress=False)
    assert a.equals(eager(fixture_images, progress=False))
    assert body.shapes.pop(wrong) is False
    assert body.shapes and all(body.shapes.values())


def test_a_model_the_tracer_cannot_follow_runs_eager(
    traced_always, monkeypatch, demo_model_path, fixture_images
):
    """A failed trace leaves no graph: every image runs the eager network, with the eager table."""

    def refuse(*args, **kwargs):
        raise RuntimeError("cannot trace this")

    monkeypatch.setattr(torch.jit, "trace", refuse)
    traced, eager = _pair(str(demo_model_path), heads="auto", workers=1)
    a = traced(fixture_images, progress=False)
    assert traced.traced is not None and traced.traced.graph is None and traced.traced.shapes == {}
    assert a.equals(eager(fixture_images, progress=False))


def test_a_small_capture_is_not_traced(demo_model_path, fixture_images):
    """Fewer images than MIN_IMAGES: no trace (it would cost more than it saves); the eager network."""
    assert len(fixture_images) < traced_body.MIN_IMAGES
    cap = Capturer(str(demo_model_path), imgsz=320, workers=1)
    cap(fixture_images, progress=False)
    assert cap.trace and cap.traced is None


def test_the_graph_is_a_function_of_the_input_holding_the_network_weights(demo_model_path):
    """The body is traced as a function of its input: the graph is a ``ScriptFunction`` whose tensor
    constants are the network's own weights (the same storage, no copy), with no TorchScript module per
    submodule; where the function trace fails, the module is traced as before (a ``ScriptModule``)."""
    cap = Capturer(str(demo_model_path), imgsz=320, workers=1)
    body = TracedBody(cap.net, (1, 3, *cap.imgsz))
    assert isinstance(body.graph, torch.jit.ScriptFunction)
    consts = [
        n.output().toIValue() for n in body.graph.graph.nodes() if n.kind() == "prim::Constant"
    ]
    consts = [c for c in consts if isinstance(c, torch.Tensor)]
    weights = {t.data_ptr() for t in [*cap.net.parameters(), *cap.net.buffers()]}
    assert len(consts) >= 100 and {c.data_ptr() for c in consts} <= weights


def test_a_failed_function_trace_traces_the_module(monkeypatch, demo_model_path):
    """A function trace that raises (e.g. a weight that requires grad cannot be a constant): the module is
    traced as a module, and that graph is what the capture checks and runs."""
    trace, calls = torch.jit.trace, []

    def module_only(fn, *args, **kwargs):
        calls.append(type(fn))
        if not isinstance(fn, torch.nn.Module):
            raise RuntimeError("Cannot insert a Tensor that requires grad as a constant")
        return trace(fn, *args, **kwargs)

    monkeypatch.setattr(torch.jit, "trace", module_only)
    cap = Capturer(str(demo_model_path), imgsz=320, workers=1)
    body = TracedBody(cap.net, (1, 3, *cap.imgsz))
    assert len(calls) == 2 and isinstance(body.graph, torch.jit.ScriptModule)
