"""mAP verification: pycocotools parity, invariance under a shared temperature, Ultralytics val."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import polars as pl
import pytest

from det_calib.calibrators.temperature import equivalent_threshold
from det_calib.capture.predictor import capture
from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.deploy.fold import write_calibrated_checkpoint
from det_calib.evaluation.map_check import coco_map, same_ranking, ultralytics_val


@pytest.fixture(scope="module")
def fixture_capture(demo_model_path, fixture_yaml):
    sp = load_split(load_data_yaml(fixture_yaml), "fixture")
    boxes = capture(str(demo_model_path), sp.images, head="nms", imgsz=320, progress=False)
    return sp, boxes


def test_coco_map_equals_cocoeval_summarize(tmp_path, fixture_capture):
    """With maxDets=100, our mAP equals pycocotools' own summarize() on json files."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    sp, boxes = fixture_capture
    ours = coco_map(boxes, sp.gt, sp.sizes, max_dets=100)
    images = [{"id": i, "width": int(w), "height": int(h)} for i, (w, h) in enumerate(sp.sizes)]
    anns = [
        {
            "id": k + 1,
            "image_id": r["image_id"],
            "category_id": r["cls"],
            "iscrowd": 0,
            "bbox": [r["x1"], r["y1"], r["x2"] - r["x1"], r["y2"] - r["y1"]],
            "area": (r["x2"] - r["x1"]) * (r["y2"] - r["y1"]),
        }
        for k, r in enumerate(sp.gt.iter_rows(named=True))
    ]
    (tmp_path / "gt.json").write_text(
        json.dumps(
            {
                "images": images,
                "annotations": anns,
                "categories": [{"id": c, "name": str(c)} for c in range(8)],
            }
        )
    )
    dets = [
        {
            "image_id": r["image_id"],
            "category_id": r["cls"],
            "score": r["conf"],
            "bbox": [r["x1"], r["y1"], r["x2"] - r["x1"], r["y2"] - r["y1"]],
        }
        for r in boxes.iter_rows(named=True)
    ]
    (tmp_path / "dt.json").write_text(json.dumps(dets))
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(tmp_path / "gt.json"))
        ev = COCOeval(gt, gt.loadRes(str(tmp_path / "dt.json")), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    assert ours["map50_95"] == pytest.approx(ev.stats[0], abs=1e-12)
    assert ours["map50"] == pytest.approx(ev.stats[1], abs=1e-12)
    assert ours["map75"] == pytest.approx(ev.stats[2], abs=1e-12)


@pytest.mark.parametrize("t", [0.4, 1.0, 2.7])
def test_shared_temperature_leaves_coco_map_identical(fixture_capture, t):
    sp, boxes = fixture_capture
    z = boxes["logit"].to_numpy()
    raw = coco_map(boxes, sp.gt, sp.sizes)
    cal = coco_map(boxes, sp.gt, sp.sizes, 1 / (1 + np.exp(-z / t)))
    assert raw == cal
    # a non-monotone rescoring does change it: the check can fail
    rng = np.random.default_rng(0)
    assert coco_map(boxes, sp.gt, sp.sizes, rng.permutation(boxes["conf"].to_numpy())) != raw


def test_ultralytics_val_original_vs_calibrated(tmp_path, demo_model_path, fixture_yaml):
    t = 0.7
    cal = write_calibrated_checkpoint(demo_model_path, tmp_path / "cal.pt", {"nms": t})
    r0 = ultralytics_val(demo_model_path, fixture_yaml, split="val", imgsz=320)
    r2 = ultralytics_val(
        cal, fixture_yaml, split="val", imgsz=320, conf=equivalent_threshold(0.001, t)
    )
    assert r0["map50"] > 0
    assert r2["map50_95"] == pytest.approx(r0["map50_95"], abs=1e-6)
    assert r2["map50"] == pytest.approx(r0["map50"], abs=1e-6)
    assert not list(tmp_path.glob("runs")) and not (fixture_yaml.parent / "runs").exists()


def test_empty_detections_give_zero_map(fixture_capture):
    sp, boxes = fixture_capture
    assert coco_map(boxes.clear(), sp.gt, sp.sizes)["map50"] == 0.0
    assert isinstance(boxes, pl.DataFrame)


@pytest.mark.fast
def test_same_ranking_is_the_weak_order():
    import numpy as np

    from det_calib.numeric import sigmoid

    rng = np.random.default_rng(0)
    z = np.round(rng.normal(size=2000), 2)  # many exact ties
    assert same_ranking(sigmoid(z), sigmoid(z / 1.3))  # a shared temperature keeps the weak order
    swapped = sigmoid(z).copy()
    i, j = np.argmax(swapped), np.argmin(swapped)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    assert not same_ranking(sigmoid(z), swapped)
    broken_tie = sigmoid(z).copy()
    k = np.flatnonzero(z == z[0])[1]
    broken_tie[k] = np.nextafter(broken_tie[k], 1.0)  # a tie under one scoring, not the other
    assert not same_ranking(sigmoid(z), broken_tie)


def test_one_evaluation_equals_two_when_the_ranking_is_the_same(demo_model_path, fixture_yaml):
    """The shortcut of the pipeline's mAP check gives what evaluating both scorings gives."""
    import numpy as np

    from det_calib.capture.predictor import capture
    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.evaluation.map_check import coco_maps
    from det_calib.numeric import sigmoid

    sp = load_split(load_data_yaml(fixture_yaml), "fixture")
    b = capture(demo_model_path, sp.images, head="nms", progress=False)
    z = b["logit"].to_numpy()
    raw, cal = sigmoid(z), sigmoid(z / 0.7)
    assert same_ranking(raw, cal)
    m0, m1 = coco_maps(b, sp.gt, sp.sizes, [raw, cal])
    assert m0 == m1 and np.isfinite(m0["map50_95"])


# ------------------------------------------------------------------ one val pass, both models
@pytest.fixture(scope="module")
def stock_original_val(demo_model_path, fixture_yaml):
    """Plain Ultralytics val of the original demo detector, per head, at val's floor."""
    return {
        h: ultralytics_val(demo_model_path, fixture_yaml, split="val", head=h, imgsz=320)
        for h in ("nms", "e2e")
    }


def _folded(kind, demo_model_path, tmp_path):
    """A calibrated checkpoint and, per head, the conf its val runs at in the pipeline."""
    from det_calib.calibrators.registry import make_calibrator
    from det_calib.deploy.fold import _write_folded_checkpoint as write_folded_checkpoint

    if kind == "temperature":
        ts = {"nms": 0.7, "e2e": 1.4}
        ckpt = write_calibrated_checkpoint(demo_model_path, tmp_path / "t.pt", ts)
        return ckpt, {h: equivalent_threshold(0.001, t) for h, t in ts.items()}
    rng = np.random.default_rng(0)
    z, k = rng.normal(-2.0, 3.0, 20_000), rng.integers(0, 8, 20_000)
    y = rng.random(z.size) < 1 / (
        1 + np.exp(-(np.linspace(0.7, 1.6, 8)[k] * z + np.linspace(-0.8, 0.6, 8)[k]))
    )
    cal = make_calibrator("class-isotonic").fit(z, y, classes=k)  # hinge layers appended, per class
    ckpt = write_folded_checkpoint(demo_model_path, tmp_path / "ci.pt", {"nms": cal, "e2e": cal})
    # nms: the pipeline's per-class check (both at val's floor); e2e: the calibrated side at a higher
    # floor, so that its figures differ from the original's and the test tells the two sides apart
    return ckpt, {"nms": 0.001, "e2e": 0.25}


@pytest.mark.parametrize("kind", ["temperature", "class-isotonic"])
def test_shared_val_pass_equals_two_stock_vals(
    tmp_path, demo_model_path, fixture_yaml, stock_original_val, kind
):
    """The original's figures from the calibrated checkpoint's val pass are exactly those of a
    separate stock val of the original; the calibrated side is exactly a stock val of it."""
    from det_calib.evaluation.map_check import _ultralytics_val_shared as ultralytics_val_shared

    ckpt, confs = _folded(kind, demo_model_path, tmp_path)
    for head, conf in confs.items():
        o, c = ultralytics_val_shared(
            demo_model_path, ckpt, fixture_yaml, split="val", head=head, conf=conf, imgsz=320
        )
        assert (
            o == stock_original_val[head]
        )  # exact: same features, same fused head weights, same code
        assert o["map50_95"] > 0.2
        assert c == ultralytics_val(
            ckpt, fixture_yaml, split="val", head=head, conf=conf, imgsz=320
        )
        if conf > 0.1:
            assert c["map50_95"] < o["map50_95"] - 0.01


@pytest.mark.parametrize("kind", ["temperature", "class-isotonic"])
@pytest.mark.parametrize("order", [("nms", "e2e"), ("e2e", "nms")])
def test_one_val_pass_for_both_heads_equals_a_pass_per_head(
    tmp_path, demo_model_path, fixture_yaml, stock_original_val, kind, order
):
    """Both heads of the calibrated checkpoint and of the original from one Ultralytics val pass
    (the second head decoded from the first one's features) give exactly the figures of one shared
    pass per head, and of separate stock vals; whichever head runs the stock pass."""
    from det_calib.evaluation.map_check import _ultralytics_val_shared as ultralytics_val_shared
    from det_calib.evaluation.map_check import ultralytics_val_heads

    ckpt, confs = _folded(kind, demo_model_path, tmp_path)
    both = ultralytics_val_heads(
        demo_model_path,
        ckpt,
        fixture_yaml,
        split="val",
        imgsz=320,
        confs={h: (0.001, confs[h]) for h in order},
    )
    assert list(both) == list(order)
    for head in order:
        o, c = both[head]
        assert (o, c) == ultralytics_val_shared(
            demo_model_path, ckpt, fixture_yaml, split="val", head=head, conf=confs[head], imgsz=320
        )
        assert o == stock_original_val[head]
        assert c == ultralytics_val(
            ckpt, fixture_yaml, split="val", head=head, conf=confs[head], imgsz=320
        )
    # the two heads score differently: the pass did not give one head's figures twice
    assert both["nms"][0] != both["e2e"][0] and both["nms"][1] != both["e2e"][1]


@pytest.mark.parametrize("kind", ["temperature", "class-isotonic"])
@pytest.mark.parametrize("head", ["nms", "e2e"])
def test_original_head_reads_the_calibrated_heads_shared_layers_bit_for_bit(
    tmp_path, demo_model_path, kind, head
):
    """The original's head, reading the layers it shares with the calibrated head from the latter's run on
    the same features, returns exactly what it returns computing them itself; it shares the box branch
    and the class branch's layers before the fold (all of them for appended hinge layers)."""
    import copy

    import torch
    from ultralytics import YOLO

    from det_calib.evaluation.val_riders import _share_unchanged_layers as share_unchanged_layers

    ckpt, _ = _folded(kind, demo_model_path, tmp_path)

    def fused(path):
        net = YOLO(str(path)).model.float().eval()
        net.model[-1].end2end = head == "e2e"
        return net.fuse(verbose=False)

    cal, orig = fused(ckpt), fused(demo_model_path)
    alone = copy.deepcopy(orig.model[-1])
    shared = share_unchanged_layers(cal.model[-1], orig.model[-1])
    levels = len(alone.cv2 if head == "nms" else alone.one2one_cv2)
    cls_layers = len((alone.cv3 if head == "nms" else alone.one2one_cv3)[0])
    # box branch of every level, the class branch up to its last conv (temperature) or all of it (hinges)
    assert shared == levels * (1 + (cls_layers - 1 if kind == "temperature" else cls_layers))
    feats = {}
    cal.model[-1].register_forward_pre_hook(
        lambda module, args: feats.__setitem__("x", list(args[0]))
    )
    with torch.inference_mode():
        for shape in ((2, 3, 320, 320), (1, 3, 256, 320)):
            cal(torch.rand(shape))
            got, want = orig.model[-1](list(feats["x"])), alone(list(feats["x"]))
            assert torch.equal(got[0], want[0])  # decoded boxes and scores
            raw_got, raw_want = (y[1]["one2one"] if head == "e2e" else y[1] for y in (got, want))
            assert all(
                torch.equal(raw_got[k], raw_want[k]) for k in ("boxes", "scores")
            )  # pre-sigmoid scores
        with pytest.raises(
            RuntimeError, match="another input"
        ):  # the calibrated head did not run on these
            orig.model[-1]([torch.rand_like(x) for x in feats["x"]])


def test_heads_in_other_modes_share_nothing(demo_model_path):
    from ultralytics import YOLO

    from det_calib.evaluation.val_riders import _share_unchanged_layers as share_unchanged_layers

    nets = []
    for e2e in (False, True):
        net = YOLO(str(demo_model_path)).model.float().eval()
        net.model[-1].end2end = e2e
        nets.append(net.fuse(verbose=False))
    assert share_unchanged_layers(nets[0].model[-1], nets[1].model[-1]) == 0


def test_shared_val_pass_on_a_legacy_head(tmp_path, fixture_yaml, make_untrained):
    """A YOLOv8 head (one branch, no one-to-one head) gives the same equality."""
    from det_calib.evaluation.map_check import _ultralytics_val_shared as ultralytics_val_shared

    src = tmp_path / "v8.pt"
    make_untrained("yolov8n.yaml", bias_mean=0.0).save(src)
    ckpt = write_calibrated_checkpoint(src, tmp_path / "v8_cal.pt", {"nms": 2.0})
    conf = equivalent_threshold(0.001, 2.0)
    o, c = ultralytics_val_shared(
        src, ckpt, fixture_yaml, split="val", head="nms", conf=conf, imgsz=320, batch=4
    )
    assert o == ultralytics_val(src, fixture_yaml, split="val", head="nms", imgsz=320, batch=4)
    assert c == ultralytics_val(
        ckpt, fixture_yaml, split="val", head="nms", conf=conf, imgsz=320, batch=4
    )
    # at a floor the calibrated candidates are not the original's: the shared pass tells them apart
    o2, c2 = ultralytics_val_shared(
        src, ckpt, fixture_yaml, split="val", head="nms", conf=0.5, imgsz=320, batch=4
    )
    assert o2 == o and c2 != o
    assert c2 == ultralytics_val(
        ckpt, fixture_yaml, split="val", head="nms", conf=0.5, imgsz=320, batch=4
    )


def test_shared_val_pass_refuses_another_model(
    tmp_path, demo_model_path, fixture_yaml, make_untrained
):
    from det_calib.errors import InputError
    from det_calib.evaluation.map_check import _ultralytics_val_shared as ultralytics_val_shared

    other = tmp_path / "other.pt"
    make_untrained("yolo26n.yaml").save(other)
    with pytest.raises(InputError, match="layers before the Detect head differ"):
        ultralytics_val_shared(demo_model_path, other, fixture_yaml, split="val", imgsz=320)


# ------------------------------------------------------------------ the NMS time budget
def test_val_postprocess_is_stock_postprocess(demo_model_path, fixture_yaml):
    """The val's postprocess (no NMS time budget) returns exactly the stock postprocess's tensors,
    batch by batch, in a real val pass of both heads."""
    import functools

    import torch
    from ultralytics import YOLO
    from ultralytics.models.yolo.detect import DetectionValidator

    from det_calib.evaluation.map_check import _budget_validator_class, _run_val, _val_kwargs

    compared = []

    class BothPostprocesses(_budget_validator_class()):
        def postprocess(self, preds):
            ours, stock = super().postprocess(preds), DetectionValidator.postprocess(self, preds)
            compared.append(
                len(ours) == len(stock)
                and all(
                    a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
                    for a, b in zip(ours, stock)
                )
            )
            return ours

    for head in ("nms", "e2e"):
        yolo = YOLO(str(demo_model_path))
        kw = _val_kwargs(
            yolo, fixture_yaml, split="val", head=head, conf=0.001, imgsz=320, batch=4, device=None
        )
        _run_val(yolo, kw, validator=functools.partial(BothPostprocesses))
    assert len(compared) == 6 and all(compared)  # 12 images in batches of 4, two heads


def test_val_that_runs_out_of_nms_time_is_not_scored(
    tmp_path, demo_model_path, fixture_yaml, stock_original_val
):
    """With a budget that binds (zero seconds: Ultralytics' NMS stops after the first image of each
    batch), the mAP Ultralytics would report is far lower, an artefact of the clock; det_calib's
    vals raise ValIncomplete instead of returning it."""
    import functools

    from ultralytics import YOLO

    from det_calib.evaluation.map_check import (
        ValIncomplete,
        _budget_validator_class,
        _val_kwargs,
    )
    from det_calib.evaluation.map_check import (
        _ultralytics_val_shared as ultralytics_val_shared,
    )

    yolo = YOLO(str(demo_model_path))
    kw = _val_kwargs(
        yolo, fixture_yaml, split="val", head="nms", conf=0.001, imgsz=320, batch=4, device=None
    )
    clocked = yolo.val(
        project=str(tmp_path),
        name="val",
        **kw,  # what Ultralytics itself reports from such a pass
        validator=functools.partial(_budget_validator_class(), nms_time_limit=0.0),
    )
    assert clocked.box.map < stock_original_val["nms"]["map50_95"] - 0.1
    with pytest.raises(ValIncomplete, match=r"NMS time limit -?0\.000s exceeded, 3 times\)"):
        ultralytics_val(
            demo_model_path, fixture_yaml, split="val", imgsz=320, batch=4, nms_time_limit=0.0
        )
    ckpt = write_calibrated_checkpoint(demo_model_path, tmp_path / "t.pt", {"nms": 0.7})
    with pytest.raises(ValIncomplete, match="the pass's mAP is not reported"):
        ultralytics_val_shared(
            demo_model_path,
            ckpt,
            fixture_yaml,
            split="val",
            imgsz=320,
            conf=equivalent_threshold(0.001, 0.7),
            nms_time_limit=0.0,
        )
    # the NMS-free head has no time limit to reach
    assert (
        ultralytics_val(
            demo_model_path, fixture_yaml, split="val", head="e2e", imgsz=320, nms_time_limit=0.0
        )
        == stock_original_val["e2e"]
    )
