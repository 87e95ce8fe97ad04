"""The one typed codec of det_calib's JSON records: a record dataclass to JSON-ready data
(:func:`encode`) and back, checked (:func:`decode`), driven by the fields' types.

Types it reads: ``float`` (any JSON number), ``int`` (a whole number), ``bool``, ``str``, ``Path``,
``Literal[...]``, ``Any`` (as it comes), ``X | None``, ``list[X]``, ``tuple[X, ...]``, ``tuple[X, Y]``,
``dict[str, X]``, ``dict[int, X]`` (keys written as strings) and nested record dataclasses. A value
that does not fit raises one :class:`~det_calib.errors.InputError` line naming its place in the
document (``eval.nms.ece_before``).

A key absent or ``null`` reads as the field's default; without one, as None where the type allows it,
as an empty list, dict or record for a container, else it is missing (an error). A fixed pair with a
``null`` inside (an interval undefined at either end) reads as None where the field is optional.

Writing: fields in their declared order; numpy scalars and arrays as Python numbers, tuples as lists, paths as
strings; floats as they are (``det_calib.io.to_json`` writes NaN as ``null``). What differs from that,
per field, is said by :func:`spec` in the field's metadata: another key, a key left out, a nested
record written flat into its parent, rounding, a value check, a reading default.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, Union

from det_calib.errors import InputError

__all__ = ["Record", "decode", "encode", "spec"]

_T = TypeVar("T")
_META = "codec"


def spec(
    default: Any = MISSING,
    *,
    default_factory: Any = MISSING,
    key: str | None = None,
    omit: str | Callable[[Any], bool] | None = None,
    flat: Callable[[str], str] | None = None,
    required: bool = False,
    check: tuple[Callable[[Any], bool], str] | None = None,
    digits: int | None = None,
    missing: Any = MISSING,
) -> Any:
    """A record field with codec options (a :func:`dataclasses.field`).

    Args:
        default, default_factory: As for :func:`dataclasses.field`.
        key: The JSON key (default: the field's name); ``a.b`` is key ``b`` of the object at ``a``.
        omit: When the key is left out on writing: ``"none"`` (the value is None), ``"empty"`` (the value
            is falsy), ``"default"`` (it equals the default) or a predicate of the record.
        flat: A nested record written into its parent's object, each of its fields under the key this
            function gives for the field's name.
        required: Absent or ``null`` is an error even where the type or a default would allow it.
        check: ``(predicate, words)``: a value the predicate refuses (or of the wrong type) is an error
            that says ``must be <words>``.
        digits: Round the number to these decimals on writing.
        missing: What an absent or ``null`` key reads as (default: the field's default).
    """
    meta = {
        k: v
        for k, v in dict(key=key, omit=omit, flat=flat, check=check, digits=digits).items()
        if v is not None
    }
    meta.update(
        {"required": True} if required else {},
        **({} if missing is MISSING else {"missing": missing}),
    )
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={_META: meta}
    )


class Record:
    """Mixin of a record dataclass: :meth:`to_dict` and :meth:`from_dict` through the codec.

    ``WHERE`` names the record's place in its document in error messages (``timings``)."""

    WHERE: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready object."""
        return encode(self)

    @classmethod
    def from_dict(cls: type[_T], d: Any, where: str | None = None) -> _T | None:
        """The record of a JSON object, checked (None for ``null``: a record the document does not hold).

        Raises:
            InputError: A value of the wrong type, or missing (one line naming its place).
        """
        return None if d is None else decode(cls, d, cls.WHERE if where is None else where)


# ------------------------------------------------------------------------------------------ writing
def encode(obj: Any) -> Any:
    """JSON-ready data of a record (or any value: lists, dicts, numbers, numpy scalars)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            _encode_field(obj, f, out)
        return out
    if isinstance(obj, (list, tuple)):
        return [encode(x) for x in obj]
    if isinstance(obj, Mapping):
        return {k if isinstance(k, str) else str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    tolist = getattr(obj, "tolist", None)  # a numpy scalar or array: Python numbers
    return tolist() if tolist is not None and type(obj).__module__ == "numpy" else obj


def _encode_field(rec: Any, f: dataclasses.Field, out: dict[str, Any]) -> None:
    o = f.metadata.get(_META, {})
    v = getattr(rec, f.name)
    omit = o.get("omit")
    if omit is not None and _omitted(omit, rec, f, v):
        return
    if "flat" in o:
        out.update({o["flat"](k): x for k, x in encode(v).items()})
        return
    v = encode(v)
    if "digits" in o and v is not None:
        v = round(v, o["digits"])
    *parents, key = o.get("key", f.name).split(".")
    for p in parents:
        out = out.setdefault(p, {})
    out[key] = v


def _omitted(omit: Any, rec: Any, f: dataclasses.Field, v: Any) -> bool:
    if callable(omit):
        return bool(omit(rec))
    if omit == "none":
        return v is None
    if omit == "empty":
        return not v
    return v == (f.default if f.default is not MISSING else f.default_factory())  # "default"


# ------------------------------------------------------------------------------------------ reading
def decode(
    cls: type[_T] | Any, d: Any, where: str = "", *, keys: Callable[[str], str] | None = None
) -> _T:
    """The record (or any type the codec reads) ``cls`` of JSON data ``d``.

    Args:
        where: The place of ``d`` in its document, for messages.
        keys: The record's JSON key of each field's own key (a record spread over its document:
            ``lambda k: f"{k}.nms"`` reads field ``fit`` at ``fit.nms``).

    Raises:
        InputError: A value of the wrong type, or a missing one (one line naming its place).
    """
    return _decode(cls, d, where) if keys is None else _decode_record(cls, d, where, keys)


def _key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _hints(cls: type) -> dict[str, Any]:
    h = _HINTS.get(cls)
    if h is None:
        h = _HINTS[cls] = typing.get_type_hints(cls)
    return h


_HINTS: dict[type, dict[str, Any]] = {}


def _decode_record(cls: type, d: Any, where: str, keyof: Callable[[str], str] = str) -> Any:
    if not isinstance(d, dict):
        raise InputError(f"`{where or 'the document'}` must be an object, got {type(d).__name__}")
    hints, kwargs = _hints(cls), {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        o = f.metadata.get(_META, {})
        if "flat" in o:
            kwargs[f.name] = _decode_record(hints[f.name], d, where, o["flat"])
            continue
        key = keyof(o.get("key", f.name))
        v = _lookup(d, key, where)
        w = _key(where, key)
        if v is None:
            value = _absent(f, hints[f.name], o, w)
            if value is not MISSING:
                kwargs[f.name] = value
            continue
        if "check" in o:
            kwargs[f.name] = _checked(hints[f.name], v, w, *o["check"])
        else:
            kwargs[f.name] = _decode(hints[f.name], v, w)
    return cls(**kwargs)


def _lookup(d: dict[str, Any], key: str, where: str) -> Any:
    *parents, last = key.split(".")
    for p in parents:
        d = d.get(p)
        if d is None:
            return None
        if not isinstance(d, dict):
            raise InputError(
                f"`{_key(where, p)}` must be an object or null, got {type(d).__name__}"
            )
    return d.get(last)


def _absent(f: dataclasses.Field, tp: Any, o: dict[str, Any], where: str) -> Any:
    """What an absent or null key reads as (MISSING: the field's own default)."""
    if o.get("required"):
        raise InputError(f"`{where}` is missing")
    if "missing" in o:
        return o["missing"]
    if f.default is not MISSING or f.default_factory is not MISSING:
        return MISSING
    if _optional(tp) is not None:
        return None
    origin = typing.get_origin(tp) or tp
    if origin in (list, dict) or (origin is tuple and _variadic(tp)):
        return origin()
    if dataclasses.is_dataclass(origin):
        return _decode_record(origin, {}, where)
    raise InputError(f"`{where}` is missing")


def _checked(tp: Any, v: Any, where: str, ok: Callable[[Any], bool], words: str) -> Any:
    try:
        value = _decode(tp, v, where)
    except InputError:
        value = MISSING
    if value is MISSING or (value is not None and not ok(value)):
        raise InputError(f"`{where}` must be {words}, got {v!r}")
    return value


def _optional(tp: Any) -> Any:
    """``X`` of ``X | None`` (None when ``tp`` is not optional)."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            return args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007
    return None


def _variadic(tp: Any) -> bool:
    args = typing.get_args(tp)
    return not args or (len(args) == 2 and args[1] is Ellipsis)


def _decode(tp: Any, v: Any, where: str) -> Any:
    if tp is Any or tp is object:
        return v
    inner = _optional(tp)
    if inner is not None:
        if v is None:
            return None
        if (
            typing.get_origin(inner) is tuple
            and not _variadic(inner)
            and isinstance(v, list)
            and None in v
        ):
            return None  # an interval undefined at either end
        return _decode(inner, v, where)
    if v is None:
        raise InputError(f"`{where}` must not be null")
    origin = typing.get_origin(tp)
    reader = _SCALARS.get(tp)
    if reader is not None:
        return reader(v, where)
    if origin is Literal:
        return _literal(typing.get_args(tp), v, where)
    if origin in (list, tuple):
        return _sequence(tp, origin, v, where)
    if origin is dict or tp is dict:
        return _mapping(tp, v, where)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _decode_record(tp, v, where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _literal(tuple(tp), v, where, wrap=tp)
    raise TypeError(f"the codec cannot read type {tp!r} (at `{where}`)")


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"`{where}` must be a number or null, got {v!r}")
    return float(v)


def _integer(v: Any, where: str) -> int:
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or not math.isfinite(v)
        or v != int(v)
    ):
        raise InputError(f"`{where}` must be an integer or null, got {v!r}")
    return int(v)


def _flag(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise InputError(f"`{where}` must be true, false or null, got {v!r}")
    return v


def _text(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise InputError(f"`{where}` must be a string or null, got {v!r}")
    return v


_SCALARS: dict[Any, Callable[[Any, str], Any]] = {
    float: _number,
    int: _integer,
    bool: _flag,
    str: _text,
    Path: lambda v, w: Path(_text(v, w)),
}


def _literal(allowed: tuple[Any, ...], v: Any, where: str, wrap: Any = None) -> Any:
    values = [a.value if isinstance(a, enum.Enum) else a for a in allowed]
    words = ", ".join(str(a) for a in values)
    if all(isinstance(a, str) for a in values) and not isinstance(v, str):
        raise InputError(f"`{where}` must be a string ({words}), got {v!r}")
    if v not in values:
        raise InputError(f"`{where}` must be one of {words}, got {v!r}")
    return v if wrap is None else wrap(v)


def _sequence(tp: Any, origin: type, v: Any, where: str) -> Any:
    if not isinstance(v, list):
        raise InputError(f"`{where}` must be a list or null, got {type(v).__name__}")
    args = typing.get_args(tp) or (Any, Ellipsis)
    if origin is list or _variadic(tp):
        return origin(_decode(args[0], x, f"{where}[{i}]") for i, x in enumerate(v))
    if len(v) != len(args):
        raise InputError(f"`{where}` must be a list of {len(args)} values or null, got {v!r}")
    return tuple(_decode(a, x, f"{where}[{i}]") for i, (a, x) in enumerate(zip(args, v)))


def _mapping(tp: Any, v: Any, where: str) -> dict[Any, Any]:
    if not isinstance(v, dict):
        raise InputError(f"`{where}` must be an object or null, got {type(v).__name__}")
    kt, vt = typing.get_args(tp) or (str, Any)
    out = {}
    for k, x in v.items():
        if kt is int:
            try:
                key: Any = int(k)
            except ValueError:
                raise InputError(f"`{where}` must be keyed by integers, got {k!r}") from None
        else:
            key = k
        out[key] = _decode(vt, x, _key(where, str(k)))
    return out
