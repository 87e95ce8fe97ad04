"""Errors that mean "the input is wrong", as opposed to bugs.

The CLI turns a :class:`DetCalibError` into its one-line message and exit code 2; anything else
is a bug and keeps its traceback.
"""

from __future__ import annotations


class DetCalibError(Exception):
    """Bad input or a result that cannot be computed from it. The message is one line for the user."""


class InputError(DetCalibError, ValueError):
    """A file, argument or dataset is missing, corrupt or inconsistent."""


class DegenerateFitError(DetCalibError, ValueError):
    """The fit data cannot determine a finite calibration (e.g. no correct or no incorrect boxes)."""


def first_line(e: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type name: for one-line errors."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
