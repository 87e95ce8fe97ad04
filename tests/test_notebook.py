"""The tutorial notebook: the committed file is clean, and it runs top to bottom on the demo.

The run executes ``notebooks/tutorial.ipynb`` with nbclient in a fresh kernel of this interpreter
(about a minute on a 2-core CPU, plus rendering the demo data on first use), then checks the key
outputs. Assertions inside the notebook (mAP unchanged, calibrated.pt conf == sigmoid(logit / T))
surface here as cell errors.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "tutorial.ipynb"
CELL_TIMEOUT = 600  # seconds per cell


def test_committed_notebook_is_clean():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    assert nb.metadata["kernelspec"].get("language") == "python"
    assert "widgets" not in nb.metadata, "widget state in the notebook metadata"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the notebook has no code cells"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} has outputs: clear them before committing"
            assert cell.execution_count is None, f"cell {i} has execution_count {cell.execution_count}"
        assert "widgets" not in cell.metadata, f"cell {i} has widget state"
        assert "execution" not in cell.metadata, f"cell {i} has execution timing metadata"
        assert not cell.get("attachments"), f"cell {i} has attachments"


@pytest.fixture
def python3_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``python3`` kernelspec that runs this interpreter, found first by jupyter_client.

    A user- or system-wide ``python3`` spec may point at another environment (or be missing on a
    fresh machine); a spec in ``$JUPYTER_PATH`` takes precedence over both, and nothing is
    installed outside ``tmp_path``.
    """
    root = tmp_path / "jupyter"
    spec = root / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (det_calib tests)",
                "language": "python",
            }
        )
    )
    old = os.environ.get("JUPYTER_PATH")
    monkeypatch.setenv("JUPYTER_PATH", str(root) + (os.pathsep + old if old else ""))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    # the notebook writes into tempfile.mkdtemp(): keep that under tmp_path
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setenv("YOLO_OFFLINE", "1")
    monkeypatch.setenv("YOLO_VERBOSE", "False")
    return "python3"


def _stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.slow
def test_notebook_runs(tmp_path: Path, python3_kernel: str):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    client = nbclient.NotebookClient(
        nb, kernel_name=python3_kernel, timeout=CELL_TIMEOUT, resources={"metadata": {"path": str(cwd)}}
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        message = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # the kernel's traceback is coloured
        pytest.fail(f"the tutorial notebook raised in a cell:\n{message}", pytrace=False)

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "not every code cell ran"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    text = "\n".join(_stdout(c) for c in code)

    # step 4: the fitted temperature
    m = re.search(r"^T = (\S+)$", text, re.MULTILINE)
    assert m, "no `T = ...` line in the outputs"
    t = float(m.group(1))
    assert math.isfinite(t) and t > 0, t
    # step 5: ECE before and after, two finite numbers
    m = re.search(r"^ECE on test .*: (\S+) -> (\S+)$", text, re.MULTILINE)
    assert m, "no ECE line in the outputs"
    assert all(0 <= float(v) <= 1 for v in m.groups()), m.groups()
    # step 7: the kept-set shift, and the equivalent threshold keeps the raw set
    assert re.search(r"^At conf 0\.25, calibrated scores keep \d+ boxes instead of \d+", text, re.MULTILINE), text
    m = re.search(r"^raw conf > 0\.25 keeps (\d+) boxes; calibrated conf > \S+ keeps (\d+)$", text, re.MULTILINE)
    assert m and m.group(1) == m.group(2), m and m.groups()
    # step 8 (asserted in the notebook too), step 9, step 10
    assert "mAP identical: True" in text
    assert "calibrated.pt conf == sigmoid(logit / T)" in text
    m = re.search(r"^temperatures: (\{.*\})$", text, re.MULTILINE)
    assert m and "'nms'" in m.group(1), "no temperatures from det_calib.calibrate"

    # figures are displayed inline: reliability, per class, threshold
    pngs = [o for c in code for o in c.outputs if o.output_type == "display_data" and "image/png" in o.data]
    assert len(pngs) >= 3, f"expected at least 3 inline figures, got {len(pngs)}"
    # tables render as HTML (polars)
    assert any("text/html" in o.get("data", {}) for c in code for o in c.outputs)

    # what the notebook wrote
    m = re.search(r"^output folder: (.+)$", text, re.MULTILINE)
    assert m, "no `output folder:` line"
    work = Path(m.group(1).strip())
    assert work.is_relative_to(tmp_path), work
    for name in ("calibrated.pt", "run/calibration.json", "run/calibrated.pt", "run/report.html", "run/report.md",
                 "run/thresholds.json"):
        assert (work / name).is_file(), f"the notebook did not write {name}"
