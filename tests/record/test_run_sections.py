"""A command's own sections of calibration.json (det_calib/record/run_sections.py): registered by the
folder that owns them, written and read by the one codec at their place in the file, and an ensemble
run's ``ensemble`` section read back wherever a run is read, also by a process that never imported the
ensemble folder."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from det_calib.codec import Record
from det_calib.errors import InputError
from det_calib.io import to_json
from det_calib.record import run_sections
from det_calib.record.run_result import RunResult

pytestmark = pytest.mark.fast

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = Path(__file__).resolve().parents[2]


def _ensemble_run(tmp_path: Path) -> tuple[Path, str]:
    """The fixture run with an ensemble section (the codec samples' EnsembleRecord) and a run time."""
    doc = RunResult.from_dict(json.loads((DATA / "fixture_calibration.json").read_text())).to_dict()
    doc["seconds"] = 3.5
    doc["ensemble"] = json.loads((DATA / "codec_records.json").read_text())["EnsembleRecord"][0]
    text = to_json(doc)
    path = tmp_path / "calibration.json"
    path.write_text(text)
    return path, text


def _fresh(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
        check=True,
    )
    return out.stdout.strip()


def test_an_ensemble_run_reads_back_in_a_process_that_never_imported_the_ensemble(tmp_path):
    path, text = _ensemble_run(tmp_path)
    got = _fresh(
        "import sys\n"
        "from det_calib.io import to_json\n"
        "from det_calib.record.run_result import RunResult\n"
        "before = 'det_calib.ensemble.ensemble_record' in sys.modules\n"
        f"r = RunResult.read({str(path)!r})\n"
        "rec = r.sections['ensemble']\n"
        "print(before, type(rec).__name__, rec.fusion_of('nms'), len(rec.members),\n"
        f"      to_json(r.to_dict()) == open({str(path)!r}).read())\n"
    )
    rec = json.loads(text)["ensemble"]
    head = rec["heads"]["nms"]
    want_fusion = (head["order"] or rec["fusion"]["order"], head["score"] or rec["fusion"]["score"])
    assert got == f"False EnsembleRecord {want_fusion} {len(rec['members'])} True"


def test_a_detectors_run_has_no_section_and_loads_no_ensemble_module():
    got = _fresh(
        "import sys\n"
        "from det_calib.record.run_result import RunResult\n"
        f"r = RunResult.read({str(DATA / 'fixture_calibration.json')!r})\n"
        "print(r.sections, 'det_calib.ensemble.ensemble_record' in sys.modules)\n"
    )
    assert got == "{} False"


def test_the_section_is_written_where_ensemble_was_and_read_typed(tmp_path):
    path, text = _ensemble_run(tmp_path)
    r = RunResult.read(path)
    assert to_json(r.to_dict()) == text
    keys = list(r.to_dict())
    assert keys[keys.index("seconds") + 1] == "ensemble" and keys[-1] == "ensemble"
    assert r.sections["ensemble"].heads["nms"].table[0].order in (
        "fuse-then-calibrate",
        "calibrate-then-fuse",
    )


def test_a_bad_section_is_one_line_naming_its_place(tmp_path):
    path, _ = _ensemble_run(tmp_path)
    doc = json.loads(path.read_text())
    doc["ensemble"]["fusion"]["iou"] = "wide"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as e:
        RunResult.read(path)
    assert str(e.value) == f"{path}: `ensemble.fusion.iou` must be a number or null, got 'wide'"


@dataclass(frozen=True)
class _Note(Record):
    text: str
    count: int = 0


def test_a_new_section_is_one_registration(tmp_path, monkeypatch):
    monkeypatch.setattr(run_sections, "_SECTIONS", dict(run_sections._SECTIONS))
    run_sections.register_run_section("note", _Note, report="tests.nowhere")
    doc = json.loads((DATA / "fixture_calibration.json").read_text())
    r = RunResult.from_dict({**doc, "note": {"text": "hello", "count": 2}})
    assert r.sections == {"note": _Note("hello", 2)}
    assert r.to_dict()["note"] == {"text": "hello", "count": 2}
    assert r.section_reports() == ["tests.nowhere"]
    with pytest.raises(InputError, match=r"^`note.count` must be an integer"):
        RunResult.from_dict({**doc, "note": {"text": "hello", "count": 2.5}})
