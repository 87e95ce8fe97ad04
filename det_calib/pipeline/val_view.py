"""The view of a split that Ultralytics' val reads (:func:`write_split_yaml`), and what val read of it
(:func:`val_view_scan`): the run's mAP check compares the two, so that it never measures another split
than the run's (other labels behind symlinks, images val leaves out).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from det_calib.data.ground_truth import Dataset, Split, label_path
from det_calib.errors import InputError

_TASK_YAML_KEYS = ("kpt_shape", "flip_idx", "kpt_oks_sigmas", "kpt_names")
"""The keys of a data.yaml beside its splits and names that :func:`write_split_yaml` carries over."""


def _task_keys(data: Dataset) -> dict:
    """The :data:`_TASK_YAML_KEYS` of ``data``'s yaml that it sets (JSON-like values, as the yaml holds them)."""
    import yaml

    try:
        raw = yaml.safe_load(Path(data.yaml_path).read_text()) or {}
    except (OSError, yaml.YAMLError):  # a yaml that was read once and then went away: no task keys
        return {}
    return {k: raw[k] for k in _TASK_YAML_KEYS if isinstance(raw, dict) and raw.get(k) is not None}


VAL_VIEW_IMAGES, VAL_VIEW_LABELS = "images", "labels"
"""The folders of :func:`write_split_yaml`'s view: links to the split's images, copies of their label files."""


def write_split_yaml(data: Dataset, split: Split, folder: Path) -> Path:
    """Write ``folder/data.yaml`` whose ``val`` is exactly the images of ``split``, with the labels
    det_calib read for them.

    Ultralytics' validator derives each image's label file from the image's path and cannot take a
    subset (a half split, ``--limit``, corrupt images left out). So the split is laid out in
    ``folder`` as a view Ultralytics reads like any dataset: ``images/`` holds a link to each image
    of the split (as the user gave its path: a symlinked image is linked, not the file behind it;
    a hard link or a copy where the file system has no symlinks), ``labels/`` a copy of the label
    file :func:`label_path` gives for it, the file det_calib's own reader read. Val then reads the
    same labels as det_calib, whatever symlinks the dataset holds, and writes its label cache in
    ``folder`` (``labels.cache``, read back by :func:`val_view_scan`), never in the user's data.
    The task keys of ``data``'s yaml (:data:`_TASK_YAML_KEYS`: a pose dataset's ``kpt_shape``,
    ``flip_idx``, ``kpt_oks_sigmas``, ``kpt_names``) are copied: a pose validator needs them.
    """
    folder = Path(folder)
    images, labels = folder / VAL_VIEW_IMAGES, folder / VAL_VIEW_LABELS
    images.mkdir(parents=True, exist_ok=True)
    labels.mkdir(exist_ok=True)
    width = len(str(len(split.images)))
    listed = []
    for i, src in enumerate(split.images):
        name = f"{i:0{width}d}_{src.stem}"
        link = images / f"{name}{src.suffix}"
        _link_image(Path(os.path.abspath(src)), link)  # the path as given: symlinks not followed
        listed.append(str(link))
        lab = label_path(src)
        if lab.is_file():
            shutil.copyfile(lab, labels / f"{name}.txt")
    lst = folder / "images.txt"
    lst.write_text("\n".join(listed) + "\n")
    lines = [f"path: {folder}", f"train: {lst}", f"val: {lst}", "names:"]
    lines += [f"  {i}: {json.dumps(n)}" for i, n in enumerate(data.names)]
    lines += [f"{k}: {json.dumps(v)}" for k, v in _task_keys(data).items()]
    yml = folder / "data.yaml"
    yml.write_text("\n".join(lines) + "\n")
    return yml


def _link_image(src: Path, link: Path) -> None:
    """``link`` to the image ``src``: a symlink, else a hard link, else a copy."""
    for make in (os.symlink, os.link, shutil.copyfile):
        try:
            make(src, link)
            return
        except OSError:
            continue
    raise InputError(f"cannot link or copy image {src} into {link.parent}")


@dataclass
class ValScan:
    """What an Ultralytics val read of a :func:`write_split_yaml` view: its label scan (the cache file).

    Attributes:
        images: Images val kept, in the split's order (their index in the split).
        instances: ``(nc,)`` labelled instances per class val kept.
        skipped: ``"<image>: <reason>"`` for each image val left out (its messages, with the view's
            link names turned back into the split's image paths).
        listed: Images the view listed.
    """

    images: list[int]
    instances: np.ndarray
    skipped: list[str]
    listed: int


def val_view_scan(folder: Path, split: Split, nc: int) -> ValScan:
    """Read back what Ultralytics' val kept of the view :func:`write_split_yaml` wrote in ``folder``: the
    label cache its dataset wrote there (``labels.cache``: each kept image's file and classes, and a
    message for each image it left out). No cache file: val kept no image."""
    links = sorted(
        p.name for p in (Path(folder) / VAL_VIEW_IMAGES).iterdir()
    )  # in the split's order
    index = {name: i for i, name in enumerate(links)}
    cache = Path(folder) / f"{VAL_VIEW_LABELS}.cache"
    kept: list[int] = []
    instances = np.zeros(nc, dtype=np.int64)
    msgs: list[str] = []
    if cache.is_file():
        x = np.load(str(cache), allow_pickle=True).item()
        for lab in x.get("labels", []):
            i = index.get(Path(lab["im_file"]).name)
            if i is not None:
                kept.append(i)
            cls = np.asarray(lab.get("cls", np.zeros((0, 1)))).reshape(-1).astype(np.int64)
            instances += np.bincount(cls[(cls >= 0) & (cls < nc)], minlength=nc)
        msgs = [str(m) for m in x.get("msgs", [])]
    skipped = []
    for i in sorted(set(range(len(links))) - set(kept)):
        tag = f"{VAL_VIEW_IMAGES}{os.sep}{links[i]}: "
        why = next(
            (m.split(tag, 1)[1].strip() for m in msgs if tag in m), "left out of val's label scan"
        )
        skipped.append(f"{split.images[i]}: {why}")
    return ValScan(images=sorted(kept), instances=instances, skipped=skipped, listed=len(links))
