"""The typed codec of the JSON records (det_calib/codec.py): known answers per type and per field option,
one-line errors naming the field, and every record class written back byte for byte as the hand-written
readers and writers it replaced wrote it (tests/data/codec_records.json: samples of det_calib's own files,
taken before the codec; see tests/data/README.md)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from det_calib.check.check_record import (
    CalibrationTests,
    CheckResult,
    ClassCheck,
    CrowdedImage,
    DetectionTests,
    HeadCheck,
    HeadShift,
    ShiftTests,
)
from det_calib.codec import Record, decode, encode, spec
from det_calib.data.matching_rule import MatchingRule
from det_calib.ensemble.ensemble_record import (
    EnsembleHead,
    EnsembleRecord,
    FusionRow,
    FusionSettingsRecord,
    MemberFigures,
    MemberRecord,
)
from det_calib.errors import InputError
from det_calib.io import to_json
from det_calib.job.detections_file import DetectionsRead
from det_calib.record.calibrator_record import Calibrator, CandidateRecord
from det_calib.record.eval_record import (
    BinGap,
    ClassResult,
    EvalResult,
    FitResult,
    FloorGap,
    OperatingFigures,
    TemperatureFit,
    Thresholded,
)
from det_calib.record.run_result import (
    Bootstrap,
    DetectionChange,
    RecordedSettings,
    RunResult,
    ValCheck,
    ValMap,
)
from det_calib.record.size_record import SizeFigures
from det_calib.record.threshold_shift import ThresholdShift
from det_calib.record.timings import StageTime, Timings

pytestmark = pytest.mark.fast

SAMPLES = json.loads(
    (Path(__file__).parent / "data" / "codec_records.json").read_text(encoding="utf-8")
)
CLASSES = {
    c.__name__: c
    for c in (
        BinGap,
        Bootstrap,
        CalibrationTests,
        Calibrator,
        CandidateRecord,
        CheckResult,
        ClassCheck,
        ClassResult,
        CrowdedImage,
        DetectionChange,
        DetectionTests,
        DetectionsRead,
        EnsembleHead,
        EnsembleRecord,
        EvalResult,
        FitResult,
        FloorGap,
        FusionRow,
        FusionSettingsRecord,
        HeadCheck,
        HeadShift,
        MatchingRule,
        MemberFigures,
        MemberRecord,
        OperatingFigures,
        RecordedSettings,
        ShiftTests,
        SizeFigures,
        StageTime,
        TemperatureFit,
        ThresholdShift,
        Thresholded,
        Timings,
        ValCheck,
        ValMap,
    )
}


def test_the_samples_hold_every_record_class():
    assert sorted(SAMPLES) == sorted(CLASSES)


@pytest.mark.parametrize(
    ("name", "i"), [(n, i) for n, vs in SAMPLES.items() for i in range(len(vs))]
)
def test_every_record_class_writes_back_what_the_old_writers_wrote(name, i):
    """Read with the codec, written with the codec: the same text, key order included."""
    sample = SAMPLES[name][i]
    rec = decode(CLASSES[name], sample, name)
    assert to_json(encode(rec)) == to_json(sample)
    assert decode(CLASSES[name], json.loads(to_json(encode(rec))), name) == rec


def test_a_record_reads_its_values_typed():
    rec = decode(CheckResult, SAMPLES["CheckResult"][0])
    assert isinstance(rec.timings, Timings) and all(
        isinstance(s, StageTime) for s in rec.timings.stages.values()
    )
    ens = decode(EnsembleRecord, SAMPLES["EnsembleRecord"][0])
    head = next(iter(ens.heads.values()))
    assert all(
        isinstance(k, int) for k in head.agreement
    )  # keys written as strings, read as class ids
    assert all(isinstance(k, int) for k in head.ensemble.class_kept_ece)
    assert all(isinstance(row.kept_ece_calibrated_ci, tuple | None) for row in head.table)
    rule = decode(MatchingRule, SAMPLES["MatchingRule"][0])
    assert rule.sigmas == (0.2,) * 5


# ------------------------------------------------------------------------------------------ known answers
@dataclass(frozen=True)
class Inner(Record):
    a: float | None = None
    b: int = 0


@dataclass(frozen=True, kw_only=True)
class Outer(Record):
    WHERE = "outer"

    name: str
    kind: Literal["x", "y"] = "x"
    ci: tuple[float, float] | None = None
    sizes: tuple[int, ...] = ()
    inner: Inner = field(default_factory=Inner)
    items: list[Inner] = field(default_factory=list)
    by_id: dict[int, float] = field(default_factory=dict)
    maybe: Inner | None = spec(None, omit="none")
    renamed: str = spec("r", key="other_name")
    nested: str | None = spec(None, key="group.value")
    flat: Inner = spec(default_factory=Inner, flat=lambda k: f"flat_{k}")
    shown: bool = spec(False, omit="empty")
    seconds: float = spec(0.0, digits=3, check=(lambda v: v >= 0, "a number of seconds >= 0"))
    path: Path | None = None
    anything: Any = None
    fallback: int = spec(missing=7)


def test_known_answers_of_writing():
    rec = Outer(
        name="n",
        ci=(0.1, 0.2),
        sizes=(3, 4),
        inner=Inner(np.float32(0.5), np.int64(2)),
        items=[Inner(1.0, 1)],
        by_id={3: 0.25},
        nested="v",
        flat=Inner(None, 5),
        seconds=1.23456,
        path=Path("/a/b"),
        anything={"k": (1, 2)},
        fallback=7,
    )
    d = encode(rec)
    assert d == {
        "name": "n",
        "kind": "x",
        "ci": [0.1, 0.2],
        "sizes": [3, 4],
        "inner": {"a": 0.5, "b": 2},
        "items": [{"a": 1.0, "b": 1}],
        "by_id": {"3": 0.25},
        "other_name": "r",
        "group": {"value": "v"},
        "flat_a": None,
        "flat_b": 5,
        "seconds": 1.235,
        "path": "/a/b",
        "anything": {"k": [1, 2]},
        "fallback": 7,
    }
    assert (
        type(d["inner"]["a"]) is float and type(d["inner"]["b"]) is int
    )  # numpy scalars as Python numbers
    assert encode({"a": np.arange(3), "b": np.bool_(True)}) == {"a": [0, 1, 2], "b": True}
    assert "maybe" not in d and "shown" not in d
    assert list(d)[:3] == ["name", "kind", "ci"]  # the declared order
    assert encode(Outer(name="n", maybe=Inner(), shown=True, fallback=7))["shown"] is True
    assert json.loads(to_json(encode(Inner(math.nan, 1)))) == {
        "a": None,
        "b": 1,
    }  # NaN as null, as written today


def test_known_answers_of_reading():
    d = {
        "name": "n",
        "kind": "y",
        "ci": [0.1, 0.2],
        "sizes": [3, 4.0],
        "inner": {"a": 1, "b": 2},
        "items": [{"a": None}],
        "by_id": {"3": 1},
        "other_name": "o",
        "group": {"value": "v"},
        "flat_b": 5,
        "seconds": 2,
        "path": "/a/b",
        "anything": {"k": [1]},
    }
    rec = Outer.from_dict(d)
    assert rec == Outer(
        name="n",
        kind="y",
        ci=(0.1, 0.2),
        sizes=(3, 4),
        inner=Inner(1.0, 2),
        items=[Inner(None, 0)],
        by_id={3: 1.0},
        renamed="o",
        nested="v",
        flat=Inner(None, 5),
        seconds=2.0,
        path=Path("/a/b"),
        anything={"k": [1]},
        fallback=7,
    )
    assert type(rec.inner.a) is float and type(rec.sizes[1]) is int
    # absent or null: the default; an optional value None; a container empty; a reading default
    assert Outer.from_dict({"name": "n", "inner": None, "items": None}) == Outer(
        name="n", fallback=7
    )
    assert (
        Outer.from_dict({"name": "n", "ci": [None, 0.2]}).ci is None
    )  # an interval undefined at one end
    assert Outer.from_dict(None) is None
    assert decode(list[Inner], [{"a": 1}], "x") == [Inner(1.0, 0)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": None}, "`outer.name` is missing"),
        ({"name": 3}, "`outer.name` must be a string or null, got 3"),
        ({"kind": "z"}, "`outer.kind` must be one of x, y, got 'z'"),
        ({"kind": 1}, "`outer.kind` must be a string (x, y), got 1"),
        ({"ci": [0.1]}, "`outer.ci` must be a list of 2 values or null, got [0.1]"),
        ({"sizes": [1, 1.5]}, "`outer.sizes[1]` must be an integer or null, got 1.5"),
        ({"inner": {"a": "low"}}, "`outer.inner.a` must be a number or null, got 'low'"),
        ({"inner": [1]}, "`outer.inner` must be an object, got list"),
        ({"items": [{"b": True}]}, "`outer.items[0].b` must be an integer or null, got True"),
        ({"items": {"a": 1}}, "`outer.items` must be a list or null, got dict"),
        ({"by_id": {"x": 1}}, "`outer.by_id` must be keyed by integers, got 'x'"),
        ({"by_id": {"1": None}}, "`outer.by_id.1` must not be null"),
        ({"group": 3}, "`outer.group` must be an object or null, got int"),
        ({"flat_a": "x"}, "`outer.flat_a` must be a number or null, got 'x'"),
        ({"seconds": -1}, "`outer.seconds` must be a number of seconds >= 0, got -1"),
        ({"seconds": "x"}, "`outer.seconds` must be a number of seconds >= 0, got 'x'"),
    ],
)
def test_a_value_that_does_not_fit_is_one_line_naming_it(change, message):
    with pytest.raises(InputError) as e:
        Outer.from_dict({"name": "n", **change})
    assert str(e.value) == message


def test_a_malformed_file_is_one_line_naming_the_file_and_the_field(tmp_path):
    doc = json.loads((Path(__file__).parent / "data" / "fixture_calibration.json").read_text())
    doc["ultralytics_val"]["nms"]["original"]["map50"] = "high"
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as e:
        RunResult.read(path)
    assert (
        str(e.value)
        == f"{path}: `ultralytics_val.nms.original.map50` must be a number or null, got 'high'"
    )
    check = dict(SAMPLES["CheckResult"][0], exit_code=9)
    (tmp_path / "check.json").write_text(json.dumps(check))
    with pytest.raises(
        InputError, match=r"check.json: `exit_code` must be one of \[0, 2, 3, 4, 5, 6\], got 9$"
    ):
        CheckResult.read(tmp_path / "check.json")


def test_a_type_the_codec_cannot_read_is_a_bug_not_an_input_error():
    @dataclass
    class Odd:
        x: set[int]

    with pytest.raises(TypeError, match="cannot read type"):
        decode(Odd, {"x": [1]})
