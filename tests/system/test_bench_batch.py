"""benchmarks/bench_batch.py, what ``--batch 16`` (the default capture on CUDA) changes: its pairing of the two
runs' boxes, its comparison of the summary figures against their intervals, and the table it writes, on planted
boxes and figures with known answers (the benchmark itself runs two calibrations: docs/speed.md)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_batch")


def _boxes(rows):
    a = np.asarray(rows, dtype=float)
    return {
        "key": a[:, 0].astype(int),
        "cls": a[:, 1].astype(int),
        "xyxy": a[:, 2:6],
        "conf": a[:, 6],
        "logit": a[:, 7],
    }


def test_boxes_pair_by_image_class_and_overlap(bench):
    """Same image, same class, IoU above 0.9, each box in one pair at most: a box moved by rounding pairs,
    a box of another class or image does not, and of two candidates the closer one wins."""
    one = _boxes(
        [
            [0, 1, 0, 0, 10, 10, 0.9, 2.2],
            [0, 2, 0, 0, 10, 10, 0.5, 0.0],
            [1, 1, 0, 0, 10, 10, 0.3, -0.8],
            [1, 1, 50, 50, 60, 60, 0.002, -6.2],
        ]
    )
    other = _boxes(
        [
            [0, 1, 0, 0, 10, 10.0001, 0.9, 2.2001],  # the first box, rounded otherwise
            [0, 3, 0, 0, 10, 10, 0.5, 0.0],  # same place, another class: not a pair
            [1, 1, 0.1, 0, 10, 10, 0.3, -0.8],
            [1, 1, 0, 0, 10, 10, 0.3, -0.8],  # the exact one wins
            [1, 1, 55, 55, 65, 65, 0.002, -6.2],
        ]
    )  # IoU 0.14 with its neighbour: another box
    i, j = bench.pair_boxes(one, other)
    assert sorted(zip(i.tolist(), j.tolist(), strict=True)) == [(0, 0), (2, 3)]


def _fig(name, value, half=None, se=None, kind="num"):
    return {"name": name, "value": value, "half": half, "se": se, "kind": kind}


def test_figures_change_against_their_intervals(bench):
    one = {
        "nms": [
            _fig("kept boxes", 100, kind="count"),
            _fig("kept-set ECE", 0.0600, half=0.02),
            _fig("precision", 0.8, se=0.04),
            _fig("NLL", 0.1000),
            _fig("chosen map", "spline", kind="text"),
        ]
    }
    same = {
        "nms": [
            _fig("kept boxes", 100, kind="count"),
            _fig("kept-set ECE", 0.06000001, half=0.02),
            _fig("precision", 0.8, se=0.04),
            _fig("NLL", 0.1000),
            _fig("chosen map", "spline", kind="text"),
        ]
    }
    rows = bench.compare_figures(one, same)
    assert not any(r["changed"] for r in rows)
    assert bench.verdict(rows).startswith(
        "Every summary figure is unchanged to four decimals, and the chosen "
        "maps are the same (the largest change: +1.0e-08, the nms head's "
        "kept-set ECE)."
    )
    moved = {
        "nms": [
            _fig("kept boxes", 98, kind="count"),
            _fig("kept-set ECE", 0.0650, half=0.02),
            _fig("precision", 0.82, se=0.04),
            _fig("NLL", 0.1003),
            _fig("chosen map", "platt", kind="text"),
        ]
    }
    rows = {r["name"]: r for r in bench.compare_figures(one, moved)}
    assert rows["kept boxes"]["changed"] and rows["kept boxes"]["diff"] == -2
    assert (
        rows["kept-set ECE"]["in_units"] == pytest.approx(0.25)
        and rows["kept-set ECE"]["unit"] == "half-interval"
    )
    assert (
        rows["precision"]["in_units"] == pytest.approx(0.5)
        and rows["precision"]["unit"] == "binomial SE"
    )
    assert rows["NLL"]["changed"] and "in_units" not in rows["NLL"]
    assert rows["chosen map"]["changed"]
    text = bench.verdict(list(rows.values()))
    assert text == (
        "4 of 4 figures changed in the fourth decimal or more (the counts aside); the largest "
        "against "
        "its interval is the nms head's precision, by +0.0200 (0.50 of its binomial SE); the "
        "chosen map "
        "changed on nms."
    )
    table = "\n".join(bench.figure_table(list(rows.values()), 16))
    assert (
        "| nms | kept-set ECE | 0.0600 | 0.0650 | +0.0050 | 0.25 of its half-interval (0.0200) |"
        in table
    )
    assert "| nms | NLL | 0.1000 | 0.1003 | +0.0003 | no interval printed |" in table
    assert "| nms | chosen map | spline | platt | DIFFERENT |  |" in table
