"""The embedded default: the ``shapes`` demo dataset and the demo detector trained on it.

The trained weights and the fixture split (a dozen images with labels) ship inside the package, in
``det_calib/demo/assets/`` (:func:`demo_root`), so ``pip install det_calib`` runs the demo from any
folder. The seed members of the demo ensemble (``yolo26n_shapes_seed*.pt``) sit beside the demo
detector in the repository only: the wheel leaves them out (pyproject.toml's
``exclude-package-data``). The dataset card, the model cards and the training scripts stay in
``datasets/shapes/`` at the repository root. The calib and test splits (and, for training, the
train split) are rendered deterministically on first use (by :mod:`det_calib.demo.shapes`) into a
cache folder: ``$DET_CALIB_CACHE`` if set, else ``$XDG_CACHE_HOME/det_calib``
(``~/.cache/det_calib``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from det_calib.capture.predictor import capture
from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.demo.shapes import CLASS_NAMES, GENERATOR_VERSION, SPLIT_SIZES, generate
from det_calib.errors import InputError
from det_calib.evaluation.map_check import ultralytics_val
from det_calib.lazy import lazy_exports
from det_calib.matching.one_to_one import match_boxes
from det_calib.tasks import TASKS

_EXPORTS = {}

__all__ = [
    "cache_dir",
    "default_inputs",
    "demo_data_yaml",
    "demo_model",
    "demo_task_model",
    "model_figures",
    "shifted_data_yaml",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)


_log = logging.getLogger(__name__)


_ASSETS = Path(__file__).resolve().parent / "assets"  # the demo files shipped inside the package


def _demo_root() -> Path:
    """The folder of the demo models and the fixture split: ``$DET_CALIB_DEMO_DIR`` if set, else
    ``det_calib/demo/assets/`` inside the installed package.

    Raises:
        InputError: The folder does not exist.
    """
    env = os.environ.get("DET_CALIB_DEMO_DIR")
    path = Path(env) if env else _ASSETS
    if not path.is_dir():
        where = "DET_CALIB_DEMO_DIR names" if env else "the installed package has"
        raise InputError(f"demo files not found: {where} no folder {path}")
    return path


def demo_model() -> Path:
    """Path of the committed demo detector (YOLO26n trained on shapes)."""
    return _demo_root() / "yolo26n_shapes.pt"


def demo_task_model(task: str) -> Path:
    """Path of the committed demo model of ``task`` (``segment``, ``pose``, ``obb``: YOLO26n of the task trained on
    the shapes demo's polygons, keypoints or rotated boxes; ``classify``: YOLO26n-cls trained on crops of its
    objects), named by its task's demo part (its ``demo_labels`` or ``demo_crops``: ``DEMO_MODEL``).

    Raises:
        InputError: No registered task of that name has a demo model.
    """
    part = _demo_part(TASKS[task]) if task in TASKS else None
    if part is None:
        raise InputError(
            f"no demo model of task `{task}`: the demo models are of the tasks "
            f"{', '.join(n for n, t in TASKS.items() if _demo_part(t) is not None)}"
        )
    return _demo_root() / part.DEMO_MODEL


def _demo_part(task: Any) -> Any:
    """A task's own demo data and model (its folder's ``demo_labels`` or ``demo_crops``), or None."""
    return task.part("demo_labels") or task.part("demo_crops")


def default_inputs(model: str | Path | None, data: str | Path | None) -> tuple[Path, Path]:
    """The model and data a run uses: both as given; neither: the embedded demo detector and its data;
    a demo model of a task with demo labels of its own alone (the segment, pose and OBB demo models):
    that task's demo data.

    Raises:
        InputError: One of the two given, and not a demo model alone.
    """
    if model is None and data is None:
        return demo_model(), demo_data_yaml()
    if data is None:
        data = _default_data_of(model)
    if model is None or data is None:
        raise InputError(
            "give both `model` and `data`, or neither (to run on the embedded demo model and data)"
        )
    return Path(model), Path(data)


def _default_data_of(model: str | Path) -> Path | None:
    """The demo data a demo model runs on when no data is given (rendered on first use): for the demo model
    of a task with demo labels of its own (its folder's ``demo_labels``: the segment, pose and OBB demo
    models), that task's demo data; None for any other model (its data must be named)."""
    if not Path(model).is_file():
        return None
    for task in TASKS.values():
        labels = task.part("demo_labels")
        if labels is None:
            continue
        try:
            path = _demo_root() / labels.DEMO_MODEL
        except InputError:  # no demo files beside the package
            return None
        if path.is_file() and Path(model).resolve() == path.resolve():
            return labels.DEMO_DATA()
    return None


def cache_dir() -> Path:
    """Folder where generated data is cached."""
    env = os.environ.get("DET_CALIB_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "det_calib"


def demo_data_yaml(*, with_train: bool = False, seed: int = 0, task: str | None = None) -> Path:
    """``data.yaml`` of the demo dataset, rendering the splits into the cache on first use.

    Args:
        with_train: Also render the train split (only training needs it).
        seed: Dataset seed; the committed models were trained on seed 0.
        task: A task with demo data of its own (its folder's demo part's ``DEMO_DATA``): ``segment``,
            ``pose`` and ``obb`` (the demo's images with polygon, keypoint or rotated-box labels, in a root
            of their own), ``classify`` (the demo's objects as crops in class folders); None, or a task
            without demo data of its own (``detect``): the detector's box labels.

    Returns:
        Path of a data.yaml with ``train``, ``val`` (= calib), ``calib`` and ``test`` splits (for
        ``classify``: the folder of class folders, ``train``, ``val`` and ``test``).

    Raises:
        InputError: ``task`` is no registered task.
    """
    if task is not None:
        if task not in TASKS:
            raise InputError(f"no task `{task}`: the tasks are {', '.join(TASKS)}")
        own = _demo_part(TASKS[task])
        if own is not None:
            return own.DEMO_DATA(with_train=with_train, seed=seed)
    splits = dict(SPLIT_SIZES)
    if not with_train:
        splits["train"] = 0
    root = cache_dir() / f"shapes-v{GENERATOR_VERSION}-seed{seed}"
    yaml = root / "data.yaml"
    for split, n in splits.items():
        if n and len(list((root / "images" / split).glob("*.png"))) != n:
            _log.info(
                "rendering the %s split of the shapes demo dataset into %s (first use)", split, root
            )
            generate(root, seed=seed, splits={split: n})
    _write_yaml(
        root, train="images/train" if (root / "images" / "train").is_dir() else "images/calib"
    )
    return yaml


def _write_yaml(root: Path, *, train: str) -> None:
    lines = [
        f"# shapes demo dataset, generator v{GENERATOR_VERSION} (see datasets/shapes/README.md)",
        f"path: {root.resolve()}",
        f"train: {train}",
        "val: images/calib",
        "calib: images/calib",
        "test: images/test",
        "names:",
        *[f"  {i}: {n}" for i, n in enumerate(CLASS_NAMES)],
    ]
    _write_text_if_changed(root / "data.yaml", "\n".join(lines) + "\n")


def shifted_data_yaml(kind: str, severity: int, *, seed: int = 0) -> Path:
    """``data.yaml`` of the demo's test split under a corruption (see :mod:`det_calib.demo.shifts`).

    The test split is rendered first if needed (:func:`demo_data_yaml`); its corrupted copy is
    written on first use into ``shapes-v1-seed0/shifted-v1/`` in the cache, as split
    ``test-<kind>-<severity>``. The yaml's ``val`` and ``test`` both name that split.

    Args:
        kind: One of :data:`~det_calib.demo.shifts.CORRUPTIONS` (``blur``, ``noise``, ``contrast``, ``jpeg``).
        severity: 1 (mild) to 5 (severe).
        seed: Dataset seed (as :func:`demo_data_yaml`).

    Raises:
        InputError: Unknown kind or severity.
    """
    from det_calib.demo.shifts import SHIFT_VERSION, split_name, write_shifted_split

    name = split_name(kind, severity)
    src = demo_data_yaml(seed=seed).parent
    root = src / f"shifted-v{SHIFT_VERSION}"
    n = SPLIT_SIZES["test"]
    if len(list((root / "images" / name).glob("*.png"))) != n:
        _log.info(
            "rendering the %s split of the shapes demo dataset into %s (first use)", name, root
        )
        write_shifted_split(src, root, kind, int(severity))
    lines = [
        f"# shapes demo test split under `{kind}` at severity {severity} (det_calib.demo.shifts "
        f"v{SHIFT_VERSION})",
        f"path: {root.resolve()}",
        f"train: images/{name}",
        f"val: images/{name}",
        f"test: images/{name}",
        "names:",
        *[f"  {i}: {c}" for i, c in enumerate(CLASS_NAMES)],
    ]
    _write_text_if_changed(root / f"{name}.yaml", "\n".join(lines) + "\n")
    return root / f"{name}.yaml"


def _write_text_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text() != text:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)


def fixture_data_yaml() -> Path:
    """``data.yaml`` of the committed fixture split (12 images; for fast tests)."""
    return _demo_root() / "fixture" / "data.yaml"


def model_figures(
    model: str | Path | None = None, *, split: str = "test", head: str = "nms"
) -> dict[str, float]:
    """The demo detector's model-card figures on one split of the demo dataset, for one head.

    Returns:
        ``map50`` and ``map50_95`` (Ultralytics val at conf 0.001), and ``correct`` and
        ``incorrect``: the boxes above conf 0.25, labelled by one-to-one matching to same-class
        ground truth at IoU 0.5.
    """

    model = model or demo_model()
    yml = demo_data_yaml()
    m = ultralytics_val(model, yml, split=split, head=head)
    sp = load_split(load_data_yaml(yml), split)
    boxes = match_boxes(
        capture(model, sp.images, head=head, progress=False), sp.gt, iou=0.5, loc_iou=0.1
    )
    kept = boxes.filter(boxes["conf"] > 0.25)
    correct = int(kept["correct"].sum())
    return {
        "map50": m["map50"],
        "map50_95": m["map50_95"],
        "correct": correct,
        "incorrect": kept.height - correct,
    }
