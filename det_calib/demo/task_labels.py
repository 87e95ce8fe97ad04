"""Writing a task's label files for the ``shapes`` demo (pose, OBB) in a root of its own.

Each task's dataset is a separate root in the cache beside the detection demo
(``shapes-v1-seed0-<task><version>``): the detection demo's image files, hard-linked (copied where
the file system refuses links), with the task's label files and its own ``data.yaml``. Nothing
under the detection root is written. A task supplies one function: the label lines of a rendered
image (:class:`~det_calib.demo.shapes.Rendered`), one line per box label, in the same order.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from det_calib.demo import demo_data_yaml
from det_calib.demo.shapes import (
    CLASS_NAMES,
    GENERATOR_VERSION,
    SPLIT_SIZES,
    Rendered,
    render_with_owners,
    swap_in_split,
)

_log = logging.getLogger(__name__)

__all__ = ["write_task_split", "task_data_yaml"]

_LineWriter = Callable[[Rendered], list[str]]
"""The label lines of one rendered image, one per box label, in the order of ``Rendered.labels``."""


def _link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link ``src`` to ``dst`` (replacing it), copying where the file system refuses links."""
    if dst.exists():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def write_task_split(
    root: Path,
    split: str,
    n: int,
    lines_of: _LineWriter,
    *,
    seed: int = 0,
    images_from: Path | None = None,
) -> int:
    """Write ``n`` images of ``split`` with the task's label lines under ``root/images|labels/split``.

    Args:
        root: The task's dataset root.
        split: Split name.
        n: Number of images.
        lines_of: The task's label lines of a rendered image.
        seed: Dataset seed.
        images_from: Root of the rendered detection demo: its PNG of each image is hard-linked
            instead of written again. Without it, or where that file is missing, the rendered image
            is written as the detection writer writes it.

    Returns:
        The number of label lines written.
    """
    import cv2

    img_dir, lbl_dir = Path(root) / "images" / split, Path(root) / "labels" / split
    img_dir.mkdir(parents=True, exist_ok=True)
    lbl_dir.mkdir(parents=True, exist_ok=True)
    count = 0
    for i in range(n):
        r = render_with_owners(seed, split, i)
        stem = f"{split}_{i:05d}"
        src = None if images_from is None else Path(images_from) / "images" / split / f"{stem}.png"
        if src is not None and src.is_file():
            _link_or_copy(src, img_dir / f"{stem}.png")
        elif not cv2.imwrite(str(img_dir / f"{stem}.png"), r.image):
            raise OSError(f"could not write {img_dir / (stem + '.png')}")
        lines = lines_of(r)
        (lbl_dir / f"{stem}.txt").write_text("\n".join(lines) + ("\n" if lines else ""))
        count += len(lines)
    return count


def task_data_yaml(
    folder_suffix: str,
    lines_of: _LineWriter,
    *,
    title: str,
    extra: list[str],
    with_train: bool = False,
    seed: int = 0,
) -> Path:
    """``data.yaml`` of a task's demo dataset, writing its splits on first use.

    Renders the detection demo first if needed (:func:`det_calib.demo.demo_data_yaml`), then each
    missing split of the task into ``shapes-v<generator>-seed<seed>-<folder_suffix>/`` beside it,
    through a temporary folder renamed into place.

    Args:
        folder_suffix: The task's part of the root's name (``pose1``, ``obb1``).
        lines_of: The task's label lines of a rendered image.
        title: The yaml's first comment line.
        extra: Further yaml lines (``kpt_shape: [5, 3]``...).
        with_train: Also write the train split (only training a model needs it).
        seed: Dataset seed.

    Returns:
        Path of a data.yaml with ``train`` (the train split when written, else calib), ``val``
        (= calib), ``calib``, ``test``, the class names and ``extra``.
    """

    det_root = demo_data_yaml(with_train=with_train, seed=seed).parent
    root = det_root.parent / f"shapes-v{GENERATOR_VERSION}-seed{seed}-{folder_suffix}"
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "calib", "test") if with_train else ("calib", "test"):
        n = SPLIT_SIZES[split]
        if len(list((root / "labels" / split).glob("*.txt"))) == n:
            continue
        _log.info(
            "writing %s labels of the %s split of the shapes demo into %s (first use)",
            folder_suffix,
            split,
            root,
        )
        swap_in_split(
            root,
            split,
            lambda tmp, split=split, n=n: write_task_split(
                tmp, split, n, lines_of, seed=seed, images_from=det_root
            ),
        )
    lines = [
        f"# {title}",
        f"path: {root.resolve()}",
        f"train: images/{'train' if (root / 'images' / 'train').is_dir() else 'calib'}",
        "val: images/calib",
        "calib: images/calib",
        "test: images/test",
        "names:",
        *[f"  {i}: {n}" for i, n in enumerate(CLASS_NAMES)],
        *extra,
    ]
    text = "\n".join(lines) + "\n"
    yaml = root / "data.yaml"
    if not yaml.is_file() or yaml.read_text() != text:
        tmp = yaml.with_suffix(".yaml.tmp")
        tmp.write_text(text)
        tmp.replace(yaml)
    return yaml
