"""The capture's network body run as one TorchScript graph on a CPU, checked bit for bit per input shape.

On a CPU at batch 1 a YOLO forward pass is about a hundred small convolutions, each reached through
a few Python module calls. With two capture workers (threads) those calls also take turns at the
interpreter's lock. A trace of the body (every layer before the head) runs the same ATen operators
with the same arguments in the same order, in TorchScript's interpreter, which holds no Python lock
while it runs: on the demo's 400 test images with two workers, the capture's CPU time goes from
about 11 s to about 9.3 s and its wall time from about 6 s to about 4.8 s. The head stays
Ultralytics' own eager module (its decode caches per-shape anchors, and it is where the capture
reads both branches).

Exactness is checked, not assumed. The graph runs with the graph executor's optimisations off (no
fusion, no rewrites: the traced operators as they are). The first image of each input shape runs
through Ultralytics' own forward pass, and the graph's outputs for it are compared with the features
that pass fed the head: same values bit for bit, same shapes, same memory layout. Only a shape that
passes is run through the graph from then on; any other shape, and every shape where the trace
itself fails (a model the tracer cannot follow, a torch without ``torch.jit.trace``), runs the eager
network as before. So the boxes, confs and logits stay exactly those of ``predict``.

A capture of fewer than :data:`MIN_IMAGES` images is not traced: the trace (about 0.3 s of CPU for
a nano model) would cost more than it saves.
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
        example = torch.zeros(shape, dtype=torch.float32)
        try:
            with (
                warnings.catch_warnings()
            ):  # the tracer's notes on Python values it records as constants,
                warnings.simplefilter("ignore")  # and torch's notice that tracing is in maintenance
                with torch.inference_mode(False), torch.no_grad():
                    self.graph = torch.jit.trace(_Body(net), example, check_trace=False)
        except Exception as e:  # any model or torch the tracer cannot follow runs the eager network
            _log.debug(
                "network body not traced (%s): the capture runs the eager network", first_line(e)
            )

    def forward(self, backend: Any, x: torch.Tensor) -> Any:
        """What ``backend(x)`` returns (the head's output), with the body run by the graph where
        ``x``'s shape has been checked equal, else by Ultralytics' own forward pass."""
        key = tuple(x.shape)
        checked = self.shapes.get(key)
        head = backend.model.model[-1]
        if checked:
            with torch.jit.optimized_execution(False):
                feats = self.graph(x)
            return head(list(feats))
        if checked is None and self.graph is not None:
            return self._check(backend, head, key, x)
        return backend(x)

    def _check(
        self, backend: Any, head: torch.nn.Module, key: tuple[int, ...], x: torch.Tensor
    ) -> Any:
        """Ultralytics' forward pass of ``x``, its head's inputs compared with the graph's outputs."""
        fed: list[list[torch.Tensor]] = []
        hook = head.register_forward_pre_hook(lambda module, args: fed.append(list(args[0])))
        try:
            out = backend(x)
        finally:
            hook.remove()
        try:
            with torch.jit.optimized_execution(False):
                same = len(fed) == 1 and _same(fed[0], self.graph(x))
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
