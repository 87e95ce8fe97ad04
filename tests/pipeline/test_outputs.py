"""The run's verification (det_calib.pipeline.outputs.Verification): the Ultralytics val pass in a child process
beside the rest of the run gives the checks of the same pass run in the run's own process."""

from __future__ import annotations

import logging
import multiprocessing.context
import os
import tempfile

import pytest

from det_calib.pipeline import outputs

OPTIONS = {"head": "nms", "n_boot": 10, "progress": False, "method": "temperature", "report": False}


def _run(model, out):
    from det_calib.demo import fixture_data_yaml
    from det_calib.pipeline.calibrate_job import calibrate

    return calibrate(model, fixture_data_yaml(), out=out, **OPTIONS)


def _checks(run) -> dict:
    return {h: run.summary["ultralytics_val"][h] for h in run.result.heads}


def _die(conn, *args):  # a child that ends without sending its checks (killed, out of memory)
    os._exit(3)


@pytest.mark.skipif(
    not outputs._runs_beside(), reason="needs Linux and two cores to run the val pass beside"
)
def test_the_val_pass_beside_the_run_gives_the_checks_of_the_pass_in_process(
    demo_model_path, tmp_path, monkeypatch, caplog
):
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(
        tempfile, "tempdir", str(tmp_path / "tmp")
    )  # where the checkpoint waits for the val pass
    beside = _run(demo_model_path, tmp_path / "beside")
    check = _checks(beside)["nms"]
    assert check["original"]["map50_95"] > 0.1 and check["identical_at_equivalent_floor"] is True
    t = beside.result.timings
    # the child's CPU is the verification's; the stages still add up to the totals
    assert t.stages["verification"].cpu > 0.5
    assert sum(s.cpu for s in t.stages.values()) == pytest.approx(t.cpu, abs=0.01)
    assert sum(s.wall for s in t.stages.values()) == pytest.approx(t.wall, abs=0.01)
    assert (
        not list((tmp_path / "tmp").glob("det_calib_verify_*"))
        and (tmp_path / "beside" / "calibrated.pt").is_file()
    )

    monkeypatch.setattr(outputs, "_runs_beside", lambda: None)
    assert _checks(_run(demo_model_path, tmp_path / "here")) == _checks(beside)

    # a GPU run's child: a fresh interpreter (CUDA does not survive a fork), the inputs pickled without the model
    monkeypatch.setattr(outputs, "_runs_beside", lambda: "spawn")
    spawned = _run(demo_model_path, tmp_path / "spawned")
    assert (
        _checks(spawned) == _checks(beside)
        and spawned.result.timings.stages["verification"].cpu > 0.5
    )
    assert not list((tmp_path / "tmp").glob("det_calib_verify_*"))

    monkeypatch.setattr(outputs, "_runs_beside", lambda: "fork")
    monkeypatch.setattr(outputs, "_checks_in_child", _die)
    with caplog.at_level(logging.WARNING, logger="det_calib.pipeline.outputs"):
        lost = _run(demo_model_path, tmp_path / "lost")
    assert _checks(lost) == _checks(beside)
    assert "ended without a result (exit code 3): running it here" in caplog.text
    assert not list((tmp_path / "tmp").glob("det_calib_verify_*"))

    def no_process(self):
        raise OSError("Resource temporarily unavailable")

    monkeypatch.setattr(multiprocessing.context.ForkProcess, "start", no_process)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="det_calib.pipeline.outputs"):
        unforked = _run(demo_model_path, tmp_path / "unforked")
    assert _checks(unforked) == _checks(beside)
    assert (
        "cannot start the Ultralytics val process (Resource temporarily unavailable)" in caplog.text
    )


def test_calibration_json_is_written_once_last(
    demo_model_path, fixture_yaml, tmp_path, monkeypatch
):
    """A run writes its record once, after everything that reads it (the thresholds, the report, the
    verification's checks, the timings): every atomic write of the run, in order, counted."""
    import contextlib
    import json

    from det_calib import io
    from det_calib.pipeline.calibrate_job import calibrate

    written: list[str] = []
    atomic_path = io.atomic_path

    @contextlib.contextmanager
    def counted(path):
        with atomic_path(path) as tmp:
            yield tmp
        written.append(os.path.basename(path))

    monkeypatch.setattr(io, "atomic_path", counted)
    run = calibrate(
        demo_model_path,
        fixture_yaml,
        out=tmp_path / "out",
        **{**OPTIONS, "report": True, "target_precision": 0.8},
    )
    assert written.count("calibration.json") == 1 and written.count("summary.txt") == 1
    after = written[written.index("calibration.json") + 1 :]
    assert set(after) <= {"summary.txt", io._MANIFEST}, (
        after
    )  # only the summary (and the folder's manifest) follow it
    assert {"thresholds.json", "report.html", "report.md"} <= set(
        written[: written.index("calibration.json")]
    )
    doc = json.loads((tmp_path / "out" / "calibration.json").read_text())
    assert doc == run.summary and doc["ultralytics_val"]["nms"]["original"]["map50_95"] > 0.1
    assert set(doc["timings"]["stages"]) >= {
        "capture",
        "fit and choice",
        "figures",
        "verification",
        "report",
    }
