"""`calibrate --method ...` end to end on the fixture split: the chosen calibrator, the CV table,
the operating-point figures, the checkpoint, `apply` and the post-hoc API."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import polars as pl
import pytest

from det_calib.calibrators.base import calibrated_logits
from det_calib.cli import main
from det_calib.errors import InputError
from det_calib.job.settings import fit_floors
from det_calib.metrics.calibration import ece
from det_calib.metrics.operating_point import LaECE0Targets, laece0
from det_calib.numeric import sigmoid
from det_calib.record.calibrator_record import calibrator_of
from det_calib.record.run_result import Calibrator, RunResult


@pytest.fixture(scope="module")
def auto_run(tmp_path_factory, demo_model_path, fixture_yaml):
    out = tmp_path_factory.mktemp("auto")
    code = main(
        [
            "calibrate",
            "--model",
            str(demo_model_path),
            "--data",
            str(fixture_yaml),
            "--method",
            "auto",
            "--n-boot",
            "20",
            "--no-val",
            "-q",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    return out


def test_auto_records_choice_candidates_and_operating_point(auto_run, capsys):
    d = json.loads((auto_run / "calibration.json").read_text())
    r = RunResult.from_dict(d)
    assert (
        d["method"] == "auto"
        and d["criterion"] == "nll"
        and d["cv_folds"] == 5
        and d["fit_min_conf"] is None
    )
    assert d["cv_repeats"] == 5
    b = pl.read_parquet(auto_run / "boxes.parquet")
    for h in r.heads:
        hr = r.head(h)
        rec = hr.calibrator
        # the temperature key holds exactly the heads a temperature calibrates; the rest are under `calibrators`
        assert (h in d["temperature"]) == (rec.method == "temperature")
        assert (h in d.get("calibrators", {})) == (rec.method != "temperature")
        cands = hr.candidates
        assert sum(c.selected for c in cands) == 1
        chosen = next(c for c in cands if c.selected)
        assert chosen.calibrator.method == rec.method
        assert {c.calibrator.method for c in cands} >= {"none", "temperature", "platt", "isotonic"}
        assert all(c.cv_score is None or math.isfinite(c.cv_score) for c in cands)
        # the chosen calibrator's operating-point ECE is the one the boxes and the JSON calibrator give
        ev = hr.eval
        e = b.filter((pl.col("head") == h) & (pl.col("split") == ev.split) & ~pl.col("ignore"))
        z, y, k = e["logit"].to_numpy(), e["correct"].to_numpy(), e["cls"].to_numpy()
        p = sigmoid(calibrated_logits(calibrator_of(rec), z, k))
        if rec.method == "none":  # the raw scores deployed: exactly the conf Ultralytics reports
            p = e["conf"].to_numpy()
        o = ev.operating_after[0]
        kept = p > 0.25
        assert o.conf == 0.25 and o.boxes == int(kept.sum())
        assert o.ece == pytest.approx(ece(p[kept], y[kept], n_bins=15), rel=1e-12)
        assert ev.operating_before[0].ece == ev.thresholded[0].ece_before
        for oo in (
            ev.operating_before[0],
            o,
        ):  # intervals contain their estimates (BC for ECE, normal for LaECE_0)
            assert oo.ece_ci[0] <= oo.ece <= oo.ece_ci[1]
            assert oo.laece0_ci[0] <= oo.laece0 <= oo.laece0_ci[1]
        scored = [c for c in cands if c.eval]
        assert {c.calibrator.method for c in scored} == {
            c.calibrator.method for c in cands if c.cv_score is not None
        }
        mine = next(c for c in scored if c.calibrator.method == rec.method)
        assert mine.operating()[0].ece == pytest.approx(o.ece, rel=1e-12)
    text = (auto_run / "summary.txt").read_text()
    assert (
        "boxes kept at conf 0.25" in text and "LaECE_0" in text and "all boxes down to conf" in text
    )
    assert text.index("boxes kept at conf 0.25") < text.index(
        "all boxes down to conf"
    )  # the operating point first


def test_auto_report_compares_every_candidate(auto_run):
    from det_calib.report import write_report

    files = write_report(auto_run, out_dir=auto_run / "rep")
    html = files["html"].read_text()
    assert (
        "Calibrators compared" in html
        and 'class="cv-candidates"' in html
        and 'class="candidates-eval"' in html
    )
    assert 'class="operating"' in html and "LaECE_0" in html
    assert any(k.startswith("figures/candidates_") for k in files)


def test_class_platt_checkpoint_apply_and_posthoc(
    tmp_path, demo_model_path, fixture_yaml, fixture_images, capsys
):
    import torch
    from ultralytics import YOLO

    import det_calib

    out = tmp_path / "run"
    assert (
        main(
            [
                "calibrate",
                "--model",
                str(demo_model_path),
                "--data",
                str(fixture_yaml),
                "--method",
                "class-platt",
                "--head",
                "nms",
                "--n-boot",
                "10",
                "--no-report",
                "-q",
                "--fit-range",
                "operating",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    d = json.loads((out / "calibration.json").read_text())
    assert d["temperature"] == {} and d["calibrators"]["nms"]["method"] == "class-platt"
    assert d["calibrators"]["nms"]["params"]["fit_min_conf"] == 0.125 and d["fit_min_conf"] == 0.125
    uv = d["ultralytics_val"]["nms"]
    assert uv.get("identical_at_equivalent_floor") is None and "per-class map" in uv["note"]
    dc = d["detection_change"]["nms"]  # measured, whatever it is
    assert dc["boxes_posthoc"] > 0 and dc["boxes_folded"] > 0 and dc["changed_class"] >= 0
    assert (
        dc["conf_floor"] >= 0.001 and dc["map50_95_posthoc"] == d["eval"]["nms"]["map50_95_after"]
    )
    from det_calib.report import write_report

    html = write_report(out, out_dir=tmp_path / "rep")["html"].read_text()
    assert 'class="detection-change"' in html
    summary = capsys.readouterr().out
    assert (
        "at equivalent floor" not in summary
        and "class-platt map" in summary
        and "post-hoc" in summary
    )
    ck = torch.load(out / "calibrated.pt", map_location="cpu", weights_only=False)
    assert ck["det_calib"]["calibrators"]["nms"]["format"] == "det_calib.ClassAffineScaler"
    # `apply` writes the same folded checkpoint from the JSON
    applied = tmp_path / "applied.pt"
    assert (
        main(
            [
                "apply",
                "--model",
                str(demo_model_path),
                "--calibration",
                str(out / "calibration.json"),
                "--out",
                str(applied),
            ]
        )
        == 0
    )
    a = torch.load(applied, map_location="cpu", weights_only=False)["model"].state_dict()
    for key, v in ck["model"].state_dict().items():
        assert torch.equal(v, a[key]), key
    # post-hoc: the original model's boxes and classes, rescored by the per-class map
    model = YOLO(str(demo_model_path))
    res = model.predict(
        [str(p) for p in fixture_images[:3]], conf=0.05, verbose=False, end2end=False
    )
    before = [r.boxes.data.clone() for r in res]
    det_calib.apply_calibrator(res, out / "calibration.json", head="nms")
    cal = calibrator_of(Calibrator.from_dict(d["calibrators"]["nms"]))
    for b0, r in zip(before, res, strict=True):
        b1 = r.boxes.data
        assert torch.equal(b0[:, :4], b1[:, :4]) and torch.equal(b0[:, 5], b1[:, 5])
        p0 = b0[:, 4].double().numpy()
        want = sigmoid(
            calibrated_logits(cal, np.log(p0) - np.log1p(-p0), b0[:, 5].numpy().astype(int))
        )
        np.testing.assert_allclose(b1[:, 4].double().numpy(), want, rtol=1e-6)
    with pytest.raises(InputError, match="head"):
        det_calib.apply_calibrator(res, out / "calibration.json", head="e2e")


def test_fit_range_and_old_fit_min_conf(capsys, tmp_path, demo_model_path, fixture_yaml):
    assert fit_floors("temperature", None, None, (0.25,)) == (0.0,)
    assert fit_floors("auto", None, None, (0.25, 0.5)) == (0.0, 0.125)
    assert fit_floors("platt", "operating", None, (0.3,)) == (0.15,)
    assert (
        fit_floors("platt", "0.05", None, (0.3,))
        == fit_floors("platt", None, 0.05, (0.3,))
        == (0.05,)
    )
    with pytest.raises(InputError, match="fit_range"):
        fit_floors("platt", "most", None, (0.3,))
    with pytest.raises(InputError, match="not both"):
        fit_floors("platt", "all", 0.1, (0.3,))
    ds = tmp_path / "ds"
    shutil.copytree(fixture_yaml.parent, ds)
    code = main(
        [
            "calibrate",
            "--model",
            str(demo_model_path),
            "--data",
            str(ds / "data.yaml"),
            "--fit-range",
            "1.5",
            "--no-val",
            "--no-report",
            "-q",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "`--fit-range`" in err and "Traceback" not in err


def test_laece0_targets_equal_the_reference_for_per_class_maps(auto_run):
    """One raw-score matching gives the reference LaECE_0 of any per-class monotone map, any threshold."""
    from det_calib.calibrators.affine import ClassAffineScaler

    r = RunResult.read(auto_run / "calibration.json")
    ev_split = r.settings.eval_split
    b = pl.read_parquet(auto_run / "boxes.parquet").filter(
        (pl.col("head") == "e2e") & (pl.col("split") == ev_split) & ~pl.col("ignore")
    )
    img, k, z = b["image_id"].to_numpy(), b["cls"].to_numpy(), b["logit"].to_numpy()
    xy = b.select("x1", "y1", "x2", "y2").to_numpy()
    # ground truth: the matched IoU of correct boxes is enough for a synthetic GT set: one GT per correct box
    c = b["correct"].to_numpy()
    gi, gx, gc = img[c], xy[c], k[c]
    cal = ClassAffineScaler(kind="platt", shrinkage=5.0).fit(z, c, classes=k)
    p = cal.predict_proba(z, classes=k)
    t = LaECE0Targets(img, xy, k, z, gi, gx, gc)
    for thr in (0.05, 0.25, 0.5):
        assert t.laece(p, threshold=thr) == pytest.approx(
            laece0(img, xy, k, p, gi, gx, gc, threshold=thr), abs=1e-12
        )


def test_none_keeps_the_raw_scores_and_the_model(auto_run, tmp_path, demo_model_path):
    """When auto picks `none`: the summary says so, and the checkpoint's weights are the original's."""
    import dataclasses

    import torch

    from det_calib.calibrators.identity import Identity
    from det_calib.deploy.fold import _write_folded_checkpoint as write_folded_checkpoint
    from det_calib.report.text_summary import summary_text

    r = RunResult.read(auto_run / "calibration.json")
    none = Calibrator("none", {"fit_min_conf": 0.0, "map": Identity().to_dict()})
    r.results["nms"] = dataclasses.replace(r.results["nms"], calibrator=none)
    d = r.to_dict()
    assert "nms" not in d["temperature"] and d["calibrators"]["nms"]["method"] == "none"
    assert "[nms] keep the raw scores" in summary_text(d)
    assert "(calibrated.pt leaves this head's scores unchanged)" in summary_text(d)
    on_export = dataclasses.replace(r, model="best_int8_openvino_model")
    assert "(the calibrated export leaves this head's scores unchanged)" in summary_text(on_export)
    out = write_folded_checkpoint(
        demo_model_path, tmp_path / "same.pt", {"nms": Identity().fit(None, None)}
    )
    src = torch.load(demo_model_path, map_location="cpu", weights_only=False)
    a = (src.get("ema") or src["model"]).float().state_dict()
    b = torch.load(out, map_location="cpu", weights_only=False)["model"].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_compare_shows_the_calibrators_of_both_runs(auto_run, tmp_path):
    from det_calib.report import compare_runs

    files = compare_runs(
        f"{auto_run}:nms", f"{auto_run}:e2e", out_dir=tmp_path / "cmp", labels=["A", "B"]
    )
    html = files["html"].read_text()
    assert "Calibrators compared: A" in html and "Calibrators compared: B" in html
    assert html.count('class="candidates-eval"') == 2


def test_isotonic_on_the_operating_range_keeps_the_boxes_below_it_in_shape(
    tmp_path, demo_model_path, fixture_yaml
):
    """`--method isotonic --fit-range operating` fits on the boxes with raw conf >= 0.125 (the
    fit's own rule, boundary included) and its map has slope 1 below its first knot."""
    out = tmp_path / "iso"
    assert (
        main(
            [
                "calibrate",
                "--model",
                str(demo_model_path),
                "--data",
                str(fixture_yaml),
                "--method",
                "isotonic",
                "--fit-range",
                "operating",
                "--n-boot",
                "5",
                "--no-val",
                "--no-report",
                "-q",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    d = json.loads((out / "calibration.json").read_text())
    b = pl.read_parquet(out / "boxes.parquet").filter(
        (pl.col("split") == d["splits"]["fit"]) & ~pl.col("ignore")
    )
    for head, rec in d["calibrators"].items():
        assert rec["method"] == "isotonic" and rec["params"]["fit_min_conf"] == 0.125
        m = rec["params"]["map"]["map"]
        assert m["tail_slope"] == 1.0 and m["right_slope"] == 0.01
        assert (
            d["fit"][head]["boxes"]
            == b.filter((pl.col("head") == head) & (pl.col("conf") >= 0.125)).height
        )
        cal = calibrator_of(RunResult.from_dict(d).head(head).calibrator)
        z = np.array([-8.0, -7.0])  # far below the floor: raw spacing
        t = calibrated_logits(cal, z, np.zeros(2, np.int64))
        assert t[1] - t[0] == pytest.approx(1.0)


def test_cv_folds_and_repeats_options(tmp_path, demo_model_path, fixture_yaml, capsys):
    """`--cv-folds K --cv-repeats R`: every candidate is scored on R x K held-out folds, and both
    are recorded; a bad value is one line and exit 2."""
    out = tmp_path / "cv"
    args = [
        "calibrate",
        "--model",
        str(demo_model_path),
        "--data",
        str(fixture_yaml),
        "--method",
        "auto",
        "--n-boot",
        "5",
        "--no-val",
        "--no-report",
        "-q",
    ]
    assert main([*args, "--cv-folds", "3", "--cv-repeats", "2", "--out", str(out)]) == 0
    d = json.loads((out / "calibration.json").read_text())
    assert (d["cv_folds"], d["cv_repeats"]) == (3, 2)
    for head, cands in d["calibration_candidates"].items():
        scored = [c for c in cands if c["params"].get("fold_scores")]
        assert len(scored) >= 3, head
        for c in scored:
            assert len(c["params"]["fold_scores"]) == 6, (head, c["method"])
            assert (c["params"]["n_repeats"], c["params"]["n_folds"]) == (2, 3)
    capsys.readouterr()
    assert main([*args, "--cv-repeats", "0", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "`--cv-repeats`" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
