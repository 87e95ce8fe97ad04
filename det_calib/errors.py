"""Errors that mean "the input is wrong", as opposed to bugs.

The CLI turns a :class:`DetCalibError` into its one-line message and exit code 2; anything else
is a bug and keeps its traceback.
"""

from __future__ import annotations


class DetCalibError(Exception):
    """Bad input or a result that cannot be computed from it. The message is one line for the user."""


class InputError(DetCalibError, ValueError):
    """A file, argument or dataset is missing, corrupt or inconsistent.

    Args:
        message: One line for the user. Parameters at fault are written in backquotes by their
            Python name (`out`, `fit_split`).
        param: The parameter(s) at fault, so that a front end can name them its own way (the CLI
            writes `--out`, `--fit-split`). ``None`` (the default): any backquoted name may be a
            parameter; ``()``: none is (e.g. a message quoting class names).
    """

    def __init__(self, message: str, *, param: str | tuple[str, ...] | None = None) -> None:
        super().__init__(message)
        self.params: tuple[str, ...] | None = (
            (param,) if isinstance(param, str) else (None if param is None else tuple(param))
        )


class DegenerateFitError(DetCalibError, ValueError):
    """The fit data cannot determine a finite calibration (e.g. no correct or no incorrect boxes)."""


def first_line(e: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type name: for one-line errors."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
