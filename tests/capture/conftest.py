"""Segment models for the capture's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

MASK_NOISE = 0.5


def shapes_segment_model(folder: Path, demo_model: Path, *, seed: int = 0) -> Path:
    """A YOLO26n-seg checkpoint for the shapes demo's 8 classes: built from Ultralytics' yaml, the
    demo detector's layers copied in (``load``: realistic boxes and scores on both heads), the
    mask branches (``proto``, ``cv4``, ``one2one_cv4``) at their initial weights perturbed so
    that masks are not their boxes. Saved (half precision, as Ultralytics saves) as
    ``folder/shapes_seg.pt``."""
    import torch
    import ultralytics
    import yaml
    from ultralytics import YOLO

    cfg = yaml.safe_load((Path(ultralytics.__file__).parent / "cfg/models/26/yolo26-seg.yaml").read_text())
    cfg["nc"] = 8
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "yolo26n-seg.yaml"  # the `n` in the name selects the scale
    spec.write_text(yaml.safe_dump(cfg, sort_keys=False))
    torch.manual_seed(seed)
    yolo = YOLO(str(spec)).load(str(demo_model))
    head = yolo.model.model[-1]
    with torch.no_grad():
        for branch in (head.proto, head.cv4, head.one2one_cv4):
            for p in branch.parameters():
                p.add_(torch.randn_like(p) * MASK_NOISE)
    yolo.model.names = dict(YOLO(str(demo_model)).names)
    path = folder / "shapes_seg.pt"
    yolo.save(str(path))
    return path


@pytest.fixture(scope="session")
def shapes_seg_path(tmp_path_factory, demo_model_path) -> Path:
    return shapes_segment_model(tmp_path_factory.mktemp("seg"), demo_model_path)
