"""Reading a JSON record file: :func:`read_json_file` (the document, parsed by a record's reader, every
error one line naming the file); :data:`CI`, the type of an interval in a record. The records
themselves are read and written by the typed codec (:mod:`det_calib.codec`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from det_calib.errors import InputError

__all__ = ["CI", "read_json_file"]

CI = tuple[float, float] | None
"""A 95% interval ``[low, high]`` (None: not computed; a ``null`` at either end reads as None)."""


def read_json_file(path: str | Path, parse: Any, *, what: str = "calibration file") -> Any:
    """``parse`` of the JSON document at ``path``; every error one :class:`InputError` line naming the file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{what} not found: {path}")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(
            f"cannot read {path}: not valid JSON ({e.msg} at line {e.lineno})"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {type(e).__name__}") from None
    try:
        return parse(d)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None
