"""det-calib ensemble: members, capture, the run folder, reuse, deployment, bad input, the classifier form."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from det_calib.cli import main
from det_calib.ensemble.members import (
    MemberSpec,
    _parse_view,
    _snapshot_paths,
    head_plan,
    member_specs,
)
from det_calib.errors import InputError


# ----------------------------------------------------------------------------- members
def noisy_checkpoint(src: Path, out: Path, *, seed: int, scale: float = 0.03) -> Path:
    """The demo checkpoint with seeded multiplicative weight noise: a genuinely different member,
    saved as a valid Ultralytics checkpoint."""
    ckpt = torch.load(src, map_location="cpu", weights_only=False)
    model = ckpt["model"].float()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim > 1:
                p.mul_(1 + scale * torch.randn(p.shape, generator=g))
    ckpt["model"] = model.half()
    ckpt.pop("ema", None)
    torch.save(ckpt, out)
    return out


@pytest.fixture(scope="module")
def noisy(demo_model_path, tmp_path_factory) -> Path:
    return noisy_checkpoint(
        demo_model_path, tmp_path_factory.mktemp("members") / "noisy1.pt", seed=1
    )


@pytest.fixture(scope="module")
def legacy(tmp_path_factory) -> Path:
    """A YOLOv8n (NMS head only) built from its yaml with the demo's class names."""
    from ultralytics.nn.tasks import DetectionModel

    from det_calib.demo.shapes import CLASS_NAMES

    torch.manual_seed(0)
    model = DetectionModel("yolov8n.yaml", nc=len(CLASS_NAMES), verbose=False)
    model.names = dict(enumerate(CLASS_NAMES))
    path = tmp_path_factory.mktemp("legacy") / "yolov8n_shapes.pt"
    torch.save(
        {"model": model.float().eval(), "train_args": {"imgsz": 320, "task": "detect"}}, path
    )
    return path


def test_views_specs_and_snapshots(tmp_path):
    assert _parse_view("orig") == (False, 1.0) and _parse_view("flip+scale:1.5") == (True, 1.5)
    with pytest.raises(InputError, match="view"):
        _parse_view("rotate")
    with pytest.raises(InputError, match="scale"):
        _parse_view("scale:9")
    specs = member_specs(["a.pt"], views=["orig", "flip", "scale:1.2"])
    assert [(m.kind, m.flip, m.scale, m.name) for m in specs] == [
        ("view", False, 1.0, "a.pt"),
        ("view", True, 1.0, "a.pt [flip]"),
        ("view", False, 1.2, "a.pt [scale:1.2]"),
    ]
    assert [m.head for m in member_specs(["a.pt:e2e", "b.pt"])] == ["e2e", None]
    with pytest.raises(InputError, match="at least two members"):
        member_specs(["a.pt"])
    with pytest.raises(InputError, match="twice"):
        member_specs(["a.pt", "a.pt"])
    w = tmp_path / "run" / "weights"
    w.mkdir(parents=True)
    for n in ("epoch10.pt", "epoch2.pt", "last.pt", "best.pt"):
        (w / n).write_bytes(b"x")
    assert [p.name for p in _snapshot_paths(tmp_path / "run")] == [
        "epoch2.pt",
        "epoch10.pt",
        "last.pt",
    ]
    assert {m.kind for m in member_specs([], snapshots=[w])} == {"snapshot"}


def test_head_plan_mixes_architectures_and_heads():
    a, b = MemberSpec(Path("y26.pt")), MemberSpec(Path("v8.pt"))
    both, nms = ["nms", "e2e"], ["nms"]
    assert head_plan([a, MemberSpec(Path("y26b.pt"))], [both, both], "auto") == {
        "nms": ["nms", "nms"],
        "e2e": ["e2e", "e2e"],
    }
    assert head_plan([a, b], [both, nms], "auto") == {"nms": ["nms", "nms"]}
    # a YOLO26 that runs only its one-to-one head beside a YOLOv8 with only its NMS head
    assert head_plan([MemberSpec(Path("y26.pt"), head="e2e"), b], [both, nms], "auto") == {
        "nms": ["e2e", "nms"]
    }
    assert head_plan([MemberSpec(Path("y26.pt"), head="e2e"), b], [["e2e"], nms], "auto") == {
        "nms": ["e2e", "nms"]
    }
    with pytest.raises(InputError, match="no `e2e` head"):
        head_plan([a, b], [both, nms], "e2e")


def test_members_capture_equals_their_own_capture(demo_model_path, fixture_images, tmp_path):
    """Each member, run in the one shared pass, gives exactly its own capture: the original, and
    the flip view equals the capture of the flipped images with the boxes flipped back."""
    import cv2

    from det_calib.capture.predictor import capture
    from det_calib.ensemble.members import _open_torch_member as open_torch_member
    from det_calib.ensemble.members import capture_members

    images = [str(p) for p in fixture_images[:3]]
    kw = dict(conf=0.001, iou=0.7, max_det=300, imgsz=None, device="cpu", workers=2)
    specs = [MemberSpec(demo_model_path, "view"), MemberSpec(demo_model_path, "view", flip=True)]
    members = [open_torch_member(sp, ["nms", "e2e"], **kw) for sp in specs]
    tables = capture_members(
        members,
        images,
        [["nms", "e2e"]] * 2,
        split="s",
        image_names=images,
        progress=False,
        workers=2,
    )
    own = capture(demo_model_path, images, heads="auto", split="s", progress=False, workers=1)
    assert tables[0].equals(own.select(tables[0].columns))
    flipped = []
    for p in images:
        q = tmp_path / (Path(p).stem + ".png")
        cv2.imwrite(str(q), cv2.imread(p)[:, ::-1])
        flipped.append(str(q))
    f = capture(demo_model_path, flipped, heads="auto", split="s", progress=False, workers=1)
    w = f["img_w"].to_numpy()
    back = f.with_columns(
        pl.Series("x1", w - f["x2"].to_numpy()), pl.Series("x2", w - f["x1"].to_numpy())
    )
    got = tables[1]
    assert got.height == back.height
    for c in ("y1", "y2", "conf", "logit", "cls", "image_id"):
        assert (got[c].to_numpy() == back[c].to_numpy()).all(), c
    np.testing.assert_allclose(got["x1"].to_numpy(), back["x1"].to_numpy(), atol=1e-9)
    assert tables[0].height != got.height or not np.allclose(
        tables[0]["x1"].to_numpy(), got["x1"].to_numpy()
    )


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "case",
    [
        "one model",
        "missing file",
        "other class names",
        "bad view",
        "weights",
        "few images",
        "detections",
        "bad head",
    ],
)
def test_bad_input_one_line_exit_2(case, demo_model_path, fixture_yaml, tmp_path, capsys):
    m = str(demo_model_path)
    args = {
        "one model": ["--model", m],
        "missing file": ["--model", m, "--model", str(tmp_path / "nope.pt")],
        "other class names": ["--model", m, "--model", "yolov8n.yaml"],
        "bad view": ["--model", m, "--view", "spin"],
        "weights": ["--model", m, "--model", m + ":e2e", "--weight", "1"],
        # 3 fit images (halves of 6): fewer than the folds the choice of fusion cross-validates over,
        # whatever the method; refused before the members' captures
        "few images": ["--model", m, "--model", m + ":e2e", "--method", "platt", "--limit", "6"],
        "detections": ["--model", m, "--model", m + ":e2e", "--detections", "dets.json"],
        "bad head": ["--model", m, "--model", m + ":foo"],
    }[case]
    code = main(
        ["ensemble", *args, "--data", str(fixture_yaml), "--out", str(tmp_path / "o"), "-q"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("det-calib: error: "), err
    want = {
        "one model": "at least two members",
        "missing file": "not found",
        "other class names": "class names",
        "bad view": "`--view`",
        "weights": "one `--weight` per member",
        "few images": "has 3 images, fewer than the 5 folds the choice of fusion cross-validates",
        "detections": "`--detections` is one engine's file of boxes, and an ensemble runs",
        "bad head": ":foo is not a head: MODEL:HEAD names one of nms, e2e",
    }[case]
    assert want in err[0]
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- a run
@pytest.fixture(scope="module")
def run(demo_model_path, noisy, fixture_yaml, tmp_path_factory):
    from det_calib.ensemble import ensemble

    out = tmp_path_factory.mktemp("ens") / "run"
    return ensemble(
        [demo_model_path, noisy],
        fixture_yaml,
        out=out,
        head="nms",
        n_boot=50,
        progress=False,
        run_val=False,
        fusion_score="agree",
        fusion_order="fuse-then-calibrate",
    )


def test_run_folder_contract(run, demo_model_path, noisy):
    from det_calib.capture.parts import model_fingerprint
    from det_calib.record.run_result import RunResult

    out = run.out_dir
    assert {
        "calibration.json",
        "boxes.parquet",
        "members.parquet",
        "report.html",
        "summary.txt",
    } <= {p.name for p in out.iterdir()}
    r = RunResult.read(out / "calibration.json")
    rec = r.sections["ensemble"]
    assert [m.fingerprint for m in rec.members] == [
        model_fingerprint(demo_model_path),
        model_fingerprint(noisy),
    ]
    assert (
        rec.fusion.score == "agree"
        and rec.fusion.order == "fuse-then-calibrate"
        and rec.fusion.iou == 0.55
    )
    eh = rec.heads["nms"]
    assert [(t.order, t.score) for t in eh.table] == [
        (o, s)
        for o in ("fuse-then-calibrate", "calibrate-then-fuse")
        for s in ("avg", "present", "max", "agree", "absent", "best-avg")
    ]
    assert r.head("nms").temperature_fit is not None and r.head("nms").eval.map_identical
    b = pl.read_parquet(out / "boxes.parquet")
    conf = b["conf"].to_numpy()
    np.testing.assert_allclose(b["logit"].to_numpy(), np.log(conf / (1 - conf)), atol=1e-9)
    assert set(b["members"].unique().to_list()) <= {1, 2} and b["calibrated"].is_not_null().all()
    assert b.group_by("split", "image_id").len()["len"].max() <= 300
    # the two members differ: their mAPs and boxes are not the same
    assert eh.members[0].map50_95 != eh.members[1].map50_95
    assert json.loads((out / "calibration.json").read_text())["ensemble"]["members"][1][
        "path"
    ] == str(noisy.resolve())
    html = (out / "report.html").read_text()
    assert (
        "ensemble-fusion" in html
        and "ensemble-members" in html
        and "of each member and of the ensemble" in html
    )
    # where the time went: typed in calibration.json, adding up, the summary's last line
    t = r.timings
    assert t is not None and all(
        t.seconds(n) > 0
        for n in (
            "model load",
            "capture",
            "fusion",
            "fit and choice",
            "figures",
            "outputs",
            "report",
        )
    )
    # the ensemble's coarse table: the data checked with the members' load
    assert set(t.stages) <= {
        "model load",
        "capture",
        "fusion",
        "fit and choice",
        "figures",
        "outputs",
        "report",
        "other",
    }
    assert sum(st.wall for st in t.stages.values()) == pytest.approx(t.wall, abs=0.01)
    assert (out / "summary.txt").read_text().splitlines()[-1] == t.line()


def test_fused_boxes_are_ensemble_boxes_wbf(run):
    """The run's fused boxes (rule agree) equal ensemble-boxes' WBF (conf_type box_and_model_avg)
    of the members' raw boxes (normalised by the image size), image by image."""
    eb = pytest.importorskip("ensemble_boxes")
    out = run.out_dir
    mem = pl.read_parquet(out / "members.parquet")
    fused = pl.read_parquet(out / "boxes.parquet")
    n = 0
    for (split, img), part in fused.group_by("split", "image_id"):
        w, h = part["img_w"][0], part["img_h"][0]
        scale = np.array([w, h, w, h], float)
        ms = [
            mem.filter(
                (pl.col("member") == i) & (pl.col("split") == split) & (pl.col("image_id") == img)
            )
            for i in range(2)
        ]
        rb, rs, rl = eb.weighted_boxes_fusion(
            [m.select("x1", "y1", "x2", "y2").to_numpy() / scale for m in ms],
            [m["conf"].to_numpy() for m in ms],
            [m["cls"].to_numpy() for m in ms],
            iou_thr=0.55,
            conf_type="box_and_model_avg",
        )
        o = np.lexsort((rb[:, 0], -rs))[:300]
        got = part.sort(["conf", "x1"], descending=[True, False])
        np.testing.assert_allclose(got["conf"].to_numpy(), rs[o], atol=1e-6)
        np.testing.assert_allclose(
            got.select("x1", "y1", "x2", "y2").to_numpy() / scale, rb[o], atol=1e-6
        )
        n += len(o)
    assert n > 100


def test_the_report_of_an_ensemble_run_written_by_a_process_that_never_imported_the_ensemble(
    run, tmp_path
):
    """The record names its Ensemble section (det_calib/record/run_sections.py): ``write_report`` alone,
    in a fresh interpreter, writes it where it always was (before Settings), the same as the run's."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from det_calib.report import write_report\n"
        f"write_report({str(run.out_dir)!r}, out_dir={str(tmp_path)!r})\n"
        "print('det_calib.ensemble.ensemble_report' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[2]
    got = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(root), "PATH": "", "HOME": str(Path.home())},
        check=True,
    )
    assert got.stdout.strip() == "True"
    md = (tmp_path / "report.md").read_text()
    h2 = [line for line in md.splitlines() if line.startswith("## ")]
    assert h2[-2:] == ["## Ensemble", "## Settings"]
    ours = md[md.index("## Ensemble") : md.index("## Settings")]
    theirs = (run.out_dir / "report.md").read_text()
    assert ours == theirs[theirs.index("## Ensemble") : theirs.index("## Settings")]
    assert "ensemble-fusion" in (tmp_path / "report.html").read_text()


def test_compare_report_thresholds_and_reuse(
    run, demo_model_path, noisy, fixture_yaml, tmp_path, capsys
):
    out = run.out_dir
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    # as another run's reference, the ensemble is named as one, not as a .pt's pytorch engine
    ref = ["--reference", str(out), "--out", str(tmp_path / "ref")]
    assert main(["report", str(out), *ref]) == 0
    md = (tmp_path / "ref" / "report.md").read_text()
    n = len(run.result.sections["ensemble"].members)
    assert f"| ensemble of {n} |" in md and "| pytorch |" not in md
    assert (
        main(
            [
                "compare",
                str(out),
                f"{out}:nms",
                "--labels",
                "a",
                "b",
                "--out",
                str(tmp_path / "cmp"),
            ]
        )
        == 0
    )
    assert (
        main(
            ["thresholds", str(out), "--head", "nms", "--target-precision", "0.5", "--n-boot", "20"]
        )
        == 0
    )
    assert (out / "thresholds.json").is_file()
    again = tmp_path / "again"
    code = main(
        [
            "ensemble",
            "--model",
            str(demo_model_path),
            "--model",
            str(noisy),
            "--data",
            str(fixture_yaml),
            "--head",
            "nms",
            "--n-boot",
            "50",
            "--boxes",
            str(out),
            "--out",
            str(again),
            "-q",
            "--fusion-score",
            "agree",
            "--fusion-order",
            "fuse-then-calibrate",
        ]
    )
    assert code == 0
    a, b = (pl.read_parquet(d / "boxes.parquet").drop("calibrated") for d in (out, again))
    assert a.equals(b)
    code = main(
        [
            "ensemble",
            "--model",
            str(demo_model_path),
            "--model",
            str(noisy),
            "--data",
            str(fixture_yaml),
            "--head",
            "nms",
            "--n-boot",
            "50",
            "--boxes",
            str(out),
            "--fusion-score",
            "max",
            "--fusion-order",
            "calibrate-then-fuse",
            "--no-fusion-table",
            "--no-report",
            "--out",
            str(tmp_path / "max"),
            "-q",
        ]
    )
    assert code == 0
    mx = pl.read_parquet(tmp_path / "max" / "boxes.parquet")
    assert not np.allclose(np.sort(mx["conf"].to_numpy()), np.sort(a["conf"].to_numpy()))
    from det_calib.record.run_result import RunResult

    assert (
        RunResult.read(tmp_path / "max" / "calibration.json").sections["ensemble"].fusion.order
        == "calibrate-then-fuse"
    )
    _assert_deployment_equals_run(tmp_path / "max", fixture_yaml)
    capsys.readouterr()
    # other members than the run's, and calibrate --boxes with one detector, are refused
    code = main(
        [
            "ensemble",
            "--model",
            str(noisy),
            "--model",
            str(demo_model_path),
            "--data",
            str(fixture_yaml),
            "--boxes",
            str(out),
            "--out",
            str(tmp_path / "x"),
            "-q",
        ]
    )
    assert code == 2 and "other members" in capsys.readouterr().err
    # the same members at another input size: refused, not run at the recorded one
    members = ["--model", str(demo_model_path), "--model", str(noisy)]
    code = main(
        ["ensemble", *members, "--data", str(fixture_yaml), "--boxes", str(out), "--imgsz", "640"]
        + ["--out", str(tmp_path / "z"), "-q"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "captured with `--imgsz` 320, not 640" in err, err
    code = main(
        [
            "calibrate",
            "--model",
            str(demo_model_path),
            "--data",
            str(fixture_yaml),
            "--boxes",
            str(out),
            "--out",
            str(tmp_path / "y"),
            "-q",
        ]
    )
    assert code == 2 and "another model" in capsys.readouterr().err


def test_auto_fusion_chosen_on_the_fit_folds(
    run, demo_model_path, noisy, fixture_yaml, tmp_path, monkeypatch
):
    """The default (``auto``) chooses the fusion per head on the fit split's folds: every cell is a
    scored candidate, one is chosen and recorded, and the run's boxes are those of the chosen
    fusion given outright; the deployment API fuses as the run chose."""
    from det_calib.ensemble import ensemble_job
    from det_calib.ensemble.ensemble_job import FusionSettings
    from det_calib.record.run_result import RunResult

    made = []  # every cell the run fuses (the real function, its cells kept to read their timings)
    real_cell = ensemble_job._fusion_cell
    monkeypatch.setattr(
        ensemble_job, "_fusion_cell", lambda *a, **k: made.append(real_cell(*a, **k)) or made[-1]
    )

    assert (FusionSettings().fusion_order, FusionSettings().fusion_score) == ("auto", "auto")
    base = [
        "ensemble",
        "--model",
        str(demo_model_path),
        "--model",
        str(noisy),
        "--data",
        str(fixture_yaml),
        "--head",
        "nms",
        "--n-boot",
        "50",
        "--boxes",
        str(run.out_dir),
        "--no-report",
        "-q",
    ]
    assert main([*base, "--out", str(tmp_path / "auto")]) == 0
    rec = RunResult.read(tmp_path / "auto" / "calibration.json").sections["ensemble"]
    assert (rec.fusion.order, rec.fusion.score) == ("auto", "auto")
    eh = rec.heads["nms"]
    chosen = [r for r in eh.table if r.chosen]
    assert len(chosen) == 1 and (chosen[0].order, chosen[0].score) == (
        eh.order,
        eh.score,
    ) == rec.fusion_of("nms")
    assert all(r.verdict and r.fit_map50_95 is not None for r in eh.table)
    assert (
        eh.ensemble.method == chosen[0].method
    )  # the chosen cell's calibrator is the one deployed
    # ... so its row's kept set at the lowest conf is the deployed one, with the run's own interval
    # (every eval image drawn, the kept boxes of those drawn)
    deployed = min(eh.ensemble.operating_after, key=lambda o: o.conf)
    assert chosen[0].kept_calibrated == deployed.boxes
    assert chosen[0].kept_ece_calibrated == pytest.approx(deployed.ece, rel=1e-12)
    assert chosen[0].kept_ece_calibrated_ci == pytest.approx(deployed.ece_ci, rel=1e-9)
    # the cost is the chosen cell's fusion (both splits), not another cell's
    cell = next(c for c in made if c.key == (eh.order, eh.score))
    hr = RunResult.read(tmp_path / "auto" / "calibration.json").results["nms"]
    n_img = hr.fit.images + hr.eval.images
    from det_calib.ensemble.fusion import SCORE_RULES

    n_cells = 2 * len(SCORE_RULES)
    assert (
        len(made) == n_cells and len({c.seconds for c in made}) == n_cells
    )  # each cell fused once, its own timing
    assert rec.seconds_per_image["fusion"] * n_img == pytest.approx(cell.seconds, rel=1e-9)
    scored = [r for r in eh.table if r.cv_kept_ece is not None]
    assert chosen[0].cv_kept_ece is not None and len(scored) >= 2
    eligible = [r for r in scored if r.fit_map50_95 >= max(x.fit_map50_95 for x in scored) - 0.01]
    from det_calib.ensemble.fusion_choice import Z_SIMPLER

    behind = chosen[0].cv_kept_ece - min(
        r.cv_kept_ece for r in eligible
    )  # the best, or as good and simpler
    assert chosen[0] in eligible and behind <= Z_SIMPLER * (chosen[0].cv_diff_se or 0) + 1e-12
    summary = (tmp_path / "auto" / "summary.txt").read_text()
    assert "chosen on the fit split's folds" in summary and "<- chosen" in summary
    # the chosen fusion given outright gives the same boxes
    assert (
        main(
            [
                *base,
                "--fusion-order",
                eh.order,
                "--fusion-score",
                eh.score,
                "--no-fusion-table",
                "--out",
                str(tmp_path / "fixed"),
            ]
        )
        == 0
    )
    a, b = (pl.read_parquet(d / "boxes.parquet") for d in (tmp_path / "auto", tmp_path / "fixed"))
    assert a.equals(b)
    _assert_deployment_equals_run(tmp_path / "auto", fixture_yaml)


def test_deployment_api_equals_the_runs_boxes(run, fixture_yaml):
    """load_ensemble(...).predict on the run's own eval images gives the run's fused, calibrated
    boxes: JSON exactly, Ultralytics Results in float32 (calibrate-then-fuse: in the reuse test)."""
    _assert_deployment_equals_run(run.out_dir, fixture_yaml)


def _assert_deployment_equals_run(out: Path, fixture_yaml: Path) -> None:
    from det_calib.ensemble import load_ensemble
    from det_calib.record.run_result import RunResult

    ens = load_ensemble(out)
    b = pl.read_parquet(out / "boxes.parquet")
    ev = b.filter(pl.col("split") == RunResult.read(out / "calibration.json").settings.eval_split)
    root = fixture_yaml.parent / "images" / "fixture"
    names = sorted(ev["image"].unique().to_list())
    docs = ens.predict_json([root / n for n in names], conf=0.0)
    results = ens.predict([root / n for n in names], conf=0.25)
    for name, doc, res in zip(names, docs, results, strict=True):
        want = ev.filter(pl.col("image") == name).sort(
            ["calibrated", "cls", "x1"], descending=[True, False, False]
        )
        got = sorted(doc["boxes"], key=lambda x: (-x["conf"], x["cls"], x["xyxy"][0]))
        assert len(got) == want.height
        np.testing.assert_array_equal([x["conf"] for x in got], want["calibrated"].to_numpy())
        np.testing.assert_array_equal(
            [x["xyxy"] for x in got], want.select("x1", "y1", "x2", "y2").to_numpy()
        )
        assert [x["cls"] for x in got] == want["cls"].to_list()
        kept = want.filter(pl.col("calibrated") > 0.25)
        assert len(res.boxes) == kept.height
        np.testing.assert_allclose(
            np.sort(res.boxes.conf.numpy()), np.sort(kept["calibrated"].to_numpy()), rtol=1e-6
        )
        assert res.names[0] == "circle"


def test_check_on_an_ensemble_run_fuses_the_new_images_as_the_run_did(
    run, fixture_yaml, tmp_path, capsys, caplog
):
    """``check`` on an ensemble run opens its members and fuses the new images with the run's
    settings: on the run's own eval images (half the fixture) its boxes are the run's (fused score,
    calibrated conf, members present, labels), and the members' names stand for the model; the
    run's eval half is read back for the recall test; ``--model`` and ``--boxes`` are refused in
    one line."""
    from det_calib.check import check_run
    from det_calib.cli import main

    res, out = check_run(
        run.out_dir,
        data=fixture_yaml,
        split="fixture",
        out=tmp_path / "chk",
        n_boot=20,
        n_perm=19,
        progress=False,
    )
    assert res.model == run.result.model and res.model.startswith("ensemble of 2")
    ev = run.boxes.filter(pl.col("split") == run.result.settings.eval_split).sort(
        ["image", "calibrated", "cls", "x1"]
    )
    mine = (
        pl.read_parquet(out / "boxes.parquet")
        .filter(pl.col("image").is_in(ev["image"].unique().to_list()))
        .sort(["image", "calibrated", "cls", "x1"])
    )
    assert mine.height == ev.height > 0 and res.labelled["nms"].detection.images == 12
    assert "cannot be read back" not in caplog.text
    assert res.labelled["nms"].detection.n_gt_then == run.result.head("nms").eval.n_gt
    for c in ("conf", "logit", "calibrated", "x1", "y2"):
        np.testing.assert_allclose(mine[c].to_numpy(), ev[c].to_numpy(), rtol=0, atol=1e-9)
    assert mine["members"].to_list() == ev["members"].to_list()
    assert mine["correct"].to_list() == ev["correct"].to_list()
    for extra, words in (
        (["--model", str(run.result.sections["ensemble"].members[0].path)], "cannot replace them"),
        (["--boxes", str(run.out_dir)], "reuse is not supported"),
    ):
        code = main(
            [
                "check",
                str(run.out_dir),
                "--data",
                str(fixture_yaml),
                "--split",
                "fixture",
                "--out",
                str(tmp_path / "x"),
                "-q",
                *extra,
            ]
        )
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and words in err, err


def test_mixed_architecture_members_capture(demo_model_path, legacy, fixture_images):
    """A YOLOv8 (NMS head only) beside the YOLO26: `auto` fuses the head both have, each member
    runs it; a YOLO26 restricted to its one-to-one head joins the YOLOv8 in one fused head."""
    from det_calib.ensemble.members import _open_torch_member as open_torch_member
    from det_calib.ensemble.members import capture_members, member_heads

    specs = [MemberSpec(demo_model_path, head="e2e"), MemberSpec(legacy)]
    plan = head_plan(specs, [member_heads(s) for s in specs], "auto")
    assert plan == {"nms": ["e2e", "nms"]}
    kw = dict(conf=0.001, iou=0.7, max_det=300, imgsz=None, device="cpu", workers=1)
    members = [open_torch_member(s, [plan["nms"][i]], **kw) for i, s in enumerate(specs)]
    tabs = capture_members(
        members,
        [str(p) for p in fixture_images[:2]],
        [["e2e"], ["nms"]],
        split="s",
        image_names=["a", "b"],
        progress=False,
    )
    assert tabs[0]["head"].unique().to_list() == ["e2e"] and tabs[1]["head"].unique().to_list() == [
        "nms"
    ]


def test_demo_switches_to_seed_members_when_shipped(demo_model_path, noisy, tmp_path, monkeypatch):
    """With seed members beside the shipped model (DET_CALIB_DEMO_DIR: a folder of demo files), the
    no-argument ensemble uses them instead of the test-time views, and says so."""
    from det_calib.ensemble.members import demo_members

    shapes = tmp_path / "demo"
    shapes.mkdir()
    (shapes / demo_model_path.name).symlink_to(demo_model_path)
    for k in (1, 2):
        (shapes / f"yolo26n_shapes_seed{k}.pt").symlink_to(noisy)
    monkeypatch.setenv("DET_CALIB_DEMO_DIR", str(shapes))
    specs, source = demo_members()
    assert [m.path.name for m in specs] == [
        "yolo26n_shapes.pt",
        "yolo26n_shapes_seed1.pt",
        "yolo26n_shapes_seed2.pt",
    ]
    assert {m.kind for m in specs} == {"checkpoint"} and "2 seed member(s)" in source


def test_demo_members_say_what_they_are():
    from det_calib.ensemble.members import _DEMO_VIEWS as DEMO_VIEWS
    from det_calib.ensemble.members import demo_members

    specs, source = demo_members()
    seeds = sorted(specs[0].path.parent.glob("yolo26n_shapes_seed*.pt"))
    if seeds:
        assert len(specs) == 1 + len(seeds) and "seed member" in source
    else:
        assert [m.view for m in specs] == list(DEMO_VIEWS) and "test-time views" in source


# ----------------------------------------------------------------------------- classifier form
def test_classifier_form_known_answer():
    """Members that are all softmax(2 z) of labels drawn from softmax(z): the average is
    softmax(2 z), and one temperature by NLL undoes the factor 2 (T ~ 2); the ECE grid lands near it."""
    from det_calib.ensemble import ensemble_temperature

    rng = np.random.default_rng(0)
    n, k = 20000, 5
    z = rng.normal(0, 1.5, (n, k))
    p_true = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p_true, 1)).sum(1)
    sharp = np.exp(2 * z) / np.exp(2 * z).sum(1, keepdims=True)
    res = ensemble_temperature([sharp, sharp, sharp], y)
    assert abs(res.temperature - 2.0) < 0.1
    assert res.nll_after < res.nll_before and res.ece_after < res.ece_before
    np.testing.assert_allclose(res.probs, p_true, atol=0.03)
    by_ece = ensemble_temperature([sharp, sharp], y, by="ece")
    assert abs(by_ece.temperature - 2.0) < 0.25
    # averaging is the members' mean, exactly
    a = np.array([[0.9, 0.1], [0.2, 0.8]])
    b = np.array([[0.5, 0.5], [0.6, 0.4]])
    np.testing.assert_allclose(
        ensemble_temperature([a, b], np.array([0, 1]), by="ece", grid=(1.0,)).mean_probs,
        [[0.7, 0.3], [0.4, 0.6]],
    )
    with pytest.raises(InputError, match="probability distribution"):
        ensemble_temperature([a * 2, b], np.array([0, 1]))
