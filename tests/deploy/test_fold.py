"""Fold: the calibrated checkpoint runs in plain Ultralytics and gives sigmoid(z / T)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import NO_DET_CALIB

from det_calib.capture.predictor import capture
from det_calib.cli import main
from det_calib.deploy.fold import (
    _fold_into_model,
    _temperatures_from_json,
    read_calibration_metadata,
    write_calibrated_checkpoint,
)
from det_calib.errors import InputError

# Runs in a fresh interpreter where importing det_calib fails, so nothing of det_calib can be
# involved in loading or running the checkpoint.
PLAIN_PREDICT = NO_DET_CALIB + textwrap.dedent(
    """
    ckpt, head, images = sys.argv[1], sys.argv[2], sys.argv[3:]
    kw = {"nms": False} if head == "e2e" else {}
    model = YOLO(ckpt)  # one image at a time, as capture (a list would be letterboxed to one shape)
    res = [model.predict(p, conf=0.001, imgsz=320, verbose=False, **kw)[0] for p in images]
    print(json.dumps([r.boxes.data.tolist() for r in res]))
    """
)


def _plain_predict(ckpt, head, images):
    out = subprocess.run(
        [sys.executable, "-c", PLAIN_PREDICT, str(ckpt), head, *map(str, images)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "YOLO_OFFLINE": "1", "YOLO_VERBOSE": "False"},
    )
    return [
        np.array(r, dtype=np.float64).reshape(-1, 6)
        for r in json.loads(out.stdout.strip().splitlines()[-1])
    ]


def test_folded_checkpoint_gives_sigmoid_z_over_t_without_det_calib(
    tmp_path, demo_model_path, fixture_images
):
    temps = {"nms": 1.7, "e2e": 0.6}
    ckpt = write_calibrated_checkpoint(
        demo_model_path, tmp_path / "cal.pt", temps, metadata={"note": "test"}
    )
    images = fixture_images[:4]
    for head, t in temps.items():
        raw = capture(str(demo_model_path), images, head=head, imgsz=320, conf=1e-4, progress=False)
        got = _plain_predict(ckpt, head, images)
        z = raw["logit"].to_numpy()
        expected = 1 / (1 + np.exp(-z / t))
        # compare the boxes above a calibrated 0.05, which both runs hold in full (T moves boxes
        # across the 0.001 floor, and the raw capture's floor of 1e-4 lies below 0.05's equivalent)
        compared = 0
        for i, rows in enumerate(got):
            mine = raw.filter(raw["image_id"] == i)
            p_cal = 1 / (1 + np.exp(-mine["logit"].to_numpy() / t))
            keep_raw = p_cal > 0.05
            keep_new = rows[:, 4] > 0.05
            assert keep_raw.sum() == keep_new.sum()
            compared += int(keep_new.sum())
            order_a = np.lexsort((mine["x1"].to_numpy()[keep_raw], -p_cal[keep_raw]))
            order_b = np.lexsort((rows[keep_new, 0], -rows[keep_new, 4]))
            np.testing.assert_allclose(
                rows[keep_new][order_b, 4], p_cal[keep_raw][order_a], atol=1e-5, rtol=0
            )
            np.testing.assert_allclose(
                rows[keep_new][order_b, :4],
                mine.select("x1", "y1", "x2", "y2").to_numpy()[keep_raw][order_a],
                atol=1e-3,
            )
            np.testing.assert_array_equal(
                rows[keep_new][order_b, 5], mine["cls"].to_numpy()[keep_raw][order_a]
            )
        assert compared > 0
        assert np.isfinite(expected).all()
    meta = read_calibration_metadata(ckpt)
    assert meta["temperature"] == temps and meta["note"] == "test"
    assert meta["folded_into"] == {"nms": "cv3", "e2e": "one2one_cv3"}
    # saved in float32: an fp16 save would round W/T
    sd = torch.load(ckpt, map_location="cpu", weights_only=False)["model"]
    assert next(sd.parameters()).dtype == torch.float32


@pytest.mark.fast
def test_fold_is_exact_on_the_conv(demo_model_path):
    from ultralytics import YOLO

    model = YOLO(str(demo_model_path)).model.float()
    x = torch.randn(2, 3, 320, 320)
    model.eval()
    with torch.no_grad():
        _, raw0 = model(x)
        _fold_into_model(model, {"nms": 2.0, "e2e": 0.5})
        _, raw1 = model(x)
    torch.testing.assert_close(
        raw1["one2many"]["scores"], raw0["one2many"]["scores"] / 2.0, rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(
        raw1["one2one"]["scores"], raw0["one2one"]["scores"] / 0.5, rtol=1e-5, atol=1e-5
    )
    # boxes are untouched
    torch.testing.assert_close(raw1["one2many"]["boxes"], raw0["one2many"]["boxes"])


@pytest.mark.fast
def test_refolding_composes_temperatures(tmp_path, demo_model_path):
    a = write_calibrated_checkpoint(demo_model_path, tmp_path / "a.pt", {"nms": 2.0})
    b = write_calibrated_checkpoint(a, tmp_path / "b.pt", {"nms": 1.5})
    assert read_calibration_metadata(b)["temperature"] == {"nms": 3.0}
    assert read_calibration_metadata(demo_model_path) is None


@pytest.mark.fast
@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_fold_rejects_bad_temperatures(tmp_path, demo_model_path, bad):
    with pytest.raises(InputError, match="finite positive"):
        write_calibrated_checkpoint(demo_model_path, tmp_path / "x.pt", {"nms": bad})
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.fast
def test_legacy_head_has_no_e2e_branch(make_untrained):
    model = make_untrained("yolov8n.yaml").model
    with pytest.raises(InputError, match="one2one_cv3"):
        _fold_into_model(model, {"e2e": 1.2})


def test_apply_cli(tmp_path, demo_model_path, capsys, caplog):
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"temperature": {"nms": 1.25}}))
    out = tmp_path / "m_cal.pt"

    def apply(to):
        argv = ["--model", str(demo_model_path), "--calibration", str(cal), "--out", str(to)]
        return main(["apply", *argv])

    assert apply(out) == 0
    assert read_calibration_metadata(out)["temperature"] == {"nms": 1.25}
    assert _temperatures_from_json(cal) == {"nms": 1.25}
    said = capsys.readouterr().out + "".join(r.getMessage() for r in caplog.records)
    assert said.count(f"wrote calibrated checkpoint {out}") == 1 and said.count(str(out)) == 1
    # an existing folder as --out: one line naming it, nothing written in it
    assert apply(tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"`--out` {tmp_path} is a folder" in err[0], err
    # bad calibration file: exit 2, one line, the old output untouched
    before = out.read_bytes()
    cal.write_text("{not json")
    assert apply(out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not valid JSON" in err[0]
    assert out.read_bytes() == before
    # a run's calibration of another checkpoint: written, and a warning names the model it fits
    other = write_calibrated_checkpoint(demo_model_path, tmp_path / "other.pt", {"nms": 2.0})
    cal.write_text(json.dumps({"model": str(other), "temperature": {"nms": 1.25}}))
    caplog.clear()
    assert apply(out) == 0
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"was fitted on {other}, not on {demo_model_path}" in said
    cal.write_text(json.dumps({"model": str(demo_model_path), "temperature": {"nms": 1.25}}))
    caplog.clear()
    assert apply(out) == 0 and "was fitted on" not in " ".join(
        r.getMessage() for r in caplog.records
    )
    # the run's folder for its calibration.json
    argv = ["--model", str(demo_model_path), "--calibration", str(tmp_path), "--out", str(out)]
    assert main(["apply", *argv]) == 0
    # a --source a .pt would not read, an --out not named .pt: refused in one line
    for extra, words in (
        (["--source", str(demo_model_path)], "`--source` is the .pt of an engine"),
        (["--out", str(tmp_path / "x.onnx")], "name it with .pt"),
    ):
        argv = ["--model", str(demo_model_path), "--calibration", str(cal), "--out", str(out)]
        assert main(["apply", *argv, *extra]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err


def test_calibrated_checkpoint_keeps_the_source_entries_but_not_the_training_state(
    tmp_path, demo_model_path
):
    src = torch.load(demo_model_path, map_location="cpu", weights_only=False)
    src.update(optimizer={"state": {}}, updates=123, epoch=7)
    torch.save(src, tmp_path / "src.pt")
    out = torch.load(
        write_calibrated_checkpoint(tmp_path / "src.pt", tmp_path / "cal.pt", {"nms": 2.0}),
        map_location="cpu",
        weights_only=False,
    )
    assert set(out) == set(src) - {"updates"} | {"det_calib"}
    assert (
        out["optimizer"] is None
        and out["ema"] is None
        and out["det_calib"]["temperature"] == {"nms": 2.0}
    )
    rec = out["det_calib"]
    assert rec["source_checkpoint"] == str((tmp_path / "src.pt").resolve()) and rec[
        "folded_into"
    ] == {"nms": "cv3"}
    import datetime

    assert datetime.datetime.fromisoformat(rec["date"]).utcoffset() == datetime.timedelta(
        0
    )  # UTC, to the second
    for k in set(src) - {"optimizer", "ema", "updates", "model"}:
        assert out[k] == src[k], k
