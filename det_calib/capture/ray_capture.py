"""Capture as a Ray Data job over image paths (optional extra: ``pip install det_calib[ray]``).

The split's image list becomes a Ray dataset; ``map_batches`` sends batches of paths to a pool
of actors (a callable class: the detector is loaded and fused once per actor, on a GPU when the
cluster has GPUs, else on CPU), and each actor writes the boxes of its batch as one Parquet part
(:mod:`det_calib.capture.parts`) straight into the output folder. The folder must be reachable from every
node (a shared file system; on a cloud cluster, a mounted bucket). The parts carry the same
metadata as those of ``det-calib capture --shard``, and :func:`det_calib.capture.parts.read_parts` gives
the same table from either.

``ray`` is imported only here.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import numpy as np

from det_calib.capture.exported import make_capturer
from det_calib.capture.options import CaptureOptions
from det_calib.capture.parts import prepare_split_capture, split_options, write_part
from det_calib.errors import InputError

_log = logging.getLogger(__name__)


class _CaptureActor:
    """Ray Data callable class: one :class:`~det_calib.capture.predictor.Capturer` per actor."""

    def __init__(
        self, *, model: str, options: CaptureOptions, out_dir: str, meta: dict, split: str
    ) -> None:
        import os

        os.environ.setdefault("YOLO_VERBOSE", "False")

        self.cap = make_capturer(model, options)  # a Capturer, or an ExportCapturer for an export
        self.out_dir, self.meta, self.split = Path(out_dir), meta, split

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:

        ids = np.asarray(batch["image_id"], dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        ids = ids[order]
        paths = [str(batch["path"][k]) for k in order]
        names = [str(batch["name"][k]) for k in order]
        df = self.cap(paths, split=self.split, image_names=names, image_ids=ids, progress=False)
        lo, hi = int(ids[0]), int(ids[-1])
        path = write_part(
            df,
            self.out_dir / f"part-ray-{lo:09d}-{hi:09d}.parquet",
            **self.meta,
            image_ids=ids.tolist(),
            part=f"ray {lo}-{hi}",
        )
        return {
            "part": np.array([path.name]),
            "images": np.array([len(ids)]),
            "boxes": np.array([df.height]),
        }


def capture_ray(
    model: str | Path,
    data: str | Path,
    split: str,
    out_dir: str | Path,
    *,
    options: CaptureOptions | None = None,
    coco_gt: str | Path | None = None,
    limit: int | None = None,
    images_per_part: int = 256,
    actors: int | None = None,
    gpus_per_actor: float | None = None,
    **option_kw: Any,
) -> list[Path]:
    """Capture a split with Ray Data; write Parquet parts into ``out_dir``.

    Connects to the running Ray instance (``ray.init()`` with no address starts a local one, or
    joins ``RAY_ADDRESS``). Arguments as :func:`det_calib.capture.parts.capture_to_parts` (the
    options' ``device`` is chosen per actor), plus:

    Args:
        images_per_part: Images per ``map_batches`` batch, and so per part file.
        actors: Actor pool size; default one per GPU when the cluster has GPUs, else one per
            two CPUs.
        gpus_per_actor: GPUs per actor; default 1 when the cluster has GPUs, else 0 (CPU).

    Returns:
        The part files written.

    Raises:
        InputError: Ray is not installed, or bad inputs (as :func:`capture_to_parts`).
    """
    # Ray is an optional dependency, declared as the `ray` extra in pyproject.toml
    # ([project.optional-dependencies] ray = ["ray[data]"]), not a runtime dependency: a plain
    # `pip install -e .` works without it, and only this function imports it.
    try:
        import ray  # optional extra `ray`: pip install 'det_calib[ray]'
    except ImportError:
        raise InputError("Ray is not installed: pip install 'det_calib[ray]'") from None

    opts = split_options(options, **{**option_kw, "device": "cpu"})
    # the probe checks the model and the arguments here, before any actor starts
    sp, names, probe, common = prepare_split_capture(
        model, data, split, opts, coco_gt=coco_gt, limit=limit
    )
    opts = dataclasses.replace(
        opts, payload=getattr(probe, "payload", opts.payload)
    )  # none on box labels
    del probe
    if not ray.is_initialized():
        ray.init(log_to_driver=False)
    n_gpu = float(ray.cluster_resources().get("GPU", 0))
    gpus = (1.0 if n_gpu else 0.0) if gpus_per_actor is None else float(gpus_per_actor)
    if actors is None:
        actors = max(
            1, int(n_gpu // gpus) if gpus else int(ray.cluster_resources().get("CPU", 1) // 2)
        )
    opts = CaptureOptions.of(
        opts, device="0" if gpus else "cpu"
    )  # an actor sees only the GPU(s) Ray gave it
    out = Path(out_dir).absolute()
    out.mkdir(parents=True, exist_ok=True)
    items = [
        {"image_id": i, "path": str(Path(p).absolute()), "name": n}
        for i, (p, n) in enumerate(zip(sp.images, names))
    ]
    result = (
        ray.data.from_items(items)
        .map_batches(
            _CaptureActor,
            fn_constructor_kwargs={
                "model": str(Path(model).absolute()),
                "options": opts,
                "out_dir": str(out),
                "meta": common,  # the parts' common metadata (write_part)
                "split": split,
            },
            batch_size=images_per_part,
            batch_format="numpy",
            concurrency=actors,
            num_gpus=gpus,
            num_cpus=0 if gpus else 1,
        )
        .take_all()
    )
    written = sorted(out / str(r["part"]) for r in result)
    _log.info(
        "ray capture: %d parts, %d images, %d boxes into %s",
        len(written),
        sum(int(r["images"]) for r in result),
        sum(int(r["boxes"]) for r in result),
        out,
    )
    return written
