"""Checked reading of JSON records: each reader takes a value and where it sits in the document
(``eval.nms.ece_before``) and returns it typed, or raises an :class:`~det_calib.errors.InputError`
that names the place. Records declare their leaf fields with :func:`leaf` / :func:`ci_field` (the
JSON kind in the field's metadata), read them with :func:`read_leaf_fields` and write them with
:func:`leaf_dict`. ``calibration.json``, ``check.json`` and the ensemble record are read with them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np

from det_calib.errors import InputError

__all__ = [
    "CI",
    "READERS",
    "ci_field",
    "key_path",
    "leaf",
    "leaf_dict",
    "plain",
    "read_flag",
    "read_integer",
    "read_interval",
    "read_items",
    "read_json_file",
    "read_leaf_fields",
    "read_number",
    "read_object",
    "read_text",
]

CI = tuple[float, float] | None


def key_path(where: str, key: str) -> str:
    """``where.key`` (``key`` alone at the top)."""
    return f"{where}.{key}" if where else key


def read_number(v: Any, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"`{where}` must be a number or null, got {v!r}")
    return float(v)


def read_integer(v: Any, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or float(v) != int(v):
        raise InputError(f"`{where}` must be an integer or null, got {v!r}")
    return int(v)


def read_flag(v: Any, where: str) -> bool | None:
    if v is None:
        return None
    if not isinstance(v, bool):
        raise InputError(f"`{where}` must be true, false or null, got {v!r}")
    return v


def read_text(v: Any, where: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise InputError(f"`{where}` must be a string or null, got {v!r}")
    return v


def read_interval(v: Any, where: str) -> CI:
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise InputError(f"`{where}` must be a [low, high] pair or null, got {v!r}")
    lo, hi = read_number(v[0], where), read_number(v[1], where)
    return None if lo is None or hi is None else (lo, hi)


def read_object(v: Any, where: str, *, optional: bool = True) -> dict[str, Any] | None:
    if v is None and optional:
        return None
    if not isinstance(v, dict):
        raise InputError(
            f"`{where}` must be an object{' or null' if optional else ''}, got {type(v).__name__}"
        )
    return v


def read_items(v: Any, where: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise InputError(f"`{where}` must be a list or null, got {type(v).__name__}")
    return v


READERS = {
    float: read_number,
    int: read_integer,
    bool: read_flag,
    str: read_text,
    "ci": read_interval,
}


def read_leaf_fields(cls: type, d: dict[str, Any], where: str) -> dict[str, Any]:
    """Read the leaf fields of a flat record (their kind in field metadata ``kind``)."""
    return {
        f.name: READERS[f.metadata["kind"]](d.get(f.name), key_path(where, f.name))
        for f in dataclasses.fields(cls)
        if "kind" in f.metadata
    }


def leaf(default: Any = None, kind: Any = float) -> Any:
    """A leaf field of a record: its JSON kind (float, int, bool, str) in the metadata."""
    return field(default=default, metadata={"kind": kind})


def ci_field() -> Any:
    return field(default=None, metadata={"kind": "ci"})


def plain(v: Any) -> Any:
    """A JSON-ready copy: tuples as lists, numpy scalars as Python numbers."""
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, np.generic):
        return v.item()
    return v


def leaf_dict(rec: Any) -> dict[str, Any]:
    return {
        f.name: plain(getattr(rec, f.name)) for f in dataclasses.fields(rec) if "kind" in f.metadata
    }


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
