"""RT-DETR as a model family of the detect task (det_calib/families/rtdetr.py): its head mode, its capture
equal to Ultralytics' ``RTDETR(path).predict`` bit for bit, and the fold into the last decoder layer's class
head read by plain Ultralytics (no det_calib) with the same queries and boxes and the calibrated scores."""

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
from families.rtdetr_models import untrained_rtdetr

from det_calib.calibrators.registry import make_calibrator
from det_calib.capture.family_registry import family_of
from det_calib.capture.predictor import available_heads, capture, load_detector
from det_calib.deploy.fold import (
    _write_folded_checkpoint,
    read_calibration_metadata,
    write_calibrated_checkpoint,
)
from det_calib.errors import InputError

PLAIN_PREDICT = NO_DET_CALIB + textwrap.dedent(
    """
    ckpts, conf, images = json.loads(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    out = {}
    for ckpt in ckpts:  # every checkpoint in this one process: one start-up
        model = YOLO(ckpt)  # Ultralytics turns a checkpoint with an RTDETRDecoder into an RTDETR
        assert type(model).__name__ == "RTDETR", type(model)
        res = [model.predict(p, conf=conf, verbose=False)[0] for p in images]
        out[ckpt] = [r.boxes.data.tolist() for r in res]
    print(json.dumps(out))
    """
)


def _plain_predict(ckpts, images, conf: float = 0.001) -> dict[str, list[np.ndarray]]:
    """Checkpoint (as ``str``) -> plain Ultralytics' rows of each image, every checkpoint predicted in
    one process where det_calib cannot be imported."""
    ckpts = json.dumps([str(c) for c in ckpts])
    out = subprocess.run(
        [sys.executable, "-c", PLAIN_PREDICT, ckpts, str(conf), *map(str, images)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "YOLO_OFFLINE": "1", "YOLO_VERBOSE": "False"},
    )
    return {
        ckpt: [np.array(r, dtype=np.float32).reshape(-1, 6) for r in rows]
        for ckpt, rows in json.loads(out.stdout.strip().splitlines()[-1]).items()
    }


@pytest.fixture(scope="module")
def rtdetr_pt(tmp_path_factory):
    return untrained_rtdetr(tmp_path_factory.mktemp("rtdetr") / "rtdetr.pt")


def test_an_rtdetr_is_its_own_family_with_one_head(rtdetr_pt, demo_model_path):
    yolo = load_detector(rtdetr_pt)
    assert type(yolo).__name__ == "RTDETR" and family_of(yolo).name == "rtdetr"
    assert available_heads(yolo) == ["detr"]
    assert (
        family_of(load_detector(demo_model_path)) is None
    )  # a YOLO detect head: the built-in path
    with pytest.raises(InputError, match="no one-to-many head for `head` nms; it has: detr"):
        capture(yolo, [], head="nms")


def test_capture_equals_rtdetr_predict_bit_for_bit(rtdetr_pt, fixture_images):
    from ultralytics import RTDETR

    images = fixture_images[:3]
    df = capture(str(rtdetr_pt), images, conf=0.001, all_logits=True, progress=False)
    assert df["head"].unique().to_list() == ["detr"]
    model = RTDETR(str(rtdetr_pt))
    rows = [model.predict(str(p), conf=0.001, verbose=False)[0].boxes.data.numpy() for p in images]
    ref = np.concatenate(rows)
    assert (
        df.height == len(ref) == 300
    )  # 100 queries: the top 100 (query, class) pairs, all above 0.001
    np.testing.assert_array_equal(
        df.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32), ref[:, :4]
    )
    np.testing.assert_array_equal(df["conf"].to_numpy().astype(np.float32), ref[:, 4])
    np.testing.assert_array_equal(df["cls"].to_numpy(), ref[:, 5].astype(int))
    np.testing.assert_array_equal(np.bincount(df["image_id"].to_numpy()), [len(r) for r in rows])
    sig = torch.sigmoid(torch.tensor(df["logit"].to_numpy(), dtype=torch.float32)).numpy()
    np.testing.assert_array_equal(
        sig, ref[:, 4]
    )  # the float32 sigmoid of the captured logit is predict's conf
    logits = np.stack(df["logits"].to_numpy())
    np.testing.assert_array_equal(
        logits[np.arange(df.height), df["cls"].to_numpy()], df["logit"].to_numpy()
    )
    # a query may give rows of several classes (the head's top-k is over (query, class) pairs)
    assert df.group_by("image_id", "x1", "y1", "x2", "y2").len()["len"].max() >= 1


def _spline(seed: int = 0):
    rng = np.random.default_rng(seed)
    z = rng.normal(-1.0, 2.5, 20_000)
    y = rng.random(z.size) < 1 / (1 + np.exp(-(0.6 * z + 0.8 + 0.1 * z**2 * (z > -1))))
    return make_calibrator("spline").fit(z, y)


def _by_box(rows: np.ndarray) -> np.ndarray:
    return rows[np.lexsort((rows[:, 3], rows[:, 2], rows[:, 1], rows[:, 0], rows[:, 5]))]


@pytest.mark.slow  # about 40 s: two folds, each read by a fresh Ultralytics process
def test_fold_into_the_last_decoder_class_head_runs_in_plain_ultralytics(
    rtdetr_pt, fixture_images, tmp_path
):
    """A temperature (folded into the Linear) and a spline (appended Linear + ReLU layers): plain Ultralytics
    returns the raw capture's queries and boxes, bit for bit, each with the calibrated score of its logit."""
    images = fixture_images[:3]
    raw = capture(str(rtdetr_pt), images, conf=0.0, all_logits=True, progress=False)
    spline = _spline()
    folded = {
        "temperature": (
            write_calibrated_checkpoint(rtdetr_pt, tmp_path / "t.pt", {"detr": 2.0}),
            lambda z: 1 / (1 + np.exp(-z / 2.0)),
        ),
        "spline": (
            _write_folded_checkpoint(rtdetr_pt, tmp_path / "s.pt", {"detr": spline}),
            spline.predict_proba,
        ),
    }
    plain = _plain_predict([ckpt for ckpt, _ in folded.values()], images, conf=0.0)
    for name, (ckpt, calibrate) in folded.items():
        pickled = torch.serialization.get_unsafe_globals_in_checkpoint(str(ckpt))
        assert "ultralytics.nn.tasks.RTDETRDetectionModel" in pickled and not [
            g for g in pickled if "det_calib" in g
        ]
        assert read_calibration_metadata(ckpt)["folded_into"] == {"detr": "dec_score_head"}
        got = plain[str(ckpt)]
        for i, rows in enumerate(got):
            mine = raw.filter(raw["image_id"] == i)
            assert len(rows) == mine.height == 100, name
            cal = calibrate(mine["logit"].to_numpy())
            expect = np.column_stack(
                [mine.select("x1", "y1", "x2", "y2").to_numpy(), cal, mine["cls"].to_numpy()]
            )
            a, b = (
                _by_box(rows.astype(np.float64)),
                _by_box(expect.astype(np.float32).astype(np.float64)),
            )
            np.testing.assert_array_equal(
                a[:, [0, 1, 2, 3, 5]], b[:, [0, 1, 2, 3, 5]]
            )  # the same boxes and classes
            np.testing.assert_allclose(a[:, 4], b[:, 4], atol=1e-5, rtol=0)  # the calibrated score
    # the encoder's query selection and every other layer are the original's: only dec_score_head[-1] changed
    orig = torch.load(rtdetr_pt, weights_only=False)["model"].float().state_dict()
    new = torch.load(folded["temperature"][0], weights_only=False)["model"].state_dict()
    changed = sorted(k for k in orig if not torch.equal(orig[k].float(), new[k].float()))
    assert changed == ["model.23.dec_score_head.2.bias", "model.23.dec_score_head.2.weight"]


def test_an_rtdetr_given_pose_labels_is_refused_in_one_line(rtdetr_pt, tmp_path, capsys):
    from conftest import FIXTURE

    from det_calib.cli import main

    names = "\n".join(f"  {i}: {n}" for i, n in load_detector(rtdetr_pt).names.items())
    pose = tmp_path / "pose.yaml"
    pose.write_text(
        f"path: {FIXTURE}\ntrain: images/fixture\nval: images/fixture\nfixture: images/fixture\n"
        f"kpt_shape: [5, 3]\nnames:\n{names}\n"
    )
    code = main(
        [
            "calibrate",
            "--model",
            str(rtdetr_pt),
            "--data",
            str(pose),
            "--fit-split",
            "fixture",
            "--eval-split",
            "fixture",
            "--out",
            str(tmp_path / "out"),
            "-q",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "kpt_shape" in err and "`detect`" in err
    assert not (tmp_path / "out").exists()


def test_the_steps_of_yolo_heads_refuse_an_rtdetr_in_one_line(
    rtdetr_pt, demo_model_path, fixture_yaml, tmp_path, capsys
):
    """The ensemble's members and ``attach`` run the YOLO detect heads' own decode: an RT-DETR is refused."""
    import det_calib
    from det_calib.capture.predictor import Capturer
    from det_calib.cli import main

    code = main(
        [
            "ensemble",
            "--model",
            str(rtdetr_pt),
            "--model",
            str(demo_model_path),
            "--data",
            str(fixture_yaml),
            "--fit-split",
            "fixture",
            "--eval-split",
            "fixture",
            "--out",
            str(tmp_path / "ens"),
            "-q",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "family `rtdetr`" in err[0], err
    with pytest.raises(InputError, match="family `rtdetr`"):
        Capturer(str(rtdetr_pt))
    with pytest.raises(InputError, match="family `rtdetr`"):
        det_calib.attach(load_detector(rtdetr_pt), tmp_path / "no_run")
