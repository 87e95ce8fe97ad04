"""A job's settings from a call: ``settings`` or keyword options, never both, checked."""

from __future__ import annotations

import pytest

from det_calib.errors import InputError
from det_calib.job import Settings


def test_a_call_gives_settings_or_options():
    s = Settings.of_call(None, {"conf": 0.5, "iou": 0.6})
    assert s.conf == (0.5,) and s.iou == 0.6
    given = Settings(conf=[0.25, 0.5])
    assert Settings.of_call(given, {}) is given and given.conf == (0.25, 0.5)
    with pytest.raises(InputError, match="not both"):
        Settings.of_call(Settings(), {"conf": 0.5})
    with pytest.raises(InputError, match="unknown option `confidence`"):
        Settings.of_call(None, {"confidence": 0.5})
    with pytest.raises(InputError):
        Settings.of_call(None, {"iou": 1.5})  # validated
