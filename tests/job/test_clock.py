"""The stage clock (det_calib.job.clock) and its record (det_calib.record.timings)."""

from __future__ import annotations

import json
import time

import pytest

from det_calib.errors import InputError
from det_calib.job import clock
from det_calib.record.timings import StageTime, Timings

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


def _busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_stages_are_exclusive_and_add_up_to_the_wall():
    clock.start()
    try:
        with clock.stage("capture"):
            _busy(0.05)
            with clock.stage("verification"):  # pauses capture
                _busy(0.1)
            _busy(0.05)
        _busy(0.03)  # no stage: other
        with clock.stage("capture"):  # a stage entered again adds up
            _busy(0.02)
        t = clock.timings()
    finally:
        clock.reset()
    assert list(t.stages) == ["capture", "verification", "other"]
    assert t.started == "call"
    assert sum(s.wall for s in t.stages.values()) == pytest.approx(t.wall, abs=1e-9)
    assert sum(s.cpu for s in t.stages.values()) == pytest.approx(t.cpu, abs=1e-9)
    assert t.stages["verification"].cpu == pytest.approx(0.1, abs=0.02)
    assert t.stages["capture"].cpu == pytest.approx(0.12, abs=0.03)
    assert t.stages["other"].cpu == pytest.approx(0.03, abs=0.02)
    assert t.stages["verification"].wall >= t.stages["verification"].cpu * 0.5


def test_a_childs_cpu_is_charged_to_its_stage_and_to_the_total():
    clock.add_cpu("verification", 1.0)  # idle clock: nothing
    clock.start()
    try:
        with clock.stage("report"):
            _busy(0.05)
        clock.add_cpu("verification", 2.5)  # a child ran the verification beside the report
        t = clock.timings()
    finally:
        clock.reset()
    assert list(t.stages) == ["report", "verification", "other"]
    assert (
        t.stages["verification"].cpu == pytest.approx(2.5) and t.stages["verification"].wall == 0.0
    )
    assert t.cpu == pytest.approx(sum(s.cpu for s in t.stages.values()), abs=1e-9)
    assert t.cpu >= 2.5 + 0.04
    assert sum(s.wall for s in t.stages.values()) == pytest.approx(t.wall, abs=1e-9)


def test_since_process_charges_the_start_up_to_imports():
    clock.start(since_process=True)
    try:
        t = clock.timings()
    finally:
        clock.reset()
    assert t.started == "process"
    # this process (pytest) has been running for a while and has used CPU: all of it is charged to imports
    assert t.seconds("imports") > 0.1 and t.stages["imports"].cpu > 0.1
    assert t.wall == pytest.approx(sum(s.wall for s in t.stages.values()), abs=1e-9)


def test_an_idle_clock_records_nothing():
    clock.reset()
    with clock.stage("capture"):
        pass
    assert clock.timings() is None and not clock._started()


def test_line_adds_up_and_groups_the_start_up():
    t = Timings(
        wall=10.0,
        cpu=12.0,
        stages={
            "imports": StageTime(1.0, 1.0),
            "model load": StageTime(0.5, 0.5),
            "data check": StageTime(0.25, 0.2),
            "figures": StageTime(2.0, 2.0),
            "capture": StageTime(5.0, 7.0),
            "report": StageTime(1.0, 1.0),
            "other": StageTime(0.25, 0.3),
        },
    )
    line = t.line()
    assert line == (
        "time: 10.0 s wall, 12.0 s CPU: start-up 1.8 (imports 1.0, model load 0.5, data check "
        "0.2), "
        "capture 5.0, figures 2.0, report 1.0, other 0.2"
    )
    assert t.startup == 1.75


def test_record_round_trip_and_bad_input():
    t = Timings(
        wall=3.5, cpu=4.25, stages={"capture": StageTime(3.0, 4.0), "other": StageTime(0.5, 0.25)}
    )
    assert Timings.from_dict(json.loads(json.dumps(t.to_dict()))) == t
    assert Timings.from_dict(None) is None
    with pytest.raises(
        InputError, match=r"`timings.stages.capture.wall` must be a number of seconds >= 0"
    ):
        Timings.from_dict({"wall": 1, "cpu": 1, "stages": {"capture": {"wall": "x", "cpu": 1}}})
    with pytest.raises(
        InputError, match=r"`timings.wall` must be a number of seconds >= 0, got -1"
    ):
        Timings.from_dict({"wall": -1, "cpu": 1, "stages": {}})
    with pytest.raises(InputError, match=r"`timings.stages` is missing"):
        Timings.from_dict({"wall": 1, "cpu": 1})


def test_a_job_takes_the_command_lines_clock_once():
    clock.start(since_process=True)  # the command line
    try:
        clock.begin()  # the job it runs: the same clock, from the process's start
        assert clock.timings().started == "process"
        with clock.stage("capture"):
            pass
        clock.begin()  # a second job in the same process: a fresh clock from its call
        t = clock.timings()
        assert t.started == "call" and "capture" not in t.stages
    finally:
        clock.reset()


def test_nothing_unneeded_is_imported_before_the_first_image(tmp_path, small_demo):
    """The start-up of calibrate (the command line's question to each task, imports, model load, data
    check) loads no plot, export or evaluation library, nor a module of det_calib that loads one: they are imported
    when their stage comes (a fresh interpreter). The summary's
    wording (``det_calib.report.record_words``) is plain text and may load; the report's pages and plots not.
    The default demo data is the session's small rendering (its cache and split sizes), not a full one."""
    import subprocess
    import sys
    from pathlib import Path

    from conftest import SMALL_DEMO_SIZES

    code = f"""
import sys
from pathlib import Path
from det_calib.demo.shapes import SPLIT_SIZES
SPLIT_SIZES.update({SMALL_DEMO_SIZES!r})
from det_calib import cli
from det_calib.pipeline.calibrate_job import load
from det_calib.job.settings import Settings
# the command line first asks every registered task whether the run is its own (a classifier's is not)
args = cli._parser().parse_args(["calibrate", "--limit", "2", "--out", {str(tmp_path / "out")!r}])
assert cli._own_run("calibrate", args) is None
load(None, None, Path({str(tmp_path / "out")!r}), Settings(limit=2, progress=False, method="temperature"))
print(" ".join(sorted(sys.modules)))
"""
    repo = Path(__file__).resolve().parents[2]
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=repo,
        timeout=300,
        env={
            **__import__("os").environ,
            "PYTHONPATH": str(repo),
            "YOLO_OFFLINE": "1",
            "DET_CALIB_CACHE": str(small_demo["detect"].parents[1]),
        },
    )
    assert p.returncode == 0, p.stderr
    loaded = set(p.stdout.split())
    assert {
        "torch",
        "ultralytics",
        "det_calib.capture.predictor",
    } <= loaded  # what the first image needs
    for name in (
        "matplotlib",
        "scipy",
        "pycocotools",
        "onnx",
        "onnxruntime",
        "openvino",
        "det_calib.report.run_report",
        "det_calib.report.plots",
        "det_calib.deploy.fold",
    ):
        assert name not in loaded, name


def test_the_command_line_tunes_its_process_and_a_library_call_does_not():
    """The command line tunes its own process once (``tuned_process``, det_calib.job.process_tuning): torch's
    and Ultralytics' objects imported and moved out of the cyclic collector's walk (``gc.freeze``), the
    young collection every 50,000 objects, numpy's OpenBLAS on one thread. A job called from Python leaves
    its caller's process alone (a fresh interpreter: the tuning is for the whole process)."""
    import subprocess
    import sys
    from pathlib import Path

    code = """
import gc
from det_calib.job import clock
from det_calib.job.capturing import startup_imports
from det_calib.job.process_tuning import blas_threads, tuned_process
clock.start()  # a library call's clock
startup_imports()
library = (gc.get_freeze_count(), gc.get_threshold()[0], blas_threads())
with tuned_process(owned=False, preload=True):  # a command called from Python: left alone
    alone = (gc.get_freeze_count(), gc.get_threshold()[0], blas_threads())
with tuned_process(owned=True, preload=True):  # the command line's
    print(*library, *alone, gc.get_freeze_count(), len(gc.get_objects()), gc.get_threshold()[0],
          blas_threads())
"""
    repo = Path(__file__).resolve().parents[2]
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=repo,
        timeout=300,
        env={
            **__import__("os").environ,
            "PYTHONPATH": str(repo),
            "YOLO_OFFLINE": "1",
            "OPENBLAS_NUM_THREADS": "2",
        },
    )
    assert p.returncode == 0, p.stderr
    out = p.stdout.split()
    library_frozen, library_threshold, library_blas, frozen, walked, threshold, blas = (
        out[:3] + out[6:]
    )
    assert out[3:6] == out[:3]  # not owned (a command called from Python): nothing changes
    assert (int(library_frozen), int(library_threshold)) == (0, 700) and library_blas in (
        "2",
        "None",
    )
    assert (
        int(frozen) > 50_000 > int(walked)
    )  # the start-up's objects frozen: the collector walks new ones only
    assert int(threshold) == 50_000 and blas in ("1", "None")


def test_a_stage_is_a_decorator_and_takes_its_own_peak_memory():
    """``@clock.stage`` on a step function charges each call; each stage's peak resident memory is its own
    (the high-water mark starts afresh at every boundary, on Linux), recorded and read back."""
    import numpy as np

    @clock.stage("figures")
    def big() -> float:
        a = np.ones(
            160 * 2**20 // 8
        )  # 160 MiB, touched (more than an allocator keeps resident after a test)
        return float(a.sum())

    clock.start()
    try:
        with clock.stage("capture"):
            _busy(0.01)
        assert big() == 160 * 2**20 // 8 and big() == 160 * 2**20 // 8
        t = clock.timings()
    finally:
        clock.reset()
    assert list(t.stages) == ["capture", "figures", "other"]
    assert t.stages["figures"].peak_rss >= t.stages["capture"].peak_rss + 64 * 2**20
    assert Timings.from_dict(json.loads(json.dumps(t.to_dict()))) == Timings.from_dict(t.to_dict())
    assert t.to_dict()["stages"]["figures"]["peak_rss"] == t.stages["figures"].peak_rss
    with pytest.raises(
        InputError, match=r"`timings.stages.capture.peak_rss` must be a number of bytes >= 0"
    ):
        Timings.from_dict(
            {"wall": 1, "cpu": 1, "stages": {"capture": {"wall": 1, "cpu": 1, "peak_rss": -1}}}
        )


def test_a_shell_that_execs_the_command_does_not_lend_it_its_start(tmp_path):
    """`bash -c 'pip install ... && det-calib calibrate'` runs det-calib in the shell's own process (an
    exec keeps the fork's start time in /proc/self/stat): the clock starts at the interpreter's start,
    not at the shell's. A shell that sleeps 3 s, then execs Python: the fork is over 3 s old when
    det_calib reads it, the start-up the clock charges is not."""
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    code = """
import os
from pathlib import Path
from det_calib import FIRST_IMPORT
from det_calib.job import clock
fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
fork_age = float(Path("/proc/uptime").read_text().split()[0]) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
clock.start(since_process=True, first_import=FIRST_IMPORT)  # as the command line starts it
print(fork_age, clock.timings().seconds("imports"))
"""
    repo = Path(__file__).resolve().parents[2]
    p = subprocess.run(
        ["sh", "-c", f"sleep 3; exec {shlex.quote(sys.executable)} -c {shlex.quote(code)}"],
        capture_output=True,
        text=True,
        cwd=repo,
        timeout=120,
        env={**__import__("os").environ, "PYTHONPATH": str(repo)},
    )
    assert p.returncode == 0, p.stderr
    fork_age, imports = map(float, p.stdout.split())
    assert fork_age >= 3.0  # the process did start with the shell
    assert (
        0 < imports < fork_age - 2.5
    )  # the clock's start-up: the interpreter's, without the shell's sleep
