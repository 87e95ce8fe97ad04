"""The run contract: a per-image task (one answer per image, nothing to match) added as a folder and one
registry line runs its own ``calibrate``, ``check`` and ``thresholds``; the real command line dispatches to
them through the registry, and an argument no task claims still runs the box pipeline."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest

from det_calib.cli import main
from det_calib.errors import InputError
from det_calib.tasks import TASKS, answers_per_image, get_task, register_task, task_names
from det_calib.tasks.contract import RUN_PARTS

pytestmark = pytest.mark.fast

TASK = '''
from det_calib.tasks.contract import Task


class Tally(Task):
    """A made-up per-image task: a model that answers once per image."""

    name = "tally"
    per_image = True
    per_image_words = "a tally model runs on a .tally file: give --data that file"
'''

#: Each command's part: claims the arguments whose path ends in ``.tally``, writes what it was given, exits 7.
PART = """
import json
from pathlib import Path

from det_calib.tasks.contract import TaskRun


def _claims(args):
    runs = getattr(args, "runs", None) or [""]
    path = Path(getattr(args, "run_dir", None) or getattr(args, "data", None) or runs[0])
    return path if path.suffix == ".tally" else None


def _run(args, claim):
    (claim.parent / "{command}.json").write_text(json.dumps({{"command": args.command, "claim": claim.name}}))
    return 7


RUN = TaskRun(claims=_claims, run=_run)
"""


@pytest.fixture
def tally(tmp_path, monkeypatch):
    """The task's folder written as a package ``tally_task`` on the path, registered by one line; unregistered
    after the test."""
    folder = tmp_path / "pkgs" / "tally_task"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "task.py").write_text(textwrap.dedent(TASK))
    for command, part in RUN_PARTS.items():
        (folder / f"{part}.py").write_text(textwrap.dedent(PART.format(command=command)))
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    task = register_task(importlib.import_module("tally_task.task").Tally())
    yield task
    TASKS.pop("tally")
    for name in [m for m in sys.modules if m == "tally_task" or m.startswith("tally_task.")]:
        del sys.modules[name]


def test_the_task_reaches_its_parts_and_the_box_stages_refuse_it(tally):
    assert {p: tally.part(p).__name__ for p in RUN_PARTS.values()} == {
        p: f"tally_task.{p}" for p in RUN_PARTS.values()
    }
    assert tally.part("report_panel") is None
    assert answers_per_image("tally") and not answers_per_image("detect")
    assert "tally" not in task_names() and "classify" not in task_names()  # the box tasks only
    with pytest.raises(InputError, match=r"^a tally model runs on a \.tally file"):
        get_task("tally")


def test_the_command_line_runs_the_tasks_own_runs(tally, tmp_path):
    data = tmp_path / "images.tally"
    data.write_text("")
    assert main(["calibrate", "--data", str(data), "-q"]) == 7
    assert main(["check", str(data), "--data", str(tmp_path), "-q"]) == 7
    assert main(["thresholds", str(data)]) == 7
    assert main(["compare", str(data), str(data)]) == 7
    for command in RUN_PARTS:
        assert json.loads((tmp_path / f"{command}.json").read_text()) == {
            "command": command,
            "claim": "images.tally",
        }


def test_an_argument_no_task_claims_runs_the_box_pipeline(tally, tmp_path, capsys):
    missing = tmp_path / "no_run"
    assert main(["thresholds", str(missing)]) == 2  # the box pipeline's one-line refusal
    assert "det-calib: error:" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.json"))


def test_classify_is_registered_with_its_own_runs():
    classify = TASKS["classify"]
    assert classify.per_image
    assert classify.part("pipeline_run").__name__ == "det_calib.tasks.classify.pipeline_run"
    assert classify.part("check_run").__name__ == "det_calib.tasks.classify.check_run"
    assert classify.part("report_compare").__name__ == "det_calib.tasks.classify.report_compare"
    assert classify.part("thresholds_run").__name__ == "det_calib.tasks.classify.thresholds_run"
    assert Path(classify.part("pipeline_run").__file__).parent.name == "classify"
