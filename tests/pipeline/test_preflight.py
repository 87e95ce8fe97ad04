"""Preflight: every input that can be seen to be wrong without the model stops the run before
the first forward pass, with one line naming the parameter (the CLI's flag) or file at fault."""

from __future__ import annotations

import os
import re
import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from det_calib.cli import _error_line, main
from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.errors import InputError
from det_calib.job.settings import Settings
from det_calib.pipeline import preflight as pf
from det_calib.pipeline.calibrate_job import calibrate

FAST = ["--no-val", "--no-report", "--n-boot", "10", "-q"]


@pytest.fixture
def two_splits(tmp_path, fixture_yaml) -> Path:
    """The fixture images as a dataset with a `calib` split (6 images) and a `test` split (6)."""
    src = fixture_yaml.parent
    root = tmp_path / "ds"
    for k, img in enumerate(sorted((src / "images" / "fixture").glob("*.jpg"))):
        split = "calib" if k < 6 else "test"
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        shutil.copy(img, root / "images" / split / img.name)
        shutil.copy(
            src / "labels" / "fixture" / f"{img.stem}.txt",
            root / "labels" / split / f"{img.stem}.txt",
        )
    names = "".join(f"  {i}: {n}\n" for i, n in enumerate(load_data_yaml(fixture_yaml).names))
    (root / "data.yaml").write_text(f"calib: images/calib\ntest: images/test\nnames:\n{names}")
    return root


@pytest.fixture
def no_forward(monkeypatch) -> list[str]:
    """Failure injection: any forward pass of any Ultralytics model, or entering the capture,
    raises (an AssertionError, which the CLI would report as an internal error with exit code 1)
    and is recorded."""
    from ultralytics.nn.tasks import BaseModel

    import det_calib.capture.predictor

    calls: list[str] = []

    def forward(self, *args, **kwargs):
        calls.append(f"{type(self).__name__}.forward")
        raise AssertionError("a forward pass ran before the inputs were checked")

    def capture(*args, **kwargs):
        calls.append("capture")
        raise AssertionError("the capture was entered before the inputs were checked")

    monkeypatch.setattr(BaseModel, "forward", forward)
    monkeypatch.setattr(det_calib.capture.predictor, "capture", capture)
    monkeypatch.setattr(
        det_calib.capture.predictor.Capturer, "__call__", capture
    )  # the pipeline's capture
    return calls


def _cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(map(str, argv)))
    return code, capsys.readouterr().err.strip()


def _calibrate(capsys, model: Path, root: Path, out: Path) -> tuple[int, str]:
    """``det-calib calibrate`` of ``model`` on ``root``'s data into ``out``, at the fast settings."""
    return _cli(
        capsys, "calibrate", "--model", model, "--data", root / "data.yaml", "--out", out, *FAST
    )


def _one_error_line(code: int, err: str) -> str:
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.startswith("det-calib: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------------ the three cases
def test_out_naming_an_existing_file(capsys, two_splits, demo_model_path, no_forward):
    blocker = two_splits / "results"
    blocker.write_text("not a folder")
    code, err = _calibrate(capsys, demo_model_path, two_splits, blocker)
    line = _one_error_line(code, err)
    assert line == f"det-calib: error: `--out` is an existing file, not a folder: {blocker}"
    assert no_forward == []
    assert blocker.read_text() == "not a folder"


def test_fit_split_with_no_ground_truth(capsys, two_splits, demo_model_path, no_forward):
    for lbl in (two_splits / "labels" / "calib").glob("*.txt"):
        lbl.write_text("")
    out = two_splits / "out"
    code, err = _calibrate(capsys, demo_model_path, two_splits, out)
    line = _one_error_line(code, err)
    assert (
        "the fit split `calib` has no ground-truth boxes in its 6 images (its label files are empty"
        in line
    )
    assert "choose another `--fit-split`" in line
    assert no_forward == [] and not out.exists()  # nothing created


def test_eval_split_with_no_ground_truth(capsys, two_splits, demo_model_path, no_forward):
    labels = sorted((two_splits / "labels" / "test").glob("*.txt"))
    for lbl in labels[1:]:
        lbl.unlink()  # background images
    labels[0].write_text("\n")  # one label file, blank
    code, err = _calibrate(capsys, demo_model_path, two_splits, two_splits / "out")
    line = _one_error_line(code, err)
    assert "the eval split `test` has no ground-truth boxes" in line and "`--eval-split`" in line
    assert no_forward == []


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("3 0.5 0.5 nan 0.2", "non-finite value `nan`"),
        ("3 0.5 0.5 -0.2 0.2", "width -0.2 is negative"),
    ],
)
def test_malformed_line_in_every_fit_label_file(
    capsys, two_splits, demo_model_path, no_forward, bad, reason
):
    """When every label file of the fit split is malformed, no image is left: one line with the
    first file and line number."""
    labels = sorted((two_splits / "labels" / "calib").glob("*.txt"))
    for lbl in labels:
        lbl.write_text(lbl.read_text() + bad + "\n")
    code, err = _calibrate(capsys, demo_model_path, two_splits, two_splits / "out")
    line = _one_error_line(code, err)
    n = len(labels[0].read_text().splitlines())
    assert f"(first: {labels[0]}:{n}: {reason})" in line
    assert "split `calib` has no usable images: the label files of all 6 are malformed" in line
    assert no_forward == []


@pytest.mark.fast
def test_malformed_line_skips_the_image_and_names_file_and_line(two_splits):
    """One bad file among good ones: its image is left out (as Ultralytics does), with a warning
    naming the file and line, and counted in `corrupt` (calibration.json's corrupt_images)."""
    ds = load_data_yaml(two_splits / "data.yaml")
    whole = load_split(ds, "calib")
    lbl = sorted((two_splits / "labels" / "calib").glob("*.txt"))[2]
    n_lines = len(lbl.read_text().splitlines())
    lbl.write_text(lbl.read_text() + "1 0.5 0.5 0.1 nan\n")
    with pytest.warns(
        UserWarning, match=f"malformed label {lbl}:{n_lines + 1}: non-finite value `nan`"
    ):
        sp = load_split(ds, "calib")
    img = two_splits / "images" / "calib" / f"{lbl.stem}.jpg"
    assert img not in sp.images and len(sp.images) == 5
    assert sp.corrupt == [str(img)] and sp.bad_labels == [
        f"{lbl}:{n_lines + 1}: non-finite value `nan`"
    ]
    assert sp.gt.height == whole.gt.height - n_lines


# ------------------------------------------------------------------- no bad input costs a forward pass
def _bad_inputs(root: Path, tmp: Path):
    """(description, calibrate kwargs, error pattern, setup) for each bad input."""

    def empty_fit_labels():
        for lbl in (root / "labels" / "calib").glob("*.txt"):
            lbl.write_text("")

    def nan_everywhere():
        for lbl in (root / "labels" / "calib").glob("*.txt"):
            lbl.write_text("0 nan 0.5 0.1 0.1\n")

    def file_as_out():
        (tmp / "file").write_text("x")

    def dir_where_output_goes():
        (tmp / "o" / "calibrated.pt").mkdir(parents=True)

    def renamed_class():
        y = root / "data.yaml"
        y.write_text(y.read_text().replace("3: rectangle", "3: rect"))

    def nothing():
        pass

    return [
        ("out is a file", {"out": tmp / "file"}, "`out` is an existing file", file_as_out),
        ("out under a file", {"out": tmp / "file" / "sub"}, "`out` cannot be created", file_as_out),
        (
            "output file is a folder",
            {"out": tmp / "o"},
            "holds a folder where the output file goes",
            dir_where_output_goes,
        ),
        ("no GT in fit split", {}, "fit split `calib` has no ground-truth boxes", empty_fit_labels),
        ("every fit label malformed", {}, "non-finite value `nan`", nan_everywhere),
        ("class names differ", {}, "class names differ at id 3", renamed_class),
        ("bad device", {"device": "99"}, "`device` '99' is not available", nothing),
        ("bad imgsz", {"imgsz": 0}, "`imgsz`", nothing),
        ("bad iou", {"iou": 1.5}, "`iou`", nothing),
        ("split not in yaml", {"eval_split": "valid"}, "split `valid` not in", nothing),
    ]


CASES = [c[0] for c in _bad_inputs(Path("."), Path("."))]


@pytest.mark.parametrize("case", CASES)
def test_no_bad_input_costs_a_forward_pass(case, two_splits, tmp_path, demo_model_path, no_forward):
    _, kwargs, pattern, setup = next(c for c in _bad_inputs(two_splits, tmp_path) if c[0] == case)
    setup()
    kwargs = {"out": tmp_path / "out", **kwargs}
    with pytest.raises(InputError, match=re.escape(pattern)):
        calibrate(
            demo_model_path,
            two_splits / "data.yaml",
            n_boot=10,
            progress=False,
            report=False,
            run_val=False,
            **kwargs,
        )
    assert no_forward == []


def test_not_enough_disk(monkeypatch, capsys, two_splits, demo_model_path, no_forward):
    """Failure injection: the output disk reports 1 MB free, less than the checkpoint alone."""
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(pf.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 10**6, 10**6))
    code, err = _calibrate(capsys, demo_model_path, two_splits, two_splits / "out")
    line = _one_error_line(code, err)
    assert "not enough free disk for `--out`" in line and "1.0 MB free" in line
    assert "lower `--max-det` or `--limit`" in line
    assert no_forward == []


@pytest.mark.fast
@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="permissions do not bind root")
def test_unwritable_out(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(InputError, match="`out` is not writable"):
            pf._check_output_folder(ro / "run")
    finally:
        ro.chmod(0o700)


@pytest.mark.fast
def test_output_folder_check_creates_nothing(tmp_path):
    out = tmp_path / "a" / "b"
    free = pf._check_output_folder(out, need_bytes=1)
    assert free > 0
    assert list(tmp_path.iterdir()) == []  # the probe file is gone, no folder created
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(InputError, match="broken symbolic link"):
        pf._check_output_folder(link)


@pytest.mark.fast
def test_option_checks_name_the_parameter():
    for kwargs, name in (
        ({"imgsz": -1}, "imgsz"),
        ({"nms_iou": 0.0}, "nms_iou"),
        ({"seed": -1}, "seed"),
        ({"min_class_boxes": 1.5}, "min_class_boxes"),
    ):
        with pytest.raises(InputError, match=f"`{name}`") as e:
            pf._check_options(Settings(**kwargs))
        assert e.value.params == (name,)
    pf._check_options(Settings(imgsz=320))


@pytest.mark.fast
def test_cli_writes_parameters_as_flags():
    e = InputError("`out` is an existing file, not a folder: out", param="out")
    assert _error_line(e) == "`--out` is an existing file, not a folder: out"
    e = InputError("bad `ece_bins` and `limit`", param=("ece_bins", "limit"))
    assert _error_line(e) == "bad `--bins` and `--limit`"
    # a class that happens to share a parameter's name is not rewritten
    e = InputError("class names differ at id 0: the model says `head`, d.yaml says `out`", param=())
    assert _error_line(e) == str(e)


def test_estimate_bounds_a_real_run(tmp_path, two_splits, demo_model_path):
    """The estimate the disk check uses is an upper bound of what a run writes, and not a loose one."""
    out = tmp_path / "run"
    run = calibrate(
        demo_model_path, two_splits / "data.yaml", out=out, n_boot=10, progress=False, run_val=False
    )
    written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    est = pf._estimate_output_bytes(
        model=demo_model_path,
        n_images=12,
        n_heads=len(run.summary["heads"]),
        max_det=300,
        n_classes=8,
        report=True,
    )
    assert written <= est <= 1.5 * written, (written, est)
    assert (out / "calibrated.pt").stat().st_size <= 2 * demo_model_path.stat().st_size


def test_the_injected_failure_fires_on_good_input(
    two_splits, tmp_path, demo_model_path, no_forward
):
    """Control for the tests above: with good input the run does reach the capture, so the
    injected failure would have shown any bad input that got that far."""
    with pytest.raises(AssertionError, match="capture was entered"):
        calibrate(
            demo_model_path,
            two_splits / "data.yaml",
            out=tmp_path / "out",
            progress=False,
            run_val=False,
        )
    assert no_forward == ["capture"]
