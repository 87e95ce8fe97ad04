"""calibrate --boxes: the boxes of an earlier run or of capture parts, no forward pass, same results."""

from __future__ import annotations

import shutil

import polars as pl
import pytest

from det_calib.capture.parts import ModelFacts, capture_to_parts
from det_calib.cli import main
from det_calib.data.box_table import _RUN_KEY, run_meta, write_boxes
from det_calib.deploy.fold import write_calibrated_checkpoint
from det_calib.errors import InputError
from det_calib.job.model_process import _read_facts
from det_calib.pipeline.calibrate_job import calibrate

FAST = {"n_boot": 20, "report": False, "run_val": False, "progress": False, "method": "temperature"}


def _result(run) -> dict:
    d = run.result.to_dict()
    for k in ("created", "seconds", "timings"):  # the machine's figures, not the run's
        d.pop(k)
    return d


@pytest.fixture(scope="module")
def first(tmp_path_factory, demo_model_path, fixture_yaml):
    return calibrate(demo_model_path, fixture_yaml, out=tmp_path_factory.mktemp("first"), **FAST)


def test_boxes_parquet_records_fingerprints(first, demo_model_path):
    from det_calib.capture.parts import model_fingerprint

    meta = run_meta(first.out_dir / "boxes.parquet")
    assert meta["model"] == model_fingerprint(demo_model_path)
    assert set(meta["splits"]) == set(first.boxes["split"].unique())
    assert (
        meta["heads"] == ["nms", "e2e"]
        and meta["settings"]["conf"] == 0.001
        and meta["settings"]["batch"] == 1
    )
    assert meta["facts"] == _read_facts(demo_model_path).record()


def test_the_models_facts_are_read_where_the_boxes_recorded_them(first, demo_model_path, tmp_path):
    """The facts recorded with the boxes of this very checkpoint are those the model gives (a run
    reusing them reads them there: no model child, tests/system/test_scale.py); boxes of another
    checkpoint, or recorded without facts, give none (the model is read)."""
    here = _read_facts(demo_model_path)
    assert ModelFacts.recorded(first.out_dir, demo_model_path) == here
    assert ModelFacts.recorded(first.out_dir / "boxes.parquet", demo_model_path) == here
    other = write_calibrated_checkpoint(demo_model_path, tmp_path / "other.pt", {"nms": 2.0})
    assert ModelFacts.recorded(first.out_dir, other) is None
    meta = run_meta(first.out_dir / "boxes.parquet")
    del meta["facts"]
    write_boxes(pl.read_parquet(first.out_dir / "boxes.parquet"), tmp_path / "old.parquet", meta)
    assert ModelFacts.recorded(tmp_path / "old.parquet", demo_model_path) is None
    assert ModelFacts.recorded(tmp_path / "nothing", demo_model_path) is None


def test_reuse_run_gives_the_same_results(first, demo_model_path, fixture_yaml, tmp_path):
    again = calibrate(demo_model_path, fixture_yaml, out=tmp_path, boxes=str(first.out_dir), **FAST)
    assert _result(again) == _result(first)
    assert again.boxes.equals(first.boxes)
    # the new boxes.parquet carries the same fingerprints, so it can be reused in turn
    assert run_meta(tmp_path / "boxes.parquet") == run_meta(first.out_dir / "boxes.parquet")


def test_a_run_folder_alone_reuses_its_own_model_and_data(first, tmp_path, capsys):
    """`--boxes RUN` without `--model` and `--data` takes the run's recorded model and data (not the
    embedded demo's, whose splits the run's boxes do not hold); where the data has moved since, one line
    names it."""
    again = calibrate(None, None, out=tmp_path / "again", boxes=str(first.out_dir), **FAST)
    assert _result(again) == _result(first)
    moved = tmp_path / "moved"
    shutil.copytree(first.out_dir, moved)
    rec = (moved / "calibration.json").read_text()
    data = first.result.data
    (moved / "calibration.json").write_text(rec.replace(data, data + ".gone"))
    with pytest.raises(InputError, match=r"recorded its data as .*\.gone, which is not there"):
        calibrate(None, None, out=tmp_path / "o", boxes=str(moved), **FAST)


def test_boxes_of_a_limited_run_take_its_limit(demo_model_path, fixture_yaml, tmp_path):
    """The boxes of a run captured with ``--limit`` hold its splits' first images: ``--boxes RUN``
    without ``--limit`` takes the recorded one (all the images would not match the boxes)."""
    first = calibrate(demo_model_path, fixture_yaml, out=tmp_path / "a", limit=8, **FAST)
    assert run_meta(tmp_path / "a" / "boxes.parquet")["settings"]["limit"] == 8
    again = calibrate(None, None, out=tmp_path / "b", boxes=str(tmp_path / "a"), iou=0.6, **FAST)
    assert again.result.settings.eval_split == first.result.settings.eval_split
    assert again.result.results["nms"].eval.images == first.result.results["nms"].eval.images
    assert again.boxes["image"].unique().sort().equals(first.boxes["image"].unique().sort())


def test_reuse_with_other_matching_settings(first, demo_model_path, fixture_yaml, tmp_path):
    """Settings after the capture (matching IoU) may change: the boxes are matched again."""
    a = calibrate(
        demo_model_path, fixture_yaml, out=tmp_path / "a", boxes=str(first.out_dir), iou=0.7, **FAST
    )
    b = calibrate(demo_model_path, fixture_yaml, out=tmp_path / "b", iou=0.7, **FAST)
    assert _result(a) == _result(b)
    assert a.result.temperatures != first.result.temperatures


def test_reuse_parts_of_the_whole_split(first, demo_model_path, fixture_yaml, tmp_path):
    """Parts of split `val` (captured as two shards) serve its fit and eval halves, matched by image name."""
    for i in range(2):
        capture_to_parts(
            demo_model_path,
            fixture_yaml,
            "val",
            tmp_path / "parts" / "val",
            shard=f"{i}/2",
            progress=False,
        )
    run = calibrate(
        demo_model_path, fixture_yaml, out=tmp_path / "out", boxes=str(tmp_path / "parts"), **FAST
    )
    assert _result(run) == _result(first)
    assert run.boxes.equals(first.boxes)
    # the parts record the model's facts (one sub-folder of parts per split)
    assert ModelFacts.recorded(tmp_path / "parts", demo_model_path) == _read_facts(demo_model_path)


def test_parts_captured_at_another_nms_iou_are_taken_at_it(demo_model_path, fixture_yaml, tmp_path):
    """``det-calib capture --iou 0.5`` sets the NMS IoU, which ``calibrate`` has no option for: a run
    on those parts takes it from them (and records it), as a run that captured at it would."""
    capture_to_parts(
        demo_model_path, fixture_yaml, "val", tmp_path / "parts" / "val", progress=False, iou=0.5
    )
    run = calibrate(
        demo_model_path, fixture_yaml, out=tmp_path / "out", boxes=str(tmp_path / "parts"), **FAST
    )
    direct = calibrate(demo_model_path, fixture_yaml, out=tmp_path / "d", nms_iou=0.5, **FAST)
    assert run.result.settings.nms_iou == 0.5 and _result(run) == _result(direct)


def test_refuses_another_model(first, demo_model_path, fixture_yaml, tmp_path):
    other = write_calibrated_checkpoint(demo_model_path, tmp_path / "other.pt", {"nms": 2.0})
    with pytest.raises(InputError, match="captured with another model"):
        calibrate(other, fixture_yaml, out=tmp_path / "o", boxes=str(first.out_dir), **FAST)


def test_refuses_other_data(first, demo_model_path, fixture_yaml, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(fixture_yaml.parent, root)
    label = sorted((root / "labels" / "fixture").glob("*.txt"))[0]
    label.write_text(label.read_text() + "0 0.5 0.5 0.1 0.1\n")
    with pytest.raises(InputError, match="captured on other data for split `val"):
        calibrate(
            demo_model_path,
            root / "data.yaml",
            out=tmp_path / "o",
            boxes=str(first.out_dir),
            **FAST,
        )


def test_refuses_other_capture_settings(first, demo_model_path, fixture_yaml, tmp_path):
    with pytest.raises(InputError, match="captured with `conf_floor` 0.001, not 0.01"):
        calibrate(
            demo_model_path,
            fixture_yaml,
            out=tmp_path,
            boxes=str(first.out_dir),
            conf_floor=0.01,
            **FAST,
        )


def test_refuses_a_table_without_fingerprints(first, demo_model_path, fixture_yaml, tmp_path):
    (tmp_path / "old").mkdir()
    pl.read_parquet(first.out_dir / "boxes.parquet").write_parquet(
        tmp_path / "old" / "boxes.parquet"
    )
    assert run_meta(tmp_path / "old" / "boxes.parquet") is None and _RUN_KEY
    with pytest.raises(InputError, match="records no model/data fingerprints"):
        calibrate(
            demo_model_path, fixture_yaml, out=tmp_path / "o", boxes=str(tmp_path / "old"), **FAST
        )


def test_cli_boxes_error_is_one_line(first, demo_model_path, fixture_yaml, tmp_path, capsys):
    rc = main(
        [
            "calibrate",
            "--model",
            str(demo_model_path),
            "--data",
            str(fixture_yaml),
            "--out",
            str(tmp_path),
            "--boxes",
            str(first.out_dir),
            "--conf-floor",
            "0.01",
            "-q",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "`--conf-floor` 0.001, not 0.01" in err


def test_reuse_parts_keeps_a_segment_models_masks(shapes_seg_path, polygon_fixture_yaml, tmp_path):
    """--boxes from capture parts of a segment model on polygon labels: each split's rows keep their `segm`
    RLEs."""
    from det_calib.capture.predictor import capture
    from det_calib.job import BoxSource, job_inputs
    from det_calib.job.inputs import load_splits
    from det_calib.job.settings import Settings

    s = Settings(fit_split="fixture", eval_split="val", imgsz=320, head="nms", progress=False)
    inputs = job_inputs(shapes_seg_path, polygon_fixture_yaml, s)
    splits = load_splits(inputs.ds, s)
    for sp in splits:
        capture_to_parts(
            shapes_seg_path,
            polygon_fixture_yaml,
            sp.name,
            tmp_path / sp.name,
            shard="0/1",
            imgsz=320,
            progress=False,
        )
    s.boxes = str(tmp_path)  # the run's boxes from the parts (job.reuse)
    got = BoxSource(inputs, splits, s).boxes(splits[0])["nms"]
    direct = capture(shapes_seg_path, splits[0].images, head="nms", imgsz=320, progress=False)
    assert got["segm"].dtype == pl.Binary and got.height == direct.height > 0
    assert got["segm"].null_count() == 0 and got["segm"].to_list() == direct["segm"].to_list()


def test_capture_settings_record_the_batch_the_capture_ran(monkeypatch):
    """A run records the batch its capture ran: the one asked for, else 16 on a CUDA device and 1 elsewhere
    (as the capturer resolves it); an export's capture (or an ensemble's members) runs one image a pass."""
    import torch

    from det_calib.job.settings import Settings

    assert Settings().batch is None
    assert Settings().capture_settings(320) == {
        "conf": 0.001,
        "iou": 0.7,
        "max_det": 300,
        "imgsz": 320,
        "batch": 1,
        "limit": None,
    }
    assert Settings(batch=4).capture_settings(320)["batch"] == 4
    assert Settings(device="0").capture_settings(320, batch=1)["batch"] == 1
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert [Settings(device=d).capture_settings(320)["batch"] for d in (None, "0", "cpu")] == [
        16,
        16,
        1,
    ]
    with pytest.raises(InputError, match="`batch` to be an integer larger than 0, but got 0"):
        Settings(batch=0).validate()
    Settings(batch=None).validate()
