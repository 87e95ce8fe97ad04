"""Reliability by size through a real run: calibration.json's ``by_size``, the summary line, the
report's section (its numbers are the records'), compare's table, and check's figures then and now;
and a run that deploys the size-conditioned map (no calibrated.pt, its mAP before and after)."""

from __future__ import annotations

import json

import pytest

from det_calib.check.run_check import check_run
from det_calib.pipeline.calibrate_job import calibrate
from det_calib.record.run_result import RunResult
from det_calib.report import compare_runs
from det_calib.report.common import fci
from det_calib.report.size_section import bin_label


@pytest.fixture(scope="module")
def runs(tmp_path_factory, demo_model_path, fixture_yaml):
    root = tmp_path_factory.mktemp("by_size")
    kw = dict(n_boot=30, run_val=False, progress=False, imgsz=320)
    size = calibrate(
        demo_model_path, fixture_yaml, out=root / "size", method="size-platt", **kw
    ).out_dir
    plain = calibrate(
        demo_model_path,
        fixture_yaml,
        out=root / "temp",
        method="temperature",
        boxes=str(size),
        report=False,
        **kw,
    ).out_dir
    return {"size": size, "temperature": plain}


def test_the_run_records_and_reports_reliability_by_size(runs):
    run = runs["size"]
    res = RunResult.read(run / "calibration.json")
    doc = json.loads((run / "calibration.json").read_text())
    for h in res.heads:
        figs = res.head(h).by_size
        assert [(f.scheme, f.bin) for f in figs][:3] == [
            ("coco", "small"),
            ("coco", "medium"),
            ("coco", "large"),
        ]
        assert (
            sum(f.boxes_before for f in figs if f.scheme == "coco")
            == res.head(h).eval.operating_before[0].boxes
        )
        assert (
            sum(f.boxes_after for f in figs if f.scheme == "relative")
            == res.head(h).eval.operating_after[0].boxes
        )
        assert len(doc["by_size"][h]) == 6
    md = (run / "report.md").read_text()
    assert "## Reliability by size" in md
    f = next(f for f in res.head("nms").by_size if f.ece_after is not None)
    row = next(line for line in md.splitlines() if line.startswith(f"| {bin_label(f)} |"))
    assert (
        fci(f.ece_after, f.ece_after_ci) in row and fci(f.laece0_before, f.laece0_before_ci) in row
    )
    assert (run / "figures" / "by_size_nms.png").is_file()
    summary = (run / "summary.txt").read_text()
    assert "[nms] kept-set ECE by COCO size at conf 0.25" in summary


def test_a_size_map_run_writes_no_checkpoint_and_shows_its_map_change(runs):
    run = runs["size"]
    assert not (run / "calibrated.pt").exists()
    summary = (run / "summary.txt").read_text()
    assert "no calibrated.pt: a size-conditioned map" in summary and "det_calib.attach" in summary
    # where its mAP moved, the summary's mAP line says why (as the report's mAP section does)
    line = next(x for x in summary.splitlines() if x.startswith("[nms] COCO mAP50-95"))
    assert ("identical" in line) != (
        "DIFFERENT: the size-conditioned map re-ranks the boxes of a class by their size" in line
    ), line
    md = (run / "report.md").read_text()
    assert "re-ranks the boxes of a class by their size" in md
    res = RunResult.read(run / "calibration.json")
    ev = res.head("nms").eval
    assert ev.map50_95_before is not None and ev.map50_95_after is not None
    assert res.head("nms").calibrator.method == "size-platt"


def test_compare_and_check_show_reliability_by_size(runs, tmp_path, fixture_yaml):
    pages = compare_runs(runs["size"], runs["temperature"], out_dir=tmp_path / "cmp")
    md = pages["md"].read_text()
    assert (
        "## Reliability by size" in md
        and "| Size | Run | ECE calibrated (boxes) | LaECE_0 calibrated |" in md
    )
    rows = [
        ln.split(" | ")[:2]
        for ln in md.splitlines()
        if ln.startswith(("| small ", "| medium ", "| large "))
    ]
    assert [(size.split()[1], run) for size, run in rows[:6]] == [
        ("small", "A"),
        ("small", "B"),
        ("medium", "A"),
        ("medium", "B"),
        ("large", "A"),
        ("large", "B"),
    ]
    result, out = check_run(
        runs["size"],
        data=fixture_yaml,
        split="fixture",
        limit=6,
        n_boot=20,
        progress=False,
        out=tmp_path / "check",
    )
    doc = json.loads((out / "check.json").read_text())
    nms = (
        next(h for h in doc["labelled"] if h["head"] == "nms")
        if isinstance(doc["labelled"], list)
        else doc["labelled"]["nms"]
    )
    assert [f["bin"] for f in nms["by_size"]][:3] == ["small", "medium", "large"]
    assert "by box size" in (out / "check.md").read_text()
