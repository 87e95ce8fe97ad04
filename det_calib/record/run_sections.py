"""A command's own sections of ``calibration.json``: plug-ins of the folder that owns them.

A command above the record keeps what only it records in a top-level section of its own (``det-calib
ensemble``: ``ensemble``, :mod:`det_calib.ensemble.ensemble_record`). The folder that owns the section
registers its :class:`~det_calib.codec.Record` type under its key (:func:`register_run_section`), with the
module that shows it on a run's report; a run holds its sections in ``RunResult.sections`` (key -> record),
which the one codec writes and reads at their place in the file (after ``seconds``). The record never
imports the folders above it: a run read before the owner was imported loads the owner's module by the
name in :data:`_BUILTIN`, as the model families are loaded.

>>> from det_calib.record.run_sections import section_report
>>> section_report("nothing registered") is None
True
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from det_calib.codec import Record, encode

_BUILTIN: dict[str, str] = {"ensemble": "det_calib.ensemble.ensemble_record"}
"""The sections det_calib ships: key -> the module that registers it, imported on the first run read that
holds the key (a detector's run imports none)."""


@dataclass(frozen=True)
class _RunSection:
    record: type[Record]
    report: (
        str | None
    )  # the module whose ``TITLE`` and ``section(page, ctx)`` show it on a run's report


_SECTIONS: dict[str, _RunSection] = {}


def register_run_section(key: str, record: type[Record], report: str | None = None) -> None:
    """Register the section ``key`` of ``calibration.json``: its record type, and the module (a name) that
    writes its section of a run's report (its ``TITLE`` and ``section(page, ctx)``), if any."""
    _SECTIONS[key] = _RunSection(record, report)


def decode_sections(d: dict[str, Any]) -> dict[str, Record]:
    """The registered sections a ``calibration.json`` object holds, typed, in registration order.

    Raises:
        InputError: A section's value of the wrong type, or missing (one line naming its place).
    """
    for key, module in _BUILTIN.items():
        if d.get(key) is not None and key not in _SECTIONS:
            importlib.import_module(module)  # it registers its section
    return {
        key: s.record.from_dict(d[key], key)
        for key, s in _SECTIONS.items()
        if d.get(key) is not None
    }


def encode_sections(sections: dict[str, Record]) -> dict[str, Any]:
    """The sections as JSON-ready data, under their keys."""
    return {key: encode(rec) for key, rec in sections.items() if rec is not None}


def section_report(key: str) -> str | None:
    """The module that shows section ``key`` on a run's report (None: none, or ``key`` not registered)."""
    return _SECTIONS[key].report if key in _SECTIONS else None
