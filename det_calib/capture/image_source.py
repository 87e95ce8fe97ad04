"""Feeding images to a capture: the image lists (:func:`image_lists`), the reader that reads
ahead of the forward passes (:func:`read_ahead`; shared by worker threads: :class:`SharedImages`),
how many capture workers a device runs (:func:`auto_workers`) and the progress bar
(:func:`progress_bar`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

from det_calib.errors import InputError

__all__ = ["LockedBar", "SharedImages", "auto_workers", "image_lists", "progress_bar", "read_ahead"]


def image_lists(
    images: Sequence[str | Path], image_names: Sequence[str] | None, image_ids: Sequence[int] | None
) -> tuple[list[str], list[str], np.ndarray]:
    """The paths, names and ids of a capture's images, checked: names default to the paths, ids to
    their positions; one of each per image.

    Example:
        >>> image_lists(["a.jpg", "b.jpg"], None, None)
        (['a.jpg', 'b.jpg'], ['a.jpg', 'b.jpg'], array([0, 1]))
    """
    paths = [str(p) for p in images]
    if not paths:
        raise InputError("no images to capture")
    names = [str(n) for n in image_names] if image_names is not None else paths
    ids = np.asarray(image_ids if image_ids is not None else np.arange(len(paths)), dtype=np.int64)
    if len(names) != len(paths) or len(ids) != len(paths):
        raise InputError(
            f"`image_names` ({len(names)}) and `image_ids` ({len(ids)}) must have one entry per "
            "image "
            f"({len(paths)})"
        )
    return paths, names, ids


def auto_workers(device: torch.device, batch: int = 1) -> int:
    """How many images :class:`Capturer` captures at once by default.

    One per CPU core (at most 8) when the device is a CPU, ``batch`` is 1 and torch runs one
    thread per operator, as Ultralytics sets it on a machine with two cores: ``predict`` then
    uses one core, and more workers use the others without changing a single operator's
    arithmetic. Otherwise 1: on a GPU, with ``batch > 1``, or where torch already runs several
    threads per operator (a worker per core there would change the thread count each
    convolution runs with, and with it the rounding).
    """
    import torch

    if device.type != "cpu" or batch != 1 or torch.get_num_threads() != 1:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


class LockedBar:
    """A progress bar that several capture workers update."""

    def __init__(self, bar, lock: threading.Lock) -> None:
        self.bar, self.lock = bar, lock

    def update(self, n: int = 1) -> None:
        with self.lock:
            self.bar.update(n)


def read_ahead(paths: list[str], *, depth: int):
    """Yield ``(position, BGR image or None)`` in order, decoding up to ``depth`` images ahead in a
    thread (OpenCV releases the GIL), with Ultralytics' own ``imread`` (as its image loader)."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    import cv2
    from ultralytics.utils.patches import imread

    with ThreadPoolExecutor(max_workers=1) as pool:
        queue: deque = deque()
        it = iter(enumerate(paths))
        for pos, p in it:
            queue.append((pos, pool.submit(imread, p, cv2.IMREAD_COLOR)))
            if len(queue) > depth:
                pos0, fut = queue.popleft()
                yield pos0, fut.result()
        while queue:
            pos0, fut = queue.popleft()
            yield pos0, fut.result()


class SharedImages:
    """A capture's images read ahead (:func:`read_ahead`) and shared by worker threads: each worker draws
    the next ``(position, BGR image or None)`` (:meth:`next`), and they update one progress bar
    (:func:`progress_bar`, as :attr:`bar`), both under one lock.

    Args:
        paths: The images, in order.
        depth: Images decoded ahead of the workers.
        desc: The progress bar's label.
        progress: Show the bar.
        batch: Images per forward pass (the bar's speed shows once another batch has arrived).
    """

    def __init__(
        self, paths: list[str], *, depth: int, desc: str, progress: bool, batch: int = 1
    ) -> None:
        self._lock = threading.Lock()
        self.bar = LockedBar(
            progress_bar(len(paths), desc, enabled=progress, batch=batch), self._lock
        )
        self._source = read_ahead(paths, depth=depth)

    def next(self) -> tuple[int, np.ndarray | None] | None:
        """The next image not yet drawn by any worker, or None when all were."""
        with self._lock:
            return next(self._source, None)

    def close(self) -> None:
        """Stop reading ahead and close the bar."""
        self._source.close()
        self.bar.bar.close()


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a replaced stream without isatty, or a closed one
        return False


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int, desc: str, *, enabled: bool, batch: int = 1):
    """A progress bar over ``total`` images that shows no ETA until the speed is known.

    The first result arrives only after model set-up and a whole first batch, so a speed measured
    from the start would promise hours on a run of minutes. The speed clock starts at the first
    result instead, and the speed, percentage and ETA appear once another full ``batch`` has arrived.

    The bar is drawn on stderr, and only when stderr is a terminal: redirected to a file or a pipe (a
    log, CI), its carriage-return frames would be noise, and the stage's one log line says the same.
    """
    if not enabled or not _is_terminal(sys.stderr):
        return _NoBar()
    from ultralytics.utils import TQDM

    class _Bar(TQDM):
        def __init__(self) -> None:
            super().__init__(
                total=None, desc=desc, unit="img", disable=False, file=sys.stderr
            )  # no total: no ETA
            self.expected = total
            self.clock: tuple[float, int] | None = None  # (time, count) at the first result

        def update(self, n: int = 1) -> None:
            now, count = time.monotonic(), self.n + n
            if self.clock is None:
                self.clock = (now, count)
            elif (
                self.total is None
                and count - self.clock[1] >= max(batch, 1)
                and now > self.clock[0]
            ):
                self.last_rate = (count - self.clock[1]) / (now - self.clock[0])  # the steady speed
                self.total = self.expected
            super().update(n)

        def _format_rate(self, rate: float) -> str:
            return (
                super()._format_rate(rate) if self.total is not None else ""
            )  # no speed until known

        def close(self) -> None:
            self.total = self.expected
            super().close()

    return _Bar()
