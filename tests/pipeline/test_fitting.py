"""The console's words for a head's calibrator choice (det_calib.pipeline.fitting.Choice.words)."""

from __future__ import annotations

import numpy as np

from det_calib.pipeline.fitting import Choice, _fit_range_words, _in_words
from det_calib.selection.cross_validation import select_calibrator


def test_candidate_names_in_words():
    assert _fit_range_words("temperature", 0.0) == "temperature fitted on every box"
    assert (
        _fit_range_words("class-isotonic", 0.125)
        == "class-isotonic fitted on the boxes above raw conf 0.125"
    )
    assert _fit_range_words("none", 0.0) == "none (the raw scores)"
    text = "none: no calibrator beats ...; the best, spline@0.125: nll 0.5 vs raw 0.6, temperature@0 behind it"
    assert _in_words(text) == (
        "none: no calibrator beats ...; the best, spline fitted on the boxes above raw conf "
        "0.125: nll 0.5 vs raw 0.6, temperature fitted on every box behind it"
    )
    assert (
        _in_words("an address a@b.c and 5x5 folds") == "an address a@b.c and 5x5 folds"
    )  # no floor: left alone


def test_choice_words_of_a_real_selection():
    """Planted over-confident logits: Platt wins; the line names it and the folds in words, and is the
    recorded reason otherwise unchanged. Raw scores kept: the line says so first."""
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 3.0, 4000)
    y = rng.random(z.size) < 1 / (1 + np.exp(-(0.5 * z - 0.3)))
    g = np.arange(z.size) // 4
    sel = select_calibrator(
        z, y, groups=g, methods=("platt",), fit_min_confs=(0.0,), n_folds=3, n_repeats=2
    )
    words = Choice("platt", 0.0, sel.calibrator, sel).words()
    assert words == sel.reason.replace("platt@0 ", "platt fitted on every box ", 1)
    assert words.startswith("platt fitted on every box has the lowest CV nll")
    assert (
        words.endswith("; 3-fold cross-validation grouped by image, repeated 2 times)")
        and "@" not in words
    )
    y_cal = rng.random(z.size) < 1 / (
        1 + np.exp(-z)
    )  # calibrated already: nothing beats the raw scores
    kept = select_calibrator(
        z, y_cal, groups=g, methods=("platt",), fit_min_confs=(0.0,), n_folds=3, n_repeats=2
    )
    assert kept.chosen.method == "none"
    words = Choice("none", 0.0, kept.calibrator, kept).words()
    assert words.startswith(
        "keep the raw scores: no calibrator beats the raw scores by more than 1 paired standard"
    )
    assert "the best, platt fitted on every box: nll " in words
    assert (
        Choice("spline", 0.125, sel.calibrator).words()
        == "spline fitted on the boxes above raw conf 0.125"
    )
