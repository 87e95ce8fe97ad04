"""det_calib.metrics.metric_inputs: the metrics refuse bad per-box arrays in one line of the house style,
naming the argument, and pass good ones through unchanged (checked through the public metrics)."""

import numpy as np
import pytest
from refusals import assert_refusal

from det_calib.errors import InputError
from det_calib.metrics import brier, ece, laece, nll_logits, per_class
from det_calib.metrics.metric_inputs import as_weights

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


@pytest.mark.parametrize(
    ("call", "want"),
    [
        (lambda: nll_logits([[1.0]], [1]), "`logits` to be one-dimensional"),
        (lambda: nll_logits(["a"], [1]), "`logits` to be numeric"),
        (lambda: nll_logits([np.inf], [1]), "`logits` to be finite"),
        (
            lambda: ece([-0.1], [1]),
            "`conf` to contain values in [0, 1], but got values in [-0.1, -0.1]",
        ),
        (lambda: ece([0.5], [0.5]), "`correct` to be bool or 0/1, but got values such as [0.5]"),
        (lambda: per_class(ece, [0.5], [1], [0.5]), "`cls` to hold integer class ids"),
        (lambda: ece([0.5], [1], weights=[-1.0]), "`weights` to be non-negative, but got -1"),
        (
            lambda: ece([0.5], [1], weights=[1.0, 1.0]),
            "`conf` and `weights` to have the same length",
        ),
        (lambda: ece([0.5], [1], n_bins=0), "`n_bins` to be an integer larger than 0, but got 0"),
        (
            lambda: ece([0.5], [1], n_bins=True),
            "`n_bins` to be an integer larger than 0, but got True",
        ),
        (
            lambda: brier([0.5, 0.5], [1]),
            "`prob` and `correct` to have the same length, but got 2 and 1",
        ),
    ],
)
def test_every_refusal_is_one_line_naming_the_argument(call, want):
    assert_refusal(call, want)


def test_what_passes_and_how_it_comes_back():
    # whole floats pass as class ids
    assert list(per_class(ece, [0.9, 0.6], [1, 0], [1.0, 2.0])) == [1, 2]
    # booleans and 0/1 are the same correctness flags
    assert brier([0.9, 0.2], np.array([True, False])) == brier([0.9, 0.2], [1, 0]) == 0.025
    # a target IoU a hair above 1 (float rounding of a perfect box) is clipped to 1, not refused
    assert laece([0.5], [1.0 + 1e-12], [0]) == laece([0.5], [1.0], [0]) == 0.5
    with pytest.raises(InputError, match="`target_iou` to contain values in"):
        laece([0.5], [1.0 + 1e-6], [0])
    w = np.array([1.0, 2.0])
    assert as_weights(w, 2, "x") is w  # no copy: what the bootstrap relies on
    assert as_weights(None, 2, "x") is None
