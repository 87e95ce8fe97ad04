"""CV selection of calibrator and fit range: `none` on calibrated data, the right method otherwise."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from det_calib.calibrators.affine import sigmoid
from det_calib.calibrators.registry import calibrator_from_dict, make_calibrator, method_spec
from det_calib.calibrators.registry import methods as registered_methods
from det_calib.codec import encode
from det_calib.errors import InputError
from det_calib.selection.cross_validation import Candidate, select_calibrator


def _boxes(true_logit, *, n=60_000, seed=0, nc=4, classes=None):
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.0, 3.0, n)
    k = rng.integers(0, nc, n) if classes is None else classes
    y = rng.random(n) < sigmoid(true_logit(z, k))
    groups = np.arange(n) // 20  # 20 boxes per image
    return z, y, k, groups


def test_perfectly_calibrated_data_keeps_raw_scores():
    z, y, k, g = _boxes(lambda z, k: z)
    sel = select_calibrator(z, y, classes=k, groups=g, min_conf=0.25)
    assert sel.chosen.method == "none"
    assert "none" in sel.reason
    # every registered method but those that read the box's size (no sizes given: skipped)
    sized = {m for m in registered_methods() if method_spec(m).uses_size}
    assert {c.method for c in sel.candidates} == set(registered_methods()) - sized
    np.testing.assert_array_equal(sel.calibrator.transform_logits(z[:5]), z[:5])


def test_planted_affine_miscalibration_picks_platt():
    z, y, k, g = _boxes(lambda z, k: 1.5 * z - 0.7)
    sel = select_calibrator(z, y, classes=k, groups=g, min_conf=0.25)
    assert sel.chosen.method == "platt", sel.reason
    assert sel.calibrator.a_ == pytest.approx(1.5, rel=0.03)


def test_planted_temperature_picks_temperature():
    z, y, k, g = _boxes(lambda z, k: z / 1.6)
    sel = select_calibrator(z, y, classes=k, groups=g, min_conf=0.25)
    assert sel.chosen.method == "temperature", sel.reason


def test_planted_per_class_maps_pick_a_per_class_method():
    a = np.array([0.6, 1.0, 1.6, 2.2])
    b = np.array([0.8, -0.5, 0.0, -1.2])
    z, y, k, g = _boxes(lambda z, k: a[k] * z + b[k])
    sel = select_calibrator(z, y, classes=k, groups=g, min_conf=0.25)
    assert sel.chosen.method == "class-platt", sel.reason


@pytest.mark.fast
def test_planted_nonlinear_map_picks_isotonic():
    z, y, k, g = _boxes(lambda z, k: np.where(z < 0, 0.4 * z - 2.0, 3.0 * z - 2.0), n=80_000)
    sel = select_calibrator(
        z, y, classes=k, groups=g, min_conf=0.25, methods=("temperature", "platt", "isotonic")
    )
    assert sel.chosen.method == "isotonic", sel.reason


@pytest.mark.fast
def test_selection_result_is_json_and_the_calibrator_round_trips():
    z, y, k, g = _boxes(lambda z, k: 1.3 * z + 0.3, n=10_000)
    sel = select_calibrator(
        z, y, classes=k, groups=g, fit_min_confs=(0.0, 0.05), n_folds=3, n_repeats=2
    )
    assert sel.criterion == "nll" and sel.n_folds == 3 and sel.n_repeats == 2
    candidates = json.loads(json.dumps(encode(sel.candidates)))  # an unscored candidate: inf
    names = {(c["method"], c["fit_min_conf"]) for c in candidates}
    assert ("platt", 0.05) in names and ("none", 0.0) in names
    for c in candidates:
        if c["error"] is None:
            assert len(c["fold_scores"]) == 3 * 2
            assert c["diff"] >= 0.0 and c["diff_se"] >= 0.0
    cal = calibrator_from_dict(json.loads(json.dumps(sel.calibrator.to_dict())))
    np.testing.assert_allclose(
        cal.transform_logits(z[:20], classes=k[:20]),
        sel.calibrator.transform_logits(z[:20], classes=k[:20]),
    )


@pytest.mark.fast
def test_repeats_are_fresh_fold_assignments_scored_fold_by_fold():
    """Repeat r uses the fold assignment of seed + r: the first K scores are the single run's, the
    next K those of a single run at seed + 1; the mean and the corrected SE cover all R x K."""
    z, y, k, g = _boxes(lambda z, k: 1.3 * z + 0.3, n=10_000)
    kw = dict(
        classes=k, groups=g, methods=("temperature", "platt"), fit_min_confs=(0.0,), n_folds=4
    )
    three = select_calibrator(z, y, n_repeats=3, seed=7, **kw)
    firsts = [select_calibrator(z, y, n_repeats=1, seed=s, **kw) for s in (7, 8, 9)]
    for j, c in enumerate(three.candidates):
        parts = [f.candidates[j].fold_scores for f in firsts]
        assert c.fold_scores == parts[0] + parts[1] + parts[2]
        d = np.asarray(c.fold_scores)
        assert c.mean == pytest.approx(d.mean(), rel=1e-12)
        assert c.se == pytest.approx(d.std(ddof=1) * np.sqrt(1 / 12 + 1 / 3), rel=1e-12)
    best = min(three.candidates, key=lambda c: c.mean)
    for c in three.candidates:
        d = np.asarray(c.fold_scores) - np.asarray(best.fold_scores)
        assert c.diff == pytest.approx(d.mean(), abs=1e-15)
        assert c.diff_se == pytest.approx(d.std(ddof=1) * np.sqrt(1 / 12 + 1 / 3), abs=1e-15)
    assert (
        three.n_repeats == 3
        and "4-fold cross-validation grouped by image, repeated 3 times" in three.reason
    )
    with pytest.raises(InputError, match="`n_repeats`"):
        select_calibrator(z, y, n_repeats=0, **kw)


@pytest.mark.fast
def test_paired_rule_sees_a_steady_gain_that_the_unpaired_error_hides():
    """Candidates are scored on the same folds: a calibrator better than the raw scores on every fold
    by a steady 0.01, where the folds themselves differ by ~0.05 (an unpaired standard error of 0.03,
    the real YOLOv8n case of issue 20), is chosen; the same gain with a fold-to-fold noise of the
    size of the gain is not, and the raw scores are kept."""
    from det_calib.selection.cross_validation import _paired_choice as paired_choice

    hard = np.array(
        [0.45, 0.52, 0.58, 0.47, 0.50] * 5
    )  # 5 repeats x 5 folds, folds differ by ~0.05
    se = float(np.std(hard, ddof=1) * np.sqrt(1 / 25 + 1 / 4))
    none = Candidate("none", 0.0, float((hard + 0.01).mean()), se, list(hard + 0.01))
    spline = Candidate("spline", 0.0, float(hard.mean()), se, list(hard))
    assert 0.01 < se  # the old one-SE rule kept the raw scores here
    chosen, best, reason = paired_choice([none, spline], (0.0,), 5)
    assert best is spline and chosen is spline
    assert spline.diff_none == pytest.approx(-0.01) and spline.diff_none_se == pytest.approx(
        0.0, abs=1e-12
    )
    assert none.diff == pytest.approx(0.01) and spline.diff == 0.0
    assert spline.verdict.startswith("chosen") and none.verdict.startswith("beaten by spline@0")
    assert "spline@0 has the lowest CV nll" in reason
    noise = np.array([0.02, -0.02, 0.015, -0.015, 0.0] * 5)  # paired SE ~0.0095 > the 0.004 gain
    noisy = Candidate(
        "spline",
        0.0,
        float((hard + 0.01 - 0.004 + noise).mean()),
        se,
        list(hard + 0.01 - 0.004 + noise),
    )
    chosen, best, reason = paired_choice([none, noisy], (0.0,), 5)
    assert best is noisy and chosen is none
    assert -0.004 == pytest.approx(noisy.diff_none) and noisy.diff_none_se > 0.004
    assert reason.startswith(
        "none: no calibrator beats the raw scores by more than 1 paired standard error"
    )
    assert noisy.verdict == "not better than the raw scores by more than 1 paired SE"


@pytest.mark.fast
def test_paired_rule_prefers_a_simpler_map_only_where_it_is_as_good():
    """A simpler eligible map wins when it is behind the best by less than a quarter of their paired
    SE, or keeps 99% of the best's gain over raw; a simpler map behind by more stays behind."""
    from det_calib.selection.cross_validation import _paired_choice as paired_choice

    base = np.array([0.50, 0.55, 0.45, 0.52, 0.48] * 5)
    jitter = np.array([0.003, -0.003, 0.002, -0.002, 0.0] * 5)

    def cand(method, shift, j=0.0):
        v = base - shift + j * jitter
        return Candidate(method, 0.0, float(v.mean()), 0.01, list(v))

    none = cand("none", 0.0)
    # platt behind isotonic by 0.001 (97% of its 0.03 gain) with a paired SE of ~0.0046: within 0.25 SE
    platt, iso = cand("platt", 0.029, 4.0), cand("isotonic", 0.03)
    chosen, _, reason = paired_choice([none, platt, iso], (0.0,), 5)
    assert chosen is platt and "and simpler" in reason
    assert iso.verdict == "as good as isotonic@0, but platt@0 is simpler"
    # temperature behind by a steady 0.0001 (no noise: infinitely many SEs) but keeping 99.7% of the gain
    temp = cand("temperature", 0.0299)
    assert paired_choice([none, temp, iso], (0.0,), 5)[0] is temp
    # a simpler map behind by 0.01 of a 0.03 gain, steadily: the best wins
    far = cand("temperature", 0.02)
    chosen, _, _ = paired_choice([none, far, iso], (0.0,), 5)
    assert chosen is iso and far.verdict == "behind isotonic@0 by more than 0.25 paired SE"
    # an ineligible simpler map is never preferred, however close
    shaky = Candidate(
        "temperature",
        0.0,
        float((base - 0.0299 + 30 * jitter).mean()),
        0.01,
        list(base - 0.0299 + 30 * jitter),
    )
    chosen, _, _ = paired_choice([none, shaky, iso], (0.0,), 5)
    assert chosen is iso and shaky.verdict.startswith("not better than the raw scores")


@pytest.mark.fast
def test_selection_bad_input():
    z, y, _k, _g = _boxes(lambda z, k: z, n=200)
    with pytest.raises(InputError, match="`criterion`"):
        select_calibrator(z, y, criterion="auc")
    with pytest.raises(InputError, match="`methods`"):
        select_calibrator(z, y, methods=("beta",))
    with pytest.raises(InputError, match="`method`"):
        make_calibrator("beta")


@pytest.mark.fast
def test_fit_calibrator_uses_only_its_fit_range():
    from det_calib.selection.cross_validation import fit_calibrator

    z, y, _k, _g = _boxes(lambda z, k: 1.4 * z + 0.2, n=20_000)
    above = z > np.log(0.1 / 0.9)
    cal = fit_calibrator("platt", z, y, fit_min_conf=0.1)
    ref = make_calibrator("platt").fit(z[above], y[above])
    assert (cal.a_, cal.b_) == (ref.a_, ref.b_)
    with pytest.raises(InputError, match="`classes`"):
        fit_calibrator("class-platt", z, y)


def _held_out_scores(z, y, groups, *, method, floor, n_folds, n_repeats, seed, criterion, min_conf):
    """The R x K held-out scores of one candidate, recomputed from group_folds, the calibrator's own
    fit and the criterion's definition (exact logits)."""
    from det_calib.calibrators.affine import group_folds
    from det_calib.metrics.calibration import ece
    from det_calib.numeric import logit_threshold

    raw_keep = z > logit_threshold(min_conf)
    in_range = z > logit_threshold(floor) if floor > 0 else np.ones(z.size, bool)
    out = []
    for r in range(n_repeats):
        folds = group_folds(z.size, n_folds, groups, seed=seed + r)
        for f in range(n_folds):
            tr, te = (folds != f) & in_range, folds == f
            t = (
                z[te]
                if method == "none"
                else make_calibrator(method).fit(z[tr], y[tr]).transform_logits(z[te])
            )
            if criterion == "nll":
                keep = raw_keep[te]
                tt, yy = t[keep], y[te][keep].astype(float)
                out.append(float(np.mean(np.logaddexp(0.0, tt) - yy * tt)))
            else:
                p = sigmoid(t)
                keep = p > min_conf
                out.append(ece(p[keep], y[te][keep], n_bins=15))
    return out


@pytest.mark.fast
@pytest.mark.parametrize("criterion", ["nll", "ece"])
def test_fold_scores_recomputed_independently(criterion):
    """Every candidate's R x K fold scores, mean and corrected SE, recomputed from the fold deal
    (images kept together, seed + r per repeat), the fit on the other folds inside the fit range,
    and the criterion on the held-out fold: NLL of the boxes with raw conf above min_conf, ECE of
    the boxes with calibrated conf above it."""
    from det_calib.numeric import logit_threshold

    z, y, _k, g = _boxes(lambda z, k: 1.3 * z + 0.4, n=3_000, seed=3)
    z[:40] = logit_threshold(0.3)  # raw conf exactly min_conf: not scored by NLL
    sel = select_calibrator(
        z,
        y,
        groups=g,
        methods=("temperature",),
        fit_min_confs=(0.0, 0.2),
        min_conf=0.3,
        criterion=criterion,
        n_folds=3,
        n_repeats=2,
        seed=5,
        cv_resolution=None,
    )
    assert [c.name for c in sel.candidates] == ["none", "temperature@0", "temperature@0.2"]
    for c in sel.candidates:
        want = _held_out_scores(
            z,
            y,
            g,
            method=c.method,
            floor=c.fit_min_conf,
            n_folds=3,
            n_repeats=2,
            seed=5,
            criterion=criterion,
            min_conf=0.3,
        )
        np.testing.assert_allclose(c.fold_scores, want, rtol=1e-7, atol=1e-12)
        assert c.mean == pytest.approx(np.mean(c.fold_scores), rel=1e-12)
        assert c.se == pytest.approx(
            np.std(c.fold_scores, ddof=1) * np.sqrt(1 / 6 + 1 / 2), rel=1e-12
        )
        assert c.error is None and c.shrinkage is None
    assert (
        sel.min_conf == 0.3
        and sel.criterion == criterion
        and sel.n_folds == 3
        and sel.n_repeats == 2
    )
    # the folds keep images together: without groups the deal and so the scores differ
    boxes = select_calibrator(
        z,
        y,
        methods=("temperature",),
        fit_min_confs=(0.0, 0.2),
        min_conf=0.3,
        criterion=criterion,
        n_folds=3,
        n_repeats=2,
        seed=5,
        cv_resolution=None,
    )
    assert boxes.candidates[1].fold_scores != sel.candidates[1].fold_scores
    # the repeats are different deals
    s = sel.candidates[1].fold_scores
    assert s[:3] != s[3:]


@pytest.mark.fast
def test_selection_defaults_and_pooled_rows():
    """Defaults: 5 x 5 folds, seed 0, fit floors (0, min_conf / 2), logits pooled on a 0.01 grid;
    on logits already on that grid the pooled CV gives the exact-logit scores."""
    z, y, _k, g = _boxes(lambda z, k: 0.8 * z, n=2_000, seed=1)
    z = np.round(z, 2)
    sel = select_calibrator(z, y, groups=g, methods=("temperature",))
    assert [c.name for c in sel.candidates] == ["none", "temperature@0", "temperature@0.125"]
    exact = select_calibrator(
        z,
        y,
        groups=g,
        methods=("temperature",),
        fit_min_confs=(0.0, 0.125),
        n_folds=5,
        n_repeats=5,
        seed=0,
        cv_resolution=None,
    )
    for a, b in zip(sel.candidates, exact.candidates, strict=True):
        assert len(a.fold_scores) == 25
        np.testing.assert_allclose(a.fold_scores, b.fold_scores, rtol=1e-6)
    want = _held_out_scores(
        z,
        y,
        g,
        method="temperature",
        floor=0.0,
        n_folds=5,
        n_repeats=5,
        seed=0,
        criterion="nll",
        min_conf=0.25,
    )
    np.testing.assert_allclose(sel.candidates[1].fold_scores, want, rtol=1e-6)


@pytest.mark.fast
def test_selection_without_classes_skips_per_class_methods_and_always_scores_none():
    z, y, k, g = _boxes(lambda z, k: 1.2 * z, n=2_000, seed=2)
    sel = select_calibrator(
        z,
        y,
        groups=g,
        methods=("class-temperature", "platt"),
        fit_min_confs=(0.0,),
        n_folds=3,
        n_repeats=1,
    )
    assert [c.name for c in sel.candidates] == ["none", "platt@0"]
    sel = select_calibrator(
        z,
        y,
        classes=k,
        groups=g,
        methods=("class-temperature", "class-isotonic"),
        fit_min_confs=(0.0,),
        n_folds=3,
        n_repeats=1,
    )
    assert [c.name for c in sel.candidates] == ["none", "class-temperature@0", "class-isotonic@0"]
    from det_calib.calibrators.affine import _SHRINKAGE_GRID as SHRINKAGE_GRID
    from det_calib.calibrators.isotonic import _BLEND_GRID as BLEND_GRID

    assert sel.candidates[0].shrinkage is None
    assert (
        sel.candidates[1].shrinkage in SHRINKAGE_GRID and sel.candidates[2].shrinkage in BLEND_GRID
    )
    for c in sel.candidates[1:]:
        assert len(c.fold_scores) == 3 and np.isfinite(c.fold_scores).all() and c.error is None


@pytest.mark.fast
def test_selection_option_checks():
    z, y, _k, _g = _boxes(lambda z, k: z, n=300)
    kw = dict(methods=("temperature",), n_folds=2, n_repeats=1)
    for bad in (
        {"min_conf": 1.0},
        {"min_conf": -0.1},
        {"fit_min_confs": (1.0,)},
        {"fit_min_confs": (-0.1,)},
        {"n_repeats": True},
        {"cv_resolution": 0.0},
        {"cv_resolution": "0.01"},
    ):
        with pytest.raises(InputError):
            select_calibrator(z, y, **{**kw, **bad})
    with pytest.raises(InputError, match="`logits`"):
        select_calibrator(z[:, None], y, **kw)
    with pytest.raises(InputError, match="`labels`"):
        select_calibrator(z, np.where(y, 2, 0), **kw)
    sel = select_calibrator(
        z, y, min_conf=0.0, criterion="ece", **kw
    )  # min_conf 0 and criterion ece accepted
    assert sel.criterion == "ece" and sel.min_conf == 0.0


@pytest.mark.fast
def test_nothing_to_score_is_refused():
    """No box above min_conf: the NLL criterion refuses at once; with ECE every fold is nan, so
    every candidate fails and that is refused too."""
    from det_calib.errors import DegenerateFitError

    rng = np.random.default_rng(0)
    z = rng.normal(-5.0, 0.3, 400)
    y = rng.random(400) < 0.01
    kw = dict(methods=("temperature",), fit_min_confs=(0.0,), n_folds=2, n_repeats=1, min_conf=0.5)
    with pytest.raises(DegenerateFitError, match="nothing to score"):
        select_calibrator(z, y, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no mean of all-nan folds on the way
        with pytest.raises(DegenerateFitError, match="every calibrator candidate failed"):
            select_calibrator(z, y, criterion="ece", **kw)


@pytest.mark.fast
def test_a_candidate_that_cannot_be_fitted_is_recorded_with_its_error():
    """A fit floor with 4 boxes above it: that candidate's fit is degenerate; it is kept with its
    error, nan scores and no fold scores, and is never chosen."""
    z, y, _k, g = _boxes(lambda z, k: 1.2 * z, n=2_000, seed=4)
    z = np.clip(z, -8.0, 2.0)  # raw conf at most 0.88
    z[[0, 500, 1000, 1500]] = 4.0  # but these 4, in 4 images
    sel = select_calibrator(
        z, y, groups=g, methods=("temperature",), fit_min_confs=(0.0, 0.95), n_folds=3, n_repeats=1
    )
    bad = sel.candidates[2]
    assert (bad.method, bad.fit_min_conf, bad.fold_scores) == ("temperature", 0.95, [])
    assert (
        np.isnan(bad.mean)
        and np.isnan(bad.se)
        and bad.error.startswith("temperature fit needs at least")
    )
    assert sel.chosen is not bad and sel.best is not bad
    assert sel.candidates[1].error is None


@pytest.mark.fast
def test_a_fit_floor_above_every_box_is_a_degenerate_candidate_not_a_crash():
    """No box above a fit floor: the candidate is recorded with an error naming the floor (the CV),
    and fitting that floor alone raises DegenerateFitError naming it (the CLI's exit 2)."""
    from det_calib.errors import DegenerateFitError
    from det_calib.selection.cross_validation import fit_calibrator

    z, y, _k, g = _boxes(lambda z, k: z, n=2_000, seed=5)
    z = np.clip(z, -8.0, 2.0)  # raw conf at most 0.88
    sel = select_calibrator(
        z, y, groups=g, methods=("platt",), fit_min_confs=(0.0, 0.95), n_folds=3, n_repeats=2
    )
    empty = sel.candidates[2]
    assert (empty.method, empty.fit_min_conf, empty.fold_scores) == ("platt", 0.95, [])
    assert empty.error == "no box of the training folds has raw conf above the fit floor 0.95"
    assert sel.chosen is not empty and sel.candidates[1].error is None
    with pytest.raises(DegenerateFitError, match="above the fit floor 0.95: nothing to fit platt"):
        fit_calibrator("platt", z, y, fit_min_conf=0.95)


@pytest.mark.fast
def test_paired_rule_edges():
    """No `none` among the candidates: the best wins; ties between the same method go to the first
    fit floor listed; `none` alone is chosen; the corrected SE needs two scores."""
    from det_calib.selection.cross_validation import _corrected_se, _paired_diff
    from det_calib.selection.cross_validation import _paired_choice as paired_choice

    a = Candidate("platt", 0.0, 0.30, float("nan"), [0.30])
    c = Candidate("temperature", 0.0, 0.31, float("nan"), [0.31])
    chosen, best, _ = paired_choice([a, c], (0.0,), 5)
    assert chosen is a and best is a and c.diff == pytest.approx(0.01) and np.isnan(c.diff_se)
    n = Candidate("none", 0.0, 0.30, float("nan"), [0.30])
    assert paired_choice([n], (0.0,), 5)[0] is n
    # one fold score: no paired SE, so no calibrator is eligible
    assert paired_choice([a, n], (0.0,), 5)[0] is n
    # floors: the first one listed wins between the same method (within 0.25 SE), whatever the order
    none = Candidate("none", 0.0, 0.40, 0.01, [0.40, 0.41, 0.39])
    hi = Candidate("temperature", 0.1, 0.300, 0.01, [0.300, 0.310, 0.290])
    lo = Candidate("temperature", 0.0, 0.3001, 0.01, [0.3001, 0.3101, 0.2901])
    assert paired_choice([none, hi, lo], (0.0, 0.1), 5)[0] is lo
    assert paired_choice([none, lo, hi], (0.1, 0.0), 5)[0] is hi
    # the corrected SE needs two scores; one difference has a mean but no SE
    assert _corrected_se(np.array([1.0, 3.0]), 5) == pytest.approx(
        np.sqrt(2.0) * np.sqrt(1 / 2 + 1 / 4)
    )
    assert np.isnan(_corrected_se(np.array([1.0, np.nan]), 5))
    m, s = _paired_diff([1.0], [0.5], 5)
    assert m == 0.5 and np.isnan(s)
    assert all(np.isnan(_paired_diff([np.nan], [0.5], 5)))


@pytest.mark.fast
def test_selection_reason_names_the_rule():
    z, y, _k, g = _boxes(lambda z, k: 2.0 * z + 1.5, n=3_000, seed=6)
    sel = select_calibrator(
        z, y, groups=g, methods=("platt",), fit_min_confs=(0.0,), n_folds=3, n_repeats=2
    )
    assert sel.chosen is sel.best and sel.chosen.method == "platt"
    assert sel.reason.startswith(
        "platt@0 has the lowest CV nll of the calibrators that beat the raw scores ("
    )
    assert "(nll " in sel.reason
    assert sel.reason.endswith(
        "paired SE; 3-fold cross-validation grouped by image, repeated 2 times)"
    )
    assert [c.verdict for c in sel.candidates] == [
        "beaten by platt@0 by more than 1 paired SE",
        "chosen: the best of the calibrators that beat the raw scores",
    ]


@pytest.mark.fast
@pytest.mark.parametrize("alike", [True, False])
@pytest.mark.parametrize("method", ["class-temperature", "class-isotonic"])
def test_per_class_candidate_keeps_the_best_shrinkage_of_its_grid(method, alike):
    """A per-class candidate is scored at every value of its own grid (lam for the affine maps, m
    for isotonic), each recomputed here by a plain fit at that value; it keeps the value with the
    lowest mean held-out NLL, and that value's fold scores."""
    from det_calib.calibrators.affine import _SHRINKAGE_GRID as SHRINKAGE_GRID
    from det_calib.calibrators.affine import ClassAffineScaler, group_folds
    from det_calib.calibrators.isotonic import _BLEND_GRID as BLEND_GRID
    from det_calib.calibrators.isotonic import ClassIsotonicCalibrator

    true = (
        (lambda z, k: 1.3 * z + 0.05 * k) if alike else (lambda z, k: (0.6 + 0.5 * k) * z + 0.3 * k)
    )
    z, y, k, g = _boxes(true, n=4_000, seed=8, nc=3)
    sel = select_calibrator(
        z,
        y,
        classes=k,
        groups=g,
        methods=(method,),
        fit_min_confs=(0.0,),
        min_conf=0.1,
        n_folds=3,
        n_repeats=1,
        seed=2,
        cv_resolution=None,
    )
    cand = sel.candidates[1]
    grid = BLEND_GRID if method == "class-isotonic" else SHRINKAGE_GRID
    folds = group_folds(z.size, 3, g, seed=2)
    keep = z > np.log(0.1 / 0.9)
    scores = np.empty((3, len(grid)))
    for f in range(3):
        tr, te = folds != f, (folds == f) & keep
        for j, v in enumerate(grid):
            cal = (
                ClassIsotonicCalibrator(blend=v)
                if method == "class-isotonic"
                else ClassAffineScaler(kind="temperature", shrinkage=v)
            )
            t = cal.fit(z[tr], y[tr], classes=k[tr]).transform_logits(z[te], classes=k[te])
            scores[f, j] = np.mean(np.logaddexp(0.0, t) - y[te] * t)
    j = int(np.argmin(scores.mean(axis=0)))
    assert cand.shrinkage == grid[j]
    if alike:  # alike classes: not the weakest shrinkage
        assert j != 0
    elif (
        method == "class-temperature"
    ):  # classes apart: the weakest, lam = 1 (only in the affine grid)
        assert cand.shrinkage == 1.0
    np.testing.assert_allclose(cand.fold_scores, scores[:, j], rtol=1e-5)
