"""Risk-controlled thresholds: the Hoeffding-Bentkus p-value against scipy, known answers on planted
per-image losses (high probability and in expectation, recall and false positives, two risks at once),
the violation rate on simulated exchangeable images over a few hundred seeded draws, conformal class
sets' coverage, and the CLI's bad input (one line, exit 2)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image
from scipy import stats

from det_calib.data.box_table import SCHEMA
from det_calib.errors import InputError
from det_calib.record.run_result import (
    Bootstrap,
    Calibrator,
    HeadResult,
    RecordedSettings,
    RunResult,
)
from det_calib.thresholds.certification import betting_pvalue
from det_calib.thresholds.class_sets import (
    LOGITS_FILE,
    ClassSets,
    LogitStore,
    agnostic_true_class,
    class_probabilities,
    run_class_sets,
    write_class_logits,
)
from det_calib.thresholds.risk_control import RiskTargets, control, hb_pvalue, image_counts
from det_calib.thresholds.risk_run import control_run

GRID = np.round(np.arange(1000) / 1000.0, 3)


def _hb_reference(r: float, n: int, a: float) -> float:
    rr = min(r, a)
    h = (rr * math.log(rr / a) if rr > 0 else 0.0) + (1 - rr) * math.log((1 - rr) / (1 - a))
    return min(math.exp(-n * h), math.e * stats.binom.cdf(math.ceil(n * r - 1e-9), n, a), 1.0)


@pytest.mark.fast
def test_hb_pvalue_matches_scipy():
    for n, a in ((50, 0.1), (400, 0.3), (1000, 0.02)):
        r = np.array([0.0, a / 4, a / 2, a * 0.9, a, a * 1.5, 1.0])
        want = [_hb_reference(float(x), n, a) for x in r]
        np.testing.assert_allclose(hb_pvalue(r, n, a), want, rtol=1e-6, atol=1e-12)


def _one_object_images(scores: np.ndarray) -> object:
    """Images with one object each, found by one correct box of the given score."""
    n = len(scores)
    return image_counts(scores, np.ones(n, bool), np.arange(n), np.ones(n), grid=GRID)


@pytest.mark.fast
def test_recall_in_expectation_known_answer():
    # 99 images, one object each, scores 0.01 .. 0.99: at t the miss rate is #(s <= t) / 99. CRC at
    # alpha 0.205 allows (99 R + 1) / 100 <= 0.205, i.e. at most 19 misses: the last such threshold is 0.199;
    # the plug-in rule (99 R <= 20.3) allows 20 misses: 0.209
    c = _one_object_images(np.arange(1, 100) / 100)
    r = control(c, RiskTargets(recall=0.795, guarantee="expectation"))
    assert r["certified"] and r["threshold"] == pytest.approx(0.199)
    assert r["plug_in_threshold"] == pytest.approx(0.209)


@pytest.mark.fast
def test_recall_with_probability_known_answer():
    # the fixed sequence from low to high conf stops where the HB p-value first exceeds delta: the last
    # threshold before it is computed here by hand from scipy's binomial
    scores = np.arange(1, 401) / 401
    c = _one_object_images(scores)
    want = None
    for t in GRID:
        risk = float(np.mean(scores <= t))
        if _hb_reference(risk, 400, 0.3) > 0.1:
            break
        want = t
    r = control(c, RiskTargets(recall=0.7, delta=0.1))
    assert r["certified"] and r["threshold"] == pytest.approx(want)
    assert r["threshold"] < r["plug_in_threshold"]  # the guarantee costs recall-side margin
    assert r["cost"] == pytest.approx(r["plug_in_threshold"] - r["threshold"])


@pytest.mark.fast
def test_false_positives_known_answer_and_cap():
    # 100 images, each with one wrong box of score s_i: FP per image at t is #(s > t) / 100. In expectation
    # with cap B: (100 R + B) / 101 <= k
    n = 100
    s = np.arange(n) / n + 0.005
    c = image_counts(s, np.zeros(n, bool), np.arange(n), np.zeros(n), grid=GRID)
    r = control(c, RiskTargets(max_fp=0.5, guarantee="expectation", fp_cap=10))
    # (100 R + 10) / 101 <= 0.5 -> R <= 0.405 -> at most 40 boxes above t: t >= 0.595 (s = 0.595 is not > t)
    assert r["threshold"] == pytest.approx(0.595)
    r300 = control(c, RiskTargets(max_fp=0.5, fp_cap=300))
    assert not r300["certified"] and r300["flag"] == "too_few_images"


@pytest.mark.fast
def test_two_risks_at_once_take_the_lowest_threshold_certified_for_both():
    rng = np.random.default_rng(0)
    m = 600
    s_obj = rng.uniform(0, 1, m)  # each image: one object found by a box of score s_obj
    s_fp = rng.uniform(0, 0.4, m)  # and one wrong box below 0.4
    c = image_counts(
        np.r_[s_obj, s_fp],
        np.r_[np.ones(m, bool), np.zeros(m, bool)],
        np.r_[np.arange(m), np.arange(m)],
        np.ones(m),
        grid=GRID,
    )
    both = control(c, RiskTargets(precision=0.8, recall=0.5, delta=0.1))
    alone_p = control(c, RiskTargets(precision=0.8, delta=0.05))
    alone_r = control(c, RiskTargets(recall=0.5, delta=0.05))
    assert both["certified"] and both["level_per_risk"] == pytest.approx(0.05)
    assert (
        both["threshold"] == alone_p["threshold"] <= alone_r["threshold"]
    )  # Bonferroni: each at delta / 2
    infeasible = control(c, RiskTargets(precision=0.95, recall=0.7, delta=0.1))
    assert not infeasible["certified"] and infeasible["threshold"] == 1.0


@pytest.mark.fast
def test_image_precision_known_answer_by_hand():
    # 400 images, one box each (correct with probability rising in its score) and one object: at t the
    # images that keep a box are those with s > t, and their mean FDP is the share of wrong boxes among them.
    # Thresholds are tested where an observed FDP of half the target would certify (a rule on counts), from
    # high to low conf; the sequence stops where the HB p-value against 1 - P first exceeds delta
    rng = np.random.default_rng(3)
    s = rng.uniform(0, 1, 400)
    y = rng.uniform(0, 1, 400) < s
    c = image_counts(s, y, np.arange(400), np.ones(400), grid=GRID)
    want = None
    for t in GRID[::-1]:
        n = int(np.sum(s > t))
        if n < math.ceil(math.log(0.1) / math.log(0.7)) or _hb_reference(0.15, n, 0.3) > 0.1:
            continue  # not tested
        fdp = float(np.sum((s > t) & ~y)) / n
        if _hb_reference(fdp, n, 0.3) > 0.1:
            break
        want = t
    r = control(c, RiskTargets(precision=0.7, delta=0.1))  # the image unit is the default
    assert want is not None and r["certified"] and r["threshold"] == pytest.approx(want)
    kept = s > want
    assert r["fit"]["precision_per_image"] == pytest.approx(float(np.mean(y[kept])))


@pytest.mark.fast
def test_pooled_precision_betting_pvalue_by_hand():
    # the pooled rule bets on per-image losses P FP_i - (1 - P) TP_i (FP clipped at fp_cap); its p-value is
    # 1 / the capital's running maximum, the bet aGRAPA on the losses before each image, capped at 0.5 / (P cap)
    rng = np.random.default_rng(4)
    fp, tp, p_t, cap = rng.poisson(1.0, 300), rng.poisson(3.0, 300), 0.6, 25.0
    loss = p_t * np.minimum(fp, cap) - (1 - p_t) * tp
    cap_log, best, seen = 0.0, 0.0, []
    for x in loss:
        mu = sum(seen) / (len(seen) + 1)
        var = (
            max(sum(v * v for v in seen) / (len(seen) + 1) - mu * mu, 1e-12)
            + 1e-6 * (p_t * cap) ** 2
        )
        lam = min(max(-mu / (var + mu * mu), 0.0), 0.5 / (p_t * cap))
        cap_log += math.log(1 - lam * x)
        best = max(best, cap_log)
        seen.append(float(x))
    got = betting_pvalue(loss[:, None], hi=p_t * cap)
    assert got[0] == pytest.approx(min(1.0, math.exp(-best)), rel=1e-9) and got[0] < 0.05
    # a precision below the target: the mean loss is positive and the capital never grows
    assert betting_pvalue((loss + 2.0)[:, None], hi=p_t * cap + 2.0)[0] == 1.0


def _clustered(rng, m):
    """Images whose boxes go wrong together: a per-image difficulty sets both how many boxes are wrong and
    their scores (the case where a box-level binomial test is optimistic)."""
    hard = rng.beta(0.6, 1.4, m)
    k = rng.integers(1, 5, m) + (rng.random(m) < 0.1) * rng.integers(5, 20, m)
    img = np.repeat(np.arange(m), k)
    y = rng.random(len(img)) > hard[img]
    s = 1 / (1 + np.exp(-(np.where(y, 1.0, -0.3) - 2 * hard[img] + rng.normal(0, 0.8, len(img)))))
    return s, y, img, np.bincount(img[y], minlength=m)


@pytest.mark.fast
@pytest.mark.parametrize("unit", ["image", "pooled"])
def test_precision_violation_rate_with_clustered_boxes(unit):
    rng = np.random.default_rng(5)
    s, y, img, n_gt = _clustered(rng, 100_000)
    pop = image_counts(s, y, img, n_gt, grid=GRID)
    if unit == "pooled":
        true = pop.tp.sum(0) / np.maximum(pop.kept.sum(0), 1)
    else:
        true = 1 - np.nan_to_num(
            np.where(pop.kept > 0, (pop.kept - pop.tp) / np.maximum(pop.kept, 1), 0).sum(0)
            / np.maximum((pop.kept > 0).sum(0), 1)
        )
    target, delta, draws = 0.75, 0.1, 200
    viol = cert = 0
    for _ in range(draws):
        s2, y2, img2, g2 = _clustered(rng, 300)
        r = control(
            image_counts(s2, y2, img2, g2, grid=GRID),
            RiskTargets(precision=target, delta=delta, precision_unit=unit, fp_cap=25.0),
        )
        if r["certified"]:
            cert += 1
            viol += true[int(np.searchsorted(GRID, r["threshold"]))] < target
    assert (
        cert >= draws // 2
    )  # the rule certifies something most of the time: the rate below is not vacuous
    assert viol / draws <= delta + 2 * math.sqrt(delta * (1 - delta) / draws)


def _population(rng, m):
    """Images with 1-6 objects whose scores share a per-image difficulty (boxes of an image correlate)."""
    k = rng.integers(1, 7, m)
    hard = rng.uniform(-1.5, 1.5, m)
    img = np.repeat(np.arange(m), k)
    s = 1 / (1 + np.exp(-(rng.normal(0, 1, len(img)) - hard[img])))
    return s, img, k


@pytest.mark.fast
def test_recall_violation_rate_on_exchangeable_images():
    rng = np.random.default_rng(1)
    s, img, k = _population(rng, 200_000)  # the population's per-image miss rate at each threshold
    true = image_counts(s, np.ones(len(s), bool), img, k, grid=GRID)
    true_risk = 1 - (true.tp / k[:, None]).mean(0)
    alpha, delta, draws, n = 0.4, 0.1, 300, 150
    viol = plug = exp_risk = 0.0
    for _ in range(draws):
        s2, img2, k2 = _population(rng, n)
        c = image_counts(s2, np.ones(len(s2), bool), img2, k2, grid=GRID)
        j = int(
            np.searchsorted(
                GRID, control(c, RiskTargets(recall=1 - alpha, delta=delta))["threshold"]
            )
        )
        viol += true_risk[j] > alpha
        jp = int(
            np.searchsorted(GRID, control(c, RiskTargets(recall=1 - alpha))["plug_in_threshold"])
        )
        plug += true_risk[jp] > alpha
        je = int(
            np.searchsorted(
                GRID,
                control(c, RiskTargets(recall=1 - alpha, guarantee="expectation"))["threshold"],
            )
        )
        exp_risk += true_risk[je]
    se = math.sqrt(delta * (1 - delta) / draws)
    assert viol / draws <= delta + 2 * se
    assert (
        plug / draws > 0.3
    )  # the plug-in threshold, without the guarantee, breaks it often: the test can fail
    assert (
        exp_risk / draws <= alpha + 0.01
    )  # conformal risk control: the mean risk is at most alpha


@pytest.mark.fast
def test_bad_targets():
    for kw, word in (
        ({"recall": 1.0}, "target_recall"),
        ({"recall": 0.5, "delta": 0}, "delta"),
        ({"precision": -0.1}, "target_precision"),
        ({"max_fp": 0}, "max_fp_per_image"),
        ({}, "at least one"),
        ({"recall": 0.5, "guarantee": "sometimes"}, "guarantee"),
    ):
        with pytest.raises(InputError, match=word):
            RiskTargets(**kw)


# --------------------------------------------------------------------------------- class sets


@pytest.mark.fast
def test_class_sets_cover_at_the_promised_rate():
    rng = np.random.default_rng(2)
    nc, n = 10, 4000
    y = rng.integers(0, nc, n)
    logits = rng.normal(-3, 1.5, (n, nc))
    logits[np.arange(n), y] += rng.normal(3, 2, n)
    probs = class_probabilities(logits)
    cov = []
    for _ in range(100):
        p = rng.permutation(n)
        cs = ClassSets(0.1).fit(probs[p[:500]], y[p[:500]])
        s = cs.summary(probs[p[500:]], y[p[500:]])
        cov.append(s["coverage"])
        assert 1 <= s["mean_size"] < nc
    assert np.mean(cov) >= 0.9 - 2 * np.std(cov) / 10
    tiny = ClassSets(0.1).fit(probs[:5], y[:5])  # fewer than 1/alpha boxes: every class
    assert tiny.predict(probs[:3]).all()


@pytest.mark.fast
def test_agnostic_matching_takes_the_objects_class():
    boxes = pl.DataFrame(
        {
            "image_id": [0, 0, 0],
            "x1": [0.0, 0.0, 50.0],
            "y1": [0.0, 1.0, 50.0],
            "x2": [10.0, 10.0, 60.0],
            "y2": [10.0, 10.0, 60.0],
            "conf": [0.5, 0.9, 0.7],
        }
    )
    gt = pl.DataFrame(
        {"image_id": [0], "x1": [0.0], "y1": [0.0], "x2": [10.0], "y2": [10.0], "cls": [3]}
    )
    # the 0.9 box takes the object (highest conf first), the 0.5 duplicate and the far box match nothing
    assert agnostic_true_class(boxes, gt).tolist() == [-1, 3, -1]


# --------------------------------------------------------------------------------- a run and the CLI


def _make_run(folder: Path, *, seed: int = 0, n_img: int = 60, logits: bool = False) -> Path:
    """A run folder whose dataset (PNG images, YOLO labels) and box table agree: each image has 2 objects
    of class 0, the detector finds each with a correct box (score rises with a per-image ease) and adds
    one wrong box. With ``logits``: three classes, every box on its object's place and a ``logits``
    column where the object's class usually, not always, has the highest logit."""
    rng = np.random.default_rng(seed)
    rows = []
    for split in ("calib", "test"):
        (folder / "images" / split).mkdir(parents=True)
        (folder / "labels" / split).mkdir(parents=True)
        for i in range(n_img):
            Image.new("RGB", (64, 64)).save(folder / "images" / split / f"{i:03d}.png")
            (folder / "labels" / split / f"{i:03d}.txt").write_text(
                "0 0.25 0.25 0.2 0.2\n0 0.75 0.75 0.2 0.2\n"
            )
            ease = rng.normal(0, 1)
            for z, ok in (
                (ease + 1.5, True),
                (ease + rng.normal(0, 1), True),
                (rng.normal(-1, 1), False),
            ):
                rows.append((f"{i:03d}.png", i, split, "nms", 0, float(z), ok, 0.8 if ok else 0.0))
    (folder / "data.yaml").write_text(
        f"path: {folder}\ncalib: images/calib\ntest: images/test\nnames:\n  0: thing\n"
    )
    image, image_id, split, head, cls, z, y, iou = map(list, zip(*rows))
    n = len(rows)
    z = np.array(z)
    # the two objects (YOLO 0.25 0.25 0.2 0.2 and 0.75 0.75 0.2 0.2 of 64 px): a box per row, in turn
    x1 = np.tile([9.6, 41.6, 9.6], n // 3)
    df = pl.DataFrame(
        {
            "image": image,
            "image_id": image_id,
            "split": split,
            "head": head,
            "x1": x1,
            "y1": x1,
            "x2": x1 + 12.8,
            "y2": x1 + 12.8,
            "img_w": np.full(n, 64),
            "img_h": np.full(n, 64),
            "cls": cls,
            "conf": 1 / (1 + np.exp(-z)),
            "logit": z,
            "correct": y,
            "iou": iou,
            "ignore": np.zeros(n, bool),
            "loc_iou": iou,
        }
    ).with_columns([pl.col(c).cast(t) for c, t in SCHEMA.items()])
    if logits:  # class 0 (the objects') on top, except where noise lifts class 1 or 2 above it
        lg = rng.normal(0, 1.0, (n, 3)) + np.array([1.5, 0.0, 0.0])
        df = df.with_columns(
            pl.Series("logits", lg.astype(np.float32).tolist(), dtype=pl.List(pl.Float32)),
            pl.Series("calibrated", 1 / (1 + np.exp(-z))),
        )
    run = folder / "run"
    run.mkdir()
    df.write_parquet(run / "boxes.parquet")
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
        fit_split="calib",
        eval_split="test",
        coco_gt=None,
    )
    names = ["thing", "other", "third"] if logits else ["thing"]
    RunResult(
        model="",
        data=str(folder / "data.yaml"),
        class_names=names,
        heads=["nms"],
        settings=settings,
        results={"nms": HeadResult(calibrator=Calibrator.temperature_scaling(1.0))},
        gt_counts={sp: [2 * n_img, 0, 0][: len(names)] for sp in ("calib", "test")},
    ).write(run / "calibration.json")
    return run


@pytest.fixture(scope="module")
def risk_run(tmp_path_factory):
    return _make_run(tmp_path_factory.mktemp("risk"))


def test_cli_risk_thresholds_written_and_deployable(risk_run, capsys):
    from det_calib.cli import main
    from det_calib.thresholds import class_thresholds

    assert (
        main(
            ["thresholds", str(risk_run), "--target-recall", "0.5", "--delta", "0.1", "--per-class"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "recall >= 0.5, with probability >= 0.9 over the fit images" in out and "conf=" in out
    doc = json.loads((risk_run / "thresholds.json").read_text())
    rc = doc["heads"]["nms"]["risk_control"]
    g = rc["global"]
    assert g["certified"] and g["fit"]["images"] == 60 and g["fit"]["n_gt"] == 120
    # the printed row: threshold, plug-in, then per split precision, recall and FP per image
    row = next(ln for ln in out.splitlines() if ln.startswith("(global)")).split()
    fit, ev = g["fit"], g["eval"]
    pk = "precision_per_image" if rc["params"]["precision_unit"] == "image" else "precision"
    want = [g["threshold"], g["plug_in_threshold"]]
    want += [d[k] for d in (fit, ev) for k in (pk, "recall_per_image", "fp_per_image")]
    assert row[1:] == [f"{x:.3f}" for x in want]
    assert "->" not in out and "None" not in out and "plug-in: the threshold the fit split" in out
    assert (
        g["fit"]["recall_per_image"] >= 0.5 and "criteria" in doc["heads"]["nms"]
    )  # the file keeps its criteria
    assert class_thresholds(doc, head="nms", criterion="risk_control") == {
        0: rc["per_class"][0]["threshold"]
    }


def test_cli_bad_input_is_one_line_and_exit_2(risk_run, capsys):
    from det_calib.cli import main

    cases = [
        (["--target-recall", "1.5"], "`--target-recall`"),
        (["--target-recall", "0.5", "--delta", "1"], "`--delta`"),
        (["--max-fp-per-image", "-1"], "`--max-fp-per-image`"),
        (["--target-recall", "0.999"], "no threshold certifies recall"),
        (["--max-fp-per-image", "0.5"], "pass --fp-cap"),
        (["--class-sets", "0.1"], "has no per-class logits (class_logits.npz)"),
        (["--class-sets", "2"], "`--class-sets`"),
        # an option the tuning asked for would not read
        (["--guarantee", "expectation"], "`--guarantee` applies to risk control"),
        (["--target-precision", "0.8", "--fp-cap", "25"], "`--fp-cap` applies to risk control"),
        (["--precision-unit", "image"], "`--precision-unit` applies to risk control"),
        (["--precision-unit", "pooled"], "certifies a --target-precision: give it one"),
        (["--target-recall", "0.5", "--threshold-unit", "box"], "always takes the image"),
    ]
    for extra, words in cases:
        assert main(["thresholds", str(risk_run), *extra]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], (extra, err)


def test_pooled_precision_alone_is_risk_control(risk_run, capsys):
    """``--target-precision P --precision-unit pooled`` (docs/thresholds.md) certifies the pooled
    precision by risk control, the risk it names, not the per-class precision tuning."""
    from det_calib.cli import main

    args = ["--target-precision", "0.5", "--precision-unit", "pooled", "--fp-cap", "2"]
    assert main(["thresholds", str(risk_run), *args, "--delta", "0.2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("head nms: precision >= 0.5, with probability >= 0.8 over the fit images")
    rc = json.loads((risk_run / "thresholds.json").read_text())["heads"]["nms"]["risk_control"]
    assert rc["params"]["precision_unit"] == "pooled" and rc["params"]["fp_cap"] == 2
    assert rc["params"]["target_recall"] is None


def test_report_section_shows_each_guarantee_and_its_cost(risk_run):
    from det_calib.report.document import Table
    from det_calib.report.thresholds_section import thresholds_section

    doc = control_run(risk_run, RiskTargets(recall=0.5, delta=0.1), per_class=True)
    g = doc["heads"]["nms"]["risk_control"]["global"]
    blocks, _ = thresholds_section(risk_run)
    table = next(b for b in blocks if isinstance(b, Table) and b.css == "risk-thresholds")
    assert table.rows[0][:4] == [
        "all classes (global)",
        f"{g['threshold']:.3f}",
        f"{g['plug_in_threshold']:.3f}",
        f"{g['cost']:.3f}",
    ]
    assert any(
        "mean per-image recall >= 0.5, with probability at least 0.9" in getattr(b, "text", "")
        for b in blocks
    )


def test_class_sets_of_a_run_with_per_class_logits(tmp_path):
    run = _make_run(tmp_path / "cs", n_img=200, logits=True)
    out = run_class_sets(run, alpha=0.1, keep=0.0, write=False)
    # the kept boxes on an object: 2 per image (the wrong third box also sits on the first object, but the
    # one-to-one matching gives that object to the higher-conf box)
    assert out["n_fit"] == out["boxes"] == 400
    assert out["coverage"] >= 0.9 - 0.05 and 1.0 <= out["mean_size"] < 3.0


def test_class_logits_through_a_store_write_the_same_file(tmp_path):
    # the capture of calibrate writes every class's logit to a LogitStore (a temporary file, float16) and the
    # table carries each box's row there: class_logits.npz is byte for byte the one the `logits` column gives,
    # whatever order the rows were stored in (the capture's threads append images in any order)
    import zipfile

    from det_calib.data.box_table import LOGITS_ROW

    run = _make_run(tmp_path / "cs", n_img=200, logits=True)
    boxes = pl.read_parquet(run / "boxes.parquet")
    lg = np.stack(boxes["logits"].to_list())
    lg[::7, 1] = np.float32(65504.0 * 1.5)  # beyond float16's range: inf in both files
    lg[::11, 2] = np.float32(1e-6)  # subnormal in float16
    boxes = boxes.with_columns(pl.Series("logits", lg.tolist(), dtype=pl.List(pl.Float32)))
    store = LogitStore(lg.shape[1], directory=tmp_path)
    perm = np.random.default_rng(0).permutation(boxes.height)
    rows = np.empty(boxes.height, dtype=np.int64)
    for part in np.array_split(perm, 9):  # stored in a shuffled order, in blocks of rows
        rows[part] = store.append(lg[part])
    assert store.n == boxes.height
    assert np.array_equal(store.gather(rows[::-1], chunk=64), lg[::-1].astype(np.float16))
    via_store = boxes.drop("logits").with_columns(pl.Series(LOGITS_ROW, rows))
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    write_class_logits(tmp_path / "a", boxes)
    write_class_logits(tmp_path / "b", via_store, store)
    assert LOGITS_ROW not in via_store.columns and via_store.columns == boxes.columns
    members = []  # each array's .npy bytes (the zip's own entries carry the time they were written)
    for f in (tmp_path / "a" / LOGITS_FILE, tmp_path / "b" / LOGITS_FILE):
        with zipfile.ZipFile(f) as z:
            members.append({n: z.read(n) for n in z.namelist()})
    assert sorted(members[0]) == ["floor.npy", "image_id.npy", "logits.npy", "row.npy"]
    assert members[0] == members[1]
    store.close()


def test_class_logits_kept_in_the_run_folder_give_the_same_sets(tmp_path, capsys):
    # calibrate moves the capture's `logits` column into class_logits.npz (float16, the boxes above the floor);
    # class sets read from it agree with those read from the column, and the CLI prints them
    from det_calib.cli import main
    from det_calib.thresholds.class_sets import _LOGITS_FLOOR as LOGITS_FLOOR

    run = _make_run(tmp_path / "cs", n_img=200, logits=True)
    want = run_class_sets(run, alpha=0.1, keep=0.25, write=False)
    boxes = pl.read_parquet(run / "boxes.parquet")
    lg = np.stack(boxes["logits"].to_list())
    write_class_logits(run, boxes)
    assert "logits" not in boxes.columns  # moved out of the table, in place
    boxes.write_parquet(run / "boxes.parquet")
    with np.load(run / LOGITS_FILE) as z:
        kept = np.flatnonzero(boxes["calibrated"].to_numpy() > LOGITS_FLOOR)
        assert z["row"].tolist() == kept.tolist() and z["logits"].dtype == np.float16
        np.testing.assert_allclose(z["logits"], lg[kept], atol=4e-3)
    got = run_class_sets(run, alpha=0.1, keep=0.25, write=False)
    assert got["n_fit"] == want["n_fit"] and got["boxes"] == want["boxes"]
    assert got["coverage"] == pytest.approx(want["coverage"], abs=0.01)
    assert got["mean_size"] == pytest.approx(want["mean_size"], abs=0.02)
    with pytest.raises(InputError, match="`keep` at least 0.05"):
        run_class_sets(run, alpha=0.1, keep=0.01, write=False)
    assert main(["thresholds", str(run), "--class-sets", "0.1"]) == 0
    assert f"mean size {got['mean_size']:.2f}" in capsys.readouterr().out
    np.savez_compressed(
        run / LOGITS_FILE,
        row=np.array([0, 1], np.int32),
        logits=np.zeros((2, 3), np.float16),
        image_id=np.array([5, 5], np.int32),
        floor=np.float64(LOGITS_FLOOR),
    )
    with pytest.raises(InputError, match="does not match the run's boxes.parquet"):
        run_class_sets(run, alpha=0.1, write=False)


@pytest.mark.fast
def test_per_class_criterion_and_risk_control_certify_the_same_image_precision():
    # `det-calib thresholds`' target_precision (unit image) and `--target-precision` of risk control are one rule:
    # the same threshold on the same boxes, so the benchmark's precision/img rows measure both
    from det_calib.thresholds.per_class import tune

    rng = np.random.default_rng(6)
    s, y, img, n_gt = _clustered(rng, 400)
    fit = pl.DataFrame(
        {
            "image_id": img,
            "cls": np.zeros(len(s), np.int64),
            "correct": y,
            "iou": np.where(y, 0.8, 0.2),
        }
    )
    doc = tune(
        fit,
        s,
        n_gt_fit={0: int(n_gt.sum())},
        class_names=["a"],
        target_precision=0.8,
        delta=0.1,
        grid=GRID,
    )["target_precision"]["global"]
    r = control(image_counts(s, y, img, n_gt, grid=GRID), RiskTargets(precision=0.8, delta=0.1))
    assert doc["certified"] and r["certified"] and doc["threshold"] == r["threshold"]
    assert doc["fit"]["precision_per_image"] == pytest.approx(
        r["fit"]["precision_per_image"], rel=1e-12
    )
