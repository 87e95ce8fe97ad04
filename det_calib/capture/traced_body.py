"""The capture's network run as one TorchScript graph on a CPU, checked bit for bit per input shape.

On a CPU at batch 1 a YOLO forward pass is about a hundred small convolutions, each reached through
a few Python module calls. With two capture workers (threads) those calls also take turns at the
interpreter's lock. A trace of the body (every layer before the head) runs the same ATen operators
with the same arguments in the same order, in TorchScript's interpreter, which holds no Python lock
while it runs: on the demo's 400 test images with two workers, the capture's CPU time goes from
about 11 s to about 9.3 s and its wall time from about 6 s to about 4.8 s. The graph also runs the
head's convolutions (each branch's ``forward_head``: the box, class and payload channels of every
level, about a third of the remaining eager calls); measured side by side under load, another 3-5%
less capture CPU with two workers and about a fifth less wall. The rest of the head stays
Ultralytics' own eager module (its decode caches per-shape anchors, a segment head's protos, the
NMS-free top-k), and it is where the capture reads both branches: each branch's ``forward_head`` is
answered with the graph's tensors for that call.

Exactness is checked, not assumed. The graph runs with the graph executor's optimisations off (no
fusion, no rewrites: the traced operators as they are). The first image of each input shape runs
through Ultralytics' own forward pass, and the graph's outputs for it are compared with the features
that pass fed the head: same values bit for bit, same shapes, same memory layout. Only a shape that
passes is run through the graph from then on; any other shape, and every shape where the trace
itself fails (a model the tracer cannot follow, a torch without ``torch.jit.trace``), runs the eager
network as before. So the boxes, confs and logits stay exactly those of ``predict``.

A capture of fewer than :data:`MIN_IMAGES` images is not traced: the trace (about 0.1 s of CPU for
a nano model, traced as a function of its input: :func:`_trace`) would cost more than it saves.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch

from det_calib.errors import first_line

_log = logging.getLogger(__name__)

__all__ = ["MIN_IMAGES", "TracedBody"]

MIN_IMAGES = 64
"""The fewest images a CPU capture traces its network body for (each image saves a few milliseconds
of CPU; the trace costs a few hundred)."""


class _Body(torch.nn.Module):
    """Every layer of a ``DetectionModel`` before its head, routed as ``_predict_once`` routes
    them; returns the head's inputs as a tuple."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(list(net.model)[:-1])
        self.save = frozenset(net.save)
        self.head_from = list(net.model[-1].f)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y: list[Any] = []
        for m in self.layers:
            if m.f != -1:
                x = y[m.f] if isinstance(m.f, int) else [x if j == -1 else y[j] for j in m.f]
            x = m(x)
            y.append(x if m.i in self.save else None)
        return tuple(x if j == -1 else y[j] for j in self.head_from)


def _branches(head: torch.nn.Module) -> tuple[str, ...]:
    """The head's branches whose convolutions the graph runs: ``one2many`` and ``one2one`` where the
    head has them (a fused single-branch head keeps one; a head without ``forward_head``: none)."""
    if not callable(getattr(head, "forward_head", None)):
        return ()
    out = []
    for name, attr in (("one2many", "cv2"), ("one2one", "one2one_cv2")):
        if getattr(head, attr, None) is not None:
            out.append(name)
    return tuple(out)


class _Network(torch.nn.Module):
    """The body, then each branch's ``forward_head`` (the head's convolutions: box, class and any
    payload channels, per level, concatenated); returns the body's outputs and then every branch's
    tensors, in ``keys`` order, as one tuple."""

    def __init__(self, net: torch.nn.Module, branches: tuple[str, ...]) -> None:
        super().__init__()
        self.body = _Body(net)
        self.head = net.model[-1]
        self.branches = branches
        self.keys: dict[str, list[str]] = {}

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feats = self.body(x)
        out = list(feats)
        for name in self.branches:
            preds = self.head.forward_head(list(feats), **getattr(self.head, name))
            keys = self.keys.setdefault(name, [k for k in preds if k != "feats"])
            out.extend(preds[k] for k in keys)
        return tuple(out)


def _same(eager: list[torch.Tensor], traced: tuple[torch.Tensor, ...]) -> bool:
    """The graph's outputs are the eager features: same count, shapes, strides and every bit."""
    return len(eager) == len(traced) and all(
        isinstance(a, torch.Tensor)
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.dtype == b.dtype
        and torch.equal(a, b)
        for a, b in zip(eager, traced)
    )


def _trace(module: torch.nn.Module, example: torch.Tensor) -> Any:
    """``module``'s forward on ``example`` as a graph: traced as a function of its input, so that its
    weights are the graph's constants (the tensors themselves, not copies), and no TorchScript module
    is built for each of its hundreds of submodules, which was most of the trace's CPU (about 0.36 s
    against 0.08 s on the demo model); the same operators in the same order. Where the function trace
    fails (a weight that requires grad cannot be a constant), the module is traced as a module."""
    try:
        return torch.jit.trace(lambda x: module(x), example, check_trace=False)
    except Exception as e:  # the module's own trace below, or its failure, decides
        _log.debug("function trace failed (%s): the module is traced", first_line(e))
        return torch.jit.trace(module, example, check_trace=False)


class TracedBody:
    """A trace of a fused network's body, shared by every capture worker's copy of that network.

    Args:
        net: The fused ``DetectionModel`` (the first worker's); the graph holds its weights, which
            every worker's copy shares bit for bit.
        shape: The example input's shape ``(batch, 3, h, w)``.

    Attributes:
        graph: The traced body, or None where the trace failed (then :meth:`forward` always runs
            the eager network).
        shapes: Input shape -> whether its first image's features from the graph equalled the eager
            ones (checked shapes only).
    """

    def __init__(self, net: torch.nn.Module, shape: tuple[int, ...]) -> None:
        self.shapes: dict[tuple[int, ...], bool] = {}
        self.graph = None
        module = _Network(net, _branches(net.model[-1]))
        self.branches, self.keys = module.branches, module.keys
        self.n_feats = len(module.body.head_from)
        self.order: dict[str, list[str]] = {}  # each branch's keys as Ultralytics returns them
        example = torch.zeros(shape, dtype=torch.float32)
        try:
            with (
                warnings.catch_warnings()
            ):  # the tracer's notes on Python values it records as constants,
                warnings.simplefilter("ignore")  # and torch's notice that tracing is in maintenance
                with torch.inference_mode(False), torch.no_grad():
                    self.graph = _trace(module, example)
        except Exception as e:  # any model or torch the tracer cannot follow runs the eager network
            _log.debug(
                "network body not traced (%s): the capture runs the eager network", first_line(e)
            )

    def forward(self, backend: Any, x: torch.Tensor) -> Any:
        """What ``backend(x)`` returns (the head's output), with the body and the head's branch
        convolutions run by the graph where ``x``'s shape has been checked equal, else by
        Ultralytics' own forward pass."""
        key = tuple(x.shape)
        checked = self.shapes.get(key)
        head = backend.model.model[-1]
        if checked:
            with torch.jit.optimized_execution(False):
                outs = self.graph(x)
            feats, rest = list(outs[: self.n_feats]), iter(outs[self.n_feats :])
            ran = {name: {k: next(rest) for k in self.keys[name]} for name in self.branches}
            return self._head_on(head, ran, feats)
        if checked is None and self.graph is not None:
            return self._check(backend, head, key, x)
        return backend(x)

    def _branch_of(self, head: torch.nn.Module, parts: dict[str, Any]) -> str | None:
        """Which of the graph's branches ``forward_head`` was called for (by its box convolutions)."""
        box = parts.get("box_head")
        return next(
            (n for n in self.branches if box is not None and getattr(head, n)["box_head"] is box),
            None,
        )

    def _head_on(
        self, head: torch.nn.Module, ran: dict[str, dict[str, torch.Tensor]], feats: list
    ) -> Any:
        """The head's forward on ``feats`` with each branch's ``forward_head`` answered by the
        graph's tensors ``ran`` (rebuilt in Ultralytics' key order, ``feats`` where it returns it);
        the rest of the head (decode, NMS-free top-k, protos) runs as Ultralytics wrote it."""
        own = head.forward_head

        def answered(x: list, **parts: Any) -> dict[str, Any]:
            name = self._branch_of(head, parts)
            if name is None:
                return own(x, **parts)
            preds = dict(ran[name])
            return {k: x if k == "feats" else preds[k] for k in self.order[name]}

        head.forward_head = answered  # this worker's own head, one image at a time
        try:
            return head(feats)
        finally:
            del head.forward_head

    def _check(
        self, backend: Any, head: torch.nn.Module, key: tuple[int, ...], x: torch.Tensor
    ) -> Any:
        """Ultralytics' forward pass of ``x``; the head's inputs and each branch's ``forward_head``
        outputs compared with the graph's outputs."""
        fed: list[list[torch.Tensor]] = []
        seen: dict[str, tuple[list[str], dict[str, Any]]] = {}
        own = head.forward_head if self.branches else None

        def recorded(x: list, **parts: Any) -> dict[str, Any]:
            preds = own(x, **parts)
            name = self._branch_of(head, parts)
            if name is not None:  # its keys now: a segment head adds its protos to it later
                seen[name] = (list(preds), preds)
            return preds

        hook = head.register_forward_pre_hook(lambda module, args: fed.append(list(args[0])))
        if own is not None:
            head.forward_head = recorded
        try:
            out = backend(x)
        finally:
            hook.remove()
            if own is not None:
                del head.forward_head
        try:
            want = list(fed[0]) if len(fed) == 1 else []
            for name in self.branches:
                self.order.setdefault(name, seen[name][0])
                want.extend(seen[name][1][k] for k in self.keys[name])
            with torch.jit.optimized_execution(False):
                same = len(fed) == 1 and _same(want, self.graph(x))
        except Exception as e:
            _log.debug("traced body failed on shape %s (%s): eager", key, first_line(e))
            same = False
        if not same:
            _log.debug(
                "traced body differs from the eager one on shape %s: that shape runs the eager "
                "network",
                key,
            )
        self.shapes[key] = same
        return out
