"""Threshold tuning: exact binomial maths, the fixed-sequence certificate and its coverage by
simulation, max-F1/LRP known answers, thresholds.json, the CLI, the report section, and
deployment in plain Ultralytics with filter_results."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import special, stats

from det_calib.data.box_table import SCHEMA
from det_calib.errors import InputError
from det_calib.record.run_result import (
    Bootstrap,
    Calibrator,
    HeadResult,
    RecordedSettings,
    RunResult,
)
from det_calib.thresholds import per_class as tuning
from det_calib.thresholds.per_class import (
    certify_image_precision,
    certify_precision,
    class_thresholds,
    counts_by_image,
    filter_results,
    read_thresholds,
    tune,
    tune_run,
)


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


# --------------------------------------------------------------------------------- exact maths


@pytest.mark.fast
def test_betainc_binom_sf_and_lower_bound_match_scipy():
    rng = np.random.default_rng(0)
    a, b, x = rng.uniform(0.3, 800, 3000), rng.uniform(0.3, 800, 3000), rng.uniform(0, 1, 3000)
    np.testing.assert_allclose(
        tuning.betainc(a, b, x), special.betainc(a, b, x), rtol=0, atol=1e-11
    )
    n = rng.integers(1, 5000, 800)
    k = rng.integers(0, n + 1)
    np.testing.assert_allclose(
        tuning.binom_sf(k, n, 0.8), stats.binom.sf(k - 1, n, 0.8), atol=1e-11
    )
    lb = tuning.precision_lower_bound(k, n, delta=0.1)
    ref = np.where(k > 0, stats.beta.ppf(0.1, np.maximum(k, 1), n - k + 1), 0.0)  # Clopper-Pearson
    np.testing.assert_allclose(lb, ref, atol=1e-8)
    assert np.isnan(tuning.precision_lower_bound(0, 0, delta=0.1))


def _reference_sequence(n, k, target, delta):
    """The fixed-sequence test written as the loop it is (scipy binomial tails)."""
    best = -1
    for j in range(len(n) - 1, -1, -1):
        kk = np.ceil(n[j] * (1 + target) / 2)
        if n[j] == 0 or stats.binom.sf(kk - 1, n[j], target) > delta:
            continue  # not testable: skipped, label-free
        if stats.binom.sf(k[j] - 1, n[j], target) <= delta:
            best = j
        else:
            break
    return best


@pytest.mark.fast
def test_certify_precision_known_answer():
    # thresholds increase left to right; n falls as the threshold rises
    n = np.array([400, 300, 200, 100, 60, 10])
    k = np.array(
        [390, 280, 120, 95, 58, 10]
    )  # index 5: too few to test; 4, 3 pass; 2 fails; 1 would pass
    assert certify_precision(n, k, target=0.8, delta=0.1) == 3
    assert (
        certify_precision(n, np.minimum(n, k + (n - k)), target=0.8, delta=0.1) == 0
    )  # all correct
    assert certify_precision(n, n // 2, target=0.8, delta=0.1) == -1
    # vectorised over leading axes, equal to the loop, on random sequences
    rng = np.random.default_rng(1)
    nn = np.sort(rng.integers(0, 300, (300, 12)), axis=1)[:, ::-1]
    kk = rng.binomial(nn, rng.uniform(0.6, 1.0, (300, 1)))
    got = certify_precision(nn, kk, target=0.85, delta=0.1)
    ref = [_reference_sequence(nn[i], kk[i], 0.85, 0.1) for i in range(300)]
    assert got.tolist() == ref
    assert (got >= 0).sum() > 50 and (got == -1).sum() > 10  # both outcomes exercised


@pytest.mark.fast
def test_design_effect_is_one_without_clustering_and_large_with_it():
    # per-image counts with identical images: no between-image variance beyond binomial -> deff 1
    kept = np.full((50, 1), 10.0)
    tp = np.full((50, 1), 8.0)
    assert tuning.design_effect(kept, tp)[0] == 1.0
    # half the images all right, half all wrong: deff = box count per image
    tp2 = np.r_[np.full(25, 10.0), np.zeros(25)][:, None]
    d = tuning.design_effect(kept, tp2)[0]
    assert d == pytest.approx(10 * 50 / 49, rel=1e-9)


def _korn_graubard(score, correct, image_id, t, *, delta):
    """Korn & Graubard's effective-sample-size Clopper-Pearson bound of the precision of the boxes
    with ``score > t``, written out with a loop over images and scipy: ``(deff, n*, k*, bound)``.

    deff: the linearised variance of the ratio estimator over the m images with a kept box,
    ``m / (m - 1) * sum_i (k_i - p n_i)^2 / n^2``, over the binomial ``p (1 - p) / n``, at least 1;
    ``n* = n / deff``, ``k* = k / deff``; the bound: ``Beta(delta; k*, n* - k* + 1)``, the ``p`` at
    which ``P(Bin(n*, p) >= k*) = delta`` (the regularised incomplete beta, real counts allowed).
    """
    ni, ki = [], []
    for i in np.unique(image_id):
        kept = (image_id == i) & (score > t)
        if kept.any():
            ni.append(kept.sum())
            ki.append((kept & correct).sum())
    ni, ki = np.array(ni, float), np.array(ki, float)
    n, k, m = ni.sum(), ki.sum(), len(ni)
    p = k / n
    var_cluster = m / (m - 1) * ((ki - p * ni) ** 2).sum() / n**2 if m > 1 else np.nan
    deff = var_cluster / (p * (1 - p) / n) if 0 < p < 1 and m > 1 else 1.0
    deff = max(deff, 1.0) if np.isfinite(deff) else 1.0
    ne, ke = n / deff, k / deff
    return deff, ne, ke, float(stats.beta.ppf(delta, ke, ne - ke + 1)) if k > 0 else 0.0


def _hb(r: float, n: int, a: float) -> float:
    """Hoeffding-Bentkus p-value of ``mean loss <= a`` from n losses in [0, 1] with mean r (scipy)."""
    rr = min(r, a)
    h = (rr * math.log(rr / a) if rr > 0 else 0.0) + (1 - rr) * math.log((1 - rr) / (1 - a))
    return min(math.exp(-n * h), math.e * stats.binom.cdf(math.ceil(n * r - 1e-9), n, a), 1.0)


def _image_fdp(score, correct, image_id, t):
    """(images keeping a box at t, their mean false discovery proportion), with a loop over images."""
    fdps = []
    for i in np.unique(image_id):
        kept = (image_id == i) & (score > t)
        if kept.any():
            fdps.append(float((kept & ~correct).sum() / kept.sum()))
    return len(fdps), (float(np.mean(fdps)) if fdps else float("nan"))


def _certified_by_hand(score, correct, image_id, grid, *, target, delta, unit):
    """The fixed-sequence test as the loop it is: thresholds high to low, the label-free testable rule on
    counts, H0 rejected by the image-level Hoeffding-Bentkus test of the mean FDP of the images that keep a
    box (unit image) or by the box-level Clopper-Pearson bound (unit box); the lowest rejected threshold
    before the first failure, or None."""
    best = None
    for t in grid[::-1]:
        kept = score > t
        n = kept.sum()
        if unit == "image":
            m, fdp = _image_fdp(score, correct, image_id, t)
            if (
                m < math.ceil(math.log(delta) / math.log(target))
                or _hb((1 - target) / 2, m, 1 - target) > delta
            ):
                continue  # not testable
            passed = _hb(fdp, m, 1 - target) <= delta
        else:
            if n == 0 or stats.binom.sf(np.ceil(n * (1 + target) / 2) - 1, n, target) > delta:
                continue  # not testable
            k = (kept & correct).sum()
            passed = (float(stats.beta.ppf(delta, k, n - k + 1)) if k > 0 else 0.0) >= target
        if passed:
            best = t
        else:
            break
    return best


@pytest.mark.fast
@pytest.mark.parametrize("unit", ["image", "box"])
def test_certified_bound_recomputed_from_its_formula(unit):
    """The reported threshold and certified precision bound of every certified class (and of all classes
    pooled) are the formula's, recomputed independently at the chosen threshold on clustered data (a
    per-image effect on correctness)."""
    rng = np.random.default_rng(11)
    rows = []
    for img in range(400):
        u = rng.normal(
            0, 1.5
        )  # per-image effect the scores do not see: the boxes of an image are correlated
        for c, nb, z0 in ((0, 9, 1.8), (1, 5, 2.4), (2, 4, 1.2)):
            z = rng.normal(z0, 1.2, nb)
            y = rng.random(nb) < sigmoid(z + u)
            rows += [(img, c, sigmoid(zi), bool(yi)) for zi, yi in zip(z, y)]
    img, cls, score, y = (np.array(v) for v in zip(*rows))
    score = np.round(score, 6)
    fit = pl.DataFrame({"image_id": img, "cls": cls, "correct": y, "iou": np.where(y, 0.8, 0.2)})
    target, delta = 0.8, 0.1
    grid = np.round(np.arange(200) / 200, 3)
    doc = tune(
        fit,
        score,
        n_gt_fit={0: 3600, 1: 2000, 2: 1600},
        class_names=["a", "b", "c"],
        target_precision=target,
        delta=delta,
        unit=unit,
        grid=grid,
    )["target_precision"]
    checked = 0
    for sel, r in [
        (np.ones(len(cls), bool), doc["global"]),
        *((cls == q["cls"], q) for q in doc["per_class"]),
    ]:
        t = _certified_by_hand(
            score[sel], y[sel], img[sel], grid, target=target, delta=delta, unit=unit
        )
        if t is None:
            assert not r["certified"] and r["precision_lower"] is None and r["deff"] is None
            continue
        assert r["certified"] and r["fallback"] is None and r["threshold"] == t
        kept = sel & (score > t)
        assert r["fit"]["kept"] == kept.sum() and r["fit"]["precision"] == pytest.approx(
            (kept & y).sum() / kept.sum()
        )
        if unit == "image":
            m, fdp = _image_fdp(score[sel], y[sel], img[sel], t)
            assert r["fit"]["precision_per_image"] == pytest.approx(1 - fdp, rel=1e-12)
            # the bound: 1 - the smallest risk level the HB test rejects at delta (to the bisection's 1e-6)
            up = 1 - r["precision_lower"]
            assert _hb(fdp, m, up) <= delta < _hb(fdp, m, up - 1e-5)
        else:
            assert r["deff"] is None
            n, k = kept.sum(), (kept & y).sum()
            assert r["precision_lower"] == pytest.approx(
                float(stats.beta.ppf(delta, k, n - k + 1)), abs=1e-9
            )
        assert r["precision_lower"] >= target
        checked += 1
    assert checked >= 3  # the pooled classes and at least two classes certified


# --------------------------------------------------------------------------------- simulation

GRID = np.round(np.arange(100) / 100, 2)
A, B = 2.0, 1.2  # scores ~ Beta(2, 1.2)


def _draw(rng, draws, m, nb, sigma):
    """Per-image counts (draws, m, G) of kept and correct boxes: calibrated scores, with an
    optional per-image random effect on the logit (boxes of one image correlated)."""
    s = rng.beta(A, B, size=(draws, m, nb))
    z = np.log(s) - np.log1p(-s) + sigma * rng.standard_normal((draws, m, 1))
    y = rng.random((draws, m, nb)) < sigmoid(z)
    keep = s[..., None] > GRID
    return keep.sum(2).astype(float), (keep & y[..., None]).sum(2).astype(float)


def _true_precision(sigma, m, nb, unit="box"):
    """The population's precision per grid threshold: pooled (box), or the mean precision of the images
    that keep a box (image)."""
    if sigma == 0 and unit == "box":  # exact: E[s | s > t] for s ~ Beta(a, b)
        return (
            A / (A + B) * (1 - special.betainc(A + 1, B, GRID)) / (1 - special.betainc(A, B, GRID))
        )
    kept, tp = _draw(np.random.default_rng(123), 40, 2000, nb, sigma)  # 80,000 images
    if unit == "box":
        return tp.sum((0, 1)) / kept.sum((0, 1))
    fdp, _ = tuning.image_fdp(kept.reshape(-1, len(GRID)), tp.reshape(-1, len(GRID)))
    return 1 - fdp


def _coverage(sigma, unit, *, m, nb, draws=2000, target=0.8, delta=0.1, seed=0):
    truth = _true_precision(sigma, m, nb, unit="image" if unit == "image" else "box")
    rng = np.random.default_rng(seed)
    idx, naive = [], []
    for _ in range(draws // 250):
        kept, tp = _draw(rng, 250, m, nb, sigma)
        n, k = kept.sum(1), tp.sum(1)
        if unit == "image":  # the image-level test, one draw at a time
            idx.append(
                np.array(
                    [
                        certify_image_precision(kept[d], tp[d], target=target, delta=delta)
                        for d in range(len(kept))
                    ]
                )
            )
        else:  # the box-level binomial test, with the design effect (``deff``) or without (``box``)
            deff = tuning.design_effect(kept, tp) if unit == "deff" else None
            idx.append(certify_precision(n, k, target=target, delta=delta, deff=deff))
        with np.errstate(invalid="ignore", divide="ignore"):
            ok = np.where(n > 0, k / np.maximum(n, 1), 0) >= target
        naive.append(
            np.where(ok.any(1), ok.argmax(1), -1)
        )  # lowest threshold with in-sample precision >= target
    idx, naive = np.concatenate(idx), np.concatenate(naive)

    def cov(i):  # no threshold certified = no claim made = not a miss
        return float(np.mean(np.where(i >= 0, truth[np.maximum(i, 0)] >= target, True)))

    return cov(idx), float(np.mean(idx >= 0)), cov(naive)


@pytest.mark.parametrize("unit", ["box", "image"])
def test_coverage_on_calibrated_synthetic_data(unit):
    cov, certified, naive = _coverage(0.0, unit, m=50 if unit == "box" else 300, nb=8)
    assert cov >= 1 - 0.1 - 0.02, f"coverage {cov} over 2000 draws"
    assert certified > 0.8  # the guarantee is not bought by refusing to certify
    assert naive < 0.7  # the in-sample choice misses often: the simulation can detect a failure


def test_image_level_test_keeps_coverage_when_boxes_of_an_image_are_correlated():
    # strong per-image effects, 30 boxes per image: the box-level binomial test is optimistic; the image-level
    # test (images the units) keeps its coverage
    cov_img, cert_img, _ = _coverage(2.0, "image", m=200, nb=30)
    cov_box, _, _ = _coverage(2.0, "box", m=200, nb=30)
    assert cov_img >= 1 - 0.1 - 0.02, f"image-level coverage {cov_img}"
    assert cov_box < 1 - 0.1 - 0.05, cov_box
    assert cert_img > 0.3


# --------------------------------------------------------------------------------- max-F1 and LRP


def _table(score, correct, cls, image_id, iou):
    return pl.DataFrame(
        {"score": score, "correct": correct, "cls": cls, "image_id": image_id, "iou": iou}
    )


@pytest.mark.fast
def test_max_f1_and_lrp_known_answers():
    # one class, 4 boxes, 4 ground truths
    s = np.array([0.9, 0.8, 0.6, 0.3])
    y = np.array([True, False, True, True])
    iou = np.array([0.9, 0.2, 0.7, 0.5])
    df = _table(s, y, np.zeros(4, int), np.arange(4), iou)
    grid = np.array([0.0, 0.5, 0.7, 0.85])
    out = tune(
        df,
        s,
        n_gt_fit={0: 4},
        class_names=["a"],
        target_precision=0.5,
        delta=0.5,
        grid=grid,
        n_boot=10,
    )
    # F1 at t: 0.85 -> 2/(1+4)=0.4; 0.7 -> 2/(2+4)=0.333; 0.5 -> 4/(3+4)=0.571; 0.0 -> 6/(4+4)=0.75
    f1 = out["max_f1"]["per_class"][0]
    assert f1["threshold"] == 0.0 and f1["f1"] == pytest.approx(0.75)
    # LRP (tau 0.5): loc = sum over kept TP of (1 - IoU)/0.5
    #  t=0.85: TP1 FP0 FN3: (0.2 + 0 + 3) / 4 = 0.8
    #  t=0.7 : TP1 FP1 FN3: (0.2 + 1 + 3) / 5 = 0.84
    #  t=0.5 : TP2 FP1 FN2: (0.2 + 0.6 + 1 + 2) / 5 = 0.76
    #  t=0.0 : TP3 FP1 FN1: (0.2 + 0.6 + 1.0 + 1 + 1) / 5 = 0.76  -> tie: the lowest threshold
    lrp = out["lrp"]["per_class"][0]
    assert lrp["lrp"] == pytest.approx(0.76) and lrp["threshold"] == 0.0
    assert out["lrp"]["params"] == {"tau": 0.5}
    assert f1["fit"] == {"precision": 0.75, "recall": 0.75, "kept": 4, "n_gt": 4}


@pytest.mark.fast
def test_lrp_and_f1_match_brute_force_on_random_data():
    rng = np.random.default_rng(5)
    n = 600
    s = rng.random(n)
    y = rng.random(n) < s
    iou = np.where(y, rng.uniform(0.5, 1.0, n), rng.uniform(0, 0.5, n))
    cls = rng.integers(0, 3, n)
    img = rng.integers(0, 40, n)
    n_gt = {0: 150, 1: 120, 2: 0}
    grid = np.round(np.arange(50) / 50, 2)
    out = tune(
        _table(s, y, cls, img, iou),
        s,
        n_gt_fit=n_gt,
        class_names=["a", "b", "c"],
        grid=grid,
        n_boot=10,
    )
    for c in (0, 1):
        m = cls == c
        best_f1, best_lrp = (-1, None), (np.inf, None)
        for t in grid:
            kept = m & (s > t)
            tp = int((kept & y).sum())
            fp = int(kept.sum()) - tp
            fn = n_gt[c] - tp
            f1 = 2 * tp / (kept.sum() + n_gt[c])
            lrp = (((1 - iou[kept & y]) / 0.5).sum() + fp + fn) / (tp + fp + fn)
            if f1 > best_f1[0] + 1e-12:
                best_f1 = (f1, t)
            if lrp < best_lrp[0] - 1e-12:
                best_lrp = (lrp, t)
        f1_row = next(r for r in out["max_f1"]["per_class"] if r["cls"] == c)
        lrp_row = next(r for r in out["lrp"]["per_class"] if r["cls"] == c)
        assert f1_row["threshold"] == best_f1[1] and f1_row["f1"] == pytest.approx(best_f1[0])
        assert lrp_row["threshold"] == best_lrp[1] and lrp_row["lrp"] == pytest.approx(best_lrp[0])
    no_gt = next(r for r in out["lrp"]["per_class"] if r["cls"] == 2)
    assert no_gt["flag"] == "no_ground_truth" and no_gt["threshold"] == 1.0


@pytest.mark.fast
def test_counts_by_image_known_answer():
    c = counts_by_image(
        np.array([0.2, 0.6, 0.6, 0.9]),
        np.array([1, 0, 1, 1], bool),
        np.array([7, 7, 3, 3]),
        grid=np.array([0.0, 0.5, 0.6, 0.8]),
        n_gt=5,
    )
    # rows: images 3, 7 (sorted); strict ">": a box at 0.6 is not kept at t = 0.6
    assert c.kept.tolist() == [[2, 2, 1, 1], [2, 1, 0, 0]]
    assert c.tp.tolist() == [[2, 2, 1, 1], [1, 0, 0, 0]]


# --------------------------------------------------------------------------------- a run folder


def make_run(
    folder: Path,
    *,
    seed: int = 0,
    heads=("nms",),
    data: str | None = None,
    fit_split="calib",
    eval_split="test",
    n_img=120,
    temperature=1.3,
    gt_counts: bool = False,
) -> tuple[Path, dict]:
    """A synthetic calibration run folder: calibration.json + boxes.parquet.

    Classes: 0 "good" (calibrated, plenty of boxes), 1 "rare" (5 boxes), 2 "bad" (never above 40%
    correct). Returns the folder and the ground-truth counts per split.
    """
    rng = np.random.default_rng(seed)
    rows = []
    n_gt: dict[str, dict[int, int]] = {}
    for split in (fit_split, eval_split):
        counts = {0: 0, 1: 0, 2: 0}
        for head in heads:
            for img in range(n_img):
                for c, nb in ((0, 6), (2, 3)):
                    z = rng.normal(0.5 if c == 0 else -1.0, 2.0, nb) * temperature
                    p = sigmoid(z / temperature)
                    y = rng.random(nb) < (p if c == 0 else np.minimum(p, 0.4))
                    for zi, yi in zip(z, y):
                        iou = rng.uniform(0.55, 1.0) if yi else rng.uniform(0, 0.5)
                        rows.append((split, head, img, c, zi, bool(yi), iou))
                        if head == heads[0]:
                            counts[c] += int(yi)
            for img in range(5):
                rows.append((split, head, img, 1, 3.0, True, 0.8))
                if head == heads[0]:
                    counts[1] += 1
        counts = {c: v + 10 for c, v in counts.items()}  # some ground truth never detected
        n_gt[split] = counts
    split, head, img, cls, z, y, iou = map(list, zip(*rows))
    n = len(rows)
    z = np.array(z)
    df = pl.DataFrame(
        {
            "image": [f"{i}.jpg" for i in img],
            "image_id": img,
            "split": split,
            "head": head,
            "x1": np.zeros(n),
            "y1": np.zeros(n),
            "x2": np.full(n, 10.0),
            "y2": np.full(n, 10.0),
            "img_w": np.full(n, 64),
            "img_h": np.full(n, 64),
            "cls": cls,
            "conf": sigmoid(z).astype(np.float32).astype(np.float64),
            "logit": z,
            "correct": y,
            "iou": iou,
            "ignore": np.zeros(n, bool),
            "loc_iou": iou,
        }
    ).with_columns([pl.col(c).cast(t) for c, t in SCHEMA.items()])
    folder.mkdir(parents=True, exist_ok=True)
    df.write_parquet(folder / "boxes.parquet")
    settings = RecordedSettings(
        iou_match=0.5,
        loc_iou_match=0.1,
        fit_min_conf=0.0,
        conf_floor=0.001,
        nms_iou=0.7,
        max_det=300,
        imgsz=64,
        conf_thresholds=(0.25,),
        ece_bins=15,
        laece_bins=25,
        dece_bins=(8, 3, 3, 3, 3),
        min_class_boxes=50,
        bootstrap=Bootstrap(),
        fit_split=fit_split,
        eval_split=eval_split,
        coco_gt=None,
    )
    RunResult(  # as calibrate writes it (the typed result); gt_counts: per split, a list indexed by class id
        model="",
        data=data or "",
        class_names=["good", "rare", "bad"],
        heads=list(heads),
        settings=settings,
        results={
            h: HeadResult(calibrator=Calibrator.temperature_scaling(temperature)) for h in heads
        },
        gt_counts={sp: [c[i] for i in range(3)] for sp, c in n_gt.items()} if gt_counts else None,
    ).write(folder / "calibration.json")
    return folder, n_gt


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder, n_gt = make_run(tmp_path_factory.mktemp("run"))
    doc = tune_run(
        folder, head="nms", target_precision=0.8, delta=0.1, n_gt=n_gt, n_boot=300, seed=4
    )
    return folder, n_gt, doc


def test_tune_run_writes_a_versioned_file_with_flags(run):
    folder, _, doc = run
    on_disk = read_thresholds(folder / "thresholds.json")
    assert on_disk == json.loads(json.dumps(doc))
    assert on_disk["format"] == "det_calib.thresholds" and on_disk["version"] == 1
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temporary file left
    crit = doc["heads"]["nms"]["criteria"]
    assert set(crit) == {"target_precision", "max_f1", "lrp"}
    tp = {r["name"]: r for r in crit["target_precision"]["per_class"]}
    assert tp["good"]["certified"] and tp["good"]["flag"] is None
    assert (
        tp["good"]["precision_lower"] >= 0.8
        and tp["good"]["fit"]["precision"] >= tp["good"]["precision_lower"]
    )
    assert crit["target_precision"]["global"]["certified"]
    g = crit["target_precision"]["global"]["threshold"]
    assert (
        tp["rare"]["flag"] == "too_few_boxes"
        and tp["rare"]["fallback"] == "global"
        and tp["rare"]["threshold"] == g
    )
    assert tp["bad"]["flag"] == "target_not_reached" and tp["bad"]["fallback"] == "global"
    assert class_thresholds(folder, head="nms", criterion="target_precision") == {
        0: tp["good"]["threshold"],
        1: g,
        2: g,
    }


def test_realised_eval_figures_and_coverage_recomputed_by_hand(run):
    folder, n_gt, doc = run
    boxes = pl.read_parquet(folder / "boxes.parquet").filter(
        (pl.col("head") == "nms") & (pl.col("split") == "test")
    )
    conf = sigmoid(boxes["logit"].to_numpy() / 1.3)
    y = boxes["correct"].to_numpy()
    cls = boxes["cls"].to_numpy()
    img = boxes["image_id"].to_numpy()
    for crit in ("target_precision", "max_f1", "lrp"):
        for r in doc["heads"]["nms"]["criteria"][crit]["per_class"]:
            kept = (cls == r["cls"]) & (conf > r["threshold"])
            ev = r["eval"]
            assert ev["kept"] == kept.sum()
            assert ev["recall"] == pytest.approx((kept & y).sum() / n_gt["test"][r["cls"]])
            if kept.any():
                assert ev["precision"] == pytest.approx((kept & y).sum() / kept.sum())
    # coverage of class "good": the same resamples drawn by a plain loop
    r = doc["heads"]["nms"]["criteria"]["target_precision"]["per_class"][0]
    rng = np.random.default_rng(4)
    uimg = np.unique(img)
    w = rng.multinomial(len(uimg), np.full(len(uimg), 1 / len(uimg)), size=300)
    hits = []
    for row in w:
        sel = np.repeat(uimg, row)
        kk = nn = 0
        for i in sel:
            m = (img == i) & (cls == 0) & (conf > r["threshold"])
            nn += m.sum()
            kk += (m & y).sum()
        hits.append(kk / nn >= 0.8)
    assert r["eval"]["coverage"] == pytest.approx(np.mean(hits))
    val = doc["heads"]["nms"]["criteria"]["target_precision"]["validation"]
    assert val["certified_classes"] == 1 and val["n_boot"] == 300


def test_pluggable_scores_give_the_same_thresholds(run, tmp_path):
    folder, n_gt, doc = run
    t = 1.3
    d1 = tune_run(
        folder,
        head="nms",
        target_precision=0.8,
        delta=0.1,
        n_gt=n_gt,
        n_boot=300,
        seed=4,
        score={"nms": lambda z: sigmoid(z / t)},
        write=False,
    )
    d2 = tune_run(
        folder,
        head="nms",
        target_precision=0.8,
        delta=0.1,
        n_gt=n_gt,
        n_boot=300,
        seed=4,
        score=lambda b, h: sigmoid(b["logit"].to_numpy() / t),
        score_name="T=1.3",
        write=False,
    )
    for d in (d1, d2):
        assert d["heads"]["nms"]["criteria"] == doc["heads"]["nms"]["criteria"]
    assert (
        d1["heads"]["nms"]["score"]["kind"] == "custom"
        and d2["heads"]["nms"]["score"]["formula"] == "T=1.3"
    )
    with pytest.raises(InputError, match="outside"):
        tune_run(folder, head="nms", n_gt=n_gt, score={"nms": lambda z: z}, write=False)
    with pytest.raises(InputError, match="transform for head"):
        tune_run(folder, head="nms", n_gt=n_gt, score={"e2e": lambda z: z}, write=False)


def test_bad_input(run, tmp_path):
    folder, n_gt, _ = run
    for v in (0, 1, 1.5, -0.2):
        with pytest.raises(InputError, match="target_precision"):
            tune_run(folder, target_precision=v, n_gt=n_gt)
    with pytest.raises(InputError, match="delta"):
        tune_run(folder, delta=0, n_gt=n_gt)
    with pytest.raises(InputError, match="head"):
        tune_run(folder, head="e2e", n_gt=n_gt)
    with pytest.raises(InputError, match="run directory not found"):
        tune_run(tmp_path / "nowhere", n_gt=n_gt)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "calibration.json").write_text((folder / "calibration.json").read_text())
    with pytest.raises(InputError, match="box table not found"):
        tune_run(empty, n_gt=n_gt)
    with pytest.raises(InputError, match="dataset"):  # no n_gt and no readable dataset to count it
        tune_run(folder, write=False)
    other, gt2 = make_run(tmp_path / "other", fit_split="val")
    cal = json.loads((other / "calibration.json").read_text())
    cal["splits"]["fit"] = "train"  # a split with no boxes
    (other / "calibration.json").write_text(json.dumps(cal))
    with pytest.raises(InputError, match="no boxes of head nms in the fit split"):
        tune_run(other, n_gt=gt2)
    bad = tmp_path / "thresholds.json"
    bad.write_text(json.dumps({"format": "det_calib.thresholds", "version": 99, "heads": {}}))
    with pytest.raises(InputError, match="version 99"):
        read_thresholds(bad)
    with pytest.raises(InputError, match="criterion"):
        class_thresholds(folder, criterion="best")


def test_class_never_reaching_target_with_no_global_is_dropped(tmp_path):
    folder, n_gt = make_run(tmp_path / "r")
    doc = tune_run(folder, target_precision=0.99, delta=0.05, n_gt=n_gt, n_boot=50)
    tp = doc["heads"]["nms"]["criteria"]["target_precision"]
    assert not tp["global"]["certified"]
    for r in tp["per_class"]:
        assert r["flag"] in ("too_few_boxes", "target_not_reached")
        assert r["fallback"] == "drop" and r["threshold"] == 1.0 and r["eval"]["kept"] == 0


def test_ground_truth_counted_from_the_runs_dataset(tmp_path, fixture_yaml):
    # the fixture data.yaml has splits `val` and `fixture` (the same 12 images)
    folder, _ = make_run(
        tmp_path / "r", data=str(fixture_yaml), fit_split="val", eval_split="fixture", n_img=12
    )
    doc = tune_run(folder, target_precision=0.8, delta=0.1, n_boot=20)
    labels = sorted((fixture_yaml.parent / "labels" / "fixture").glob("*.txt"))
    assert len(labels) == 12
    cls = [
        int(line.split()[0]) for p in labels for line in p.read_text().splitlines() if line.strip()
    ]
    want = {c: cls.count(c) for c in range(8)}
    rows = doc["heads"]["nms"]["criteria"]["max_f1"]["per_class"]
    assert {r["cls"] for r in rows} == {c for c, v in want.items() if v} | {
        0,
        1,
        2,
    }  # classes with GT or boxes
    for r in rows:
        assert r["fit"]["n_gt"] == want[r["cls"]] == r["eval"]["n_gt"]


# --------------------------------------------------------------------------------- CLI and report


def test_cli_thresholds(run, tmp_path, capsys):
    from det_calib.cli import main

    folder, _, _ = run
    with_data, _ = make_run(tmp_path / "r", data=str(tmp_path / "missing.yaml"))
    assert main(["thresholds", str(with_data), "--target-precision", "0.8"]) == 2
    assert "dataset" in capsys.readouterr().err
    assert main(["thresholds", str(folder), "--target-precision", "1.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "`--target-precision`" in err[0]
    )  # the library's parameter shown as the flag
    assert main(["thresholds", str(folder), "--delta", "0"]) == 2
    assert "`--delta`" in capsys.readouterr().err
    assert main(["thresholds", str(folder), "--head", "e2e"]) == 2  # a head the run lacks
    assert "`--head`" in capsys.readouterr().err


def test_cli_thresholds_options_come_from_settings(tmp_path, capsys):
    """`thresholds` shares its options and defaults with `calibrate` (Settings) and writes what
    tune_run writes with the same values; ground truth from the run's recorded `gt_counts`."""
    import inspect

    from det_calib.cli import _parser, main
    from det_calib.cli import _settings_from_args as settings_from_args
    from det_calib.job.settings import Settings

    args = _parser().parse_args(["thresholds", "somewhere"])
    s = settings_from_args(args, Settings)
    sig = inspect.signature(tune_run).parameters
    assert s.target_precision == tuning.DEFAULT_TARGET_PRECISION == sig["target_precision"].default
    # --threshold-unit is None when not given (risk control refuses a given one): the tuning then
    # reads Settings' default
    assert args.threshold_unit is None
    assert (s.delta, Settings().threshold_unit, s.threshold_fallback, s.n_boot) == (
        sig["delta"].default,
        sig["unit"].default,
        sig["fallback"].default,
        sig["n_boot"].default,
    )
    assert Settings().target_precision is None  # calibrate tunes only when asked
    folder, n_gt = make_run(tmp_path / "r", gt_counts=True)
    assert (
        main(
            [
                "thresholds",
                str(folder),
                "--target-precision",
                "0.8",
                "--n-boot",
                "40",
                "--threshold-unit",
                "box",
                "--threshold-fallback",
                "drop",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "certified: the pooled precision of the boxes is at least 0.8 with probability at least 0.9"
        " (delta 0.1) if boxes were independent draws"
        in out
        and "thresholds.json" in out
    )
    want = tune_run(
        folder, target_precision=0.8, unit="box", fallback="drop", n_boot=40, n_gt=n_gt, write=False
    )
    assert read_thresholds(folder)["heads"]["nms"]["criteria"] == want["heads"]["nms"]["criteria"]


def test_ground_truth_read_from_recorded_counts(tmp_path):
    """calibration.json's `gt_counts` replaces reopening the dataset; it wins over `data`; a bad one
    is a one-line error naming the file."""
    folder, n_gt = make_run(tmp_path / "r", gt_counts=True, data=str(tmp_path / "missing.yaml"))
    got = tune_run(folder, target_precision=0.8, n_boot=30, write=False)
    want = tune_run(folder, target_precision=0.8, n_boot=30, n_gt=n_gt, write=False)
    assert got["heads"]["nms"]["criteria"] == want["heads"]["nms"]["criteria"]
    rows = got["heads"]["nms"]["criteria"]["max_f1"]["per_class"]
    assert [r["fit"]["n_gt"] for r in rows] == [n_gt["calib"][c] for c in (0, 1, 2)]
    cal = json.loads((folder / "calibration.json").read_text())
    cal["gt_counts"]["calib"] = [1, "x"]
    (folder / "calibration.json").write_text(json.dumps(cal))
    with pytest.raises(
        InputError, match=r"calibration.json: `gt_counts.calib\[1\]` must be an integer"
    ):
        tune_run(folder, write=False)


@pytest.mark.fast
def test_filter_results_at_top_level():
    import det_calib

    assert det_calib.filter_results is filter_results and "filter_results" in det_calib.__all__


def test_the_printed_table_says_what_each_figure_is(run):
    """The table ``thresholds`` prints: with the image-level guarantee its precision columns are the
    mean precision of the images that keep a box (what is certified, and what coverage reads), the
    pooled one beside them; a class not certified says why and what it uses, in words."""
    from det_calib.thresholds import summary_lines

    _, _, doc = run
    lines = summary_lines(doc, head="nms")
    text = "\n".join(lines)
    assert "->" not in text and "None" not in text and "_" not in text
    assert lines[1].startswith("certified: the mean precision of the images that keep a box is at")
    tp = doc["heads"]["nms"]["criteria"]["target_precision"]
    g, f1 = tp["global"], doc["heads"]["nms"]["criteria"]["max_f1"]["global"]
    row = next(ln for ln in lines if ln.startswith("(global)")).split()
    want = [
        g["threshold"],
        g["fit"]["precision_per_image"],
        g["eval"]["precision_per_image"],
        g["eval"]["precision"],
        g["eval"]["recall"],
        g["eval"]["coverage"],
        f1["threshold"],
    ]
    assert row[1:8] == [f"{x:.3f}" for x in want]
    assert g["eval"]["precision_per_image"] != g["eval"]["precision"]
    rare = next(ln for ln in lines if ln.startswith("rare"))
    assert rare.endswith(
        "not certified (too few images keep a box to certify): uses the global threshold"
    )
    assert lines[-2].startswith("on test: ") or lines[-2].startswith("on eval: ")


def test_report_section(run):
    from det_calib.report.document import Fig, Table, to_html, to_markdown
    from det_calib.report.thresholds_section import thresholds_section

    folder, _, doc = run
    blocks, figures = thresholds_section(folder)
    tables = [b for b in blocks if isinstance(b, Table)]
    figs = [b for b in blocks if isinstance(b, Fig)]
    assert len(tables) == 1 and len(tables[0].rows) == 1 + 3  # global + 3 classes
    assert [f.name for f in figs] == list(figures) == ["thresholds_pr_nms"]
    assert figures["thresholds_pr_nms"][:8] == b"\x89PNG\r\n\x1a\n"
    good = next(r for r in tables[0].rows if r[0] == "good")
    t = doc["heads"]["nms"]["criteria"]["target_precision"]["per_class"][0]
    assert good[1] == f"{t['threshold']:.3f}"
    assert good[2].startswith(f"{t['fit']['precision_per_image']:.3f} (")  # the lower bound beside
    assert good[3] == f"{t['eval']['precision_per_image']:.3f} / {t['eval']['precision']:.3f}"
    rare = next(r for r in tables[0].rows if r[0] == "rare")
    assert rare[1].endswith("(not certified: the global threshold)")
    html = to_html("t", blocks)
    assert "Not certified: rare (too few boxes" in html
    assert "figures/thresholds_pr_nms.png" in to_markdown("t", blocks)


def test_the_report_reads_one_view_of_the_thresholds(run, tmp_path):
    """``thresholds_view``: the file's rows as the section's table shows them, the document's
    temperature, and each class's curves, which pass through its chosen thresholds' eval figures."""
    import shutil

    from det_calib.thresholds import thresholds_view

    folder, _, doc = run
    hd = doc["heads"]["nms"]
    v = thresholds_view(folder)
    assert v.heads == ["nms"] and v.criteria == ("target_precision", "max_f1", "lrp")
    assert hd["score"]["temperature"] > 0
    assert v.file.heads["nms"].temperature == hd["score"]["temperature"]
    rows = v.rows("nms")
    per_class = {c: hd["criteria"][c]["per_class"] for c in v.criteria}
    assert [name for name, _ in rows] == [
        "all classes (global)",
        *[r["name"] for r in per_class["target_precision"]],
    ]
    for c in v.criteria:
        assert rows[0][1][c].threshold == hd["criteria"][c]["global"]["threshold"]
        assert [rr[c].threshold for _, rr in rows[1:]] == [r["threshold"] for r in per_class[c]]
    curves = v.curves["nms"]
    assert [k.name for k in curves] == [r["name"] for r in per_class["target_precision"]]
    good = next(k for k in curves if k.name == "good")
    t = next(r for r in per_class["max_f1"] if r["name"] == "good")
    i = round(t["threshold"] * 1000)
    assert good.marks["max_f1"] == (t["eval"]["recall"], t["eval"]["precision"], t["threshold"])
    assert good.eval[0][i] == pytest.approx(t["eval"]["precision"])
    assert good.eval[1][i] == pytest.approx(t["eval"]["recall"])
    assert good.fit is not None and len(good.fit[0]) == 1000
    assert thresholds_view(folder, curves=False).curves == {}
    # without its boxes the view says why it has no curves; the rows stand
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare)
    (bare / "boxes.parquet").unlink()
    lone = thresholds_view(bare)
    assert isinstance(lone.curves["nms"], str) and "boxes.parquet" in lone.curves["nms"]
    assert lone.rows("nms") == rows
    with pytest.raises(InputError, match="thresholds file not found"):
        thresholds_view(tmp_path)


def test_compare_thresholds_table(run, tmp_path):
    from det_calib.report.thresholds_section import (
        _compare_thresholds_table as compare_thresholds_table,
    )
    from det_calib.thresholds import thresholds_view

    folder, n_gt, doc = run
    other = tune_run(folder, target_precision=0.7, delta=0.2, n_gt=n_gt, n_boot=50, write=False)
    t = compare_thresholds_table(
        thresholds_view(folder, doc=doc, curves=False),
        thresholds_view(folder, doc=other, curves=False),
        labels=("p0.8", "p0.7"),
    )
    assert t.columns[1] == "p0.8 threshold" and len(t.rows) == 4
    good = next(r for r in t.rows if r[0] == "good")
    ra = doc["heads"]["nms"]["criteria"]["target_precision"]["per_class"][0]
    rb = other["heads"]["nms"]["criteria"]["target_precision"]["per_class"][0]
    assert good[1] == f"{ra['threshold']:.3f}" and good[3] == f"{rb['threshold']:.3f}"
    assert rb["threshold"] <= ra["threshold"]  # a lower target never needs a higher threshold here


# --------------------------------------------------------------------------------- deployment


def test_filter_results_in_plain_ultralytics_keeps_exactly_the_selected_boxes(
    tmp_path, demo_model_path, fixture_images
):
    from ultralytics import YOLO

    from det_calib.capture.predictor import capture, load_detector
    from det_calib.deploy.fold import write_calibrated_checkpoint

    temperature = 1.4
    # each image captured alone, as predict runs it below (a batch letterboxes its images to one shape)
    yolo = load_detector(demo_model_path)
    boxes = pl.concat(
        [
            capture(yolo, [p], head="nms", batch=1, progress=False).with_columns(
                pl.lit(i).alias("image_id")
            )
            for i, p in enumerate(fixture_images)
        ]
    )
    cal = sigmoid(boxes["logit"].to_numpy() / temperature)
    cls = boxes["cls"].to_numpy()
    # per-class thresholds at the class's median calibrated conf above 0.05 (the capture is complete
    # above the calibrated floor sigmoid(logit(0.001) / T) = 0.007), moved off any box's score
    thr = {}
    for c in np.unique(cls):
        t = float(np.median(cal[(cls == c) & (cal > 0.05)]))
        while np.min(np.abs(cal - t)) < 1e-4:
            t += 2e-4
        thr[int(c)] = t
    del thr[int(np.unique(cls)[-1])]  # a class without a threshold: dropped
    ckpt = write_calibrated_checkpoint(
        demo_model_path, tmp_path / "calibrated.pt", {"nms": temperature}
    )

    model = YOLO(ckpt)  # plain Ultralytics
    kept_total = predicted_total = 0
    for i, path in enumerate(fixture_images):
        res = model.predict(path, conf=min(thr.values()), verbose=False)
        predicted_total += len(res[0].boxes)
        out = filter_results(res, thr)
        assert isinstance(out, list) and len(out) == 1
        got = out[0].boxes
        sel = np.flatnonzero(
            (boxes["image_id"].to_numpy() == i)
            & np.array([cal[j] > thr.get(int(cls[j]), np.inf) for j in range(len(cls))])
        )
        assert len(got) == len(sel), path.name
        order = np.argsort(-cal[sel])
        np.testing.assert_array_equal(got.cls.numpy().astype(int), cls[sel][order])
        np.testing.assert_allclose(got.conf.numpy(), cal[sel][order], atol=2e-5)
        xyxy = boxes.select("x1", "y1", "x2", "y2").to_numpy()[sel][order]
        np.testing.assert_allclose(got.xyxy.numpy(), xyxy, atol=0.05)
        kept_total += len(got)
        single = filter_results(res[0], thr)  # one Results in, one out
        assert len(single.boxes) == len(got)
    assert 0 < kept_total < predicted_total  # the filter did remove boxes, and kept some
