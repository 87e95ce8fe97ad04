"""Lazy exports: a package's public names import their module on first use (some modules import
torch or Ultralytics, which a light command should not pay for)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of ``package``: a name of ``exports`` is read from the
    submodule ``package.<exports[name]>``, imported on first use; any other name is an AttributeError.

    Example:
        >>> getattr_ = lazy_exports("det_calib", {"sigmoid": "numeric"})
        >>> getattr_("sigmoid").__name__
        'sigmoid'
    """

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
