"""A fifth task added through the registry alone: a made-up payload (each box's aspect ratio, a per-box scalar
column), decoded from the demo detector's own rows, matched by box IoU, calibrated and written end to end by
the real pipeline. Nothing outside the test names it: one class, one ``register_task`` line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from det_calib.errors import InputError
from det_calib.tasks import TASKS, get_task, register_task, task_names
from det_calib.tasks.detect_task import Detect

OPTIONS = {"head": "nms", "n_boot": 10, "progress": False, "method": "temperature", "report": False}


class Toy(Detect):
    """A detector whose boxes carry one number each: their width over their height, in image pixels."""

    name = "toy"
    model_words = "a toy model"
    payload = "aspect"
    payload_dtype = pl.Float32
    payload_words = "aspect ratios"
    records_rule = True  # calibration.json's `matching` says why: box IoU, "a toy model"
    fusable = False

    def decode(self, det, lb_shape, im_shape, shape):
        xyxy, _ = super().decode(det, lb_shape, im_shape, shape)
        wh = (xyxy[:, 2:4] - xyxy[:, 0:2]).cpu().numpy()
        return xyxy, (wh[:, 0] / wh[:, 1]).astype(np.float32)

    def payload_series(self, images, shape):
        arrays = [im.extra for im in images]
        return pl.Series(
            self.payload,
            np.concatenate(arrays) if arrays else np.zeros(0, np.float32),
            dtype=self.payload_dtype,
        )


@pytest.fixture
def toy():
    task = register_task(
        Toy()
    )  # the one line a new task adds to the registry (here undone after the test)
    yield task
    TASKS.pop(task.name)


def _toy_checkpoint(demo: Path, out: Path) -> Path:
    """The demo detector, its checkpoint saying its task is ``toy`` (Ultralytics loads ``model.task``)."""
    ckpt = torch.load(demo, map_location="cpu", weights_only=False)
    for key in ("model", "ema"):
        if ckpt.get(key) is not None:
            ckpt[key].task = "toy"
    ckpt["train_args"] = {**(ckpt.get("train_args") or {}), "task": "toy"}
    torch.save(ckpt, out)
    return out


def test_an_unknown_task_is_one_line():
    with pytest.raises(
        InputError,
        match=r"^model task is `toy`: det_calib calibrates detect, segment, pose and obb "
        r"models$",
    ):
        get_task("toy")


def test_a_toy_task_registered_alone_runs_end_to_end(toy, demo_model_path, fixture_yaml, tmp_path):
    from det_calib.data.box_table import CAPTURE_COLUMNS
    from det_calib.data.ground_truth import load_data_yaml
    from det_calib.job.inputs import load_splits
    from det_calib.job.settings import Settings
    from det_calib.matching.one_to_one import match_boxes
    from det_calib.pipeline.calibrate_job import calibrate

    assert task_names() == ("detect", "segment", "pose", "obb", "toy") and get_task("toy") is toy
    model = _toy_checkpoint(demo_model_path, tmp_path / "toy.pt")
    run = calibrate(model, fixture_yaml, out=tmp_path / "run", **OPTIONS)

    # the toy payload, decoded from the detector's rows, rides along in the written box table
    boxes = pl.read_parquet(tmp_path / "run" / "boxes.parquet")
    assert boxes.schema["aspect"] == pl.Float32 and boxes.height > 100
    ratio = ((boxes["x2"] - boxes["x1"]) / (boxes["y2"] - boxes["y1"])).to_numpy()
    np.testing.assert_allclose(boxes["aspect"].to_numpy(), ratio, rtol=1e-5)

    # matched by box IoU (the task's rule), recorded as the toy's
    assert (run.result.matching.by, run.result.matching.reason) == ("box", "a toy model")
    st = run.result.settings
    _, ev = load_splits(load_data_yaml(fixture_yaml), Settings(**OPTIONS), task="toy")
    mine = boxes.filter(pl.col("split") == st.eval_split)
    again = match_boxes(
        mine.select(CAPTURE_COLUMNS), ev.gt, iou=st.iou_match, loc_iou=st.loc_iou_match
    )
    assert mine.height > 0 and again["correct"].to_list() == mine["correct"].to_list()

    # calibrated: a temperature fitted, the checkpoint folded, the figures written
    assert run.result.heads == ["nms"] and (tmp_path / "run" / "calibration.json").is_file()
    assert run.checkpoint is not None and run.checkpoint.is_file()
    assert run.result.head("nms").calibrator.method == "temperature"
