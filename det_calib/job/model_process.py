"""The detector where torch is not imported. ``calibrate --boxes`` needs the model only twice: its
facts at the start (class names, task, heads, default image size, the payload's shape; read where the
boxes recorded them, when they were captured with the same checkpoint) and the calibrated checkpoint
at the end (the fold). Everything between is numpy, polars and matplotlib
work. Where this process has not imported torch, each of the two runs in a short-lived child
interpreter (torch, Ultralytics and the model live and die there, about 0.5 GiB), so the process
that holds the box table never pays for them; where torch is imported already (a capture, a caller
that loaded it), here. Either way the same function runs on the same file: the facts, the
checkpoint and an error (its type, its words) are the same.

A child is a fresh interpreter (``sys.executable``) with this process's ``sys.path``: what it runs
travels pickled on its standard input, its answer and det_calib's log lines pickled on its
standard output (logged here again, as this process logs them; whatever the libraries print goes to
standard error, which it shares with this process). Its CPU seconds are
charged to the stage that waits for it (:func:`det_calib.job.clock.add_cpu`).
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

from det_calib.capture.parts import ModelFacts
from det_calib.capture.predictor import load_detector
from det_calib.job import clock

__all__ = ["capture_batch", "fold_checkpoint", "model_facts"]


def _read_facts(model: Path) -> ModelFacts:
    """The facts of ``model``, loaded here (torch and Ultralytics imported)."""
    return ModelFacts.of(load_detector(model))


def model_facts(model: Path, boxes: Path | None = None) -> ModelFacts:
    """The facts of the detector checkpoint ``model`` (:class:`~det_calib.capture.parts.ModelFacts`):
    those recorded with the boxes at ``boxes`` where they were captured with this very checkpoint
    (:meth:`~det_calib.capture.parts.ModelFacts.recorded`: no model loaded), else read in a child
    process unless torch is imported here; on the ``model load`` stage's clock.

    Raises:
        InputError: As :func:`~det_calib.capture.predictor.load_detector` (a missing or corrupt file,
            a model of another task).
    """
    if boxes is not None and (known := ModelFacts.recorded(boxes, model)) is not None:
        return known
    return _where_torch_is("model load", f"{__name__}:_read_facts", model)


_FOLD = "det_calib.deploy.fold:write_run_checkpoint"
"""The one writer of a run's ``calibrated.pt`` (its module imports torch when it loads)."""


def fold_checkpoint(
    source: Path, out: Path, records: dict[str, Any], *, metadata: dict[str, Any]
) -> Path:
    """``calibrated.pt`` of ``records`` folded into ``source``
    (:func:`det_calib.deploy.fold.write_run_checkpoint`), written in a child process unless torch is
    imported here; its CPU on the ``outputs`` stage's clock."""
    return _where_torch_is("outputs", _FOLD, source, out, records, metadata=metadata)


def capture_batch(batch: int | None, device: str | None) -> int:
    """The capture batch a run records (:func:`det_calib.capture.options.resolve_batch`: on a CUDA
    device more than one), where no capture ran (a file of detections): asked of torch in a child
    process unless ``batch`` is given or torch is imported here; on the ``data check`` stage's clock."""
    if batch is not None:
        return int(batch)
    return _where_torch_is("data check", "det_calib.capture.options:resolve_batch", batch, device)


def _where_torch_is(stage: str, target: str, *args: Any, **kwargs: Any) -> Any:
    """``target`` (``module:function``) called here when torch is imported, else in a child."""
    if "torch" in sys.modules:
        return _resolve(target)(*args, **kwargs)
    return _in_child(stage, target, args, kwargs)


def _resolve(target: str) -> Any:
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


_CHILD = (
    "import pickle, sys; sys.path[:] = pickle.loads(bytes.fromhex(sys.argv[1]));"
    "from det_calib.job.model_process import _child_main; _child_main()"
)


def _in_child(stage: str, target: str, args: tuple, kwargs: dict) -> Any:
    """``target(*args, **kwargs)`` in a fresh interpreter: its value, or its error raised here."""
    cpu0 = _children_cpu()
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, pickle.dumps(list(sys.path)).hex()],
        input=pickle.dumps(
            (target, args, kwargs, logging.getLogger("det_calib").getEffectiveLevel())
        ),
        stdout=subprocess.PIPE,
        check=False,
    )
    clock.add_cpu(stage, max(_children_cpu() - cpu0, 0.0))
    try:
        status, value, logged = pickle.loads(r.stdout)
    except Exception:  # noqa: BLE001 - the child died before it answered
        raise RuntimeError(
            f"the model process ({target.split(':')[1]}) ended without an answer "
            f"(exit code {r.returncode})"
        ) from None
    for name, level, message in logged:  # its log lines, as this process logs them
        logging.getLogger(name).log(level, "%s", message)
    if status == "error":
        raise _rebuilt(*value)
    return value


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's children that have ended."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _child_main() -> None:
    """The child's work: the call read from standard input, its value (or its error) written pickled
    to standard output; the libraries' prints go to standard error. Ends the process."""
    answer_to = sys.stdout.buffer
    sys.stdout = sys.stderr
    target, args, kwargs, level = pickle.loads(sys.stdin.buffer.read())
    logged: list[tuple[str, int, str]] = []
    log = logging.getLogger("det_calib")
    log.setLevel(level)  # det_calib's log lines at the parent's level go back with the answer
    log.addHandler(_Collect(logged))
    log.propagate = False
    try:
        answer: tuple[str, Any] = ("ok", _resolve(target)(*args, **kwargs))
    except BaseException as e:  # noqa: BLE001 - raised again in the parent
        answer = ("error", _portable(e))
    answer_to.write(pickle.dumps((*answer, logged)))
    answer_to.flush()
    sys.stderr.flush()
    # done: the interpreter's teardown of torch and Ultralytics would only raise the child's peak
    # (by about 0.1 GiB, measured here), so the child ends here
    os._exit(0)


class _Collect(logging.Handler):
    """Keeps each record's logger, level and message."""

    def __init__(self, into: list[tuple[str, int, str]]) -> None:
        super().__init__()
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append((record.name, record.levelno, record.getMessage()))


def _portable(e: BaseException) -> tuple:
    """An error as (class, args, attributes) that pickles: an error's own ``__init__`` need not take
    its ``args`` back (det_calib's errors carry keyword attributes such as ``param``)."""
    state = (type(e), e.args, dict(getattr(e, "__dict__", {})))
    try:
        pickle.dumps(state)
    except Exception:  # noqa: BLE001 - its words only
        return RuntimeError, (f"{type(e).__name__}: {e}",), {}
    return state


def _rebuilt(cls: type[BaseException], args: tuple, attrs: dict[str, Any]) -> BaseException:
    """The child's error as the same class, args and attributes."""
    e = cls.__new__(cls, *args)
    BaseException.__init__(e, *args)
    e.__dict__.update(attrs)
    return e
