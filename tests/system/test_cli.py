"""CLI: bad input gives one line naming the problem and exit code 2, never a traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import assert_intervals_contain_estimates

from det_calib.cli import main
from det_calib.errors import InputError

FAST = ["--no-val", "--no-report", "--n-boot", "10", "-q"]


@pytest.fixture
def ds(tmp_path, fixture_yaml) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(fixture_yaml.parent, root)
    return root


def _run(capsys, *argv) -> tuple[int, str]:
    code = main(list(map(str, argv)))
    err = capsys.readouterr().err.strip()
    return code, err


def _assert_one_line_error(code, err, pattern):
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.startswith("det-calib: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert pattern in lines[0], lines[0]


def test_bad_model_files(capsys, tmp_path, ds, demo_model_path):
    data = ds / "data.yaml"
    code, err = _run(capsys, "calibrate", "--model", tmp_path / "missing.pt", "--data", data, *FAST)
    _assert_one_line_error(code, err, "model file not found")
    bad = tmp_path / "corrupt.pt"
    bad.write_bytes(b"\x00garbage" * 10)
    code, err = _run(capsys, "calibrate", "--model", bad, "--data", data, *FAST)
    _assert_one_line_error(code, err, "cannot load model")
    code, err = _run(capsys, "calibrate", "--model", "yolo26n-cls.yaml", "--data", data, *FAST)
    _assert_one_line_error(
        code, err, "a classify model is calibrated on a folder of class folders: give --data"
    )
    code, err = _run(capsys, "calibrate", "--model", ds / "data.yaml", "--data", data, *FAST)
    _assert_one_line_error(code, err, "cannot load model")


@pytest.mark.parametrize("task", ["pose", "obb"])
def test_pose_and_obb_models_are_checked_as_detectors(capsys, tmp_path, ds, task):
    """Pose and OBB models are calibrated (tests/system/test_pose_obb_run.py) and captured (keypoints / rotated
    boxes ride along): an 80-class model is refused by the data's class names, not by its task."""
    data = ds / "data.yaml"
    for cfg in (f"yolo26n-{task}.yaml", f"yolo11n-{task}.yaml"):
        code, err = _run(capsys, "calibrate", "--model", cfg, "--data", data, *FAST)
        _assert_one_line_error(code, err, "class names differ: the model has 80 classes")
        assert "task" not in err
    code, err = _run(
        capsys,
        "capture",
        "--model",
        f"yolo11n-{task}.yaml",
        "--data",
        data,
        "--split",
        "val",
        "--out",
        tmp_path / "parts",
        "-q",
    )
    _assert_one_line_error(code, err, "class")
    assert "task" not in err
    assert not (tmp_path / "parts").exists()


def test_bad_data(capsys, tmp_path, ds, demo_model_path):
    m = demo_model_path
    code, err = _run(capsys, "calibrate", "--model", m, "--data", tmp_path / "nope.yaml", *FAST)
    _assert_one_line_error(code, err, "data.yaml not found")
    code, err = _run(
        capsys,
        "calibrate",
        "--model",
        m,
        "--data",
        ds / "data.yaml",
        "--fit-split",
        "train",
        "--eval-split",
        "bogus",
        *FAST,
    )
    _assert_one_line_error(code, err, "split `bogus` not in")
    # names that disagree with the model's
    text = (ds / "data.yaml").read_text()
    (ds / "data.yaml").write_text(text.replace("3: rectangle", "3: rect"))
    code, err = _run(capsys, "calibrate", "--model", m, "--data", ds / "data.yaml", *FAST)
    _assert_one_line_error(code, err, "class names differ at id 3: the model says `rectangle`")
    (ds / "data.yaml").write_text(text)
    # class id out of range in every label file (one such file is skipped with a warning, as by Ultralytics)
    labels = sorted((ds / "labels" / "fixture").glob("*.txt"))
    keep = [lbl.read_text() for lbl in labels]
    for lbl in labels:
        lbl.write_text("11 0.5 0.5 0.2 0.2\n")
    code, err = _run(capsys, "calibrate", "--model", m, "--data", ds / "data.yaml", *FAST)
    _assert_one_line_error(code, err, f"(first: {labels[0]}:1: class id 11 out of range 0..7)")
    for lbl, text in zip(labels, keep):
        lbl.write_text(text)
    # no labels at all
    shutil.rmtree(ds / "labels")
    code, err = _run(capsys, "calibrate", "--model", m, "--data", ds / "data.yaml", *FAST)
    _assert_one_line_error(code, err, "has no labels")
    # no images
    for p in (ds / "images" / "fixture").glob("*"):
        p.unlink()
    code, err = _run(capsys, "calibrate", "--model", m, "--data", ds / "data.yaml", *FAST)
    _assert_one_line_error(code, err, "has no images")
    # missing image folder
    shutil.rmtree(ds / "images")
    code, err = _run(capsys, "calibrate", "--model", m, "--data", ds / "data.yaml", *FAST)
    _assert_one_line_error(code, err, "not found")


def test_bad_options(capsys, ds, demo_model_path):
    # (--per-class widens --method auto's choice, and --cv-folds and --criterion set it: with a named
    # method each is refused, not ignored)
    for options, named, also in (
        (["--iou", "1.5"], "--iou", ""),
        (["--conf", "0"], "--conf", ""),
        (["--method", "isotonic", "--per-class"], "--per-class", "(class-temperature, class-"),
        (["--method", "temperature", "--cv-folds", "3"], "--cv-folds", "no choice to set"),
        (["--method", "platt", "--criterion", "ece"], "--criterion", "with --method platt"),
        # fewer fit images than folds: refused before the capture, naming the options
        (["--limit", "4"], "--cv-folds", "has 2 images, fewer than the 5 folds"),
    ):
        model_data = ["--model", demo_model_path, "--data", ds / "data.yaml"]
        code, err = _run(capsys, "calibrate", *model_data, *options, *FAST)
        _assert_one_line_error(code, err, named)
        assert also in err


def test_degenerate_fit_and_no_boxes(capsys, ds, demo_model_path):
    # every label emptied: no box can be correct; found before any capture (see test_preflight)
    labels = {lbl: lbl.read_text() for lbl in (ds / "labels" / "fixture").glob("*.txt")}
    for lbl in labels:
        lbl.write_text("")
    out = ds / "out"
    out.mkdir()
    old = '{"det_calib_version": "0.0.1", "note": "an earlier run"}'
    (out / "calibration.json").write_text(old)
    code, err = _run(
        capsys,
        "calibrate",
        "--model",
        demo_model_path,
        "--data",
        ds / "data.yaml",
        "--out",
        out,
        *FAST,
    )
    _assert_one_line_error(code, err, "has no ground-truth boxes")
    assert (
        out / "calibration.json"
    ).read_text() == old  # a failed run leaves earlier outputs alone
    assert sorted(p.name for p in out.iterdir()) == ["calibration.json"]
    # blank grey images: nothing above a high floor (labels restored: ground truth is there)
    for lbl, text in labels.items():
        lbl.write_text(text)
    for img in (ds / "images" / "fixture").glob("*.jpg"):
        cv2.imwrite(str(img), np.full((64, 64, 3), 127, np.uint8))
    code, err = _run(
        capsys,
        "calibrate",
        "--model",
        demo_model_path,
        "--data",
        ds / "data.yaml",
        "--conf-floor",
        "0.2",
        *FAST,
    )
    _assert_one_line_error(code, err, "no boxes captured")


def test_console_script_exit_code_and_no_traceback(tmp_path):
    exe = shutil.which("det-calib")
    cmd = [exe] if exe else [sys.executable, "-m", "det_calib.cli"]
    out = subprocess.run(
        [*cmd, "calibrate", "--model", str(tmp_path / "x.pt"), "--data", str(tmp_path / "d.yaml")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("det-calib: error: model file not found")
    assert "Traceback" not in out.stderr


def test_model_without_data_and_unwritable_out(capsys, tmp_path, ds, demo_model_path):
    code, err = _run(capsys, "calibrate", "--model", demo_model_path, *FAST)
    _assert_one_line_error(code, err, "give both `--model` and `--data`")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, err = _run(
        capsys,
        "calibrate",
        "--model",
        demo_model_path,
        "--data",
        ds / "data.yaml",
        "--out",
        blocker / "sub",
        "--head",
        "nms",
        *FAST,
    )
    assert code == 2 and "Traceback" not in err and err.startswith("det-calib: error:")
    assert f"`--out` cannot be created: {blocker} is a file" in err


@pytest.mark.slow
def test_default_run_on_the_embedded_demo(tmp_path):
    """The README's main command with no model or data: the demo detector on the demo splits
    (rendered into the cache on first use); --limit keeps it short."""
    exe = shutil.which("det-calib")
    cmd = [exe] if exe else [sys.executable, "-m", "det_calib.cli"]
    out = subprocess.run(
        [*cmd, "calibrate", "--limit", "40", "--n-boot", "100", "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1200,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for head in (
        "nms",
        "e2e",
    ):  # the temperature is fitted and reported whatever the default deploys
        assert (
            f"[{head}] temperature (fitted on all fit boxes" in out.stdout and "T = " in out.stdout
        )
    assert "(identical;" in out.stdout and "boxes kept at conf 0.25" in out.stdout
    for name in ("calibration.json", "boxes.parquet", "calibrated.pt", "report.html", "report.md"):
        assert (tmp_path / "run" / name).is_file()
    doc = json.loads((tmp_path / "run" / "calibration.json").read_text())
    assert doc["method"] == "auto" and set(doc["temperature_fit"]) == {"nms", "e2e"}
    assert all(
        r["method"] in ("none", "temperature", "platt", "spline", "isotonic")
        for r in doc.get("calibrators", {}).values()
    )  # the default keeps every box's ranking
    assert all(doc["eval"][h]["map_identical"] for h in ("nms", "e2e"))
    assert_intervals_contain_estimates(tmp_path / "run")
    assert not list(tmp_path.glob(".run.det_calib-*")) and not list(
        (tmp_path / "run").glob(".det_calib-staging-*")
    )
    assert not (tmp_path / "runs").exists()  # Ultralytics val wrote nothing into the cwd


def test_calibrate_options_come_from_settings():
    """Every option of `calibrate` is a Settings field: same defaults, values read back into Settings."""
    from det_calib.cli import _flag_names as flag_names
    from det_calib.cli import _parser
    from det_calib.cli import _settings_from_args as settings_from_args
    from det_calib.job.settings import Settings

    parser = _parser()
    assert settings_from_args(parser.parse_args(["calibrate"]), Settings) == Settings()
    args = parser.parse_args(
        [
            "calibrate",
            "--conf",
            "0.3",
            "--conf",
            "0.5",
            "--bins",
            "10",
            "--no-val",
            "-q",
            "--head",
            "nms",
            "--limit",
            "7",
            "--device",
            "cpu",
        ]
    )
    s = settings_from_args(args, Settings)
    assert (
        s.conf == (0.3, 0.5)
        and s.ece_bins == 10
        and s.head == "nms"
        and s.limit == 7
        and s.device == "cpu"
    )
    assert not s.run_val and not s.progress and s.report and s.iou == 0.5
    flags = flag_names(Settings)
    assert (
        flags["ece_bins"] == "--bins" and flags["run_val"] == "--no-val" and "loc_iou" not in flags
    )
    # an ensemble's choice of fusion reads --cv-folds whatever the method; calibrate's does not
    named = ["--model", "a.pt", "--model", "b.pt", "--method", "temperature", "--cv-folds", "3"]
    assert settings_from_args(parser.parse_args(["ensemble", *named]), Settings).cv_folds == 3
    with pytest.raises(InputError, match="`--cv-folds` sets --method auto's choice"):
        settings_from_args(parser.parse_args(["calibrate", *named[4:]]), Settings)
    with pytest.raises(SystemExit):
        parser.parse_args(["calibrate", "--head", "yolo"])  # choices come from the head vocabulary


def test_no_command_takes_an_abbreviated_option(capsys, tmp_path):
    """Prefix matching is off for every command: an abbreviation is refused in one line, so an option
    added later (say `--target`) can never be read as an older one it prefixes (`--target-precision`)."""
    import argparse

    from det_calib.cli import _parser

    parser = _parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert len(subs) >= 9 and not parser.allow_abbrev
    assert [name for name, sp in subs.items() if sp.allow_abbrev] == []
    run = tmp_path / "no_run"
    with pytest.raises(SystemExit) as e:  # argparse's own usage error: exit 2, one line, no usage
        main(["thresholds", str(run), "--target-prec", "0.8"])
    err = capsys.readouterr().err
    _assert_one_line_error(e.value.code, err, "unrecognized arguments: --target-prec")
    assert err.count("\n") == 1 and "usage:" not in err, err
    with pytest.raises(SystemExit) as e:  # a command's own: named, with where its options are
        main(["calibrate", "--method", "foo"])
    err = capsys.readouterr().err
    _assert_one_line_error(e.value.code, err, "calibrate: argument --method: invalid choice")
    assert err.count("\n") == 1 and "(`det-calib calibrate --help` lists the options)" in err
    code, err = _run(
        capsys, "thresholds", run, "--target-precision", "0.8"
    )  # the full name reaches the run check
    _assert_one_line_error(code, err, "run directory not found")


def test_library_errors_are_shown_with_option_names():
    from det_calib.cli import _error_line

    assert (
        _error_line(InputError("Expected `iou` in (0, 1], but got 1.5"))
        == "Expected `--iou` in (0, 1], but got 1.5"
    )
    msg = InputError("give both `model` and `data`, or neither")
    assert _error_line(msg) == "give both `--model` and `--data`, or neither"
    assert (
        _error_line(InputError("Expected `ece_bins` to be an integer"))
        == "Expected `--bins` to be an integer"
    )
    text = "`loc_iou` has no option; `heads` is a JSON key"
    assert _error_line(InputError(text)) == text


def test_the_cli_prints_no_third_party_chatter(tmp_path, demo_model_path, fixture_yaml):
    """On a fresh machine (no matplotlib font cache) with the report and Ultralytics val: the
    output holds det_calib's lines, not matplotlib's `generated new fontManager` nor Ultralytics
    banners, and no line names the staging folder."""
    import os

    env = {
        **os.environ,
        "MPLCONFIGDIR": str(tmp_path / "mpl"),
        "YOLO_CONFIG_DIR": str(tmp_path / "yolo"),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    env.pop("YOLO_VERBOSE", None)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "det_calib.cli",
            "calibrate",
            "--model",
            str(demo_model_path),
            "--data",
            str(fixture_yaml),
            "--head",
            "nms",
            "--n-boot",
            "10",
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=900,
        check=False,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert (tmp_path / "mpl").is_dir()  # matplotlib did build its font cache in this run
    assert (
        "capturing nms boxes" in text and "[nms] temperature (fitted on all fit boxes" in text
    )  # det_calib's own
    assert "fontManager" not in text
    assert "Ultralytics 8." not in text and "🚀" not in text
    assert ".det_calib-staging-" not in text
    assert (
        f"wrote calibrated checkpoint {tmp_path / 'run' / 'calibrated.pt'}" in text
    )  # the final path


def test_the_docs_options_table_lists_every_calibrate_option():
    """docs/cli.md's options table and `calibrate`'s parser name the same options, and the rows of
    `--method` and `--head` name every choice the parser accepts."""
    import re

    from det_calib.cli import _parser

    readme = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    table = readme.split("| option | meaning (default) |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        first, meaning = line.split("|")[1:3]
        for flag in re.findall(r"`(--?[\w-]+)`", first):
            rows[flag] = meaning
    calibrate = next(
        a for a in _parser()._subparsers._group_actions[0].choices.items() if a[0] == "calibrate"
    )[1]
    actions = [
        a for a in calibrate._actions if a.option_strings and "--help" not in a.option_strings
    ]
    options = {max(a.option_strings, key=len) for a in actions}
    assert set(rows) - {"-q"} == options, (sorted(options - set(rows)), sorted(set(rows) - options))
    for flag in ("--method", "--head"):
        choices = next(a.choices for a in actions if flag in a.option_strings)
        named = set(re.findall(r"`([\w-]+)`", rows[flag]))
        assert set(choices) <= named, (flag, sorted(set(choices) - named))


def test_the_docs_layout_table_names_every_module():
    """docs/layout.md's layout table names every module of the package (and only existing paths)."""
    import re

    root = Path(__file__).resolve().parents[2]
    readme = (root / "docs" / "layout.md").read_text()
    table = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`((?:det_calib|datasets|benchmarks|tests)/[\w/.]*)`", table))
    assert all((root / p).exists() for p in named), sorted(
        p for p in named if not (root / p).exists()
    )
    folders = {p for p in named if p.endswith("/")}
    modules = {
        str(p.relative_to(root))
        for p in (root / "det_calib").rglob("*.py")
        if p.name != "__init__.py"
    }
    missing = {m for m in modules if m not in named and not any(m.startswith(f) for f in folders)}
    assert not missing, sorted(missing)


def test_the_command_line_tunes_its_own_collector_and_a_library_call_does_not():
    """``det-calib`` run as the command line collects its youngest generation every 50,000 new objects
    and keeps freed memory in glibc's heap (:func:`det_calib.cli.main` with no ``argv``); called from
    Python (``main(argv)``) it leaves its caller's collector as it was (fresh interpreters)."""
    code = """
import gc, sys
from det_calib.cli import main
before = gc.get_threshold()
if sys.argv[1] == "library":
    main(["demo-data"])
else:
    sys.argv = ["det-calib", "demo-data"]
    try:
        main()
    except SystemExit:
        pass
print(before[0], gc.get_threshold()[0])
"""
    repo = Path(__file__).resolve().parents[2]
    env = {**__import__("os").environ, "PYTHONPATH": str(repo), "YOLO_OFFLINE": "1"}
    out = {}
    for how in ("library", "command"):
        p = subprocess.run(
            [sys.executable, "-c", code, how],
            capture_output=True,
            text=True,
            cwd=repo,
            timeout=120,
            env=env,
        )
        assert p.returncode == 0, p.stderr
        out[how] = tuple(map(int, p.stdout.split()[-2:]))
    assert out["library"] == (700, 700)
    assert out["command"] == (700, 50_000)


def test_warnings_are_det_calibs_not_other_libraries_deprecation_notices():
    """A command shows warnings as one ``det-calib: warning:`` line each, but not the deprecation notices
    of the libraries it calls (Python's own default): e.g. Python 3.12's "this process is multi-threaded,
    use of fork() may lead to deadlocks in the child", which a data loader's workers raise on a GPU run
    (seen on an H200, docs/speed.md). A fresh interpreter, one stand-in command raising both kinds."""
    code = """
import sys, warnings
import det_calib.cli as cli

def command(args):
    warnings.warn_explicit("use of fork() may lead to deadlocks", DeprecationWarning, "loader.py", 1, module="loader")
    warnings.warn_explicit("soon gone", PendingDeprecationWarning, "loader.py", 2, module="loader")
    warnings.warn("split `calib`: skipping image x.png (unreadable)")
    return 0

cli._COMMANDS["demo-data"] = command
sys.exit(cli.main(["demo-data"]))
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert lines == ["det-calib: warning: split `calib`: skipping image x.png (unreadable)"], lines


def test_help_imports_no_torch_nor_ultralytics():
    """`det-calib --help` and `det-calib calibrate --help` build every option (from Settings and the
    calibrator registry) without importing torch, Ultralytics or matplotlib: a help answers at once
    (0.7 s here under load, against 4-7 s while the thresholds' Results filter pulled torch in). A
    fresh interpreter; the modules are checked, not the time."""
    code = """
import sys
from det_calib.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    assert e.code == 0, e.code
print("modules:", " ".join(sorted(sys.modules)))
"""
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    for argv in (
        ["--help"],
        ["calibrate", "--help"],
        ["ensemble", "--help"],
        ["thresholds", "--help"],
    ):
        p = subprocess.run(
            [sys.executable, "-c", code, *argv],
            capture_output=True,
            text=True,
            cwd=repo,
            timeout=120,
            env=env,
        )
        assert p.returncode == 0, p.stderr[-2000:]
        loaded = set(p.stdout.splitlines()[-1].removeprefix("modules: ").split())
        assert "argparse" in loaded and "det_calib.job.settings" in loaded  # the options were built
        for name in ("torch", "ultralytics", "matplotlib", "cv2", "scipy"):
            assert name not in loaded, (argv, name)
        assert ("--seed" in p.stdout) == (
            argv != ["--help"]
        )  # every command with a random draw takes it


def _figures(run: Path) -> dict:
    """calibration.json without what differs between two identical runs (when and how long)."""
    doc = json.loads((run / "calibration.json").read_text())
    for key in ("timings", "created", "seconds"):
        doc.pop(key, None)
    return doc


def _summary_lines(run: Path) -> list[str]:
    return [
        ln for ln in (run / "summary.txt").read_text().splitlines() if not ln.startswith("time: ")
    ]


def test_seed_repeats_a_run_and_another_seed_moves_its_intervals(
    capsys, tmp_path, demo_model_path, fixture_yaml
):
    """`--seed` is every random draw of a run: the same seed on the same boxes gives the same
    calibration.json and summary (the CV's fold assignments, the bootstrap, the sampling floor's draws);
    another seed moves the bootstrap intervals and the floors, never an estimate. The boxes are captured
    once and re-fitted with `--boxes` (fit on the fixture split, evaluated on the same images as `val`:
    no random halves, so the boxes serve every seed)."""
    common = [
        "--model",
        str(demo_model_path),
        "--data",
        str(fixture_yaml),
        "--fit-split",
        "fixture",
        "--eval-split",
        "val",
        "--no-val",
        "--no-report",
        "-q",
        "--n-boot",
        "50",
    ]
    assert main(["calibrate", *common, "--out", str(tmp_path / "boxes")]) == 0
    runs = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        runs[name] = tmp_path / name
        assert (
            main(
                [
                    "calibrate",
                    *common,
                    "--boxes",
                    str(tmp_path / "boxes"),
                    "--seed",
                    str(seed),
                    "--out",
                    str(runs[name]),
                ]
            )
            == 0
        )
    a, b, c = (_figures(runs[k]) for k in "abc")
    assert a["bootstrap"]["seed"] == 7 and c["bootstrap"]["seed"] == 8
    assert a == b and _summary_lines(runs["a"]) == _summary_lines(runs["b"])
    for head in ("nms", "e2e"):
        ea, ec = a["eval"][head], c["eval"][head]
        oa, oc = ea["operating_after"][0], ec["operating_after"][0]
        assert (
            oa["ece"] == oc["ece"] and ea["map50_95_after"] == ec["map50_95_after"]
        )  # estimates: no draw
        assert (
            oa["ece_ci"] != oc["ece_ci"] and ea["ece_after_ci"] != ec["ece_after_ci"]
        )  # the bootstrap
        assert oa["ece_floor_range"] != oc["ece_floor_range"]  # the sampling floor's draws
    assert _summary_lines(runs["a"]) != _summary_lines(runs["c"])
    code, err = _run(capsys, "calibrate", *common, "--seed", "-1", "--out", tmp_path / "bad")
    _assert_one_line_error(code, err, "Expected `--seed` to be an integer of 0 or more, but got -1")


REPR = re.compile(r"\{'|\[<|<[\w.]+ object at|\w+Calibrator\(|\bIdentity\b|\b[a-z][a-z-]*@\d")
"""What a console line must not show: a Python dict, list of objects or repr, a calibrator's class, a
candidate's short name (``spline@0``: the console writes it out in words)."""


@pytest.mark.slow
def test_the_default_console_says_each_thing_once_in_words(tmp_path):
    """`det-calib calibrate` on the demo (--limit 16), its output redirected (not a terminal): every
    line once, no Python repr, no carriage-return frame of a progress bar, one line per head saying
    which calibrator and why (in words: no `@`, no `fit floor`, no `5x5 folds`), no line per candidate,
    each mAP figure labelled with what it is, and the why of their difference said once."""
    exe = shutil.which("det-calib")
    cmd = [exe] if exe else [sys.executable, "-m", "det_calib.cli"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [*cmd, "calibrate", "--limit", "16", "--n-boot", "50", "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1200,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (
        "\r" not in out.stdout + out.stderr
    )  # no progress bar frames when stderr is not a terminal
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    repeated = [ln for ln in set(lines) if lines.count(ln) > 1]
    assert repeated == []
    assert [ln for ln in lines if REPR.search(ln)] == []
    for head in ("nms", "e2e"):
        chosen = [ln for ln in out.stderr.splitlines() if ln.startswith(f"{head} head: ")]
        assert len(chosen) == 1, chosen
        assert "cross-validation grouped by image, repeated 5 times" in chosen[0]
        ulv = [
            ln
            for ln in out.stdout.splitlines()
            if ln.startswith(f"[{head}] Ultralytics val mAP50-95")
        ]
        assert len(ulv) == 1 and ulv[0].endswith("(Ultralytics' own val pass and mAP code)")
        coco = [ln for ln in out.stdout.splitlines() if ln.startswith(f"[{head}] COCO mAP50-95")]
        assert len(coco) == 1 and "the boxes det_calib captured, scored by" in coco[0]
    for gone in ("scoring candidate", "fit floor", "x5 folds", "calibrator selection"):
        assert gone not in out.stdout + out.stderr, gone
    assert sum("the two mAP50-95 of a head measure different things" in ln for ln in lines) == 1
    assert sum(ln.startswith("time: ") for ln in lines) == 1
    assert (
        sum(ln.startswith("wrote calibrated checkpoint ") for ln in lines) == 1
    )  # each head's map in words
