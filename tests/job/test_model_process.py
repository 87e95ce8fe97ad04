"""The detector's facts and fold where torch is not imported (:mod:`det_calib.job.model_process`): a
child interpreter answers as this process does, its errors the same class and words. The command
line's runs without torch: ``tests/system/test_scale.py``."""

from __future__ import annotations

import pytest

from det_calib.errors import InputError
from det_calib.job.model_process import _in_child, _read_facts

FACTS = "det_calib.job.model_process:_read_facts"


def test_the_childs_facts_are_those_read_here(demo_model_path):
    here = _read_facts(demo_model_path)
    assert _in_child("model load", FACTS, (demo_model_path,), {}) == here
    assert here.task == "detect" and here.heads == ["nms", "e2e"] and here.imgsz == 320
    assert here.names[:3] == ["circle", "ellipse", "square"] and here.payload_shape is None


def test_the_childs_errors_are_those_raised_here(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError) as here:
        _read_facts(bad)
    with pytest.raises(InputError) as there:
        _in_child("model load", FACTS, (bad,), {})
    assert str(there.value) == str(here.value)
    assert str(here.value).startswith(f"cannot load model {bad}: ")
    with pytest.raises(InputError, match="model file not found"):
        _in_child("model load", FACTS, (tmp_path / "missing.pt",), {})
