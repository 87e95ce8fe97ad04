"""The one assertion the tests of argument checks share: a refusal is one ``InputError`` line that names
the argument (``Expected argument ...``) and says what was wrong."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from det_calib.errors import InputError


def assert_refusal(call: Callable[[], object], want: str) -> None:
    """``call()`` raises an ``InputError`` of one line, starting ``Expected argument``, containing ``want``."""
    with pytest.raises(InputError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith("Expected argument") and "\n" not in msg
    assert want in msg
