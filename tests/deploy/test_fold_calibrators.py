"""Every calibrator folds into a checkpoint that plain Ultralytics (no det_calib) loads and runs
with the calibrated scores, fused, in the validator, and after an ONNX export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import NO_DET_CALIB

from det_calib.calibrators.isotonic import PiecewiseLinear
from det_calib.calibrators.registry import (
    calibrator_from_dict,
    make_calibrator,
    method_spec,
    methods,
)
from det_calib.capture.predictor import capture
from det_calib.deploy.fold import (
    _fold_calibrator,
    _write_folded_checkpoint,
    hinge_layers,
    read_calibration_metadata,
)
from det_calib.errors import InputError

BLOCK = NO_DET_CALIB + textwrap.dedent(
    """
    """
)
PREDICT = BLOCK + textwrap.dedent(
    """
    ckpts, images = json.loads(sys.argv[1]), sys.argv[2:]
    out = {}
    for ckpt in ckpts:  # every checkpoint in this one process: one start-up, not one per checkpoint
        out[ckpt] = {}
        for head in ("nms", "e2e"):
            kw = {"nms": False} if head == "e2e" else {}
            model = YOLO(ckpt)  # one image at a time, as capture (a list is letterboxed to one shape)
            res = [model.predict(p, conf=0.001, imgsz=320, verbose=False, **kw)[0] for p in images]
            out[ckpt][head] = [r.boxes.data.tolist() for r in res]
    print(json.dumps(out))
    """
)
# batch 1: Ultralytics' NMS checks its wall-clock budget (2.0 + 0.05 x batch s) after each image
# and drops the batch's remaining images once past it; with one image per batch none can be
# dropped. At batch 4 the isotonic checkpoint's NMS (many boxes lifted over conf 0.001) took
# 1.8-2.4 s per batch on a busy 2-core CPU, and mAP50 fell from 0.603 to 0.506 when it ran out.
VAL = BLOCK + textwrap.dedent(
    """
    ckpt, data = sys.argv[1], sys.argv[2]
    m = YOLO(ckpt).val(data=data, imgsz=320, batch=1, plots=False, verbose=False)
    print(json.dumps({"map50": float(m.box.map50), "map": float(m.box.map)}))
    """
)


def _plain(script, *args, cwd=None):
    out = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "YOLO_OFFLINE": "1", "YOLO_VERBOSE": "False"},
        cwd=cwd or os.path.dirname(str(args[0])),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _synthetic_fit_data(seed=0, n=20_000, nc=8):
    """Boxes whose correctness follows a different monotone curve per class."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.0, 3.0, n)
    k = rng.integers(0, nc, n)
    a = np.linspace(0.7, 1.6, nc)
    b = np.linspace(-0.8, 0.6, nc)
    y = rng.random(n) < 1 / (1 + np.exp(-(a[k] * z + b[k] + 0.05 * z**2 * (z > 0))))
    return z, y, k


METHODS = [
    m for m in methods() if m != "none" and not method_spec(m).uses_size
]  # every calibrator that folds


def test_a_size_conditioned_map_is_refused_by_the_fold(tmp_path, demo_model_path):
    rng = np.random.default_rng(0)
    z, a = rng.normal(-1, 2, 2000), rng.uniform(-8, -1, 2000)
    cal = make_calibrator("size-platt").fit(z, rng.random(2000) < 1 / (1 + np.exp(-z)), log_area=a)
    with pytest.raises(
        InputError, match="cannot fold a size-platt map into a model: it reads each box's size"
    ):
        _write_folded_checkpoint(demo_model_path, tmp_path / "cal.pt", {"nms": cal})
    assert not (tmp_path / "cal.pt").exists()


@pytest.fixture(scope="module")
def raw_captures(demo_model_path, fixture_images):
    return {
        head: capture(
            str(demo_model_path),
            fixture_images,
            head=head,
            imgsz=320,
            conf=1e-5,
            batch=1,
            max_det=3000,
            all_logits=True,
            progress=False,
        )
        for head in ("nms", "e2e")
    }


def test_hinge_layers_compute_the_piecewise_linear_maps():
    maps = [
        PiecewiseLinear([-3.0, 0.0, 2.0], [-5.0, -1.0, 3.0], 0.01),
        PiecewiseLinear([1.0], [0.5], 0.2),
    ]
    layers = hinge_layers(maps, 2, dtype=torch.float64)
    z = torch.linspace(-10, 10, 401, dtype=torch.float64)
    x = torch.stack([z, z]).view(1, 2, -1, 1)
    with torch.no_grad():
        out = layers(x).view(2, -1).numpy()
    np.testing.assert_allclose(out[0], maps[0](z.numpy()), atol=1e-12)
    np.testing.assert_allclose(out[1], maps[1](z.numpy()), atol=1e-12)
    assert all(type(m) in (torch.nn.Conv2d, torch.nn.ReLU) for m in layers)


@pytest.fixture(scope="module")
def folded(tmp_path_factory, demo_model_path, fixture_images) -> dict[str, tuple]:
    """Method (each of :data:`METHODS`) -> (its calibrator fit on the synthetic data, the demo detector
    with it folded into both heads, plain Ultralytics' predictions of that checkpoint on the fixture
    images): the checkpoints predicted by one process where det_calib cannot be imported."""
    folder = tmp_path_factory.mktemp("folded")
    made = {}
    for method in METHODS:
        z, y, k = _synthetic_fit_data()
        cal = make_calibrator(method).fit(
            z, y, **({"classes": k} if method_spec(method).per_class else {})
        )
        (folder / method).mkdir()
        made[method] = (
            cal,
            _write_folded_checkpoint(
                demo_model_path, folder / method / "cal.pt", {"nms": cal, "e2e": cal}
            ),
        )
    ckpts = [str(ckpt) for _, ckpt in made.values()]
    plain = _plain(PREDICT, json.dumps(ckpts), *fixture_images, cwd=folder)
    return {method: (cal, ckpt, plain[str(ckpt)]) for method, (cal, ckpt) in made.items()}


@pytest.mark.parametrize("method", METHODS)
def test_folded_checkpoint_reproduces_calibrated_scores_without_det_calib(
    raw_captures, folded, method
):
    cal, ckpt, plain = folded[method]
    meta = read_calibration_metadata(ckpt)
    assert calibrator_from_dict(meta["calibrators"]["nms"]).to_dict() == cal.to_dict()
    sd = torch.load(ckpt, map_location="cpu", weights_only=False)["model"]
    assert next(sd.parameters()).dtype == torch.float32
    for head, raw in raw_captures.items():
        got = plain[head]
        compared = 0
        for i, rows in enumerate(got):
            rows = np.asarray(rows, dtype=np.float64).reshape(-1, 6)
            mine = raw.filter(raw["image_id"] == i)
            xy = mine.select("x1", "y1", "x2", "y2").to_numpy()
            logits = np.stack(mine["logits"].to_numpy()).astype(np.float64)
            for r in rows:
                d = np.abs(xy - r[:4]).max(axis=1)
                j = int(np.argmin(d))
                if d[j] > 1e-3:
                    continue  # an anchor the raw run did not output
                c = int(r[5])
                zc = logits[j, c : c + 1]
                kw = {"classes": np.array([c])} if method_spec(method).per_class else {}
                expected = cal.predict_proba(zc, **kw)[0]
                assert abs(r[4] - expected) <= 1e-5, (head, i, c, r[4], expected)
                compared += 1
        assert compared >= 0.9 * sum(len(r) for r in got) > 0, (head, compared)


def test_isotonic_checkpoint_runs_in_plain_validator_with_the_same_map(
    tmp_path, demo_model_path, fixture_yaml
):
    # one strictly increasing map for every class keeps the ranking, so detections and mAP are
    # those of the raw model, apart from boxes crossing the 0.001 pre-filter
    z, y, _ = _synthetic_fit_data()
    cal = make_calibrator("isotonic").fit(z, y)
    ckpt = _write_folded_checkpoint(demo_model_path, tmp_path / "iso.pt", {"nms": cal, "e2e": cal})
    raw = _plain(VAL, demo_model_path, fixture_yaml)
    got = _plain(VAL, ckpt, fixture_yaml)
    assert got["map50"] == pytest.approx(raw["map50"], abs=0.02)
    assert got["map"] == pytest.approx(raw["map"], abs=0.02)


def test_isotonic_checkpoint_survives_onnx_export(tmp_path, demo_model_path, fixture_images):
    pytest.importorskip(
        "onnx", reason="the ONNX exporter (pip install onnx onnxruntime) is not installed"
    )
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    from ultralytics import YOLO

    z, y, k = _synthetic_fit_data()
    cal = make_calibrator("class-isotonic").fit(z, y, classes=k)
    ckpt = _write_folded_checkpoint(demo_model_path, tmp_path / "iso.pt", {"nms": cal, "e2e": cal})
    onnx_path = YOLO(str(ckpt)).export(format="onnx", imgsz=320, simplify=False, verbose=False)
    a = YOLO(str(ckpt)).predict(fixture_images[:4], conf=0.01, imgsz=320, batch=1, verbose=False)
    b = YOLO(onnx_path, task="detect").predict(
        fixture_images[:4], conf=0.01, imgsz=320, batch=1, verbose=False
    )
    for ra, rb in zip(a, b, strict=True):
        da, db = ra.boxes.data.numpy(), rb.boxes.data.numpy()
        keep_a, keep_b = da[:, 4] > 0.05, db[:, 4] > 0.05  # away from the 0.01 cut
        assert keep_a.sum() == keep_b.sum() > 0
        oa = np.lexsort((da[keep_a, 0], -da[keep_a, 4]))
        ob = np.lexsort((db[keep_b, 0], -db[keep_b, 4]))
        np.testing.assert_allclose(db[keep_b][ob, 4], da[keep_a][oa, 4], atol=1e-5)
        np.testing.assert_allclose(db[keep_b][ob, :4], da[keep_a][oa, :4], atol=1e-2)


def test_fold_calibrator_on_a_fused_model_matches_unfused(demo_model_path):
    from ultralytics import YOLO

    z, y, k = _synthetic_fit_data()
    cal = make_calibrator("class-isotonic").fit(z, y, classes=k)
    model = YOLO(str(demo_model_path)).model.float().eval()
    _fold_calibrator(model, "nms", cal)
    x = torch.rand(1, 3, 320, 320)
    with torch.no_grad():
        y0 = model(x)[0]
        y1 = model.fuse()(x)[0]
    s1 = y1[..., 4:] if y1.shape[-1] == 6 else y1[:, 4:]
    s0 = y0[..., 4:] if y0.shape[-1] == 6 else y0[:, 4:]
    torch.testing.assert_close(s1, s0, atol=1e-5, rtol=1e-4)


def test_folded_checkpoint_records_what_was_folded_where_and_from_what(tmp_path, demo_model_path):
    """The record of a folded checkpoint: its calibrators, the branch of each head, the resolved
    source path, a UTC date, the source's own record (None for a plain checkpoint; the first
    record when folding into an already calibrated one), and extra metadata."""
    import datetime as dt

    z, y, _ = _synthetic_fit_data()
    cal = make_calibrator("platt").fit(z, y)
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    first = _write_folded_checkpoint(
        demo_model_path, tmp_path / "a.pt", {"nms": cal}, metadata={"run": "r1"}
    )
    meta = read_calibration_metadata(first)
    assert meta["folded_into"] == {"nms": "cv3"} and meta["run"] == "r1"
    assert meta["source_checkpoint"] == str(Path(demo_model_path).resolve())
    date = dt.datetime.fromisoformat(meta["date"])
    assert date.utcoffset() == dt.timedelta(0) and before <= date <= dt.datetime.now(
        dt.timezone.utc
    )
    assert meta["previous"] is None
    second = _write_folded_checkpoint(first, tmp_path / "b.pt", {"e2e": cal})
    meta2 = read_calibration_metadata(second)
    assert meta2["folded_into"] == {"e2e": "one2one_cv3"} and meta2["source_checkpoint"] == str(
        first.resolve()
    )
    assert meta2["previous"] == meta
