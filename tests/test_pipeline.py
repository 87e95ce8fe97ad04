"""The main job end to end on the committed fixture split and demo detector."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import assert_intervals_contain_estimates

from det_calib.data import load_data_yaml
from det_calib.fold import read_calibration_metadata, write_calibrated_checkpoint
from det_calib.metrics import nll_logits
from det_calib.pipeline import calibrate, resolve_splits, summary_text
from det_calib.thresholds import equivalent_threshold

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "tests" / "data" / "fixture_calibration.json"


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_model_path, fixture_yaml):
    out = tmp_path_factory.mktemp("run")
    # the temperature pipeline, pinned since issue 1 (the default, auto, has its own tests)
    return calibrate(demo_model_path, fixture_yaml, out=out, n_boot=50, progress=False, target_precision=0.8,
                     method="temperature")


def test_every_interval_contains_its_estimate(run):
    """calibration.json, summary.txt and report.md of the fixture run (tests/test_intervals.py: planted cases)."""
    assert_intervals_contain_estimates(run.out_dir)


def test_output_contract(run):
    out = run.out_dir
    for name in ("calibration.json", "boxes.parquet", "calibrated.pt", "report.html", "report.md", "summary.txt"):
        assert (out / name).is_file(), name
    s = json.loads((out / "calibration.json").read_text())
    for key in ("model", "data", "temperature", "iou_match", "fit_min_conf", "conf_thresholds", "fit", "eval",
                "threshold_shift", "per_class", "ultralytics_val"):
        assert key in s, key
    assert s["heads"] == ["nms", "e2e"]
    for head in s["heads"]:
        t = s["temperature"][head]
        assert math.isfinite(t) and t > 0
        fit = s["fit"][head]
        assert {"split", "images", "boxes", "nll_before", "nll_after"} <= set(fit)
        assert fit["nll_after"] <= fit["nll_before"] + 1e-12
        ev = s["eval"][head]
        for k in ("split", "images", "boxes", "ece_before", "ece_after", "nll_before", "nll_after", "brier_before",
                  "brier_after", "map50_95_before", "map50_95_after", "map50_before", "map50_after"):
            assert k in ev, k
        assert ev["split"] != fit["split"]
        # a shared temperature never changes the ranking: pycocotools mAP identical
        assert ev["map_identical"] and ev["map50_95_before"] == ev["map50_95_after"]
        # the reported eval NLL is the one the boxes table gives (non-ignored eval boxes, logit / T)
        b = pl.read_parquet(out / "boxes.parquet").filter(
            (pl.col("head") == head) & (pl.col("split") == ev["split"]) & ~pl.col("ignore"))
        assert len(b) == ev["boxes"]
        z, y = b["logit"].to_numpy(), b["correct"].to_numpy()
        assert ev["nll_after"] == pytest.approx(nll_logits(z, y, temperature=t), rel=1e-9)
        assert ev["nll_before"] == pytest.approx(nll_logits(z, y), rel=1e-9)
        sh = s["threshold_shift"][head][0]
        assert sh["conf"] == 0.25
        assert sh["kept_after"] == sh["kept_before"] + sh["added"] - sh["removed"]
        assert sh["equivalent_conf"] == pytest.approx(equivalent_threshold(0.25, t))
        assert (sh["added"] == 0) if t < 1 else (sh["removed"] == 0)
        assert len(s["per_class"][head]) >= 6
        assert sum(c["threshold_shift"][0]["kept_before"] for c in s["per_class"][head]) == sh["kept_before"]
        uv = s["ultralytics_val"][head]
        assert uv["identical_at_equivalent_floor"], uv["note"]
    assert read_calibration_metadata(out / "calibrated.pt")["temperature"] == s["temperature"]
    assert "T =" in summary_text(s)


def test_boxes_table(run):
    b = pl.read_parquet(run.out_dir / "boxes.parquet")
    for c in ("image", "split", "head", "x1", "y1", "x2", "y2", "cls", "conf", "logit", "correct", "iou"):
        assert c in b.columns
    assert set(b["head"].unique()) == {"nms", "e2e"}
    assert b["split"].n_unique() == 2
    z, p = b["logit"].to_numpy(), b["conf"].to_numpy()
    assert np.abs(1 / (1 + np.exp(-z)) - p).max() <= 1e-6
    assert b["correct"].any() and not b["correct"].all()


def test_planted_temperature_is_recovered_end_to_end(tmp_path, demo_model_path, fixture_yaml):
    """Fold T0 = 2 into the detector: its fitted temperature must be the original's / 2."""
    t0 = 2.0
    hot = write_calibrated_checkpoint(demo_model_path, tmp_path / "soft.pt", {"nms": t0})
    # the same boxes enter both fits: raw conf >= c in the folded model <=> >= c' in the original
    c = 0.05
    kw = {"head": "nms", "run_val": False, "report": False, "n_boot": 10, "progress": False, "method": "temperature"}
    a = calibrate(demo_model_path, fixture_yaml, out=tmp_path / "a", fit_min_conf=equivalent_threshold(c, 1 / t0), **kw)
    import shutil

    shutil.copytree(tmp_path / "a", tmp_path / "b")  # an earlier det_calib output ...
    (tmp_path / "b" / "thresholds.json").write_text("{}")  # ... with thresholds tuned on its scores
    b = calibrate(hot, fixture_yaml, out=tmp_path / "b", fit_min_conf=c, **kw)
    assert not (tmp_path / "b" / "thresholds.json").exists()  # removed: no `target_precision` this time
    assert a.summary["fit"]["nms"]["boxes"] == b.summary["fit"]["nms"]["boxes"] > 20
    assert b.temperature["nms"] == pytest.approx(a.temperature["nms"] / t0, rel=1e-3)


def test_default_split_resolution(fixture_yaml, tmp_path):
    ds = load_data_yaml(fixture_yaml)  # train, val, fixture -> halves of val
    assert resolve_splits(ds, None, None) == ("val", None, True)
    assert resolve_splits(ds, "fixture", "val") == ("fixture", "val", False)
    (tmp_path / "d.yaml").write_text("calib: a\ntest: b\nval: c\nnames: [x]\n")
    assert resolve_splits(load_data_yaml(tmp_path / "d.yaml"), None, None) == ("calib", "test", False)


def test_corrupt_image_is_skipped_and_counted(tmp_path, demo_model_path, fixture_yaml):
    import shutil
    import warnings

    root = tmp_path / "ds"
    shutil.copytree(fixture_yaml.parent, root)
    bad = sorted((root / "images" / "fixture").glob("*.jpg"))[5]
    bad.write_bytes(b"\xff\xd8\xff\xe0 truncated")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = calibrate(demo_model_path, root / "data.yaml", out=tmp_path / "out", head="nms", run_val=False,
                        report=False, n_boot=10, progress=False)
    assert run.summary["corrupt_images"] == [str(bad)]
    assert run.summary["eval"]["nms"]["corrupt_images"] == 1
    assert run.summary["fit"]["nms"]["images"] + run.summary["eval"]["nms"]["images"] == 11
    assert any("unreadable image" in str(w.message) for w in caught)


def _same(ref, got, path="") -> list[str]:
    """Differences between two JSON values: keys, types, lengths exactly; floats to 1e-9 relative
    (the only latitude: BLAS/conv rounding of another CPU; on the machine that wrote the reference
    every value is bit-identical)."""
    if isinstance(ref, dict):
        if not isinstance(got, dict) or set(ref) != set(got):
            return [f"{path}: keys {sorted(set(ref) ^ set(got or {}))}"]
        return [d for k in ref for d in _same(ref[k], got[k], f"{path}.{k}")]
    if isinstance(ref, list):
        if not isinstance(got, list) or len(ref) != len(got):
            return [f"{path}: {ref!r} vs {got!r}"]
        return [d for i, (a, b) in enumerate(zip(ref, got)) for d in _same(a, b, f"{path}[{i}]")]
    if isinstance(ref, float) and isinstance(got, float):
        return [] if math.isclose(ref, got, rel_tol=1e-9, abs_tol=1e-12) else [f"{path}: {ref!r} vs {got!r}"]
    return [] if type(ref) is type(got) and ref == got else [f"{path}: {ref!r} vs {got!r}"]


def test_calibration_json_pinned(run, fixture_yaml):
    """calibration.json on the fixture split has the keys and values of the reference (written by
    the code before the typed result model, regenerated when capture became exact per image:
    tests/data/README.md), apart from `created`, `seconds` and `schema_version`, plus one key added
    since: `gt_counts` (issue 11), checked here against the label files."""
    ref = json.loads(REFERENCE.read_text())
    got = json.loads((run.out_dir / "calibration.json").read_text())
    # added key: ground-truth boxes per split and class id. The fixture halves one 12-image split
    # (YOLO txt labels, no crowd): the halves add up to the label files, and the eval half's counts
    # are the per-class `n_gt` the reference holds.
    gt = got.pop("gt_counts")
    fit, ev = ref["splits"]["fit"], ref["splits"]["eval"]
    assert set(gt) == {fit, ev}
    lines = [ln for p in sorted((fixture_yaml.parent / "labels" / "fixture").glob("*.txt"))
             for ln in p.read_text().splitlines() if ln.strip()]
    labelled = np.bincount([int(ln.split()[0]) for ln in lines], minlength=len(ref["class_names"]))
    assert (np.array(gt[fit]) + np.array(gt[ev])).tolist() == labelled.tolist()
    for head in ref["heads"]:
        per_class = {c["cls"]: c["n_gt"] for c in ref["per_class"][head]}
        assert [per_class.get(c, 0) for c in range(len(ref["class_names"]))] == gt[ev]
        assert sum(gt[ev]) == ref["eval"][head]["n_gt"]
    assert got.pop("schema_version") == 1
    assert isinstance(got.pop("created"), str) and got.pop("seconds") > 0
    assert Path(got["model"]).resolve() == (REPO / ref["model"]).resolve()
    assert Path(got["data"]).resolve() == (REPO / ref["data"]).resolve()
    got["model"], got["data"] = ref["model"], ref["data"]
    assert _same(ref, got) == []
    assert list(got) == list(ref)  # same order of the top-level keys


def test_calibrate_tunes_thresholds_when_asked(run, tmp_path):
    """`target_precision` given: thresholds.json for every head, the same as tuning the written run
    afterwards (ground truth from `gt_counts`, no dataset needed), in summary.txt, the report and compare."""
    from det_calib.report import compare_runs
    from det_calib.tuning import read_thresholds, tune_run

    out = run.out_dir
    assert run.files["thresholds"] == out / "thresholds.json"
    doc = read_thresholds(out)
    assert sorted(doc["heads"]) == ["e2e", "nms"]
    copy = tmp_path / "copy"  # a copy whose dataset is gone: the recorded counts are enough
    copy.mkdir()
    cal = json.loads((out / "calibration.json").read_text())
    cal["data"] = str(tmp_path / "gone.yaml")
    (copy / "calibration.json").write_text(json.dumps(cal))
    (copy / "boxes.parquet").write_bytes((out / "boxes.parquet").read_bytes())
    for head in ("nms", "e2e"):
        again = tune_run(copy, head=head, target_precision=0.8, delta=0.1, n_boot=50, write=False)
        assert again["heads"][head]["criteria"] == doc["heads"][head]["criteria"]
        prm = doc["heads"][head]["criteria"]["target_precision"]["params"]
        assert (prm["target_precision"], prm["delta"], prm["unit"], prm["fallback"]) == (0.8, 0.1, "image", "global")
        assert doc["heads"][head]["score"]["temperature"] == run.temperature[head]
    summary = (out / "summary.txt").read_text()
    assert "head nms: target precision 0.8, delta 0.1" in summary and "head e2e: target precision 0.8" in summary
    html = (out / "report.html").read_text()
    assert '<h2 id="thresholds">Conf thresholds</h2>' in html
    assert html.index("Threshold shift</h2>") < html.index("Conf thresholds</h2>") < html.index("mAP verification</h2>")
    for head in ("nms", "e2e"):
        assert (out / "figures" / f"thresholds_pr_{head}.png").is_file()
    cmp = compare_runs(f"{out}:nms", f"{out}:e2e", out_dir=tmp_path / "cmp")
    page = cmp["html"].read_text()
    for crit in ("target_precision", "max_f1", "lrp"):
        assert f'class="compare-thresholds" data-criterion="{crit}"' in page


def test_summary_says_plainly_when_calibration_made_the_kept_boxes_worse():
    """The summary flags a head whose calibrated kept-set ECE (lowest conf) is above the raw one."""
    import copy

    from det_calib.pipeline import summary_text

    ref = json.loads((Path(__file__).parent / "data" / "fixture_calibration.json").read_text())
    for worse in (True, False):
        d = copy.deepcopy(ref)
        for head in d["heads"]:
            o0, o1 = d["eval"][head]["operating_before"][0], d["eval"][head]["operating_after"][0]
            o1["ece"] = o0["ece"] + (0.01 if worse else -0.01)
        flagged = [ln for ln in summary_text(d).splitlines() if "WORSE than the raw scores" in ln]
        assert len(flagged) == (len(d["heads"]) if worse else 0)
        if worse:
            assert "keep the raw scores" in flagged[0] and "--method auto" in flagged[0]
        # the report's headline of each head says the same
        from det_calib.report.calibrators import lead
        from det_calib.report.load import Run
        from det_calib.results import RunResult

        run = Run(run_dir=Path("."), result=RunResult.from_dict(d), boxes=pl.DataFrame())
        assert all(("WORSE than the raw scores" in lead(run, h)) == worse for h in d["heads"])


@pytest.mark.parametrize("per_class", [False, True])
def test_default_run_chooses_a_ranking_map_and_reports_the_temperature(tmp_path, demo_model_path, fixture_yaml,
                                                                       per_class):
    """The default is `auto` over the maps that keep every box's ranking (`--per-class` adds the
    per-class maps); every candidate says why it won or lost; the temperature is fitted on the
    fit boxes and reported whatever is deployed; boxes.parquet holds each box's deployed score."""
    from det_calib.calibrators import TemperatureScaler
    from det_calib.fitting import calibrator_of
    from det_calib.results import RunResult
    from det_calib.selection import GLOBAL_METHODS, METHODS

    run = calibrate(demo_model_path, fixture_yaml, out=tmp_path / "run", head="nms", n_boot=10, run_val=False,
                    report=False, progress=False, per_class=per_class)
    doc = json.loads((tmp_path / "run" / "calibration.json").read_text())
    assert doc["method"] == "auto" and doc["auto_per_class"] is per_class
    cands = doc["calibration_candidates"]["nms"]
    methods = {c["method"] for c in cands}
    assert methods == (set(METHODS) if per_class else set(GLOBAL_METHODS))
    assert all(c["params"]["verdict"] for c in cands)
    assert [c["params"]["verdict"].startswith("chosen") for c in cands] == [c["selected"] for c in cands]
    assert sum(c["selected"] for c in cands) == 1
    # the temperature: refitted here on the same fit boxes
    boxes = pl.read_parquet(tmp_path / "run" / "boxes.parquet")
    fb = boxes.filter((pl.col("split") == doc["splits"]["fit"]) & ~pl.col("ignore"))
    t = TemperatureScaler(kind="sigmoid").fit(fb["logit"].to_numpy(), fb["correct"].to_numpy()).temperature_
    tf = doc["temperature_fit"]["nms"]
    assert tf["temperature"] == pytest.approx(t, rel=1e-12)
    assert tf["deployed"] is (doc["temperature"].get("nms") is not None)
    assert len(tf["operating"]) == 1 and tf["operating"][0]["boxes"] > 0
    summary = (tmp_path / "run" / "summary.txt").read_text()
    assert f"T = {t:.4f}" in summary
    # the deployed score of every box
    rec = RunResult.from_dict(doc).head("nms").calibrator
    cal = calibrator_of(rec)
    if rec.method == "none":
        np.testing.assert_array_equal(boxes["calibrated"].to_numpy(), boxes["conf"].to_numpy())
    else:
        want = 1 / (1 + np.exp(-cal.transform_logits(boxes["logit"].to_numpy(), classes=boxes["cls"].to_numpy())))
        np.testing.assert_allclose(boxes["calibrated"].to_numpy(), want, rtol=1e-12)
    assert run.result.head("nms").temperature_fit.temperature == tf["temperature"]
