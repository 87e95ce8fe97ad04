"""`det-calib check`: the drift statistics (known answers, parity with scipy, false-alarm rates),
the shifted demo splits, and the command on real runs of the demo detector (clean, most severe
shift, unlabelled, bad input)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from det_calib.check import drift_tests as drift
from det_calib.check.run_check import CHECK_FILE, CheckResult, exit_code
from det_calib.cli import main

N_IMAGES = 60  # images of each split in the run and in every check
REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------ statistics
@pytest.mark.fast
def test_p_values_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in range(1, 16):
        for x in (0.01, 0.5, 2.0, 7.3, 15.0, 31.0, 80.0):
            assert drift._chi2_sf(x, df) == pytest.approx(stats.chi2.sf(x, df), rel=1e-9, abs=1e-14)
    for z in (0.0, 0.5, 1.96, -2.5, 4.0):
        assert drift.normal_sf(z) == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-12)
    rng = np.random.default_rng(3)
    a, b = rng.uniform(size=80), rng.uniform(size=55).round(1)  # ties within and across samples
    assert drift._ks_distance(a, b) == pytest.approx(stats.ks_2samp(a, b).statistic, abs=1e-12)


def _calibrated_sets(rng, n_sets, n_img, per_img, *, shift=0.0, image_effect=0.0):
    """Boxes whose confidence is their probability of being correct (plus ``shift``); with
    ``image_effect`` the correctness of one image's boxes is correlated (a shared random offset in
    logit space, re-centred so that the marginal calibration is kept only approximately)."""
    for _ in range(n_sets):
        img = np.repeat(np.arange(n_img), per_img)
        p = rng.uniform(0.3, 0.95, img.size)
        if image_effect:
            u = rng.normal(0, image_effect, n_img)[img]
            q = 1 / (1 + np.exp(-(np.log(p / (1 - p)) + u)))
            # the confidence a calibrated detector reports is the marginal probability, averaged over u
            y = rng.uniform(size=img.size) < q
        else:
            y = rng.uniform(size=img.size) < p
        yield np.clip(p + shift, 0.0, 1.0), y, img


@pytest.mark.fast
def test_calibration_in_the_large_false_alarm_and_power():
    rng = np.random.default_rng(0)
    null = [
        drift.calibration_in_the_large(p, y, i).p_value
        for p, y, i in _calibrated_sets(rng, 400, 60, 4)
    ]
    assert 0.02 < np.mean(np.array(null) < 0.05) < 0.09  # nominal 5%
    off = [
        drift.calibration_in_the_large(p, y, i).p_value
        for p, y, i in _calibrated_sets(rng, 100, 60, 4, shift=-0.1)
    ]
    assert np.mean(np.array(off) < 0.05) > 0.75  # under-confident by 0.1 on 240 boxes: mostly found
    # the z-score itself: 10 correct of 10 at conf 0.5 is z = (10 - 5) / sqrt(2.5)
    r = drift.calibration_in_the_large(np.full(10, 0.5), np.ones(10, bool), np.arange(10))
    assert r.observed == 10 and r.expected == 5 and r.z == pytest.approx(5 / math.sqrt(2.5))


@pytest.mark.fast
def test_clustered_images_do_not_read_as_drift():
    """Boxes of one image correct together: the binomial z alone over-rejects; the check's z does not."""
    rng = np.random.default_rng(1)
    plain, used = [], []
    for p, y, img in _calibrated_sets(rng, 300, 40, 8, image_effect=2.0):
        # the reported conf is the marginal probability of each box (averaged over image effects)
        u = rng.normal(0, 2.0, (2000, 1))
        logit = np.log(p / (1 - p))
        marginal = (1 / (1 + np.exp(-(logit[None, :] + u)))).mean(axis=0)
        r = drift.calibration_in_the_large(marginal, y, img)
        plain.append(drift.normal_sf((r.observed - r.expected) / math.sqrt(r.var_binomial)))
        used.append(r.p_value)
        assert r.design_effect >= 1.0
    assert np.mean(np.array(plain) < 0.05) > 0.15  # the binomial test is fooled by the clustering
    assert np.mean(np.array(used) < 0.05) < 0.09


@pytest.mark.fast
def test_hosmer_lemeshow_known_answers():
    rng = np.random.default_rng(2)
    null = [
        drift.hosmer_lemeshow(p, y, i).p_value for p, y, i in _calibrated_sets(rng, 300, 100, 5)
    ]
    assert 0.02 < np.mean(np.array(null) < 0.05) < 0.09
    # over-confident at the top, under-confident at the bottom: in the large nearly calibrated, binned not
    p = rng.uniform(0.3, 0.95, 3000)
    y = rng.uniform(size=3000) < 0.3 + 0.5 * (p - 0.3)
    y2 = rng.uniform(size=3000) < p
    img = np.arange(3000) // 5
    assert drift.hosmer_lemeshow(p, y, img).p_value < 1e-6
    assert drift.hosmer_lemeshow(p, y2, img).p_value > 1e-3
    assert drift.hosmer_lemeshow(p[:59], y[:59], img[:59]) is None  # fewer than two bins of 30


@pytest.mark.fast
def test_change_tests_false_alarm_and_power():
    """Two calibrated sets: the change tests flag about 5% at 0.05; a set 0.1 over-confident: mostly flagged."""
    rng = np.random.default_rng(5)
    sets = list(_calibrated_sets(rng, 400, 60, 4))
    pairs = list(zip(sets[::2], sets[1::2]))
    z = [drift.citl_change(a, b).p_value for a, b in pairs]
    binned = [drift.binned_change(a, b).p_value for a, b in pairs]
    assert (
        0.01 < np.mean(np.array(z) < 0.05) < 0.1 and 0.01 < np.mean(np.array(binned) < 0.05) < 0.1
    )
    off = [drift.citl_change(a, (b[0] + 0.1, b[1], b[2])).p_value for a, b in pairs[:50]]
    assert np.mean(np.array(off) < 0.05) > 0.6
    same = drift.citl_change(sets[0], sets[0])
    assert (same.statistic, same.p_value) == (0.0, 1.0)


@pytest.mark.fast
def test_ratio_test_and_permutation_tests():
    # 4 images of 4 boxes: precision 0.75 then, 0.1875 now
    t = drift.ratio_test([3, 2, 4, 3], [4, 4, 4, 4], [1, 0, 1, 1], [4, 4, 4, 4])
    assert (t.then, t.now) == (0.75, 0.1875) and t.z < -2
    rng = np.random.default_rng(4)
    hits = []
    for k in range(100):
        na, nb = 50, 50
        ca, cb = rng.integers(0, 6, na), rng.integers(0, 6, nb)
        ia, ib = np.repeat(np.arange(na), ca), np.repeat(np.arange(nb), cb)
        s = drift.shift_tests(
            rng.uniform(size=ia.size),
            ia,
            rng.integers(0, 3, ia.size),
            na,
            rng.uniform(size=ib.size),
            ib,
            rng.integers(0, 3, ib.size),
            nb,
            n_classes=3,
            n_perm=199,
            seed=k,
        )
        hits.append(min(s.ks_p, s.per_image_p, s.class_chi2_p) < 0.05 / 3)
    assert np.mean(hits) < 0.08  # no shift: rarely flagged (Bonferroni over the three)
    ia = np.repeat(np.arange(50), 4)
    ib = ia[:100] // 2  # half the boxes per image
    s = drift.shift_tests(
        rng.uniform(size=200),
        ia,
        ia % 3,
        50,
        rng.uniform(size=100) ** 2,
        ib,
        ib % 3,
        50,
        n_classes=3,
        n_perm=199,
    )
    assert s.per_image == pytest.approx(-2.0) and s.per_image_p < 0.01 and s.ks_p < 0.01


@pytest.mark.fast
def test_exit_codes():
    assert exit_code("holds", "holds", None) == 0
    assert exit_code("drifted", "holds", None) == 3
    assert exit_code("holds", "changed", None) == 4
    assert exit_code("not enough boxes to tell", "changed", None) == 4
    assert exit_code("drifted", "changed", None) == 5
    assert exit_code("not enough boxes to tell", "holds", None) == 6
    assert exit_code(None, None, "shifted") == 4 and exit_code(None, None, "no shift detected") == 0


def _view(p, y, img, cls=None):
    """A kept-box view from arrays (calibrated conf ``p``, flags ``y``, images ``img``)."""
    from det_calib.data.box_view import BoxView

    cls = np.asarray(img) % 3 if cls is None else cls
    p = np.asarray(p, dtype=np.float64)
    return BoxView.from_boxes(
        pl.DataFrame(
            {
                "logit": np.log(p / (1 - p)),
                "conf": p,
                "correct": np.asarray(y, bool),
                "cls": cls,
                "image_id": img,
                "ignore": np.zeros(len(p), bool),
            }
        ),
        geometry=False,
    )


def _planted(rng, n_img, per_img, *, shift=0.0, crowded=(), first=0):
    """Calibrated boxes on ``n_img`` images (``per_img`` each; correct with probability conf - ``shift``),
    and crowded images of ``crowded`` boxes each (conf 0.7, 1 correct), ids from ``first``."""
    img = np.repeat(np.arange(n_img), per_img)
    p = rng.uniform(0.3, 0.95, img.size)
    y = rng.uniform(size=img.size) < np.clip(p - shift, 0, 1)
    for k, n in enumerate(crowded):
        img = np.r_[img, np.full(n, first + n_img + k)]
        p = np.r_[p, np.full(n, 0.7)]
        y = np.r_[y, np.arange(n) == 0]
    return _view(p, y, img), n_img + len(crowded)


def _checks(now, n_now, then, n_then, alpha=0.05, **kw):
    from det_calib.check.verdicts import labelled_checks

    names = ["a", "b", "c"]
    gt_now, gt_then = np.full(n_now, 4.0), np.full(n_then, 4.0)
    return labelled_checks(
        now,
        then,
        conf=0.25,
        names=names,
        gt_now=gt_now,
        gt_cls_now=np.arange(4 * n_now) % 3,
        gt_then=gt_then,
        gt_cls_then=[4 * n_then // 3] * 3,
        n_gt_then=4 * n_then,
        n_img_then=n_then,
        alpha=alpha,
        min_boxes=30,
        ece_bins=15,
        image_names={n_now - 3 + k: f"crowd_{k}.png" for k in range(3)},
        **kw,
    )


@pytest.mark.fast
def test_crowded_images_are_named_and_do_not_hide_drift():
    """Three images of 100 boxes with 1 correct each, the other boxes over-confident by 0.05: the
    check as it was lets the three images set the clustered variance (the gap the boxes could show
    grows sixfold) and says holds; set apart, the drift of the other boxes is found and the
    three images are named with their share of the kept boxes."""
    rng = np.random.default_rng(11)
    then, n_then = _planted(rng, 300, 4)
    now, n_now = _planted(rng, 297, 4, shift=0.05, crowded=(100, 100, 100))
    lc = _checks(now, n_now, then, n_then)
    before = _checks(now, n_now, then, n_then, set_apart=False)
    assert before.calibration_verdict == "holds" and lc.calibration_verdict == "drifted"
    t = lc.calibration
    assert (t.crowded_images, t.crowded_boxes, t.crowded_observed, t.crowded_images_then) == (
        3,
        300,
        3,
        0,
    )
    assert t.crowded_variance_share > 0.8 and t.rest_boxes == 297 * 4
    assert before.calibration.detectable_gap > 5 * t.detectable_gap
    assert [c.image for c in lc.crowded] == ["crowd_0.png", "crowd_1.png", "crowd_2.png"]
    assert all(
        c.boxes == 100 and c.observed == 1 and c.box_share == pytest.approx(100 / now.n)
        for c in lc.crowded
    )
    line = lc.calibration_line
    assert (
        "in the large" in line and "3 crowded images hold 300 of the 1488 kept boxes (20%)" in line
    )
    assert all(f"crowd_{k}.png 100 boxes (1 correct vs 70.0)" in line for k in range(3))
    # the other boxes calibrated: three crowded images against none is no evidence of a change (p 0.25) ...
    now, n_now = _planted(rng, 297, 4, crowded=(100, 100, 100))
    lc = _checks(now, n_now, then, n_then)
    assert lc.calibration_verdict == "holds" and lc.calibration.crowded_rate_p == pytest.approx(
        0.25
    )
    assert "crowd_2.png" in lc.calibration_line
    # ... twelve are
    now, n_now = _planted(rng, 288, 4, crowded=(40,) * 12)
    lc = _checks(now, n_now, then, n_then)
    assert lc.calibration_verdict == "drifted" and "share of crowded images" in lc.calibration_line
    assert drift.count_change(0, 300, 12, 300) < 0.005 / 2


@pytest.mark.fast
def test_calibration_verdict_level_with_crowded_images():
    """No change, crowded images on both sides at the same rate (swarms of 60 to 200 wrong boxes, about
    one in 150 images; the demo's nms head has 0 to 4 in 400): the calibration verdict is "drifted" in
    at most about 5% of 150 repetitions at alpha 0.05 (its half, 0.025, Bonferroni over its family), set
    apart or not, and the change in the large alone rejects near its nominal 5% (4% measured)."""
    rng = np.random.default_rng(12)
    hits, hits_before, change = [], [], []
    for _ in range(150):
        sides = []
        for _side in range(2):
            k = rng.poisson(1.0)
            sides.append(_planted(rng, 150 - k, 3, crowded=tuple(rng.integers(60, 200, k))))
        (now, n_now), (then, n_then) = sides
        lc = _checks(now, n_now, then, n_then)
        hits.append(lc.calibration_verdict == "drifted")
        change.append(lc.calibration.change_p < 0.05)  # the change in the large alone, at 0.05
        hits_before.append(
            _checks(now, n_now, then, n_then, set_apart=False).calibration_verdict == "drifted"
        )
    assert np.mean(hits) < 0.08 and np.mean(hits_before) < 0.08
    assert 0.02 < np.mean(change) < 0.09


@pytest.mark.fast
def test_alpha_is_halved_between_the_two_verdicts():
    """``--alpha`` is the level of the labelled check as one decision (its exit code): each verdict is a
    Bonferroni family at alpha / 2, and its line names that level; at alpha 0.1 each verdict is at 0.05,
    as the check was before. Over a range of planted over-confidence (which also lowers precision), the
    verdicts follow their p-values exactly, and some set is drifted at 0.1 and holds at 0.05."""
    rng = np.random.default_rng(5)
    between = 0
    for shift in np.linspace(0.0, 0.06, 16):
        then, n_then = _planted(rng, 300, 4)
        now, n_now = _planted(rng, 300, 4, shift=shift)
        for alpha in (0.05, 0.1):
            lc = _checks(now, n_now, then, n_then, alpha=alpha)
            t, d = lc.calibration, lc.detection
            ps = [
                q
                for q in (
                    t.change_p,
                    t.binned_change_p,
                    *(c.change_p for c in lc.per_class if c.tested),
                )
                if q is not None
            ]
            assert (lc.calibration_verdict == "drifted") == (min(ps) < alpha / 2 / t.tests), (
                shift,
                alpha,
            )
            assert (lc.detection_verdict == "changed") == (
                min(d.precision_p, d.recall_p) < alpha / 4
            ), (shift, alpha)
            level = f"{alpha / 2:g}"
            assert (
                f"no test below {level} / {t.tests}" in lc.calibration_line
                or f"at family level {level})" in lc.calibration_line
            ), lc.calibration_line[:120]
        between += (
            alpha / 4 / t.tests <= min(ps) < alpha / 2 / t.tests
        )  # alpha 0.1 here: drifted at 0.1 only
    assert between >= 1


# ------------------------------------------------------------------------------ shifted demo
def test_shifted_splits_are_cached_corruptions_of_test():
    import cv2

    from det_calib.demo import demo_data_yaml, shifted_data_yaml
    from det_calib.demo.shifts import CORRUPTIONS
    from det_calib.demo.shifts import _corrupt as corrupt
    from det_calib.errors import InputError

    test = demo_data_yaml().parent
    src = sorted((test / "images" / "test").glob("*.png"))[:3]
    for kind in CORRUPTIONS:
        y = shifted_data_yaml(kind, 5)
        root = y.parent
        imgs = sorted((root / "images" / f"test-{kind}-5").glob("*.png"))
        assert len(imgs) == 400 and [p.name for p in imgs[:3]] == [p.name for p in src]
        for s, p in zip(src, imgs[:3]):
            a = cv2.imread(str(s))
            assert np.array_equal(
                cv2.imread(str(p)), corrupt(a, kind, 5, index=int(s.stem.split("_")[1]))
            )
            assert (test / "labels" / "test" / f"{s.stem}.txt").read_text() == (
                root / "labels" / f"test-{kind}-5" / f"{s.stem}.txt"
            ).read_text()
    a = cv2.imread(str(src[0])).astype(float)
    diffs = [np.abs(corrupt(a.astype(np.uint8), "blur", s, index=0) - a).mean() for s in (1, 3, 5)]
    assert diffs[0] < diffs[1] < diffs[2]
    with pytest.raises(InputError, match="severity"):
        shifted_data_yaml("blur", 6)
    with pytest.raises(InputError, match="corruption kind"):
        shifted_data_yaml("fog", 2)


# ------------------------------------------------------------------------------ on real runs
@pytest.fixture(scope="session")
def run_dir(tmp_path_factory) -> Path:
    from det_calib.pipeline.calibrate_job import calibrate

    out = tmp_path_factory.mktemp("check") / "run"
    calibrate(
        out=out, limit=N_IMAGES, run_val=False, n_boot=50, progress=False, head="nms", report=False
    )
    return out


@pytest.fixture(scope="session")
def demo_yaml() -> Path:
    from det_calib.demo import demo_data_yaml

    return demo_data_yaml()


@pytest.fixture(scope="session")
def severe_yaml() -> Path:
    from det_calib.demo import shifted_data_yaml

    return shifted_data_yaml("blur", 5)


def _check(capsys, *argv) -> tuple[int, str, str]:
    code = main(["check", *map(str, argv), "--limit", str(N_IMAGES), "-q"])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_clean_test_split_holds(tmp_path, run_dir, demo_yaml):
    """On the run's own eval split both verdicts hold and the command exits 0 (a real process)."""
    out = tmp_path / "clean"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "det_calib.cli",
            "check",
            str(run_dir),
            "--data",
            str(demo_yaml),
            "--split",
            "test",
            "--limit",
            str(N_IMAGES),
            "--out",
            str(out),
            "-q",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    assert "[nms] calibration: holds" in p.stdout and "[nms] detection quality: holds" in p.stdout
    r = CheckResult.read(out / CHECK_FILE)
    c = r.labelled["nms"]
    assert (r.exit_code, r.calibration_verdict, r.detection_verdict) == (0, "holds", "holds")
    # the same images, model and calibrator as the run's eval split: the same boxes and figures
    d, then = c.detection, c.operating_then[0]
    assert d.kept == d.kept_then and d.precision == d.precision_then and d.recall == d.recall_then
    assert c.operating[0].boxes == then.boxes and c.operating[0].ece == pytest.approx(
        then.ece, abs=1e-9
    )
    assert d.map50 == pytest.approx(d.map50_then, abs=1e-9)
    assert c.calibration.z == pytest.approx(c.calibration.z_then, abs=1e-9)
    assert (
        c.calibration.change_z == pytest.approx(0.0, abs=1e-9)
        and c.calibration.binned_change_statistic == 0.0
    )
    assert not any(k.drifted for k in c.per_class)
    assert (out / "check.html").is_file() and "reliability_nms.png" in (
        out / "check.md"
    ).read_text()
    # these are the run's own eval images: said on the console and in the report, recorded
    assert r.seen_images == {"test": N_IMAGES}
    said = f"{N_IMAGES} of the {N_IMAGES} new images are images the run used ({N_IMAGES} of its split `test`)"
    assert said in p.stderr, p.stderr
    assert "the check compares the run with itself" in (out / "check.md").read_text()
    assert (
        CheckResult.from_dict(json.loads((out / CHECK_FILE).read_text())).to_dict() == r.to_dict()
    )
    # where the time went: from the process's start, by stage, adding up; printed after the verdicts
    t = r.timings
    assert t is not None and t.started == "process"
    # check's coarse table: the data checked with the model's load, the report written on the outputs' time
    assert all(t.seconds(n) > 0 for n in ("imports", "model load", "capture", "figures", "outputs"))
    assert set(t.stages) <= {"imports", "model load", "capture", "figures", "outputs", "other"}
    assert sum(st.wall for st in t.stages.values()) == pytest.approx(t.wall, abs=0.01)
    assert p.stdout.splitlines()[-2] == t.line()


def test_most_severe_shift(capsys, tmp_path, run_dir, severe_yaml):
    """Blur at severity 5: detection quality changed; the calibration figures, recomputed from the
    calibrated checkpoint run through a plain capture, agree with the check's."""
    from det_calib.capture.predictor import Capturer
    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.matching.one_to_one import match_boxes
    from det_calib.record.run_result import RunResult

    out = tmp_path / "blur5"
    code, stdout, err = _check(capsys, run_dir, "--data", severe_yaml, "--out", out)
    r = CheckResult.read(out / CHECK_FILE)
    c = r.labelled["nms"]
    assert r.detection_verdict == "changed" and code == r.exit_code in (4, 5), (code, stdout, err)
    assert c.detection.recall < c.detection.recall_then and c.detection.recall_p < 0.025
    assert c.calibration_verdict in ("holds", "drifted", "not enough boxes to tell")
    assert f"calibration: {c.calibration_verdict}" in stdout

    # independently: the folded checkpoint (what a user deploys) on the same images, plain numpy
    run = RunResult.read(run_dir / "calibration.json")
    sp = load_split(load_data_yaml(severe_yaml), "test", limit=N_IMAGES)
    cap = Capturer(
        run_dir / "calibrated.pt",
        head="nms",
        conf=run.settings.conf_floor,
        iou=run.settings.nms_iou,
        max_det=run.settings.max_det,
        imgsz=run.settings.imgsz,
    )
    b = match_boxes(cap(sp.images, progress=False), sp.gt, iou=run.settings.iou_match, loc_iou=0.1)
    k = b.filter(~pl.col("ignore") & (pl.col("conf") > r.conf))
    p, y = k["conf"].to_numpy().astype(float), k["correct"].to_numpy().astype(float)
    ids = k["image_id"].to_numpy()
    per_img = np.bincount(ids, weights=y - p)[
        np.unique(ids)
    ]  # clusters: the images with a kept box
    m = per_img.size
    var = max(np.sum(p * (1 - p)), m / (m - 1) * np.sum((per_img - per_img.mean()) ** 2))
    z = (y.sum() - p.sum()) / math.sqrt(var)
    t = c.calibration
    assert abs(t.boxes - k.height) <= 1  # float32 conf of the checkpoint at the threshold's edge
    assert t.observed == pytest.approx(y.sum(), abs=1) and t.expected == pytest.approx(
        p.sum(), abs=0.6
    )
    assert t.z == pytest.approx(z, abs=0.05)
    assert t.p_value == pytest.approx(math.erfc(abs(z) / math.sqrt(2)), abs=0.01)
    assert c.detection.recall == pytest.approx(y.sum() / sp.gt.height, abs=2 / sp.gt.height)
    # the change against the run's eval split: its boxes.parquet, same formula
    then = pl.read_parquet(run_dir / "boxes.parquet").filter(
        (pl.col("split") == run.settings.eval_split)
        & (pl.col("head") == "nms")
        & ~pl.col("ignore")
        & (pl.col("calibrated") > r.conf)
    )
    p0, y0 = then["calibrated"].to_numpy(), then["correct"].to_numpy().astype(float)
    i0 = then["image_id"].to_numpy()
    # the change is tested outside the crowded images of either side (none on these 60 images, or some)
    k0, k1 = ~np.isin(i0, drift.crowded_images(i0)), ~np.isin(ids, drift.crowded_images(ids))
    assert t.crowded_images == np.unique(ids[~k1]).size and abs(t.rest_boxes - k1.sum()) <= 1
    p0, y0, i0, p1, y1, i1 = p0[k0], y0[k0], i0[k0], p[k1], y[k1], ids[k1]
    r0, r1 = (
        np.bincount(i, weights=b - a)[np.unique(i)] for a, b, i in ((p0, y0, i0), (p1, y1, i1))
    )
    v0, v1 = (
        max(np.sum(a * (1 - a)), r.size / (r.size - 1) * np.sum((r - r.mean()) ** 2)) / a.size**2
        for a, r in ((p0, r0), (p1, r1))
    )
    gap0, gap1 = (y0 - p0).mean(), (y1 - p1).mean()
    assert t.gap_then == pytest.approx(gap0, abs=1e-9) and t.gap == pytest.approx(gap1, abs=0.01)
    assert t.change_z == pytest.approx((gap1 - gap0) / math.sqrt(v0 + v1), abs=0.05)
    assert (c.calibration_verdict == "drifted") == any(
        q is not None and q < r.alpha / 2 / t.tests
        for q in (
            t.change_p,
            t.binned_change_p,
            t.crowded_rate_p,
            *(k.change_p for k in c.per_class if k.tested),
        )
    )
    # kept-set ECE and LaECE_0 and their floors, then and now, each interval containing its estimate
    for o in (*c.operating, *c.operating_then):
        assert (
            o.ece_ci[0] <= o.ece <= o.ece_ci[1]
            and o.ece_floor_range[0] <= o.ece_floor <= o.ece_floor_range[1]
        )
        assert o.laece_floor_range[0] <= o.laece_floor <= o.laece_floor_range[1]
    # the check's page shows both floors, now's LaECE_0 floor as recorded
    md = (out / "check.md").read_text().replace("\\_", "_")
    assert "LaECE_0 sampling floor [range]" in md
    now = c.operating[0]
    assert (
        f"{now.laece_floor:.4f} [{now.laece_floor_range[0]:.4f}, {now.laece_floor_range[1]:.4f}]"
        in md
    )


def test_unlabelled_images(capsys, tmp_path, run_dir, demo_yaml, severe_yaml):
    shifted = severe_yaml.parent / "images" / "test-blur-5"
    code, stdout, err = _check(capsys, run_dir, "--images", shifted, "--out", tmp_path / "u1")
    assert code == 4 and "output: shifted" in stdout, (stdout, err)
    assert "not a miscalibration" in stdout
    r = CheckResult.read(tmp_path / "u1" / CHECK_FILE)
    assert (
        r.seen_images is None
    )  # the blurred renders share the eval images' names, not their bytes
    t = r.unlabelled["nms"].tests
    assert (
        t.kept_per_image < t.kept_per_image_then
        and min(t.ks_p, t.per_image_p, t.class_chi2_p) < 0.05 / 3
    )
    clean = demo_yaml.parent / "images" / "calib"  # held out from the eval split the run reports on
    code, stdout, err = _check(capsys, run_dir, "--images", clean, "--out", tmp_path / "u2")
    assert code == 0 and "output: no shift detected" in stdout, (stdout, err)
    # but the run fitted on them: the check says so (copies too: the same name, size and bytes)
    assert CheckResult.read(tmp_path / "u2" / CHECK_FILE).seen_images == {"calib": N_IMAGES}
    copies = tmp_path / "copies"
    copies.mkdir()
    for p in sorted(clean.glob("*.png"))[:5]:
        shutil.copy(p, copies / p.name)
    # a name of the run's with another image's bytes: not the run's image
    shutil.copy(demo_yaml.parent / "images" / "test" / "test_00000.png", copies / "calib_00000.png")
    code, _, err = _check(capsys, run_dir, "--images", copies, "--out", tmp_path / "u3")
    assert CheckResult.read(tmp_path / "u3" / CHECK_FILE).seen_images == {"calib": 4}, err


def test_reused_boxes_give_the_same_check(capsys, tmp_path, run_dir, demo_yaml):
    code, _, err = _check(
        capsys,
        run_dir,
        "--data",
        demo_yaml,
        "--split",
        "test",
        "--boxes",
        run_dir,
        "--out",
        tmp_path / "reuse",
        "--no-report",
    )
    assert code == 0, err
    r = CheckResult.read(tmp_path / "reuse" / CHECK_FILE).labelled["nms"]
    assert r.detection.kept == r.detection.kept_then and r.calibration.z == pytest.approx(
        r.calibration.z_then
    )


def _one_line(code: int, err: str, pattern: str) -> None:
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.startswith("det-calib: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert pattern in lines[0], lines[0]


def test_bad_input(capsys, tmp_path, run_dir, demo_yaml, fixture_yaml):
    code, _, err = _check(capsys, tmp_path, "--data", demo_yaml)
    _one_line(code, err, "not a run folder")
    no_cal = tmp_path / "nocal"
    shutil.copytree(run_dir, no_cal)
    doc = json.loads((no_cal / "calibration.json").read_text())
    doc["temperature"], doc["calibrators"] = {}, {}
    (no_cal / "calibration.json").write_text(json.dumps(doc))
    code, _, err = _check(capsys, no_cal, "--data", demo_yaml)
    _one_line(code, err, "no calibrator")
    other = tmp_path / "other"
    shutil.copytree(fixture_yaml.parent, other)
    (other / "data.yaml").write_text((other / "data.yaml").read_text().replace("circle", "disc"))
    code, _, err = _check(capsys, run_dir, "--data", other / "data.yaml", "--split", "fixture")
    _one_line(code, err, "class names differ")
    (tmp_path / "empty").mkdir()
    code, _, err = _check(capsys, run_dir, "--images", tmp_path / "empty")
    _one_line(code, err, "no images in")
    code, _, err = _check(capsys, run_dir, "--images", tmp_path / "empty", "--split", "test")
    _one_line(code, err, "`--split` names a split of `--data`; with `--images`")
    code, _, err = _check(capsys, run_dir, "--data", demo_yaml, "--split", "nope")
    _one_line(code, err, "split `nope`")
