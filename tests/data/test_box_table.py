"""The box table and atomic output."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from det_calib.data.box_table import (
    SCHEMA,
    _empty_boxes,
    read_boxes,
    run_meta,
    validate_boxes,
    write_boxes,
)
from det_calib.errors import InputError
from det_calib.io import atomic_path, write_json

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


def _table(n=4):
    rng = np.random.default_rng(0)
    z = rng.normal(size=n)
    return pl.DataFrame(
        {
            "image": [f"im{i % 2}.png" for i in range(n)],
            "image_id": [i % 2 for i in range(n)],
            "split": ["test"] * n,
            "head": ["nms"] * n,
            "x1": np.zeros(n),
            "y1": np.zeros(n),
            "x2": np.full(n, 10.0),
            "y2": np.full(n, 5.0),
            "img_w": [64] * n,
            "img_h": [48] * n,
            "cls": [0] * n,
            "conf": 1 / (1 + np.exp(-z)),
            "logit": z,
            "correct": [True, False] * (n // 2),
            "iou": np.full(n, 0.6),
            "ignore": [False] * n,
            "loc_iou": np.full(n, 0.6),
        }
    )


def test_round_trip_keeps_schema(tmp_path):
    df = _table()
    path = write_boxes(validate_boxes(df), tmp_path / "boxes.parquet")
    back = read_boxes(path)
    assert back.schema == pl.Schema(SCHEMA)
    assert back.equals(validate_boxes(df))
    assert _empty_boxes().height == 0 and list(_empty_boxes().schema) == list(SCHEMA)
    assert run_meta(path) is None  # a table written without a run's fingerprints


def test_a_runs_table_carries_its_fingerprints(tmp_path):
    """A run's boxes.parquet: the same table, categorical labels written as strings, with the run's
    fingerprints in the Parquet metadata."""
    df = validate_boxes(_table())
    fp = {"model": "m", "splits": {"val": "d"}, "settings": {"conf": 0.001}}
    held = df.with_columns(pl.col("image", "head").cast(pl.Categorical))
    path = write_boxes(held, tmp_path / "boxes.parquet", fp)
    assert run_meta(path) == fp
    assert read_boxes(path).equals(df) and read_boxes(path).schema == pl.Schema(SCHEMA)
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="cannot read box table"):
        run_meta(tmp_path / "bad.parquet")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.drop("logit"), "missing columns \\['logit'\\]"),
        (lambda d: d.with_columns(pl.lit("two").alias("head")), "`head` must be one of"),
        (lambda d: d.with_columns(pl.lit(0).alias("img_w")), "must be positive"),
        (lambda d: d.with_columns(pl.lit(float("nan")).alias("x2")), "non-finite box"),
        (lambda d: d.with_columns(pl.lit(1.5).alias("conf")), "`conf` must lie in"),
        (lambda d: d.with_columns(pl.lit(float("inf")).alias("logit")), "non-finite"),
        # nan and null fail each check as nan failed numpy's (the checks run as polars expressions)
        (lambda d: d.with_columns(pl.lit(float("nan")).alias("conf")), "`conf` must lie in"),
        (lambda d: d.with_columns(pl.lit(None, pl.Float64).alias("y1")), "non-finite box"),
        (lambda d: d.with_columns(pl.lit(float("nan")).alias("loc_iou")), "`loc_iou` must lie"),
        (lambda d: d.with_columns(pl.lit(-0.5).alias("calibrated")), "`calibrated` must lie"),
    ],
)
def test_validation_names_the_problem(change, message):
    with pytest.raises(InputError, match=message):
        validate_boxes(change(_table()))


def test_read_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        read_boxes(tmp_path / "nope.parquet")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="cannot read box table"):
        read_boxes(tmp_path / "bad.parquet")


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    target = tmp_path / "calibration.json"
    write_json(target, {"temperature": {"nms": 1.0}})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text('{"half": ')
            raise RuntimeError("interrupted")
    assert json.loads(target.read_text()) == {"temperature": {"nms": 1.0}}
    assert [p.name for p in tmp_path.iterdir()] == ["calibration.json"]  # no temp file left


def test_json_writes_nan_as_null(tmp_path):
    write_json(
        tmp_path / "x.json",
        {"a": float("nan"), "b": np.float32(0.5), "c": np.int64(3), "d": [np.nan]},
    )
    assert json.loads((tmp_path / "x.json").read_text()) == {
        "a": None,
        "b": 0.5,
        "c": 3,
        "d": [None],
    }


def test_atomic_files_get_normal_permissions(tmp_path):
    import os

    umask = os.umask(0o022)
    try:
        path = write_json(tmp_path / "x.json", {})
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644


def test_the_head_vocabulary_has_one_home():
    """Every per-head table covers exactly the heads of `Head`, and the modules that need the
    names take them from det_calib.data.box_table."""
    from typing import get_args

    from det_calib.capture import parts as parts
    from det_calib.data import box_table as boxes
    from det_calib.deploy import fold as fold
    from det_calib.job import settings as pipeline
    from det_calib.report import common

    assert boxes.HEADS == get_args(boxes.Head) == ("nms", "e2e", "detr")
    assert (
        pipeline._HEAD_CHOICES
        == get_args(pipeline._HeadChoice)
        == ("auto", "nms", "e2e", "detr", "both")
    )
    for table in (boxes.HEAD_LABEL, boxes.HEAD_BRANCH, boxes.HEAD_PREDICT_NMS):
        assert tuple(table) == boxes.HEADS
    assert fold._BRANCHES is boxes.HEAD_BRANCH and common.HEAD_LABEL is boxes.HEAD_LABEL
    assert list(parts._HEAD_RANK) == list(boxes.HEADS)
