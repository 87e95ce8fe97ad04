"""benchmarks/measure_targets_deployed.py's scoring of plain-predict rows (kept-set LaECE_0 and ECE) on
boxes built here with known answers, and against the figures det_calib's own operating points give."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("measure_targets_deployed")


GT = pl.DataFrame(
    {
        "image_id": [0, 0, 1],
        "cls": [0, 1, 0],
        "x1": [0.0, 50.0, 10.0],
        "y1": [0.0, 50.0, 10.0],
        "x2": [10.0, 70.0, 30.0],
        "y2": [10.0, 70.0, 30.0],
        "crowd": [False, False, False],
    }
)


def test_known_answer(bench):
    """Class 0: a box on its ground truth at 0.9 (IoU 1), one shifted to IoU 1/3 (0 at 0.5) at 0.6, a duplicate
    at 0.3 (no ground truth left); class 1: a box at IoU 0.5 at 0.7. One bin each (25 bins). Below 0.25: not kept."""
    rows = [
        [0, 0, 0, 10, 10, 0.9, 0],
        [1, 20, 10, 40, 30, 0.6, 0],
        [0, 0, 0, 10, 10, 0.3, 0],
        [0, 50, 50, 70, 60, 0.7, 1],
        [1, 10, 10, 30, 30, 0.2, 0],
    ]
    n, la, e = bench.kept_figures(rows, GT)
    assert n == 4
    iou_shift = (10 * 20) / (20 * 20 + 20 * 20 - 10 * 20)  # 1/3
    class0 = (abs(0.9 - 1.0) + abs(0.6 - iou_shift) + abs(0.3 - 0.0)) / 3
    class1 = abs(0.7 - 0.5)
    assert la == pytest.approx((class0 + class1) / 2, abs=1e-12)
    # ECE at IoU 0.5, 15 bins: correct are the 0.9 box and the class-1 box (IoU exactly 0.5)
    assert e == pytest.approx(
        (abs(0.9 - 1) + abs(0.6 - 0) + abs(0.3 - 0) + abs(0.7 - 1)) / 4, abs=1e-12
    )


def test_verdict(bench):
    case = bench.Case(
        "full", "nms", "platt", 10, (5, 0.2, 0.1), (5, 0.15, 0.1), (5, 0.2, 0.1), (5, 0.15, 0.1)
    )
    assert case.ratio == pytest.approx(0.75)
    worse = bench.Case(
        "full", "e2e", "spline", 10, (5, 0.1, 0.1), (5, 0.11, 0.1), (5, 0.1, 0.1), (5, 0.11, 0.1)
    )
    assert bench.verdict([case])[2] and not bench.verdict([case, worse])[2]
    assert "NOT met" in bench.table([case, worse])
    assert np.isclose(bench.verdict([case, worse])[0], (0.75 + 1.1) / 2)


def test_kept_floor(bench):
    """400 images, each with one ground truth and one box at IoU 0.8 scored 0.5 (and one below 0.25, not kept):
    the floor of the kept set is that of targets 0.8 with probability 0.5 / 0.8, |0.5 - 0.8 Binomial(400, 5/8) / 400|
    (mean 0.0155); its LaECE_0 (every box matched, 0.3) is far above it."""
    n = 400
    gt = pl.DataFrame(
        {
            "image_id": np.arange(n),
            "cls": np.zeros(n, int),
            "x1": np.zeros(n),
            "y1": np.zeros(n),
            "x2": np.full(n, 10.0),
            "y2": np.full(n, 8.0),
            "crowd": np.zeros(n, bool),
        }
    )
    rows = [[i, 0, 0, 10, 10, 0.5, 0] for i in range(n)] + [
        [i, 50, 50, 60, 60, 0.2, 0] for i in range(n)
    ]
    kept, la, _ = bench.kept_figures(rows, gt)
    f = bench.kept_floor(rows, gt)
    assert kept == n and la == pytest.approx(0.3)
    assert 0.013 < f.mean < 0.018 and f.low < f.mean < f.high < 0.05
    assert bench.kept_floor([[0, 0, 0, 10, 10, 0.2, 0]], gt) is None  # nothing kept


def test_floor_verdicts_and_closing_line(bench):
    from det_calib.metrics.operating_point import ECEFloor

    floor = ECEFloor(0.09, 0.08, 0.11)
    # raw 0.139 above its floor, calibrated 0.105 within it; 0.8 x 0.139 = 0.111 is above the floor's low end
    a = bench.Case(
        "full",
        "nms",
        "isotonic",
        400,
        (1376, 0.139, 0.06),
        (1065, 0.105, 0.04),
        (1376, 0.139, 0.06),
        (1065, 0.105, 0.04),
        raw_floor=floor,
        calibrated_floor=floor,
        map50_95=(0.5, 0.5, None, None),
    )
    # raw 0.106 within its floor, calibrated 0.119 above; 0.8 x 0.106 = 0.0848 is below its mean, not its low end
    b = bench.Case(
        "full",
        "e2e",
        "spline",
        400,
        (1154, 0.106, 0.07),
        (1041, 0.119, 0.06),
        (1154, 0.106, 0.07),
        (1041, 0.119, 0.06),
        raw_floor=floor,
        calibrated_floor=floor,
        map50_95=(0.5, 0.51, 0.5, 0.49),
    )
    # 0.8 x 0.09 = 0.072 is below the low end
    c = bench.Case(
        "--limit 64",
        "e2e",
        "none",
        64,
        (196, 0.09, 0.1),
        (196, 0.09, 0.1),
        (196, 0.09, 0.1),
        (196, 0.09, 0.1),
        raw_floor=floor,
        calibrated_floor=floor,
    )
    assert (a.raw_at_floor, a.at_floor, a.goal_below_floor) == (False, True, False)
    assert (b.raw_at_floor, b.at_floor, b.goal_below_floor) == (True, False, False)
    assert c.goal_below_floor is True
    no_floor = bench.Case(
        "full", "nms", "none", 1, (1, 0.1, 0.1), (1, 0.1, 0.1), (1, 0.1, 0.1), (1, 0.1, 0.1)
    )
    assert no_floor.at_floor is None and no_floor.goal_below_floor is None
    line = bench.floor_line([a, b, c])
    assert (
        "the raw kept set is at its floor in 2 of 3 cases, the calibrated in 2 of 3; 0.8x raw is "
        "below the "
        "calibrated kept set's floor mean in 2 of 3 cases and below the low end"
    ) in line
    assert line.endswith("in 1 of 3.")
    text = bench.table([a, b, c])
    assert (
        "| 0.1390 | 0.0900 [0.0800, 0.1100] | 0.0600 |" in text
        and "| no, yes | unchanged |" in text
    )
    assert "| yes, no | 0.5000 → 0.5100; folded model 0.5000 → 0.4900 |" in text and text.endswith(
        line
    )
