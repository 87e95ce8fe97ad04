"""Intervals of a part of a set (a class's boxes, a size bin's) from the draws of the whole set's images
(``bootstrap_ci``'s ``population``, ``group_ece_ci``): each replicate draws as many images as the set has,
from the set, and the part's boxes of the images drawn are its replicate; replayed here with the resampled
boxes materialised, and against the plain bootstrap where the part is the whole set."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

from det_calib.errors import InputError
from det_calib.metrics import bootstrap_ci, ece, group_ece_ci

ECE10 = functools.partial(ece, n_bins=10)


def _set(seed=0, n=4000, n_img=150, n_groups=7):
    rng = np.random.default_rng(seed)
    img = rng.integers(0, n_img, n) * 3 + 11  # sparse, unsorted image ids
    conf = rng.uniform(size=n)
    correct = rng.uniform(size=n) < conf**1.4
    # a skewed class mix: the last classes sit in a few images only
    group = np.minimum(rng.zipf(1.7, n) - 1, n_groups - 1)
    return img, conf, correct, group


def _replay(img, conf, correct, part, n_boot, seed):
    """The part's ECE on each replicate of the set's image bootstrap, boxes materialised: nan where no
    image of the part is drawn."""
    pop = np.unique(img)
    rows = [np.flatnonzero(img == i) for i in pop]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_boot):
        idx = np.concatenate([rows[k] for k in rng.integers(0, len(pop), size=len(pop))])
        idx = idx[part[idx]]
        out.append(ECE10(conf[idx], correct[idx]) if idx.size else np.nan)
    return np.array(out)


@pytest.mark.fast
def test_the_whole_set_as_its_own_population_is_the_plain_bootstrap():
    img, conf, correct, _ = _set()
    plain = bootstrap_ci(ECE10, img, conf, correct, n_boot=300, seed=5)
    assert (
        bootstrap_ci(ECE10, img, conf, correct, n_boot=300, seed=5, population=np.unique(img))
        == plain
    )


@pytest.mark.fast
@pytest.mark.parametrize("seed", [0, 1])
def test_a_part_resamples_the_set_s_images(seed):
    img, conf, correct, group = _set(seed)
    pop = np.unique(img)
    part = np.isin(img, pop[:3]) & (
        group < 3
    )  # boxes of 3 images of 150: some replicates draw none
    reps = _replay(img, conf, correct, part, 400, seed)
    assert np.isnan(reps).any() and not np.isnan(reps).all()
    good = reps[~np.isnan(reps)]
    want = tuple(np.percentile(good, [2.5, 97.5]))
    args = (img[part], conf[part], correct[part])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the draws that miss the part are dropped without a warning
        # the batch path (ECE's tables) and the indexed path (a statistic without weights): the same draws
        fast = bootstrap_ci(
            ECE10, *args, n_boot=400, seed=seed, population=pop, method="percentile"
        )
        slow = bootstrap_ci(
            lambda c, y: ECE10(c, y),
            *args,
            n_boot=400,
            seed=seed,
            population=pop,
            method="percentile",
        )
    assert fast == pytest.approx(want, rel=1e-12)
    assert slow == pytest.approx(want, rel=1e-12)


@pytest.mark.fast
@pytest.mark.parametrize(
    "table_bytes", [None, 4096]
)  # one block of groups; a group or two at a time
def test_group_intervals_equal_each_part_s_own(monkeypatch, table_bytes):
    if table_bytes is not None:
        monkeypatch.setattr("det_calib.metrics.bootstrap._GROUP_TABLE_BYTES", table_bytes)
    img, conf, correct, group = _set(3)
    pop = np.unique(img)
    n_groups = 9  # groups 7 and 8 have no boxes
    est = np.array(
        [
            ECE10(conf[group == g], correct[group == g]) if (group == g).any() else np.nan
            for g in range(n_groups)
        ]
    )
    got = group_ece_ci(conf, correct, group, img, pop, est, n_bins=10, n_boot=300, seed=2)
    assert len(got) == n_groups and got[7] is None and got[8] is None
    for g in range(7):
        m = group == g
        want = bootstrap_ci(
            ECE10, img[m], conf[m], correct[m], n_boot=300, seed=2, population=pop, estimate=est[g]
        )
        assert got[g] == pytest.approx(want, rel=1e-9), g


@pytest.mark.fast
def test_a_population_that_does_not_hold_the_boxes_is_refused():
    img, conf, correct, _ = _set()
    pop = np.unique(img)
    with pytest.raises(InputError, match="every image id to be in `population`"):
        bootstrap_ci(ECE10, img, conf, correct, population=pop[1:])
    with pytest.raises(InputError, match="to hold a set's image ids, but got none"):
        bootstrap_ci(ECE10, img, conf, correct, population=pop[:0])


@pytest.mark.fast
def test_a_population_is_its_distinct_images_in_any_order():
    img, conf, correct, group = _set(4)
    part = group == 1
    args = (ECE10, img[part], conf[part], correct[part])
    want = bootstrap_ci(*args, n_boot=200, seed=1, population=np.unique(img))
    assert bootstrap_ci(*args, n_boot=200, seed=1, population=img) == want  # every box's image id
    assert bootstrap_ci(*args, n_boot=200, seed=1, population=img[::-1]) == want
