"""The CODS recall rule that benchmarks/bench_conformal.py reimplements, against cods 0.2's own
``ConfidenceConformalizer`` on small planted inputs (the ``conformal`` extra: skipped where cods is not
installed)."""

from __future__ import annotations

import numpy as np
import pytest

from det_calib.thresholds.risk_control import image_counts

pytest.importorskip("cods")
pytest.importorskip("skopt")  # cods imports it without declaring it
pytest.importorskip("timm")  # likewise


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_conformal")


def _images(seed: int, m: int = 25) -> tuple[list[np.ndarray], np.ndarray]:
    """Per-image box confs (0-7 boxes) and object counts (1-3)."""
    rng = np.random.default_rng(seed)
    return [np.round(rng.uniform(0, 1, rng.integers(0, 8)), 4) for _ in range(m)], rng.integers(
        1, 4, m
    ).astype(float)


@pytest.mark.parametrize(("seed", "alpha"), [(0, 0.35), (1, 0.5), (2, 0.6)])
def test_reimplemented_rule_chooses_the_threshold_cods_chooses(bench, seed, alpha):
    by, gt = _images(seed)
    by[0] = np.r_[by[0], 0.5]  # cods reads the class count off the first image's first box
    thr = bench.cods_package_threshold(by, gt, alpha)
    # the reimplemented rule on a grid of every box conf (kept at grid[j]: conf >= the j-th box conf)
    conf = np.concatenate(by)
    grid = np.unique(conf) - 1e-7
    c = image_counts(
        conf,
        np.zeros(len(conf), bool),
        np.concatenate([np.full(len(b), i) for i, b in enumerate(by)]),
        gt,
        grid=grid,
    )
    j = bench.cods_rule(c, alpha)
    assert j >= 0 and grid[j] + 1e-7 == pytest.approx(thr, abs=1e-6)
    # the rule as its docstring states it: the corrected box-count miss rate at the threshold is within alpha,
    # and the next box conf up would break it
    kept = np.array([(b >= thr - 1e-6).sum() for b in by])  # cods's threshold is a float32 box conf
    assert (np.maximum(0, (gt - kept) / gt).sum() + 1) / (len(gt) + 1) <= alpha
    above = np.unique(conf[conf > thr + 1e-6])
    if above.size:
        kept2 = np.array([(b >= above[0]).sum() for b in by])
        assert (np.maximum(0, (gt - kept2) / gt).sum() + 1) / (len(gt) + 1) > alpha
