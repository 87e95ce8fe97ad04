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


def test_per_class_and_size_maps_only_widen_auto():
    """``--per-class`` and ``--size-maps`` widen ``--method auto``'s choice; with a named method they would
    do nothing, so the run refuses them and names the maps to ask for instead."""
    assert "class-isotonic" in Settings(per_class=True).auto_methods()
    with pytest.raises(
        InputError, match=r"with `method` isotonic it would do nothing.*class-isotonic"
    ):
        Settings.of_call(None, {"method": "isotonic", "per_class": True})
    with pytest.raises(
        InputError, match=r"size-conditioned maps; with `method` platt.*\(size-platt\)"
    ):
        Settings.of_call(None, {"method": "platt", "size_maps": True})
    assert Settings.of_call(None, {"method": "class-isotonic"}).method == "class-isotonic"
    assert Settings.of_call(None, {"per_class": True, "size_maps": True}).method == "auto"


def test_options_of_the_choice_only_beside_auto():
    """``criterion``, ``cv_folds`` and ``cv_repeats`` set ``--method auto``'s choice; a call that
    sets one beside a named method is refused (at its default it changes nothing and passes)."""
    for name, value in (("cv_folds", 3), ("cv_repeats", 1), ("criterion", "brier")):
        with pytest.raises(
            InputError, match=rf"`{name}` sets `method` auto's choice; with `method` temperature"
        ):
            Settings.of_call(None, {"method": "temperature", name: value})
        assert getattr(Settings.of_call(None, {name: value}), name) == value
    assert Settings.of_call(None, {"method": "temperature", "cv_folds": 5}).cv_folds == 5
    # an ensemble's choice of fusion cross-validates whatever the method: its folds are its own
    fused = Settings.of_call(
        None, {"method": "temperature", "cv_folds": 3, "cv_repeats": 1}, fusion_choice=True
    )
    assert (fused.cv_folds, fused.cv_repeats) == (3, 1)
    with pytest.raises(InputError, match="`criterion` sets `method` auto's choice"):
        Settings.of_call(None, {"method": "temperature", "criterion": "ece"}, fusion_choice=True)


def test_threshold_options_only_with_a_target_precision():
    """calibrate tunes thresholds only at ``target_precision``: their other options without it are
    refused, not ignored."""
    for name, value in (("delta", 0.2), ("threshold_unit", "box"), ("threshold_fallback", "drop")):
        with pytest.raises(InputError, match=rf"`{name}` sets the thresholds tuned at"):
            Settings.of_call(None, {name: value})
        s = Settings.of_call(None, {name: value, "target_precision": 0.8})
        assert getattr(s, name) == value
