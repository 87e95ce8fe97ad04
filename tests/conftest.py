"""Shared fixtures: the committed demo detector, the fixture split, small untrained models."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("YOLO_VERBOSE", "False")
os.environ.setdefault("YOLO_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "datasets" / "shapes" / "fixture"


@pytest.fixture(scope="session")
def demo_model_path() -> Path:
    from det_calib.demo import demo_model

    path = demo_model()
    assert path.is_file(), f"the committed demo detector is missing: {path}"
    return path


@pytest.fixture(scope="session")
def fixture_yaml() -> Path:
    return FIXTURE / "data.yaml"


@pytest.fixture(scope="session")
def fixture_images() -> list[Path]:
    images = sorted((FIXTURE / "images" / "fixture").glob("*.jpg"))
    assert len(images) == 12
    return images


def untrained_detector(cfg: str, *, seed: int = 0, bias_mean: float = -2.0):
    """A detector built from a yaml, with random class-conv weights and biases so that its
    scores spread over (0, 1) like a trained model's (the default bias init makes every score
    ~1e-4, below any useful floor)."""
    import torch
    from ultralytics import YOLO

    torch.manual_seed(seed)
    yolo = YOLO(cfg)
    head = yolo.model.model[-1]
    branches = [head.cv3] + ([head.one2one_cv3] if getattr(head, "one2one_cv3", None) is not None else [])
    with torch.no_grad():
        for branch in branches:
            for level in branch:
                conv = level[-1]
                torch.nn.init.normal_(conv.weight, 0.0, 0.05)
                torch.nn.init.normal_(conv.bias, bias_mean, 1.5)
    yolo.model.eval()
    return yolo


@pytest.fixture
def make_untrained():
    return untrained_detector


# The start of a script run in a fresh interpreter where importing det_calib fails, so nothing of
# det_calib can be involved in loading or running a checkpoint (plain Ultralytics only).
NO_DET_CALIB = textwrap.dedent(
    """
    import json, sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "det_calib" or name.startswith("det_calib."):
                raise ImportError("det_calib is blocked in this process")
    sys.meta_path.insert(0, Block())
    try:
        import det_calib  # noqa
        raise SystemExit("det_calib importable")
    except ImportError:
        pass
    from ultralytics import YOLO
    """
)
