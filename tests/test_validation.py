"""det_calib.validation: the one array-validation dialect (messages name the argument, one style)."""

import numpy as np
import pytest

from det_calib import validation as v
from det_calib.errors import InputError

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


@pytest.mark.parametrize(
    "call",
    [
        lambda: v.as_1d([[1.0]], "x"),
        lambda: v.as_float(["a"], "x"),
        lambda: v.as_float([np.inf], "x"),
        lambda: v.as_unit([-0.1], "x"),
        lambda: v.as_binary([0.5], "x"),
        lambda: v.as_int_ids([0.5], "x"),
        lambda: v.as_weights([-1.0], 1, "x"),
        lambda: v.check_positive_int(0, "x"),
        lambda: v.check_positive_int(True, "x"),
        lambda: v.as_array([[1, 2], [3]], "x"),
        lambda: v.as_1d([1, 2], "x", 3, "ref"),
        lambda: v.as_real(np.array([True]), "x"),
        lambda: v.as_integers([0.0, 1.0], "x"),
        lambda: v.as_integers([True], "x"),
        lambda: v.check_logits(np.zeros((2, 2)), "sigmoid"),
        lambda: v.check_labels([0, 2], "sigmoid", 2, 2),
        lambda: v.check_weights([0.0, 0.0], 2),
    ],
)
def test_every_refusal_is_one_line_in_the_house_style(call):
    with pytest.raises(InputError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith("Expected argument") and "\n" not in msg
    assert (
        "`x`" in msg
        or "`ref`" in msg
        or "`logits`" in msg
        or "`labels`" in msg
        or "`weights`" in msg
    )


def test_lengths_name_both_arguments():
    want = r"`ref` and `x` to have the same length \(one entry per box\), but got 3 and 2"
    with pytest.raises(InputError, match=want):
        v.as_1d([1, 2], "x", 3, "ref")
    with pytest.raises(InputError, match="`a` and `b` to have the same length, but got 2 and 1"):
        v.check_lengths(a=np.zeros(2), b=np.zeros(1))


def test_what_passes_and_how_it_comes_back():
    assert v.as_integers(np.array([], dtype=float), "x").dtype == np.int64  # empty: any dtype
    assert v.as_integers(np.array([3], dtype=np.int32), "x").dtype == np.int64
    assert v.as_int_ids([1.0, 2.0], "x").tolist() == [1, 2]  # whole floats pass as class ids
    assert v.as_real(np.array([np.inf, 1]), "x").tolist() == [np.inf, 1.0]  # inf allowed here
    assert v.as_unit([0.5, 1.0 + 1e-12], "x", tol=1e-9).max() == 1.0  # clipped within tol
    assert v.as_binary(np.array([True, False]), "x").dtype == np.float64
    w = np.array([1.0, 2.0])
    assert v.as_weights(w, 2, "x") is w  # no copy: what the bootstrap relies on
    assert v.as_weights(None, 2, "x") is None
