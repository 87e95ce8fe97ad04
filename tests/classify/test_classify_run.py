"""Classify models: the logits captured through Ultralytics' own predictor, the class-folder data and
its one-line errors, the map folded into the last linear layer (plain Ultralytics runs it), and the
default command end to end on the demo classifier (top-1 and top-5 unchanged by Ultralytics' val)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from det_calib.cli import main
from det_calib.demo import demo_task_model
from det_calib.demo.shapes import CLASS_NAMES
from det_calib.errors import InputError
from det_calib.tasks.classify.capture_logits import capture_classify
from det_calib.tasks.classify.class_folders import check_model_classes, read_class_split
from det_calib.tasks.classify.demo_crops import classify_root
from det_calib.tasks.classify.deploy_fold import write_classify_checkpoint
from det_calib.tasks.classify.pipeline_run import calibrate_classifier
from det_calib.tasks.classify.softmax_maps import MultiClassMap, fit_multiclass
from det_calib.tasks.classify.thresholds_reject import reject_threshold

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cls_data(tmp_path_factory) -> Path:
    """Crops of the first 40 calib and 40 test images of the shapes demo (about 200 a split)."""
    return classify_root(tmp_path_factory.mktemp("cls"), splits={"val": 40, "test": 40})


@pytest.fixture(scope="module")
def cls_model() -> Path:
    path = demo_task_model("classify")
    assert path.is_file(), f"the committed demo classifier is missing: {path}"
    return path


def test_captured_logits_are_those_whose_softmax_predict_returns(cls_model, cls_data):
    from ultralytics import YOLO

    yolo = YOLO(str(cls_model))
    paths = read_class_split(cls_data, "test").paths[::25]
    yolo.predict(str(paths[0]), verbose=False)  # a plain predictor made first is replaced
    cap = capture_classify(yolo, paths)
    assert not cap.from_log_probs and cap.logits.shape == (len(paths), len(CLASS_NAMES))
    assert np.array_equal(torch.from_numpy(cap.logits).softmax(1).numpy(), cap.probs)
    plain = [
        YOLO(str(cls_model)).predict(str(p), verbose=False)[0].probs.data.numpy() for p in paths[:3]
    ]
    assert np.array_equal(np.stack(plain), cap.probs[:3])


def test_the_folded_checkpoint_runs_the_map_in_plain_ultralytics(cls_model, cls_data, tmp_path):
    from ultralytics import YOLO

    paths = read_class_split(cls_data, "test").paths[::20]
    raw = capture_classify(cls_model, paths)
    rng = np.random.default_rng(0)
    k = len(CLASS_NAMES)
    maps = [
        fit_multiclass("none", raw.logits, np.zeros(len(paths), int)),
        MultiClassMap("temperature", np.eye(k) / 1.7, np.zeros(k), temperature=1.7),
        MultiClassMap("vector", np.diag(rng.uniform(0.5, 2, k)), rng.normal(0, 0.5, k)),
        MultiClassMap("matrix", np.eye(k) + 0.1 * rng.normal(size=(k, k)), rng.normal(0, 0.5, k)),
    ]
    for m in maps:
        out = write_classify_checkpoint(cls_model, tmp_path / f"{m.method}.pt", m)
        probs = np.stack(
            [YOLO(str(out)).predict(str(p), verbose=False)[0].probs.data.numpy() for p in paths]
        )
        assert np.abs(probs - m.proba(raw.logits)).max() < 2e-5, m.method
        assert (
            torch.load(out, weights_only=False)["det_calib"]["classifier_map"]["method"] == m.method
        )


def test_class_folders_are_read_as_ultralytics_numbers_them_and_checked(cls_data, tmp_path):
    split = read_class_split(cls_data, "val")
    assert split.names == tuple(sorted(CLASS_NAMES))
    assert np.all(np.diff(split.labels) >= 0) and set(split.labels.tolist()) == set(
        range(len(CLASS_NAMES))
    )
    check_model_classes(split, tuple(sorted(CLASS_NAMES)))
    with pytest.raises(InputError, match="not the model's: the model's dog missing"):
        check_model_classes(split, (*sorted(CLASS_NAMES)[:-1], "dog"))


def _one_line_error(capsys, argv, pattern):
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    lines = [ln for ln in err.splitlines() if ln.startswith("det-calib: error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert pattern in lines[0], lines[0]


def test_bad_classify_input_gets_one_line_and_exit_2(
    capsys, cls_model, cls_data, tmp_path, demo_model_path
):
    bad = tmp_path / "bad"
    shutil.copytree(cls_data, bad, symlinks=True)
    out = tmp_path / "out"
    empty = bad / "test" / "star"
    shutil.rmtree(empty)
    empty.mkdir()
    _one_line_error(
        capsys,
        ["calibrate", "--model", cls_model, "--data", bad, "--out", out],
        "class `star` has no images",
    )
    shutil.rmtree(empty)
    _one_line_error(
        capsys,
        ["calibrate", "--model", cls_model, "--data", bad, "--out", out],
        "the `test` split's classes are not the model's",
    )
    shutil.copytree(cls_data / "test" / "star", empty)
    stray = next((bad / "val" / "circle").iterdir())
    shutil.copy(stray, bad / "val" / "loose.png")
    _one_line_error(
        capsys,
        ["calibrate", "--model", cls_model, "--data", bad, "--out", out],
        "1 image(s) in no class folder (loose.png)",
    )
    (bad / "val" / "loose.png").unlink()
    _one_line_error(
        capsys,
        ["calibrate", "--model", demo_model_path, "--data", bad, "--out", out],
        "a folder-per-class dataset needs a classify model",
    )
    _one_line_error(
        capsys,
        ["calibrate", "--model", cls_model, "--data", bad, "--method", "platt", "--out", out],
        "a classify model takes auto",
    )
    # a detector's options are refused, not ignored
    for extra, flag in (
        (["--target", "iou"], "--target"),
        (["--head", "e2e"], "--head"),
        (["--conf", "0.5"], "--conf"),
        (["--iou", "0.7"], "--iou"),
        (["--size-maps"], "--size-maps"),
    ):
        _one_line_error(
            capsys,
            ["calibrate", "--model", cls_model, "--data", bad, *extra, "--out", out],
            f"{flag} is not available for a classify model",
        )
    assert not out.exists()


def test_default_command_on_the_demo_classifier(capsys, cls_model, cls_data, tmp_path):
    out = tmp_path / "run"
    assert (
        main(["calibrate", "--model", str(cls_model), "--data", str(cls_data), "--out", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    record = json.loads((out / "calibration.json").read_text())
    assert {p.name for p in out.iterdir()} >= {
        "calibration.json",
        "summary.md",
        "calibrated.pt",
        "report.html",
        "report.md",
        "classifier_map.json",
        "top1.parquet",
        "figures",
    }
    ev = record["eval"]
    assert ev["deployed"]["top_label_ece"] == pytest.approx(
        ev["calibrated"]["top_label_ece"], abs=2e-4
    )
    if record["keeps_top1"]:
        assert record["val"]["identical"] and record["top1_changed"] == 0
        assert ev["deployed"]["top1"] == ev["raw"]["top1"]
    # val batches 16 images, the capture predicts one at a time: at most one image's top-1 may differ
    assert record["val"]["raw"]["top1"] == pytest.approx(
        ev["raw"]["top1"], abs=1.5 / record["images"]["test"]
    )
    assert "wrote calibrated.pt" in printed and printed.startswith("# Classifier calibration: ")
    assert ("At its floor" in printed) == ev["deployed"]["at_floor"]
    page = (out / "report.html").read_text()
    assert page.index('class="verdict"') < page.index("<figure") < page.index('class="per-class"')
    assert page.count("<tr") >= 8 + 7 and (out / "figures" / "per_class_reliability.png").is_file()
    assert [r["target"] for r in record["reject"]] == [
        0.9,
        0.95,
        0.99,
    ] and "Reject option" in printed
    for r in record[
        "reject"
    ]:  # a certified threshold answers a share of the fit split at the target at least
        assert not r["certified"] or (r["accuracy"] >= r["target"] and 0 < r["answered"] <= 1)


def test_an_onnx_export_is_calibrated_from_its_log_probabilities(
    cls_model, cls_data, tmp_path, capsys
):
    """An export returns only the softmax: its log-probabilities give the temperature the .pt's logits
    give, and the run writes the map to apply after the engine (no checkpoint)."""
    from ultralytics import YOLO

    local = (
        tmp_path / cls_model.name
    )  # the export is written beside its checkpoint: not into the package
    shutil.copy(cls_model, local)
    onnx = Path(YOLO(str(local)).export(format="onnx", imgsz=64))
    split = read_class_split(cls_data, "val")
    pt, engine = capture_classify(cls_model, split.paths), capture_classify(onnx, split.paths)
    assert engine.from_log_probs and not pt.from_log_probs
    t_pt = fit_multiclass("temperature", pt.logits, split.labels).temperature
    t_engine = fit_multiclass("temperature", engine.logits, split.labels).temperature
    assert t_engine == pytest.approx(t_pt, rel=1e-3)
    out = tmp_path / "run"
    assert (
        main(
            [
                "calibrate",
                "--model",
                str(onnx),
                "--data",
                str(cls_data),
                "--method",
                "temperature",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads((out / "calibration.json").read_text())
    assert not (out / "calibrated.pt").exists() and (out / "classifier_map.json").is_file()
    assert record["map"]["temperature"] == pytest.approx(t_pt, rel=1e-3) and record["val"] is None


@pytest.fixture(scope="module")
def cls_run(cls_model, cls_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clsrun") / "run"
    assert (
        main(
            [
                "calibrate",
                "--model",
                str(cls_model),
                "--data",
                str(cls_data),
                "--method",
                "temperature",
                "--no-val",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


def test_check_holds_on_like_images_and_calls_heavy_blur_drift(cls_run, cls_data, tmp_path, capsys):
    """New crops of the same generator (dataset seed 1: images the run never saw) hold; the same crops
    blurred hard lose accuracy and calibration, and check says so with its exit code."""
    import cv2

    fresh = classify_root(tmp_path / "fresh", seed=1, splits={"val": 80})
    code = main(
        [
            "check",
            str(cls_run),
            "--data",
            str(fresh),
            "--split",
            "val",
            "--out",
            str(tmp_path / "c1"),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "calibration: holds" in printed and "accuracy: holds" in printed
    blurred = tmp_path / "blur"
    for src in (fresh / "val").rglob("*.png"):
        dst = blurred / "val" / src.parent.name / src.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(dst), cv2.GaussianBlur(cv2.imread(str(src)), (0, 0), 6))
    code = main(
        [
            "check",
            str(cls_run),
            "--data",
            str(blurred),
            "--split",
            "val",
            "--out",
            str(tmp_path / "c2"),
        ]
    )
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "c2" / "check.json").read_text())
    assert code == 5 and result["calibration"] == "drifted" and result["accuracy"] == "changed", (
        printed
    )
    assert result["right"] < result["expected_right"]  # over-confident on blurred crops
    _one_line_error(
        capsys, ["check", str(cls_run), "--images", str(blurred)], "--images is not available"
    )


def test_a_planted_over_confident_classifier_gets_its_temperature_back(
    cls_model, cls_data, cls_run, tmp_path
):
    """The textbook case on the real demo classifier: its logits x3 (folded into its last layer) fit a
    temperature 3 times its own; the calibrated classifier's logits x3 (its own temperature folded in
    first, a calibrated classifier made over-confident) fit one within 5% of 3."""
    k = len(CLASS_NAMES)
    t_base = json.loads((cls_run / "calibration.json").read_text())["map"]["temperature"]
    fitted = {}
    for name, scale in (("raw_x3", 3.0), ("calibrated_x3", 3.0 / t_base)):
        planted = write_classify_checkpoint(
            cls_model,
            tmp_path / f"{name}.pt",
            MultiClassMap("temperature", scale * np.eye(k), np.zeros(k), 1 / scale),
        )
        out = tmp_path / name
        assert (
            main(
                [
                    "calibrate",
                    "--model",
                    str(planted),
                    "--data",
                    str(cls_data),
                    "--method",
                    "temperature",
                    "--no-val",
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
        fitted[name] = json.loads((out / "calibration.json").read_text())["map"]["temperature"]
    assert fitted["raw_x3"] / t_base == pytest.approx(3.0, rel=1e-3)
    assert abs(fitted["calibrated_x3"] - 3.0) / 3.0 < 0.05


def test_compare_classify_runs_side_by_side(
    cls_run, cls_model, cls_data, tmp_path, capsys, demo_task_runs
):
    """Two classify runs (a temperature and no map) compared: every printed figure is the runs' own, the
    page and its figure are written, and a classify run beside a box run is refused in one line."""
    other = tmp_path / "none"
    calibrate_classifier(cls_model, cls_data, other, method="none", val=False)
    out = tmp_path / "cmp"
    assert (
        main(["compare", str(cls_run), str(other), "--labels", "T", "raw", "--out", str(out)]) == 0
    )
    printed = capsys.readouterr().out
    a, b = (json.loads((r / "calibration.json").read_text()) for r in (cls_run, other))
    rows = {line.split("  ")[0]: line for line in printed.splitlines()}
    ece = rows["top-label ECE"]
    for r in (a, b):
        raw, dep = r["eval"]["raw"]["top_label_ece"], r["eval"]["deployed"]["top_label_ece"]
        assert f"{raw:.4f} -> {dep:.4f}" in ece
    assert (
        f"temperature T = {a['map']['temperature']:.4f}" in rows["deployed map"]
        and "none" in rows["deployed map"]
    )
    assert (
        b["eval"]["raw"]["top_label_ece"] == b["eval"]["deployed"]["top_label_ece"]
    )  # no map: nothing moves
    assert "Lowest deployed top-label ECE:" in printed
    assert {p.name for p in out.iterdir()} >= {
        "compare.txt",
        "compare.md",
        "compare.html",
        "figures",
    }
    assert (out / "figures" / "compare_ece.png").stat().st_size > 5000
    box_run = demo_task_runs["obb"].out_dir
    assert main(["compare", str(cls_run), str(box_run), "--out", str(tmp_path / "mixed")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is compared with classify runs only" in err[0]
    assert not (tmp_path / "mixed").exists()


def test_thresholds_certify_the_reject_option_asked_for(cls_run, tmp_path, capsys):
    """``thresholds`` on a classify run: at accuracy 0.90 and delta 0.1 it gives the threshold ``calibrate``
    certified; at another target the rule recomputed from the written per-image answers, with the eval
    split's share answered and accuracy; box options and a run without ``top1.parquet`` get one line."""
    record = json.loads((cls_run / "calibration.json").read_text())
    top1 = pl.read_parquet(cls_run / "top1.parquet")
    assert top1.group_by("split").len().sort("split").rows() == sorted(record["images"].items())
    assert (top1["right"] == (top1["top1"] == top1["label"])).all()
    run = tmp_path / "run"
    shutil.copytree(cls_run, run)
    assert main(["thresholds", str(run)]) == 0  # default target 0.9, delta 0.1: calibrate's first
    doc = json.loads((run / "thresholds.json").read_text())
    first = record["reject"][0]
    assert (first["target"], first["delta"]) == (0.9, 0.1)
    for key in ("threshold", "certified", "answered", "accuracy", "eval_answered", "eval_accuracy"):
        assert doc[key] == first[key], key
    assert main(["thresholds", str(run), "--target-precision", "0.97", "--delta", "0.05"]) == 0
    printed = capsys.readouterr().out
    doc = json.loads((run / "thresholds.json").read_text())
    fit = top1.filter(pl.col("split") == record["fit_split"])
    rule = reject_threshold(
        fit["conf"].to_numpy(), fit["right"].to_numpy(), target=0.97, delta=0.05
    )
    assert (doc["target"], doc["delta"], doc["certified"]) == (0.97, 0.05, rule.certified)
    if rule.certified:
        ev = top1.filter(pl.col("split") == record["eval_split"])
        on = ev["conf"].to_numpy() >= rule.threshold
        assert doc["threshold"] == rule.threshold and doc["eval_answered"] == float(on.mean())
        assert f"answer when the top-1 probability >= {rule.threshold:.2f}" in printed
    else:
        assert "cannot certify on these images" in printed
    for argv in (
        ["--target-recall", "0.5"],
        ["--head", "e2e"],
        ["--per-class"],
        ["--fp-cap", "25"],
        ["--guarantee", "probability"],
    ):
        assert main(["thresholds", str(run), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is a detector's option" in err[0], err
    (run / "top1.parquet").unlink()
    before = (run / "thresholds.json").read_bytes()
    assert main(["thresholds", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "top1.parquet not found" in err[0]
    assert (run / "thresholds.json").read_bytes() == before  # nothing written
