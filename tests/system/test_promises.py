"""Promises of the README that had no test: the unexpected-error exit, the report/compare/
demo-data subcommands, corrupt images in the report, and legacy (YOLOv8/YOLO11) heads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from det_calib.cli import main
from det_calib.demo.shapes import CLASS_NAMES

REPO = Path(__file__).resolve().parents[2]


def _env(**extra) -> dict:
    env = {**os.environ, "YOLO_OFFLINE": "1", "YOLO_VERBOSE": "False", **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("DET_CALIB_DEBUG", None)
    env.update(extra)
    return env


# The CLI entry point in a fresh interpreter, with one library function replaced by a bug
# (failure injection: the rest is the real program, its real stderr and exit status).
BUGGY_CLI = textwrap.dedent(
    """
    import sys
    import det_calib.capture.predictor

    def load_detector(model):
        return {}["a bug"]  # KeyError, something no input check anticipates

    det_calib.capture.predictor.load_detector = load_detector
    from det_calib.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def test_unexpected_error_exits_1_with_one_line_and_traceback_on_request(
    tmp_path, demo_model_path, fixture_yaml
):
    args = [
        "calibrate",
        "--model",
        str(demo_model_path),
        "--data",
        str(fixture_yaml),
        "--out",
        str(tmp_path / "o"),
        "--no-val",
        "--no-report",
        "-q",
    ]
    r = subprocess.run(
        [sys.executable, "-c", BUGGY_CLI, *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
        check=False,
    )
    assert r.returncode == 1, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("det-calib: internal error: KeyError") and "'a bug'" in lines[0]
    assert "DET_CALIB_DEBUG=1" in lines[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())

    r = subprocess.run(
        [sys.executable, "-c", BUGGY_CLI, *args],
        capture_output=True,
        text=True,
        env=_env(DET_CALIB_DEBUG="1"),
        cwd=tmp_path,
        check=False,
    )
    assert r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr
    assert (
        "in load_detector" in r.stderr and r.stderr.strip().splitlines()[-1] == "KeyError: 'a bug'"
    )


def test_unexpected_error_in_process(monkeypatch, capsys, tmp_path, demo_model_path, fixture_yaml):
    import det_calib.capture.predictor

    def boom(*a, **k):
        raise ZeroDivisionError("planted\nsecond line")

    monkeypatch.setattr(det_calib.capture.predictor, "load_detector", boom)
    monkeypatch.delenv("DET_CALIB_DEBUG", raising=False)
    code = main(
        [
            "calibrate",
            "--model",
            str(demo_model_path),
            "--data",
            str(fixture_yaml),
            "--out",
            str(tmp_path),
            "-q",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert (
        err
        == "det-calib: internal error: ZeroDivisionError: planted (set DET_CALIB_DEBUG=1 for the "
        "traceback)"
    )
    monkeypatch.setenv("DET_CALIB_DEBUG", "1")
    with pytest.raises(ZeroDivisionError, match="planted"):
        main(
            [
                "calibrate",
                "--model",
                str(demo_model_path),
                "--data",
                str(fixture_yaml),
                "--out",
                str(tmp_path),
                "-q",
            ]
        )


# ----------------------------------------------------------------------------- report / compare
@pytest.fixture(scope="module")
def corrupt_run(tmp_path_factory, demo_model_path, fixture_yaml):
    """Both heads on a copy of the fixture split with one unreadable image, through the CLI."""
    tmp = tmp_path_factory.mktemp("promises")
    root = tmp / "ds"
    shutil.copytree(fixture_yaml.parent, root)
    bad = sorted((root / "images" / "fixture").glob("*.jpg"))[3]
    bad.write_bytes(b"not a jpeg at all")
    out = tmp / "run"
    code = main(
        [
            "calibrate",
            "--model",
            str(demo_model_path),
            "--data",
            str(root / "data.yaml"),
            "--out",
            str(out),
            "--no-val",
            "--n-boot",
            "20",
            "-q",
        ]
    )
    assert code == 0
    return out, bad


def test_corrupt_image_is_counted_in_the_report(corrupt_run):
    out, bad = corrupt_run
    s = json.loads((out / "calibration.json").read_text())
    assert s["corrupt_images"] == [str(bad)]
    assert s["fit"]["nms"]["images"] + s["eval"]["nms"]["images"] == 11
    assert sum(s["eval"][h]["corrupt_images"] for h in s["heads"]) >= 1
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "Corrupt images skipped: " + str(bad).replace("_", "\\_") + "." in md  # Markdown-escaped
    assert f"Corrupt images skipped: {bad}." in html
    # the per-head table has a corrupt-image column holding the eval split's count
    header = next(ln for ln in md.splitlines() if "| Corrupt images |" in ln)
    col = [c.strip() for c in header.split("|")].index("Corrupt images")
    rows = [ln for ln in md.splitlines() if ln.startswith(("| nms |", "| e2e |"))]
    counts = {
        r.split("|")[1].strip(): r.split("|")[col].strip() for r in rows if len(r.split("|")) > col
    }
    assert counts and all(v == str(s["eval"][h]["corrupt_images"]) for h, v in counts.items()), (
        counts
    )


def test_report_cli_rewrites_the_report(corrupt_run, capsys):
    out, bad = corrupt_run
    s = json.loads((out / "calibration.json").read_text())
    (out / "report.html").unlink()
    (out / "report.md").write_text("stale")
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert str(out / "report.html") in printed
    html, md = (out / "report.html").read_text(), (out / "report.md").read_text()
    assert md != "stale" and "Corrupt images skipped: " in md and str(bad) in html
    for head in s[
        "heads"
    ]:  # the default (auto) deploys another map: the temperature is fitted and shown anyway
        t = s["temperature_fit"][head]["temperature"]
        assert f"T = {t:.4f}" in md and f"T = {t:.4f}" in html
    assert (
        "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html
    )  # self-contained
    assert "data:image/png;base64," in html


def test_compare_cli_two_heads_of_one_run(corrupt_run, tmp_path, capsys):
    out, _ = corrupt_run
    s = json.loads((out / "calibration.json").read_text())
    cmp = tmp_path / "cmp"
    assert main(["compare", f"{out}:nms", f"{out}:e2e", "--out", str(cmp)]) == 0
    printed = capsys.readouterr().out
    wrote = printed.strip().splitlines()[
        -1
    ]  # after the side-by-side table: what was written, and where
    assert "compare.html" in wrote and "compare.md" in wrote and wrote.endswith(f"to {cmp}")
    assert "run:nms" in printed.splitlines()[0] and "run:e2e" in printed.splitlines()[0]
    md = (cmp / "compare.md").read_text()
    assert (cmp / "compare.html").is_file()
    for head in ("nms", "e2e"):
        assert f"{s['temperature_fit'][head]['temperature']:.3f}" in md, head
    assert main(["compare", f"{out}:nms", f"{out}:bogus", "--out", str(cmp)]) == 2


@pytest.mark.slow
def test_demo_data_cli_prints_the_data_yaml():
    r = subprocess.run(
        [sys.executable, "-m", "det_calib.cli", "demo-data"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=900,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip().splitlines()[-1])
    assert path.name == "data.yaml" and path.is_file()
    text = path.read_text()
    for split in ("calib", "test"):
        assert f"{split}: images/{split}" in text
        assert len(list((path.parent / "images" / split).glob("*.png"))) >= 100
    assert all(f": {n}" in text for n in CLASS_NAMES)


# ----------------------------------------------------------------------------- legacy heads
@pytest.fixture(scope="module")
def legacy_ckpt(tmp_path_factory) -> Path:
    """A YOLOv8n detector built from its yaml with the demo's class names, random class convs."""
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(0)
    model = DetectionModel("yolov8n.yaml", nc=len(CLASS_NAMES), verbose=False)
    model.names = dict(enumerate(CLASS_NAMES))
    with torch.no_grad():
        for level in model.model[-1].cv3:
            torch.nn.init.normal_(level[-1].weight, 0.0, 0.05)
            torch.nn.init.normal_(level[-1].bias, -2.0, 1.5)
    path = tmp_path_factory.mktemp("legacy") / "yolov8n_shapes.pt"
    torch.save(
        {"model": model.float().eval(), "train_args": {"imgsz": 320, "task": "detect"}}, path
    )
    return path


def test_both_heads_on_a_legacy_model_is_refused(legacy_ckpt, fixture_yaml, tmp_path, capsys):
    code = main(
        [
            "calibrate",
            "--model",
            str(legacy_ckpt),
            "--data",
            str(fixture_yaml),
            "--head",
            "both",
            "--out",
            str(tmp_path / "o"),
            "--no-val",
            "--no-report",
            "-q",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.splitlines() == [
        "det-calib: error: the model has no `e2e` head (it has: nms); choose `--head` nms"
    ]
    assert not (tmp_path / "o").exists()


def test_fold_into_a_legacy_head(legacy_ckpt, tmp_path, fixture_images):
    """YOLOv8 head (one-to-many only): T folds into cv3, plain Ultralytics gives logit / T."""
    from det_calib.deploy.fold import read_calibration_metadata, write_calibrated_checkpoint

    t = 1.7
    out = write_calibrated_checkpoint(legacy_ckpt, tmp_path / "cal.pt", {"nms": t})
    assert read_calibration_metadata(out)["temperature"] == {"nms": t}
    src = torch.load(legacy_ckpt, weights_only=False)["model"].model[-1].cv3
    dst = torch.load(out, weights_only=False)["model"].model[-1].cv3
    for a, b in zip(src, dst):
        assert torch.equal(b[-1].weight, a[-1].weight / t) and torch.equal(
            b[-1].bias, a[-1].bias / t
        )
    # the head's raw class logits on a real image: calibrated = raw / T (to float32 rounding of
    # the conv; an untrained head has many exactly tied scores, so boxes after NMS can't be paired)
    from ultralytics import YOLO

    img = cv2.resize(cv2.imread(str(fixture_images[0])), (320, 320))[:, :, ::-1]
    x = torch.from_numpy(img.copy()).permute(2, 0, 1)[None].float() / 255
    logits = []
    for ckpt in (legacy_ckpt, out):
        model = YOLO(str(ckpt)).model.float().eval()  # plain Ultralytics loads the checkpoint
        with torch.no_grad():
            _, preds = model(x)
        logits.append(preds["scores"].numpy().astype(np.float64))
    raw, cal = logits
    assert raw.shape == (1, len(CLASS_NAMES), 2100) and raw.std() > 0.1
    np.testing.assert_allclose(cal, raw / t, rtol=1e-5, atol=1e-6)
