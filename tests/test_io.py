"""Tests for det_calib.io: atomic files, and the output folder replaced whole (staged_output)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from det_calib import io
from det_calib.errors import InputError

REPO = Path(__file__).resolve().parents[1]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def write_run(out: Path, files: dict[str, str]) -> None:
    with io.staged_output(out) as stage:
        for rel, text in files.items():
            io.write_text(stage / rel, text)


def leftovers(out: Path) -> list[str]:
    return sorted(
        p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.det_calib-")
    )


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


RUN1 = {"calibration.json": '{"a": 1}', "report.html": "<p>1</p>", "figures/f.png": "png1"}
RUN2 = {"calibration.json": '{"a": 2}', "figures/g.png": "png2"}


# ------------------------------------------------------------------------------------ publish
@pytest.mark.fast
def test_a_run_replaces_the_folder_whole(tmp_path):
    out = tmp_path / "out"
    write_run(out, RUN1)
    assert snapshot(out) == {
        **{k: v.encode() for k, v in RUN1.items()},
        io._MANIFEST: (out / io._MANIFEST).read_bytes(),
    }
    assert io.read_manifest(out) == sorted(RUN1)
    write_run(out, RUN2)  # fewer files (like --no-report): nothing of run 1 stays
    assert set(snapshot(out)) == set(RUN2) | {io._MANIFEST}
    assert (out / "calibration.json").read_text() == '{"a": 2}'
    assert not (out / "report.html").exists() and not (out / "figures" / "f.png").exists()
    assert leftovers(out) == []
    (out / "report.html").write_text("rewritten by `det-calib report` after the run")
    write_run(out, {"calibration.json": "3"})  # det_calib's own names are never kept as a user's
    assert set(snapshot(out)) == {"calibration.json", io._MANIFEST}
    assert oct(out.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


@pytest.mark.fast
def test_files_det_calib_did_not_write_are_kept(tmp_path):
    out = tmp_path / "out"
    write_run(out, RUN1)
    (out / "notes.txt").write_text("mine")
    (out / "mine").mkdir()
    (out / "mine" / "a.txt").write_text("also mine")
    write_run(out, RUN2)
    assert (out / "notes.txt").read_text() == "mine" and (
        out / "mine" / "a.txt"
    ).read_text() == "also mine"
    assert io.read_manifest(out) == sorted(RUN2)  # the user's files are not det_calib's
    write_run(out, RUN1)
    assert (out / "notes.txt").read_text() == "mine" and not (out / "figures" / "g.png").exists()


@pytest.mark.fast
def test_a_folder_det_calib_did_not_write_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("precious")
    with pytest.raises(InputError, match="did not write"):
        write_run(home, RUN1)
    assert snapshot(home) == {"thesis.tex": b"precious"} and leftovers(home) == []
    empty = tmp_path / "empty"
    empty.mkdir()
    write_run(empty, RUN1)  # an empty folder is fine
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        io.check_output_dir(a_file)


@pytest.mark.fast
def test_an_earlier_versions_output_is_recognised_and_its_staging_cleared(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "calibration.json").write_text(json.dumps({"det_calib_version": "0.1.0"}))
    (out / "report.html").write_text("old")
    (out / ".det_calib-staging-abc123").mkdir()
    (out / ".det_calib-staging-abc123" / "calibrated.pt").write_text("half")
    write_run(out, RUN2)
    assert set(snapshot(out)) == set(RUN2) | {io._MANIFEST}


@pytest.mark.fast
def test_a_failure_while_staging_leaves_the_previous_folder_byte_identical(tmp_path):
    out = tmp_path / "out"
    write_run(out, RUN1)
    before = snapshot(out)
    with pytest.raises(RuntimeError, match="boom"), io.staged_output(out) as stage:
        io.write_text(stage / "calibration.json", "new")
        raise RuntimeError("boom")
    assert snapshot(out) == before and leftovers(out) == []


@pytest.mark.fast
def test_log_lines_name_the_final_path_not_the_staging_folder(tmp_path, caplog):
    out = tmp_path / "out"
    log = logging.getLogger("det_calib.test")
    with caplog.at_level(logging.INFO, logger="det_calib"), io.staged_output(out) as stage:
        log.info("wrote %s (T=%s)", stage / "calibrated.pt", 1.5)
    messages = [r.getMessage() for r in caplog.records]
    assert f"wrote {out / 'calibrated.pt'} (T=1.5)" in messages
    assert not any(".det_calib-staging-" in m for m in messages)


# -------------------------------------------------------------------------------- leftovers
@pytest.mark.fast
def test_leftover_staging_folders_of_dead_runs_are_cleared(tmp_path):
    out = tmp_path / "out"
    write_run(out, RUN1)
    before = snapshot(out)
    stale = tmp_path / f".out.det_calib-staging-{dead_pid()}-xyz"
    stale.mkdir()
    (stale / "calibrated.pt").write_text("half-written")
    live = tmp_path / f".out.det_calib-staging-{os.getppid()}-xyz"  # a running process's: kept
    live.mkdir()
    assert io._recover_output_dir(out) == [stale]
    assert not stale.exists() and live.is_dir() and snapshot(out) == before
    write_run(out, RUN2)
    assert leftovers(out) == [live.name]


KILL = textwrap.dedent(
    """
    import os, shutil, sys
    from pathlib import Path
    from det_calib import io

    out, point = Path(sys.argv[1]), sys.argv[2]
    if point == "between-renames":  # the two-rename swap (no renameat2), killed between the renames
        io._exchange = lambda a, b: False
        rename = os.rename
        def kill_after_first(a, b):
            rename(a, b)
            if Path(b).name.startswith(".out.det_calib-old-"):
                os._exit(9)
        io.os.rename = kill_after_first
    elif point == "after-exchange":  # killed after the swap, before the old folder is removed
        io.shutil.rmtree = lambda *a, **k: os._exit(9)
    elif point == "while-staging":
        pass
    with io.staged_output(out) as stage:
        io.write_text(stage / "calibration.json", "new")
        io.write_text(stage / "figures" / "g.png", "new")
        if point == "while-staging":
            os._exit(9)
    """
)


@pytest.mark.fast
@pytest.mark.parametrize("point", ["while-staging", "between-renames", "after-exchange"])
def test_a_run_killed_at_any_step_of_the_swap_is_recovered(tmp_path, point):
    """Kill the publishing process (os._exit, no clean-up) at each step; the next run repairs it."""
    out = tmp_path / "out"
    write_run(out, RUN1)
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run(
        [sys.executable, "-c", KILL, str(out), point],
        check=False,
        env=env,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 9, res.stderr[-2000:]
    if point == "after-exchange":
        assert (
            out / "calibration.json"
        ).read_text() == "new"  # the swap had happened: the new folder
        assert (out / "notes.txt").read_text() == "mine"
    elif point == "between-renames":
        assert not out.exists()  # the moment the two-rename swap has no folder under the name
    else:
        assert snapshot(out) == before
    assert leftovers(out)  # what the killed run left
    io._recover_output_dir(out)
    assert leftovers(out) == []
    if point != "after-exchange":
        assert snapshot(out) == before  # the previous run's folder, byte-identical
    write_run(out, RUN2)  # and the next run works
    assert set(snapshot(out)) == set(RUN2) | {io._MANIFEST, "notes.txt"}


@pytest.mark.fast
def test_the_atomic_exchange_is_used_on_linux(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    (b / "x").write_text("b")
    if not sys.platform.startswith("linux"):
        pytest.skip("renameat2 is Linux's")
    assert io._exchange(a, b)
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"


# ----------------------------------------------------------------------- the pipeline's steps
FAST = {"head": "nms", "n_boot": 10, "progress": False, "run_val": False, "method": "temperature"}


@pytest.fixture(scope="module")
def previous_run(tmp_path_factory, demo_model_path, fixture_yaml):
    """A complete previous output (with the report) on the fixture split."""
    from det_calib.pipeline.calibrate_job import calibrate

    out = tmp_path_factory.mktemp("prev") / "out"
    calibrate(demo_model_path, fixture_yaml, out=out, report=True, **FAST)
    return out


@pytest.fixture
def previous(previous_run, tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(previous_run, out)
    return out


def _boom(*args, **kwargs):
    raise RuntimeError("injected failure")


@pytest.mark.parametrize(
    ("target", "options"),
    [
        ("det_calib.report.run_report.draft_report", {"report": True}),
        ("det_calib.pipeline.outputs.run_ultralytics_checks", {"report": False, "run_val": True}),
        ("det_calib.deploy.fold.write_calibrated_checkpoint", {"report": False}),
    ],
    ids=["report", "ultralytics-val", "checkpoint"],
)
def test_a_failure_in_a_late_step_leaves_the_previous_output_byte_identical(
    previous, demo_model_path, fixture_yaml, monkeypatch, target, options
):
    from det_calib.pipeline.calibrate_job import calibrate

    before = snapshot(previous)
    assert {"calibration.json", "report.html", "calibrated.pt", io._MANIFEST} <= set(before)
    monkeypatch.setattr(target, _boom)
    with pytest.raises(RuntimeError, match="injected failure"):
        calibrate(demo_model_path, fixture_yaml, out=previous, **{**FAST, **options})
    assert snapshot(previous) == before
    assert leftovers(previous) == []


def test_a_no_report_rerun_leaves_no_stale_report(previous, demo_model_path, fixture_yaml):
    from det_calib.pipeline.calibrate_job import calibrate

    old = json.loads((previous / "calibration.json").read_text())
    run = calibrate(demo_model_path, fixture_yaml, out=previous, report=False, **FAST)
    names = set(snapshot(previous))
    assert not {"report.html", "report.md"} & names and not any(
        n.startswith("figures/") for n in names
    )
    assert {
        "calibration.json",
        "boxes.parquet",
        "calibrated.pt",
        "summary.txt",
        "class_logits.npz",
        io._MANIFEST,
    } == names
    assert json.loads((previous / "calibration.json").read_text())["created"] >= old["created"]
    assert set(run.files) == {"calibration", "boxes", "checkpoint", "summary", "class_logits.npz"}
    assert all(p.is_file() and p.parent == previous for p in run.files.values())
