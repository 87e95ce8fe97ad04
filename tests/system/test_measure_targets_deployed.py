"""benchmarks/measure_targets_deployed.py's scoring of plain-predict rows (kept-set LaECE_0 and ECE) on
boxes built here with known answers, and against the figures det_calib's own operating points give."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

pytestmark = pytest.mark.fast

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "measure_targets_deployed.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("measure_targets_deployed", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up
    spec.loader.exec_module(mod)
    return mod


GT = pl.DataFrame({"image_id": [0, 0, 1], "cls": [0, 1, 0], "x1": [0.0, 50.0, 10.0], "y1": [0.0, 50.0, 10.0],
                   "x2": [10.0, 70.0, 30.0], "y2": [10.0, 70.0, 30.0], "crowd": [False, False, False]})


def test_known_answer(bench):
    """Class 0: a box on its ground truth at 0.9 (IoU 1), one shifted to IoU 1/3 (0 at 0.5) at 0.6, a duplicate
    at 0.3 (no ground truth left); class 1: a box at IoU 0.5 at 0.7. One bin each (25 bins). Below 0.25: not kept."""
    rows = [[0, 0, 0, 10, 10, 0.9, 0], [1, 20, 10, 40, 30, 0.6, 0], [0, 0, 0, 10, 10, 0.3, 0],
            [0, 50, 50, 70, 60, 0.7, 1], [1, 10, 10, 30, 30, 0.2, 0]]
    n, la, e = bench.kept_figures(rows, GT)
    assert n == 4
    iou_shift = (10 * 20) / (20 * 20 + 20 * 20 - 10 * 20)  # 1/3
    class0 = (abs(0.9 - 1.0) + abs(0.6 - iou_shift) + abs(0.3 - 0.0)) / 3
    class1 = abs(0.7 - 0.5)
    assert la == pytest.approx((class0 + class1) / 2, abs=1e-12)
    # ECE at IoU 0.5, 15 bins: correct are the 0.9 box and the class-1 box (IoU exactly 0.5)
    assert e == pytest.approx((abs(0.9 - 1) + abs(0.6 - 0) + abs(0.3 - 0) + abs(0.7 - 1)) / 4, abs=1e-12)


def test_verdict(bench):
    case = bench.Case("full", "nms", "platt", 10, (5, 0.2, 0.1), (5, 0.15, 0.1), (5, 0.2, 0.1), (5, 0.15, 0.1))
    assert case.ratio == pytest.approx(0.75)
    worse = bench.Case("full", "e2e", "spline", 10, (5, 0.1, 0.1), (5, 0.11, 0.1), (5, 0.1, 0.1), (5, 0.11, 0.1))
    assert bench.verdict([case])[2] and not bench.verdict([case, worse])[2]
    assert "NOT met" in bench.table([case, worse])
    assert np.isclose(bench.verdict([case, worse])[0], (0.75 + 1.1) / 2)
