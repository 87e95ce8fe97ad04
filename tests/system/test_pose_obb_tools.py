"""Pose and OBB models through the tools around the run: ``ensemble`` refuses them in one line."""

from __future__ import annotations

import pytest

from det_calib.cli import main
from det_calib.demo import demo_data_yaml, demo_model, demo_root


def _error(capsys, *argv) -> str:
    """The one error line of a command that must fail with exit 2."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    lines = [ln for ln in err.splitlines() if ln.startswith("det-calib: error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("name,words", [("yolo26n_shapes_pose.pt", "is a pose model: det-calib ensemble fuses boxes "
                                         "and cannot fuse keypoints"),
                                        ("yolo26n_shapes_obb.pt", "is an OBB model: det-calib ensemble fuses boxes "
                                         "and cannot fuse rotated boxes")])
def test_ensemble_refuses_pose_and_obb_members(capsys, tmp_path, name, words):
    for models in ((demo_root() / name, demo_model()), (demo_model(), demo_root() / name)):
        line = _error(capsys, "ensemble", *(a for m in models for a in ("--model", m)), "--data", demo_data_yaml(),
                      "--limit", "4", "--out", tmp_path / "ens")
        assert words in line and name in line
        assert not (tmp_path / "ens").exists()
