"""benchmarks/gpu_check.py, the checks a CUDA machine runs (docs/gpu.md), tested where they can be: its
comparison of the capture with ``predict`` on the CPU (where both are known to agree bit for bit), and the
table it writes from a run's json, on planted results with known lines (exact, not exact, failed, not run)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def gpu_check(load_benchmark):
    return load_benchmark("gpu_check")


def test_capture_comparison_on_the_cpu_finds_the_capture_exact(gpu_check, fixture_images):
    """The script's own comparison, run on the CPU: every box of both heads bit-identical to predict's."""
    r = gpu_check.capture_equals_predict(fixture_images[:2], "cpu")
    assert r["device_name"] == "cpu"
    for head in ("nms", "e2e"):
        fig = r[head]
        assert fig["boxes"] == fig["predict_boxes"] > 20 and fig["same_boxes_per_image"]
        assert fig["xyxy_exact"] and fig["conf_exact"] and fig["cls_exact"]
        assert fig["xyxy_max_diff"] == fig["conf_max_diff"] == 0.0
        assert fig["sigmoid_logit_vs_conf"] < 1e-6


SUMMARY = [
    "[nms] boxes kept at conf 0.25 (1375 raw -> 1260 calibrated): ECE(15 bins, IoU 0.5) 0.0644 "
    "[0.0472, 0.0748] -> "
    "0.0560 [0.0332, 0.0908]; LaECE_0(25 bins) 0.1400 [0.1133, 0.1667] -> 0.1529 [0.1244, 0.1813]",
    "[nms] COCO mAP50-95 0.4632 -> 0.4632, mAP50 0.5714 -> 0.5714 (identical; the detector's boxes "
    "rescored)",
]


def test_the_table_says_what_each_check_found(gpu_check):
    head = {
        "boxes": 10,
        "predict_boxes": 10,
        "same_boxes_per_image": True,
        "xyxy_exact": True,
        "conf_exact": True,
        "cls_exact": True,
        "xyxy_max_diff": 0.0,
        "conf_max_diff": 0.0,
    }
    results = {
        "environment": {"device": "GPU X", "python": "3.12.3"},
        "capture_equals_predict": {
            "images": 3,
            "nms": head,
            "e2e": {**head, "conf_exact": False, "conf_max_diff": 2.5e-05},
        },
        "batched_capture": {"error": "RuntimeError: out of memory"},
        "default_run": {
            "exit": 0,
            "wall": 20.0,
            "summary_tail": SUMMARY,
            "timings": {
                "stages": {
                    "capture": {"wall": 9.0},
                    "report": {"wall": 4.0},
                    "other": {"wall": 0.01},
                }
            },
        },
        "timings": {
            "plain_val_two_splits_wall": 2.5,
            "capture_test_batch1_wall": 3.8,
            "capture_test_batch16_wall": 1.2,
        },
    }
    body = gpu_check.doc_body(results)
    rows = dict(
        ln[2:-2].split(" | ", 1)
        for ln in body.splitlines()
        if ln.startswith("| ") and ln.endswith(" |")
    )
    assert body.startswith("On device GPU X, python 3.12.3:")
    capture = rows["capture = `predict`, demo detector, both heads"]
    assert "nms: 10 boxes on 3 test images, boxes, confs and classes bit-identical" in capture
    assert (
        "e2e: 10 boxes on 3 test images, boxes, confs and classes NOT identical (largest "
        "differences: box 0.0, "
        "conf 2.5e-05)" in capture
    )
    assert (
        rows["`--batch 16` against the exact batch-1 capture (nms head, same images)"]
        == "failed: RuntimeError: out of memory"
    )
    assert (
        rows[
            "the run's `calibrated.pt` through plain Ultralytics `predict` on the GPU, kept at 0.25"
        ]
        == "not run"
    )
    assert rows["`det-calib calibrate --device 0` (the README's first command)"] == (
        "exit 0; kept-set ECE at 0.25 nms: ECE 0.0644 → 0.0560 (1375 raw -> 1260 calibrated); COCO "
        "mAP nms identical"
    )
    wall = rows["wall time: `calibrate` against plain Ultralytics val of the two splits"]
    assert wall == "20.0 s against 2.5 s (8.0x); the run's stages (wall s): capture 9.0, report 4.0"
    assert (
        rows["capture of the 400-image test split, both heads"]
        == "3.8 s at batch 1 (exact), 1.2 s at `--batch 16`"
    )
