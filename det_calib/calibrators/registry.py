"""The one registry of calibration methods: every method name, its calibrator class, its place in
the simplicity order, and how it is built. The method lists (``--method`` choices and help,
``auto``'s candidates, the report's and the fold's dispatch) are all read from here.

A method is registered with the :func:`register` class decorator in the calibrator's own module:

>>> from det_calib.calibrators.registry import methods
>>> methods()[:3]
('none', 'temperature', 'platt')

A new calibrator is one new module: subclass :class:`~det_calib.calibrators.base.LogitCalibrator`,
decorate it with ``@register("my-method", order=...)``, and add the module to :data:`BUILTIN`
(or, outside the package, import it before use).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from det_calib.errors import InputError
from det_calib.validation import check_choice

__all__ = [
    "TARGETS",
    "MethodSpec",
    "calibrator_from_dict",
    "excluded_methods",
    "global_methods",
    "make_calibrator",
    "method_spec",
    "methods",
    "register",
    "target_methods",
]

#: The modules of the package's own calibrators (imported on the first look-up).
_BUILTIN: tuple[str, ...] = ("identity", "temperature", "affine", "spline", "isotonic", "size")

_Build = Callable[..., Any]


@dataclass(frozen=True)
class MethodSpec:
    """A registered method.

    Attributes:
        name: The method name (``--method NAME``, ``calibration.json`` ``calibrator.method``).
        cls: Its :class:`~det_calib.calibrators.base.LogitCalibrator` subclass.
        order: Its place in the simplicity order (lower is simpler; ``auto``'s one-SE rule prefers
            the simpler of two close candidates).
        build: ``build(*, seed, shrinkage, fit_min_conf)`` -> an unfitted calibrator.
    """

    name: str
    cls: type
    order: float
    build: _Build

    @property
    def per_class(self) -> bool:
        """The method fits one map per class."""
        return bool(self.cls.per_class)

    @property
    def uses_size(self) -> bool:
        """The map reads each box's size (it re-ranks boxes; opt-in: ``--size-maps``)."""
        return bool(getattr(self.cls, "uses_size", False))

    @property
    def reranks(self) -> bool:
        """The map can change the order of the boxes (per class, or by size), hence mAP: mAP is
        measured before and after, and the map may change what the detector keeps."""
        return self.per_class or self.uses_size


_METHODS: dict[str, MethodSpec] = {}
_FORMATS: dict[str, type] = {}
_loaded = False


def _default_build(cls: type) -> _Build:
    def build(*, seed: int = 0, shrinkage: Any = "auto", fit_min_conf: float = 0.0) -> Any:
        return cls()

    return build


def register(name: str, *, order: float, build: _Build | None = None) -> Callable[[type], type]:
    """Class decorator: register ``cls`` as method ``name`` (one class may serve several methods,
    each with its own ``build``). The class's ``format`` is registered for :func:`calibrator_from_dict`."""

    def deco(cls: type) -> type:
        if name in _METHODS and _METHODS[name].cls is not cls:
            raise InputError(
                f"calibration method {name!r} is already registered ({_METHODS[name].cls.__name__})"
            )
        fmt = getattr(cls, "format", "")
        if not fmt:
            raise InputError(f"calibrator {cls.__name__} has no `format` string")
        if fmt in _FORMATS and _FORMATS[fmt] is not cls:
            raise InputError(
                f"calibrator format {fmt!r} is already registered ({_FORMATS[fmt].__name__})"
            )
        _METHODS[name] = MethodSpec(name, cls, float(order), build or _default_build(cls))
        _FORMATS[fmt] = cls
        return cls

    return deco


def _unregister(name: str) -> None:
    """Remove method ``name`` (and its class's format when no other method uses that class)."""
    spec = _METHODS.pop(name)
    if not any(s.cls is spec.cls for s in _METHODS.values()):
        _FORMATS.pop(spec.cls.format, None)


def _specs() -> dict[str, MethodSpec]:
    global _loaded
    if not _loaded:
        _loaded = True
        for mod in _BUILTIN:
            importlib.import_module(f"det_calib.calibrators.{mod}")
    return _METHODS


def methods() -> tuple[str, ...]:
    """Every registered method, simplest first (the order the one-SE rule prefers)."""
    return tuple(s.name for s in sorted(_specs().values(), key=lambda s: s.order))


def global_methods(target: str = "correct") -> tuple[str, ...]:
    """The methods with one monotone map for every class: the ranking of all boxes, hence mAP, is
    unchanged (``auto``'s default candidates); for ``target="iou"`` only those that fit soft labels
    (:func:`target_methods`)."""
    return tuple(m for m in target_methods(target) if not _METHODS[m].reranks)


#: What a calibrator is fitted to: the matched flag at ``--iou`` (``correct``) or the IoU of the box's
#: match (``iou``, a soft label in [0, 1]).
TARGETS: tuple[str, ...] = ("correct", "iou")


def target_methods(target: str = "correct") -> tuple[str, ...]:
    """The methods that can be fitted to ``target``: every one for ``correct``; for ``iou`` those
    whose class sets :attr:`~det_calib.calibrators.base.LogitCalibrator.soft_labels` (a fit written
    for 0/1 labels only is left out rather than fitted to a target it would misread)."""
    check_choice(target, TARGETS, "target")
    return tuple(
        m
        for m in methods()
        if target == "correct" or getattr(_METHODS[m].cls, "soft_labels", False)
    )


def excluded_methods(target: str) -> dict[str, str]:
    """Method -> why it is left out of ``target``'s choice (empty for ``correct``)."""
    ok = set(target_methods(target))
    return {
        m: "its fit takes 0/1 labels only (it does not declare soft_labels)"
        for m in methods()
        if m not in ok
    }


def method_spec(method: str) -> MethodSpec:
    """The registered :class:`MethodSpec` of ``method``; InputError naming the methods otherwise."""
    specs = _specs()
    return specs[check_choice(method, methods(), "method")]


def make_calibrator(
    method: str, *, seed: int = 0, shrinkage: Any = "auto", fit_min_conf: float = 0.0
) -> Any:
    """An unfitted calibrator for ``method``; ``fit_min_conf`` > 0 (it will be fitted above that raw
    conf only) gives the isotonic maps slope 1 below their first knot: the boxes below the floor
    keep their raw spacing (see :mod:`det_calib.calibrators.isotonic`)."""
    return method_spec(method).build(seed=seed, shrinkage=shrinkage, fit_min_conf=fit_min_conf)


def _formats() -> tuple[str, ...]:
    """The ``format`` strings :func:`calibrator_from_dict` reads."""
    _specs()
    return tuple(sorted(_FORMATS))


def calibrator_from_dict(d: dict[str, Any]) -> Any:
    """Rebuild any calibrator from its ``to_dict`` output (dispatch on ``d["format"]``)."""
    _specs()
    if not isinstance(d, dict) or d.get("format") not in _FORMATS:
        got = d.get("format") if isinstance(d, dict) else type(d).__name__
        raise InputError(
            f"Expected a calibrator dict with `format` in {sorted(_FORMATS)}, but got {got!r}"
        )
    return _FORMATS[d["format"]].from_dict(d)
