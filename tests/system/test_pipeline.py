"""The main job end to end on the committed fixture split and demo detector."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import assert_intervals_contain_estimates

from det_calib.calibrators.temperature import equivalent_threshold
from det_calib.data.ground_truth import load_data_yaml
from det_calib.deploy.fold import read_calibration_metadata, write_calibrated_checkpoint
from det_calib.job.inputs import _resolve_splits
from det_calib.metrics.calibration import nll_logits
from det_calib.pipeline.calibrate_job import calibrate
from det_calib.report.text_summary import summary_text

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "tests" / "data" / "fixture_calibration.json"


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_model_path, fixture_yaml):
    out = tmp_path_factory.mktemp("run")
    # the temperature pipeline, pinned since issue 1 (the default, auto, has its own tests)
    return calibrate(
        demo_model_path,
        fixture_yaml,
        out=out,
        n_boot=50,
        progress=False,
        target_precision=0.8,
        method="temperature",
    )


def test_every_interval_contains_its_estimate(run):
    """calibration.json, summary.txt and report.md of the fixture run (metrics/test_intervals.py: planted cases)."""
    assert_intervals_contain_estimates(run.out_dir)


def test_timings_recorded_read_back_and_in_the_summary(run):
    """calibration.json records where the time went, per stage, read back by the checked reader;
    the stages add up to the wall; the summary's timing line shows the same figures."""
    from det_calib.record.run_result import RunResult

    doc = json.loads((run.out_dir / "calibration.json").read_text())
    t = RunResult.read(run.out_dir / "calibration.json").timings
    assert t is not None and t.to_dict() == doc["timings"]
    assert t.started == "call"  # a library call: timed from the call
    assert (
        "imports" not in t.stages
    )  # a library call: torch's and Ultralytics' imports are its model load's
    for name in (
        "model load",
        "data check",
        "capture",
        "fit and choice",
        "figures",
        "verification",
        "outputs",
        "report",
    ):
        assert t.seconds(name) > 0, name
    assert sum(st.wall for st in t.stages.values()) == pytest.approx(t.wall, abs=0.01)
    assert t.seconds("other") < 0.05 * t.wall  # the named stages hold the time
    assert t.wall >= doc["seconds"] - 0.1
    assert t.line() in (run.out_dir / "summary.txt").read_text().splitlines()


def test_output_contract(run):
    out = run.out_dir
    for name in (
        "calibration.json",
        "boxes.parquet",
        "calibrated.pt",
        "report.html",
        "report.md",
        "summary.txt",
    ):
        assert (out / name).is_file(), name
    s = json.loads((out / "calibration.json").read_text())
    for key in (
        "model",
        "data",
        "temperature",
        "iou_match",
        "fit_min_conf",
        "conf_thresholds",
        "fit",
        "eval",
        "threshold_shift",
        "per_class",
        "ultralytics_val",
    ):
        assert key in s, key
    assert s["heads"] == ["nms", "e2e"]
    for head in s["heads"]:
        t = s["temperature"][head]
        assert math.isfinite(t) and t > 0
        fit = s["fit"][head]
        assert {"split", "images", "boxes", "nll_before", "nll_after"} <= set(fit)
        assert fit["nll_after"] <= fit["nll_before"] + 1e-12
        ev = s["eval"][head]
        for k in (
            "split",
            "images",
            "boxes",
            "ece_before",
            "ece_after",
            "nll_before",
            "nll_after",
            "brier_before",
            "brier_after",
            "map50_95_before",
            "map50_95_after",
            "map50_before",
            "map50_after",
        ):
            assert k in ev, k
        assert ev["split"] != fit["split"]
        # a shared temperature never changes the ranking: pycocotools mAP identical
        assert ev["map_identical"] and ev["map50_95_before"] == ev["map50_95_after"]
        # the reported eval NLL is the one the boxes table gives (non-ignored eval boxes, logit / T)
        b = pl.read_parquet(out / "boxes.parquet").filter(
            (pl.col("head") == head) & (pl.col("split") == ev["split"]) & ~pl.col("ignore")
        )
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
        assert (
            sum(c["threshold_shift"][0]["kept_before"] for c in s["per_class"][head])
            == sh["kept_before"]
        )
        uv = s["ultralytics_val"][head]
        assert uv["identical_at_equivalent_floor"], uv["note"]
    assert read_calibration_metadata(out / "calibrated.pt")["temperature"] == s["temperature"]
    assert "T =" in summary_text(s)


def test_boxes_table(run):
    b = pl.read_parquet(run.out_dir / "boxes.parquet")
    for c in (
        "image",
        "split",
        "head",
        "x1",
        "y1",
        "x2",
        "y2",
        "cls",
        "conf",
        "logit",
        "correct",
        "iou",
    ):
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
    kw = {
        "head": "nms",
        "run_val": False,
        "report": False,
        "n_boot": 10,
        "progress": False,
        "method": "temperature",
    }
    a = calibrate(
        demo_model_path,
        fixture_yaml,
        out=tmp_path / "a",
        fit_min_conf=equivalent_threshold(c, 1 / t0),
        **kw,
    )
    import shutil

    shutil.copytree(tmp_path / "a", tmp_path / "b")  # an earlier det_calib output ...
    (tmp_path / "b" / "thresholds.json").write_text("{}")  # ... with thresholds tuned on its scores
    b = calibrate(hot, fixture_yaml, out=tmp_path / "b", fit_min_conf=c, **kw)
    assert not (
        tmp_path / "b" / "thresholds.json"
    ).exists()  # removed: no `target_precision` this time
    assert a.summary["fit"]["nms"]["boxes"] == b.summary["fit"]["nms"]["boxes"] > 20
    assert b.temperature["nms"] == pytest.approx(a.temperature["nms"] / t0, rel=1e-3)


def test_default_split_resolution(fixture_yaml, tmp_path):
    ds = load_data_yaml(fixture_yaml)  # train, val, fixture -> halves of val
    assert _resolve_splits(ds, None, None) == ("val", None, True)
    # two names of one folder, named: kept (with a warning); chosen by default, halves of them
    assert _resolve_splits(ds, "fixture", "val") == ("fixture", "val", False)
    (tmp_path / "same.yaml").write_text(f"path: {tmp_path}\nval: a\ntest: a\nnames: [x]\n")
    assert _resolve_splits(load_data_yaml(tmp_path / "same.yaml"), None, None) == (
        "val",
        None,
        True,
    )
    (tmp_path / "d.yaml").write_text("calib: a\ntest: b\nval: c\nnames: [x]\n")
    assert _resolve_splits(load_data_yaml(tmp_path / "d.yaml"), None, None) == (
        "calib",
        "test",
        False,
    )


def test_corrupt_image_is_skipped_and_counted(tmp_path, demo_model_path, fixture_yaml):
    import shutil
    import warnings

    root = tmp_path / "ds"
    shutil.copytree(fixture_yaml.parent, root)
    bad = sorted((root / "images" / "fixture").glob("*.jpg"))[5]
    bad.write_bytes(b"\xff\xd8\xff\xe0 truncated")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = calibrate(
            demo_model_path,
            root / "data.yaml",
            out=tmp_path / "out",
            head="nms",
            run_val=False,
            report=False,
            n_boot=10,
            progress=False,
        )
    assert run.summary["corrupt_images"] == [str(bad)]
    assert run.summary["eval"]["nms"]["corrupt_images"] == 1
    assert run.summary["fit"]["nms"]["images"] + run.summary["eval"]["nms"]["images"] == 11
    assert any("unreadable image" in str(w.message) for w in caught)


# The pin's float tolerance, from a measurement (benchmarks/fixture_spread.py; tests/data/README.md):
# the pinned run with torch at 1, 2 and 4 threads, oneDNN off, oneDNN capped at AVX-512/AVX2/AVX/SSE4.1,
# ATen at AVX2 and scalar, MKL at AVX2, and the reference (written on another machine) gave 9 distinct
# results. Across them the largest relative spread of any of the 390 floats is 3.5e-6 (a per-class
# kept-set ECE: a difference of float32 confidences and accuracies), the temperatures' 1.8e-7; the
# 13 floats below 1e-6 in size are 0.0 in every run; no int, bool, list length or choice differed,
# and one string did, by the last printed digit of a number (``0.000860795`` vs ``0.000860796``).
# 3e-5 is 8.7 times the largest spread and 3.3 times smaller than the smallest change of a value in
# its fourth significant digit (1e-4 relative, at 9.999 -> 9.998).
PIN_REL_TOL = 3e-5
PIN_ABS_TOL = 1e-12
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _printed_unit(token: str) -> float | None:
    """One unit in the last printed digit of a decimal number in a string; None for an integer."""
    mantissa, _, exponent = token.lower().partition("e")
    if "." not in mantissa and not exponent:
        return None
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def _same_text(ref: str, got: str, rel_tol: float, abs_tol: float) -> bool:
    """Strings equal, except that a decimal number printed in them may differ within the tolerance
    plus one unit in its last printed digit (a value that moved within tolerance can round the
    other way); integers in them (counts) and every other character must be equal."""
    if ref == got:
        return True
    a, b = _NUMBER.split(ref), _NUMBER.split(got)
    na, nb = _NUMBER.findall(ref), _NUMBER.findall(got)
    if a != b or len(na) != len(nb):
        return False
    for x, y in zip(na, nb):
        ux, uy = _printed_unit(x), _printed_unit(y)
        if ux is None or uy is None:
            if x != y:
                return False
        elif not math.isclose(float(x), float(y), rel_tol=rel_tol, abs_tol=abs_tol + max(ux, uy)):
            return False
    return True


def pinned_differences(
    ref, got, *, rel_tol: float = PIN_REL_TOL, abs_tol: float = PIN_ABS_TOL, path: str = ""
) -> list[str]:
    """Differences between two JSON values (two ``calibration.json`` documents), one line each.

    Exact: dict keys, list lengths, the type of every leaf, ints (counts, ids), bools (choices),
    None, and strings (names, methods, notes; a decimal number printed in a string may move as a
    float may, plus its last printed digit). Floats: ``math.isclose`` with ``rel_tol`` and
    ``abs_tol`` (NaN equals NaN). Nothing here knows which keys a run writes.
    """
    if isinstance(ref, dict):
        if not isinstance(got, dict) or set(ref) != set(got):
            return [
                f"{path}: keys {sorted(set(ref) ^ set(got or {}))}"
                if isinstance(got, dict)
                else f"{path}: {ref!r} vs {got!r}"
            ]
        return [
            d
            for k in ref
            for d in pinned_differences(
                ref[k], got[k], rel_tol=rel_tol, abs_tol=abs_tol, path=f"{path}.{k}"
            )
        ]
    if isinstance(ref, list):
        if not isinstance(got, list) or len(ref) != len(got):
            return [f"{path}: {ref!r} vs {got!r}"]
        return [
            d
            for i, (a, b) in enumerate(zip(ref, got))
            for d in pinned_differences(a, b, rel_tol=rel_tol, abs_tol=abs_tol, path=f"{path}[{i}]")
        ]
    if type(ref) is not type(got):
        return [f"{path}: {ref!r} vs {got!r} (type)"]
    if isinstance(ref, float):
        same = (math.isnan(ref) and math.isnan(got)) or math.isclose(
            ref, got, rel_tol=rel_tol, abs_tol=abs_tol
        )
    elif isinstance(ref, str):
        same = _same_text(ref, got, rel_tol, abs_tol)
    else:
        same = ref == got
    return [] if same else [f"{path}: {ref!r} vs {got!r}"]


def _fourth_digit_up(x: float) -> float:
    """``x`` with one unit added to its fourth significant digit (1.0820 -> 1.0830)."""
    return x + 10.0 ** (math.floor(math.log10(abs(x))) - 3)


def _float_keys(x, keys: tuple = ()):
    """The key path of every float leaf of a JSON value."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _float_keys(v, (*keys, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _float_keys(v, (*keys, i))
    elif isinstance(x, float):
        yield keys


def _planted(doc, keys: tuple):
    """A copy of ``doc`` with the float at ``keys`` changed in its fourth significant digit, and its path."""
    import copy

    out = copy.deepcopy(doc)
    parent = out
    for k in keys[:-1]:
        parent = parent[k]
    parent[keys[-1]] = _fourth_digit_up(parent[keys[-1]])
    return out, "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys)


def planted_misses(ref, got) -> list[str]:
    """The floats of ``ref`` (at least 1e-8 in size) whose change in the fourth significant digit
    :func:`pinned_differences` would not report, against ``got``, as exactly that one difference."""
    misses = []
    for keys in _float_keys(ref):
        parent = ref
        for k in keys:
            parent = parent[k]
        if not math.isfinite(parent) or abs(parent) < 1e-8:
            continue
        doc, path = _planted(ref, keys)
        if [d.partition(": ")[0] for d in pinned_differences(doc, got)] != [path]:
            misses.append(path)
    return misses


def test_calibration_json_pinned(run, fixture_yaml):
    """calibration.json on the fixture split has the keys and values of the reference (written by
    the code before the typed result model, regenerated when capture became exact per image:
    tests/data/README.md), apart from `created`, `seconds` and `schema_version`, plus one key added
    since: `gt_counts` (issue 11), checked here against the label files, `eval.{head}.map_engine`
    (issue 26): the mAP figures are those pycocotools gave, scored by det_calib's engine, and `timings`
    (issue 43), the run's seconds per stage."""
    ref = json.loads(REFERENCE.read_text())
    got = json.loads((run.out_dir / "calibration.json").read_text())
    # added key: ground-truth boxes per split and class id. The fixture halves one 12-image split
    # (YOLO txt labels, no crowd): the halves add up to the label files, and the eval half's counts
    # are the per-class `n_gt` the reference holds.
    gt = got.pop("gt_counts")
    # added key (issue 26): which engine scored the mAP check, the project's own by default
    assert {h: got["eval"][h].pop("map_engine") for h in ref["heads"]} == dict.fromkeys(
        ref["heads"], "det_calib"
    )
    fit, ev = ref["splits"]["fit"], ref["splits"]["eval"]
    assert set(gt) == {fit, ev}
    lines = [
        ln
        for p in sorted((fixture_yaml.parent / "labels" / "fixture").glob("*.txt"))
        for ln in p.read_text().splitlines()
        if ln.strip()
    ]
    labelled = np.bincount([int(ln.split()[0]) for ln in lines], minlength=len(ref["class_names"]))
    assert (np.array(gt[fit]) + np.array(gt[ev])).tolist() == labelled.tolist()
    for head in ref["heads"]:
        per_class = {c["cls"]: c["n_gt"] for c in ref["per_class"][head]}
        assert [per_class.get(c, 0) for c in range(len(ref["class_names"]))] == gt[ev]
        assert sum(gt[ev]) == ref["eval"][head]["n_gt"]
    assert got.pop("schema_version") == 1
    assert isinstance(got.pop("created"), str) and got.pop("seconds") > 0
    # added key (issue 43): the run's seconds per stage, a machine's figures (read back in test_timings_*)
    assert set(got.pop("timings")) == {"wall", "cpu", "started", "stages"}
    # added key (issue 42): kept-set figures per box size; its bins partition each head's kept boxes
    by_size = got.pop("by_size")
    assert set(by_size) == set(ref["heads"])
    for head, rows in by_size.items():
        kept = {o["conf"]: o["boxes"] for o in ref["eval"][head]["operating_before"]}
        for conf in {r["conf"] for r in rows}:
            coco = [r for r in rows if r["scheme"] == "coco" and r["conf"] == conf]
            assert [r["bin"] for r in coco] == ["small", "medium", "large"]
            assert sum(r["boxes_before"] for r in coco) == kept[conf]
    # added keys (issue 52): what Ultralytics val read, compared with the eval split: the same images and instances
    for head in ref["heads"]:
        uv = got["ultralytics_val"][head]
        seen = {
            k: uv.pop(k)
            for k in (
                "verified",
                "images_seen",
                "images_expected",
                "instances_seen",
                "instances_expected",
                "skipped",
            )
        }
        assert seen["verified"] is True and seen["skipped"] == []
        assert seen["images_seen"] == seen["images_expected"] == ref["eval"][head]["images"]
        assert seen["instances_seen"] == seen["instances_expected"] == ref["eval"][head]["n_gt"]
    assert Path(got["model"]).resolve() == (REPO / ref["model"]).resolve()
    assert Path(got["data"]).resolve() == (REPO / ref["data"]).resolve()
    got["model"], got["data"] = ref["model"], ref["data"]
    # floats at the measured tolerance (PIN_REL_TOL above), everything else exactly
    assert pinned_differences(ref, got) == []
    assert list(got) == list(ref)  # same order of the top-level keys
    # and it still fails on any float of the reference changed in its fourth significant digit
    # (a temperature among them), against this run's values: the tolerance admits what a CPU
    # moves, not such a change
    assert planted_misses(ref, got) == []
    assert {("temperature", h) for h in ref["temperature"]} <= set(_float_keys(ref))


def test_pin_comparison_exact_and_float_parts():
    """The pin's comparison on the reference itself: a CPU's measured spread passes, a temperature
    changed in its fourth significant digit (or by 1e-4 relative, the smallest such change) fails,
    and ints, bools, strings, keys, lengths and types must match exactly."""
    import copy

    ref = json.loads(REFERENCE.read_text())
    assert pinned_differences(ref, copy.deepcopy(ref)) == []
    # every float moved by the largest spread measured across CPU code paths (3.5e-6 relative)
    moved = copy.deepcopy(ref)
    for keys in _float_keys(ref):
        parent = moved
        for k in keys[:-1]:
            parent = parent[k]
        parent[keys[-1]] *= 1 + 3.5e-6
    assert pinned_differences(ref, moved) == []
    for head, t in ref["temperature"].items():
        for planted in (_fourth_digit_up(t), t * (1 + 1e-4), t * (1 - 1e-4)):
            doc = copy.deepcopy(ref)
            doc["temperature"][head] = planted
            assert pinned_differences(ref, doc) == [f".temperature.{head}: {t!r} vs {planted!r}"]
    assert _fourth_digit_up(1.0820771625767422) == pytest.approx(1.0830771625767422, abs=1e-15)
    assert _fourth_digit_up(0.0123456) == pytest.approx(0.0123556, abs=1e-15)
    assert planted_misses(ref, ref) == []

    def differ(path: tuple, value) -> list[str]:
        doc = copy.deepcopy(ref)
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = value(parent[path[-1]]) if callable(value) else value
        return pinned_differences(ref, doc)

    shift = ("threshold_shift", "nms", 0)
    assert differ((*shift, "kept_before"), lambda n: n + 1)  # a count
    assert differ((*shift, "kept_before"), float)  # an int written as a float
    assert differ(("eval", "nms", "map_identical"), lambda b: not b)  # a bool
    assert differ(("heads",), ["nms"])  # a list's length
    assert differ(("method",), "platt")  # a choice
    assert differ(("class_names", 0), "Circle")
    assert differ(("eval", "nms", "n_gt"), None)
    doc = copy.deepcopy(ref)
    del doc["eval"]["nms"]["boxes"]
    assert pinned_differences(ref, doc) == [".eval.nms: keys ['boxes']"]
    # numbers printed in a string: a decimal may round the other way, nothing else may change
    assert _same_text(
        "mAP identical (0.4723 vs 0.4723), floor 0.000860795",
        "mAP identical (0.4724 vs 0.4723), floor 0.000860796",
        PIN_REL_TOL,
        PIN_ABS_TOL,
    )
    assert not _same_text("mAP 0.4723", "mAP 0.4733", PIN_REL_TOL, PIN_ABS_TOL)
    assert not _same_text("23 boxes", "24 boxes", PIN_REL_TOL, PIN_ABS_TOL)
    assert not _same_text(
        "mAP identical (0.4723)", "mAP differs (0.4723)", PIN_REL_TOL, PIN_ABS_TOL
    )
    assert not _same_text("T=0.979", "T=0.979 1", PIN_REL_TOL, PIN_ABS_TOL)


def test_calibrate_tunes_thresholds_when_asked(run, tmp_path):
    """`target_precision` given: thresholds.json for every head, the same as tuning the written run
    afterwards (ground truth from `gt_counts`, no dataset needed), in summary.txt, the report and compare."""
    from det_calib.report import compare_runs
    from det_calib.thresholds.per_class import read_thresholds, tune_run

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
        assert (prm["target_precision"], prm["delta"], prm["unit"], prm["fallback"]) == (
            0.8,
            0.1,
            "image",
            "global",
        )
        assert doc["heads"][head]["score"]["temperature"] == run.temperature[head]
    summary = (out / "summary.txt").read_text()
    assert (
        "head nms: thresholds on the calibrated conf" in summary
        and "head e2e: thresholds on the calibrated conf" in summary
        and "is at least 0.8 on new images, with probability at least 0.9" in summary
    )
    html = (out / "report.html").read_text()
    assert '<h2 id="thresholds">Conf thresholds</h2>' in html
    assert (
        html.index("Threshold shift</h2>")
        < html.index("Conf thresholds</h2>")
        < html.index("mAP verification</h2>")
    )
    for head in ("nms", "e2e"):
        assert (out / "figures" / f"thresholds_pr_{head}.png").is_file()
    cmp = compare_runs(f"{out}:nms", f"{out}:e2e", out_dir=tmp_path / "cmp")
    page = cmp["html"].read_text()
    for crit in ("target_precision", "max_f1", "lrp"):
        assert f'class="compare-thresholds" data-criterion="{crit}"' in page


def test_summary_says_plainly_when_calibration_made_the_kept_boxes_worse():
    """The summary flags a head whose calibrated kept-set ECE (lowest conf) is above the raw one."""
    import copy

    from det_calib.report.text_summary import summary_text

    ref = json.loads(
        (Path(__file__).resolve().parents[1] / "data" / "fixture_calibration.json").read_text()
    )
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
        from det_calib.record.run_folder import Run
        from det_calib.record.run_result import RunResult
        from det_calib.report.calibrators_section import lead

        run = Run(run_dir=Path("."), result=RunResult.from_dict(d), boxes=pl.DataFrame())
        assert all(("WORSE than the raw scores" in lead(run, h)) == worse for h in d["heads"])


@pytest.mark.parametrize("per_class", [False, True])
def test_default_run_chooses_a_ranking_map_and_reports_the_temperature(
    tmp_path, demo_model_path, fixture_yaml, per_class
):
    """The default is `auto` over the maps that keep every box's ranking (`--per-class` adds the
    per-class maps); every candidate says why it won or lost; the temperature is fitted on the
    fit boxes and reported whatever is deployed; boxes.parquet holds each box's deployed score."""
    from det_calib.calibrators.registry import global_methods, method_spec
    from det_calib.calibrators.registry import methods as all_methods
    from det_calib.calibrators.temperature import TemperatureScaler
    from det_calib.record.calibrator_record import calibrator_of
    from det_calib.record.run_result import RunResult

    run = calibrate(
        demo_model_path,
        fixture_yaml,
        out=tmp_path / "run",
        head="nms",
        n_boot=10,
        run_val=False,
        report=False,
        progress=False,
        per_class=per_class,
    )
    doc = json.loads((tmp_path / "run" / "calibration.json").read_text())
    assert doc["method"] == "auto" and doc["auto_per_class"] is per_class
    cands = doc["calibration_candidates"]["nms"]
    methods = {c["method"] for c in cands}
    # auto's pool: the ranking maps, with --per-class the per-class maps too (size maps only with --size-maps)
    assert methods == (
        {m for m in all_methods() if not method_spec(m).uses_size}
        if per_class
        else set(global_methods())
    )
    assert all(c["params"]["verdict"] for c in cands)
    assert [c["params"]["verdict"].startswith("chosen") for c in cands] == [
        c["selected"] for c in cands
    ]
    assert sum(c["selected"] for c in cands) == 1
    # the temperature: refitted here on the same fit boxes
    boxes = pl.read_parquet(tmp_path / "run" / "boxes.parquet")
    fb = boxes.filter((pl.col("split") == doc["splits"]["fit"]) & ~pl.col("ignore"))
    t = (
        TemperatureScaler(kind="sigmoid")
        .fit(fb["logit"].to_numpy(), fb["correct"].to_numpy())
        .temperature_
    )
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
        want = 1 / (
            1
            + np.exp(
                -cal.transform_logits(boxes["logit"].to_numpy(), classes=boxes["cls"].to_numpy())
            )
        )
        np.testing.assert_allclose(boxes["calibrated"].to_numpy(), want, rtol=1e-12)
    assert run.result.head("nms").temperature_fit.temperature == tf["temperature"]


def test_val_check_not_completed_when_the_nms_budget_binds(
    run, tmp_path, demo_model_path, fixture_yaml
):
    """A real val pass of the run's calibrated checkpoint whose NMS runs out of time (a budget of
    zero seconds; one batch of 12 images, the calibrated and the original head's NMS) gives a
    check "not completed" with no mAP, changed or unchanged: so say calibration.json, the summary
    and the report."""
    import dataclasses
    import re
    import shutil

    from det_calib.evaluation.map_check import _ultralytics_val_shared as ultralytics_val_shared
    from det_calib.job.settings import Settings
    from det_calib.pipeline.ultralytics_checks import _val_check
    from det_calib.record.run_result import RunResult
    from det_calib.report import write_report

    result = RunResult.from_dict(json.loads((run.out_dir / "calibration.json").read_text()))
    kw = dict(split="val", head="nms", imgsz=None, batch=16, device=None, nms_time_limit=0.0)
    check = _val_check(
        demo_model_path,
        run.out_dir / "calibrated.pt",
        fixture_yaml,
        "val",
        result.head("nms").calibrator,
        Settings(),
        kw,
        ultralytics_val_shared,
    )
    assert check.completed is False and not check.ran
    assert (check.original, check.calibrated, check.calibrated_equivalent_floor) == (
        None,
        None,
        None,
    )
    assert check.identical_at_equivalent_floor is None
    assert re.fullmatch(
        r"not completed: Ultralytics' NMS stopped early \(NMS time limit -?0\.000s exceeded, "
        r"2 times\) and dropped the boxes of the images it had not reached: the pass's mAP is not "
        r"reported",
        check.note,
    ), check.note
    # the same run with that check
    out = tmp_path / "run"
    shutil.copytree(run.out_dir, out)
    result.results["nms"] = dataclasses.replace(result.results["nms"], ultralytics_val=check)
    result.write(out / "calibration.json")
    written = json.loads((out / "calibration.json").read_text())
    assert written["ultralytics_val"]["nms"] == {
        "split": "val",
        "original": None,
        "calibrated": None,
        "calibrated_equivalent_floor": None,
        "completed": False,
        "note": check.note,
    }
    assert "completed" not in written["ultralytics_val"]["e2e"]  # a completed check: as before
    assert RunResult.from_dict(written).head("nms").ultralytics_val == check
    lines = summary_text(written).splitlines()
    assert f"[nms] Ultralytics val {check.note}" in lines
    assert not [ln for ln in lines if ln.startswith("[nms] Ultralytics val mAP")]
    assert [ln for ln in lines if ln.startswith("[e2e] Ultralytics val mAP")]
    html = write_report(out)["html"].read_text()
    table = re.search(r'<table class="map-ultralytics".*?</table>', html, flags=re.S).group(0)
    rows = [
        re.findall(r"<td[^>]*>(.*?)</td>", r)
        for r in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)
    ]
    nms_rows = [r for r in rows if r and r[0] == "nms"]
    assert nms_rows == [["nms", "not completed", "n/a", "n/a", "n/a", ""]]
    import html as html_text

    assert f"nms: {check.note}" in html_text.unescape(html)
    assert f"nms: {check.note}" in (out / "report.md").read_text()
