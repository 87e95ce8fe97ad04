"""det_calib.calibrators.fit_support's checks of a fit's arrays: one line of the house style naming the
argument; what passes comes back as the fits need it."""

import numpy as np
import pytest
from refusals import assert_refusal

from det_calib.calibrators import check_fit

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


@pytest.mark.parametrize(
    ("call", "want"),
    [
        (
            lambda: check_fit([[1, 2], [3]], [1, 0]),
            "`logits` to be an array, but got one numpy cannot",
        ),
        (lambda: check_fit(np.zeros((2, 2)), [1, 0]), "`logits` of shape (n,) for kind='sigmoid'"),
        (
            lambda: check_fit(np.zeros(2), [1, 0], kind="softmax"),
            "`logits` of shape (n, K) with K >= 2",
        ),
        (lambda: check_fit(np.array(["a"]), [1]), "`logits` to be a real-valued array"),
        (lambda: check_fit(np.zeros(2), [0, 2]), "`labels` to hold only 0/1"),
        (
            lambda: check_fit(np.zeros(2), [0]),
            "`labels` to have the length of `logits` (2), but got 1",
        ),
        (lambda: check_fit(np.zeros((2, 3)), [0, 3], kind="softmax"), "class ids in [0, 3)"),
        (lambda: check_fit(np.zeros((2, 3)), [0.0, 1.0], kind="softmax"), "integer class ids"),
        (
            lambda: check_fit(np.zeros(2), [1, 0], [0.0, 0.0]),
            "`weights` to have at least one positive",
        ),
        (
            lambda: check_fit(np.zeros(2), [1, 0], [1.0]),
            "`weights` of shape (2,), but got shape (1,)",
        ),
        (lambda: check_fit(np.zeros(2), [1, 0], [1.0, -1.0]), "`weights` to be finite and >= 0"),
    ],
)
def test_every_refusal_is_one_line_naming_the_argument(call, want):
    assert_refusal(call, want)


def test_what_passes_and_how_it_comes_back():
    z, y, w = check_fit(np.array([1, -2], dtype=np.int32), np.array([True, False]))
    assert z.dtype == y.dtype == np.float64 and w is None
    assert z.tolist() == [1.0, -2.0] and y.tolist() == [1.0, 0.0]
    z, y, w = check_fit(np.zeros((3, 4)), np.array([0, 3, 1]), [1, 0, 2], kind="softmax")
    assert y.dtype == np.intp and y.tolist() == [0, 3, 1]
    assert w.dtype == np.float64 and w.tolist() == [1.0, 0.0, 2.0]
