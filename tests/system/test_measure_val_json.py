"""benchmarks/measure_val_json.py's reason why Ultralytics val(save_json=True) files are not predict's
(docs/detections.md): on the demo detector, val as written scores other boxes (multi-label NMS, more rows;
the scores of the ``.pt`` run's boxes moved by its letterbox), and val with single-label NMS, one image per
batch and no half-stride padding writes predict's scores to the JSON's 5 decimals, so its file calibrates to
the ``.pt`` run's figures."""

from __future__ import annotations

import polars as pl
import pytest

pytestmark = pytest.mark.slow

N = 16  # images of each split


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("measure_val_json")


@pytest.fixture(scope="module")
def setup(bench, tmp_path_factory, demo_model_path):
    work = tmp_path_factory.mktemp("val_json")
    data = bench.limited_data(work, N)
    pt = bench.calibrate(data, work / "pt", model=demo_model_path, head="nms")
    boxes = pl.read_parquet(work / "pt" / "boxes.parquet").filter(pl.col("head") == "nms")
    return work, data, pt, boxes


def test_val_without_its_padding_writes_predicts_scores(bench, setup, demo_model_path):
    work, data, pt, boxes = setup
    path = bench.val_json(
        demo_model_path, data, work, "single_b1_pad0", batch=1, single_label=True, pad=0.0
    )
    d = bench.score_difference(boxes, path)
    assert d["rows"] == boxes.height and d["lost"] <= 0.01 * boxes.height
    assert d["max"] <= 5e-6 + 1e-9  # the JSON's 5 decimals
    r = bench.calibrate(data, work / "run_pad0", detections=str(path))
    assert r["method"] == pt["method"]
    assert r["raw"] == pytest.approx(pt["raw"], abs=0.002) and r["calibrated"] == pytest.approx(
        pt["calibrated"], abs=0.002
    )


def test_val_as_written_scores_other_boxes(bench, setup, demo_model_path):
    work, data, _, boxes = setup
    path = bench.val_json(
        demo_model_path, data, work, "val", batch=16, single_label=False, pad=None
    )
    d = bench.score_difference(boxes, path)
    assert d["rows"] > 1.5 * boxes.height  # multi-label NMS: a box kept once per class above conf
    assert (
        d["lost"] > 0.1 * boxes.height and d["mean"] > 1e-3
    )  # the letterbox moved boxes and scores
    top = bench.score_difference(boxes, bench.top_class(path))
    assert (
        boxes.height * 0.8 < top["rows"] < d["rows"]
    )  # one row per box: predict's count, not its boxes
    assert top["mean"] > 1e-3
