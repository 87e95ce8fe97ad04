"""``det-calib calibrate --target iou`` end to end on the fixture split: recorded, headlined by kept-set
LaECE_0, both targets' kept-set figures side by side in the summary, the report and ``compare``,
mAP unchanged (the choice runs among ranking maps)."""

from __future__ import annotations

import json

import pytest
from conftest import assert_intervals_contain_estimates

from det_calib.calibrators import registry
from det_calib.cli import main
from det_calib.record.run_result import RunResult
from det_calib.report import compare_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory, demo_model_path, fixture_yaml):
    root = tmp_path_factory.mktemp("target")
    iou, default = root / "iou", root / "default"
    common = ["--n-boot", "30", "--no-val", "-q", "--head", "nms"]
    assert (
        main(
            [
                "calibrate",
                "--model",
                str(demo_model_path),
                "--data",
                str(fixture_yaml),
                "--target",
                "iou",
                "--out",
                str(iou),
                *common,
            ]
        )
        == 0
    )
    # the default target on the same captured boxes
    assert (
        main(
            [
                "calibrate",
                "--model",
                str(demo_model_path),
                "--data",
                str(fixture_yaml),
                "--boxes",
                str(iou),
                "--out",
                str(default),
                *common,
            ]
        )
        == 0
    )
    return iou, default


def test_the_iou_run_is_recorded_headlined_by_laece0_and_keeps_the_map(runs):
    iou, default = runs
    d = json.loads((iou / "calibration.json").read_text())
    assert d["target"] == "iou" and "target" not in json.loads(
        (default / "calibration.json").read_text()
    )
    r = RunResult.read(iou / "calibration.json")
    h = r.head("nms")
    assert h.calibrator.method in registry.global_methods("iou")
    assert h.eval.map_identical is True
    o0, o1 = h.eval.operating_before[0], h.eval.operating_after[0]
    assert None not in (
        o0.ece,
        o1.ece,
        o0.laece0,
        o1.laece0,
        o0.ece_ci,
        o1.ece_ci,
        o0.laece0_ci,
        o1.laece0_ci,
    )
    summary = (iou / "summary.txt").read_text()
    line = next(x for x in summary.splitlines() if x.startswith("[nms] boxes kept at conf 0.25"))
    assert (
        line.index("LaECE_0(25 bins)")
        < line.index("(the target)")
        < line.index("ECE(15 bins, IoU 0.5)")
    )
    assert f"{o1.laece0:.4f} [{o1.laece0_ci[0]:.4f}, {o1.laece0_ci[1]:.4f}]" in line
    assert (
        "fitted to the IoU of each box's match (--target iou)" in summary
    )  # the map, or none beat the raw
    other = next(
        x
        for x in (default / "summary.txt").read_text().splitlines()
        if x.startswith("[nms] boxes kept at conf 0.25")
    )
    assert (
        other.index("ECE(15 bins, IoU 0.5)") < other.index("LaECE_0(25 bins)")
        and "(the target)" not in other
    )
    report = (iou / "report.md").read_text()
    assert (
        "LaECE\\_0 of the boxes kept at conf 0.25 (the target): raw" in report
    )  # Markdown-escaped
    # what is left is the target's: LaECE_0 above its floor, not the ECE's bins of correctness
    rng = o1.laece_floor_range
    left = [x for x in summary.splitlines() if x.startswith("[nms] what is left")]
    assert left == (
        [
            f"[nms] what is left at conf 0.25: LaECE_0 {o1.laece0:.4f} is above what a perfectly "
            f"calibrated detector would score on these boxes (up to {rng[1]:.4f}): the map's conf "
            "is not yet the IoU these boxes reach"
        ]
        if o1.laece0 > rng[1]
        else []
    )
    assert "stated, " not in summary and "the kept set whose ECE the verdict reads" not in report
    assert_intervals_contain_estimates(iou)


def test_compare_puts_both_targets_side_by_side(runs, tmp_path):
    iou, default = runs
    files = compare_runs(iou, default, out_dir=tmp_path / "cmp", labels=["iou", "correct"])
    md = files["md"].read_text()
    assert "ECE of the boxes kept at conf 0.25, calibrated" in md
    assert "LaECE\\_0 of the boxes kept at conf 0.25, calibrated" in md
    for name in ("iou", "correct"):
        r = RunResult.read((iou if name == "iou" else default) / "calibration.json").head("nms")
        assert f"{r.eval.operating_after[0].laece0:.4f}" in md


def test_check_prints_both_targets_kept_set_figures(runs, fixture_yaml, tmp_path, capsys):
    from det_calib.check import CheckResult

    iou, _ = runs
    assert main(
        [
            "check",
            str(iou),
            "--data",
            str(fixture_yaml),
            "--out",
            str(tmp_path / "chk"),
            "-q",
            "--no-report",
        ]
    ) in (0, 3, 4, 5)
    out = capsys.readouterr().out
    r = CheckResult.read(tmp_path / "chk" / "check.json").labelled["nms"]
    o, t = r.operating[0], r.operating_then[0]
    line = next(
        x for x in out.splitlines() if x.startswith("[nms] boxes kept at conf 0.25 (calibrated)")
    )
    assert line == (
        f"[nms] boxes kept at conf 0.25 (calibrated): ECE {t.ece:.4f} [{t.ece_ci[0]:.4f}, "
        f"{t.ece_ci[1]:.4f}] then -> {o.ece:.4f} [{o.ece_ci[0]:.4f}, {o.ece_ci[1]:.4f}] now; "
        "LaECE_0 "
        f"{t.laece0:.4f} [{t.laece0_ci[0]:.4f}, {t.laece0_ci[1]:.4f}] then -> {o.laece0:.4f} "
        f"[{o.laece0_ci[0]:.4f}, {o.laece0_ci[1]:.4f}] now"
    )
