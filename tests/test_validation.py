"""det_calib.validation: the one array-validation dialect (messages name the argument, one style); the
metrics' and the calibrator fits' own checks are tested with them (tests/metrics/test_metric_inputs.py,
tests/calibrators/test_fit_checks.py)."""

import numpy as np
import pytest

from det_calib import validation as v
from det_calib.errors import InputError

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


@pytest.mark.parametrize(
    "call",
    [
        lambda: v.as_1d([[1.0]], "x"),
        lambda: v.as_1d([1, 2], "x", 3, "ref"),
        lambda: v.as_real(np.array([True]), "x"),
        lambda: v.as_integers([0.0, 1.0], "x"),
        lambda: v.as_integers([True], "x"),
    ],
)
def test_every_refusal_is_one_line_in_the_house_style(call):
    with pytest.raises(InputError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith("Expected argument") and "\n" not in msg
    assert "`x`" in msg


def test_lengths_name_both_arguments():
    want = r"`ref` and `x` to have the same length \(one entry per box\), but got 3 and 2"
    with pytest.raises(InputError, match=want):
        v.as_1d([1, 2], "x", 3, "ref")


def test_what_passes_and_how_it_comes_back():
    assert v.as_integers(np.array([], dtype=float), "x").dtype == np.int64  # empty: any dtype
    assert v.as_integers(np.array([3], dtype=np.int32), "x").dtype == np.int64
    assert v.as_real(np.array([np.inf, 1]), "x").tolist() == [np.inf, 1.0]  # inf allowed here
