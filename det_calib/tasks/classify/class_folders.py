"""A classification dataset as Ultralytics reads one: a folder of splits, one folder per class.

Layout: ``root/<split>/<class name>/**/<image>`` for the splits ``train``, ``val`` and ``test``
(any may be missing; det_calib reads the two it is asked for). Classes are the class folders in
sorted name order and their class id is that order, as ``torchvision``'s ``ImageFolder`` (which
Ultralytics' classification dataset wraps) numbers them; images are every file of an image format
Ultralytics reads, found recursively under its class folder, in sorted path order.

Checked line by line, each with a one-line error naming what is wrong: the split folder exists; it
holds class folders; no class folder is empty; no image lies in the split folder itself (in no
class folder, so it has no label); the classes are the model's, by name and in order.

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for c in ("cat", "dog"):
    ...     (root / "val" / c).mkdir(parents=True)
    ...     _ = (root / "val" / c / "a.png").write_bytes(b"")
    >>> s = read_class_split(root, "val")
    >>> s.names, [p.name for p in s.paths], s.labels.tolist()
    (('cat', 'dog'), ['a.png', 'a.png'], [0, 1])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from det_calib.data.ground_truth import image_suffixes
from det_calib.errors import InputError

__all__ = ["ClassSplit", "check_model_classes", "read_class_split"]


@dataclass(frozen=True)
class ClassSplit:
    """One split of a folder-per-class dataset.

    Attributes:
        name: The split's folder name.
        names: Class names, by class id (sorted folder names).
        paths: Every image, class by class, each class's in sorted path order.
        labels: ``(n,)`` int64 class id of each image.
    """

    name: str
    names: tuple[str, ...]
    paths: tuple[Path, ...]
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.paths)


def read_class_split(root: str | Path, split: str) -> ClassSplit:
    """Read ``root/split`` as Ultralytics' classification dataset does, with det_calib's checks.

    Raises:
        InputError: No such split folder, no class folders, an empty class folder, or an image in no
            class folder.
    """
    folder = Path(root) / split
    if not folder.is_dir():
        raise InputError(
            f"classification data {root}: no `{split}` folder (expected {folder}/<class>/<images>)"
        )
    suffixes = image_suffixes()
    loose = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
    if loose:
        raise InputError(
            f"{folder}: {len(loose)} image(s) in no class folder ({', '.join(loose[:3])}): "
            "every image must sit in the folder of its class"
        )
    names = tuple(
        sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    )
    if not names:
        raise InputError(f"{folder}: no class folders (expected {folder}/<class>/<images>)")
    paths: list[Path] = []
    labels: list[int] = []
    for k, name in enumerate(names):
        found = sorted(
            p for p in (folder / name).rglob("*") if p.is_file() and p.suffix.lower() in suffixes
        )
        if not found:
            raise InputError(f"{folder / name}: class `{name}` has no images")
        paths += found
        labels += [k] * len(found)
    return ClassSplit(split, names, tuple(paths), np.asarray(labels, dtype=np.int64))


def check_model_classes(split: ClassSplit, model_names: Sequence[str]) -> None:
    """Refuse, in one line, a split whose classes are not the model's (by name, in class-id order)."""
    model = tuple(model_names)
    if split.names == model:
        return
    missing = [n for n in model if n not in split.names]
    extra = [n for n in split.names if n not in model]
    if missing or extra:
        parts = [f"the model's {', '.join(missing[:3])} missing" if missing else ""] + [
            f"{', '.join(extra[:3])} not in the model" if extra else ""
        ]
        raise InputError(
            f"the `{split.name}` split's classes are not the model's: "
            f"{'; '.join(p for p in parts if p)}"
        )
    raise InputError(
        f"the `{split.name}` split's classes are the model's in another order "
        f"({', '.join(split.names[:4])}... against {', '.join(model[:4])}...): class ids would "
        "differ"
    )
