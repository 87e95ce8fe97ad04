"""The tutorial notebook: committed executed, with its pictures, and still true.

The committed file holds the outputs of a run (``python3 notebooks/execute.py``): every code cell
has output, at least six figures, no path of the machine that ran it, no megabyte cells. The slow
test executes ``notebooks/tutorial.ipynb`` again with nbclient in a fresh kernel of this
interpreter (about two minutes on a 2-core CPU, plus rendering the demo data on first use),
checks the key outputs, and checks that every figure cell still draws its figures and that every
number a cell prints agrees with the committed one to its printed precision (one unit of its last
digit: a CPU's rounding may flip the last digit, nothing more). Assertions inside the notebook
(mAP unchanged, calibrated.pt conf == sigmoid(logit / T)) surface here as cell errors.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "notebooks"))
from execute import execute  # noqa: E402  (notebooks/execute.py: the same run as the committed outputs)

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "tutorial.ipynb"


MACHINE_PATH = re.compile(r"(/root/|/home/|/tmp/|/work/|/Users/|/var/folders/|[A-Z]:\\\\)")
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
MIN_FIGURES = 6
MAX_IMAGE_BYTES = 300_000
MAX_NOTEBOOK_BYTES = 2_500_000


def _images(cell) -> int:
    return sum(1 for o in cell.get("outputs", []) if "image/png" in o.get("data", {}))


def _texts(cell) -> list[str]:
    """What a cell prints and shows as text: its streams, then the text of each displayed value."""
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o.get("text", ""))
        elif "text/plain" in o.get("data", {}) and "image/png" not in o["data"]:
            out.append(o["data"]["text/plain"])
    return out


def _numbers(text: str) -> list[tuple[float, float]]:
    """``(value, unit of its last printed digit)`` of every number in ``text``."""
    out = []
    for m in NUMBER.finditer(text):
        tok = m.group(0).replace(",", "")
        mant, _, exp = tok.lower().partition("e")
        decimals = len(mant.partition(".")[2])
        out.append((float(tok), 10.0 ** (-decimals + (int(exp) if exp else 0))))
    return out


def _words(text: str) -> str:
    """The text with its numbers masked and its spacing (and table rules, whose width follows the
    numbers') collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"[─═]+", "─", NUMBER.sub("#", text))).strip()


def _without_timings(text: str) -> str:
    """``text`` without a run's timing line (``time: ...``): its seconds are this machine's, not the run's."""
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("time: "))


def notebook_drift(committed, executed) -> list[str]:
    """Where the executed notebook's outputs drift from the committed ones: a code cell whose
    figures are fewer, whose text differs other than in its numbers, or one of whose printed
    numbers moved by more than one unit of its last printed digit (a run's timing line is left out)."""
    out = []
    code_a = [c for c in committed.cells if c.cell_type == "code"]
    code_b = [c for c in executed.cells if c.cell_type == "code"]
    if len(code_a) != len(code_b):
        return [f"{len(code_a)} code cells committed, {len(code_b)} executed"]
    for i, (a, b) in enumerate(zip(code_a, code_b)):
        if _images(b) < _images(a):
            out.append(f"code cell {i}: {_images(a)} figures committed, {_images(b)} drawn")
        ta, tb = (_without_timings("\n".join(_texts(c))) for c in (a, b))
        wa, wb = _words(ta), _words(tb)
        if wa != wb:
            out.append(f"code cell {i}: its text changed: {wa[:200]!r} -> {wb[:200]!r}")
            continue
        for (x, ux), (y, uy) in zip(_numbers(ta), _numbers(tb)):
            if abs(x - y) > max(ux, uy) * (1 + 1e-9):
                out.append(f"code cell {i}: {x:g} committed, {y:g} now")
    return out


def test_committed_notebook_is_executed_and_clean():
    """Outputs in every code cell, at least six figures, no machine path, no megabyte cell, no
    widget state or timing metadata."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    assert nb.metadata["kernelspec"].get("language") == "python"
    assert "widgets" not in nb.metadata, "widget state in the notebook metadata"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the notebook has no code cells"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs, (
                f"cell {i} has no output: run `python3 notebooks/execute.py` before committing"
            )
            assert isinstance(cell.execution_count, int), f"cell {i} was not executed"
            assert not [o for o in cell.outputs if o.output_type == "error"], (
                f"cell {i} holds an error"
            )
            for o in cell.outputs:
                png = o.get("data", {}).get("image/png", "")
                assert len(png) * 3 // 4 <= MAX_IMAGE_BYTES, (
                    f"cell {i}: a {len(png) * 3 // 4:,}-byte figure"
                )
            text = json.dumps(cell.outputs)
            m = MACHINE_PATH.search(NUMBER.sub("#", "\n".join(_texts(cell))))
            assert m is None, f"cell {i} prints a path of the machine that ran it: {m.group(0)!r}"
            assert "\\u001b[" not in text, f"cell {i} holds terminal escapes (a progress bar?)"
        assert "widgets" not in cell.metadata, f"cell {i} has widget state"
        assert "execution" not in cell.metadata, f"cell {i} has execution timing metadata"
        assert not cell.get("attachments"), f"cell {i} has attachments"
    assert sum(_images(c) for c in code) >= MIN_FIGURES
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), (
        "not executed top to bottom"
    )
    assert NOTEBOOK.stat().st_size <= MAX_NOTEBOOK_BYTES


def test_drift_check_finds_a_moved_figure_and_allows_the_last_digit():
    """The comparison the slow test makes, on the committed notebook against edited copies of itself."""
    import copy

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert notebook_drift(nb, copy.deepcopy(nb)) == []
    cell = next(c for c in nb.cells if c.cell_type == "code" and "T = " in "".join(_texts(c)))
    stream = next(o for o in cell.outputs if o.output_type == "stream" and "T = " in o.text)
    t = re.search(r"T = (\d\.\d{4})", stream.text).group(1)

    def with_t(value: str):
        other = copy.deepcopy(nb)
        c = other.cells[nb.cells.index(cell)]
        o = c.outputs[cell.outputs.index(stream)]
        o.text = o.text.replace(f"T = {t}", f"T = {value}", 1)
        return other

    last = float(t)
    assert notebook_drift(nb, with_t(f"{last + 0.0001:.4f}")) == []  # the last digit may flip
    moved = notebook_drift(nb, with_t(f"{last + 0.0003:.4f}"))
    assert len(moved) == 1 and f"{last:g} committed, {last + 0.0003:g} now" in moved[0]
    fewer = copy.deepcopy(nb)
    fig = next(c for c in fewer.cells if c.cell_type == "code" and _images(c))
    fig.outputs = [o for o in fig.outputs if "image/png" not in o.get("data", {})]
    assert any("figures committed" in d for d in notebook_drift(nb, fewer))
    words = copy.deepcopy(nb)
    c = next(
        c
        for c in words.cells
        if c.cell_type == "code" and any(o.output_type == "stream" for o in c.outputs)
    )
    o = next(o for o in c.outputs if o.output_type == "stream")
    o.text = "something else entirely " + o.text
    assert any("its text changed" in d for d in notebook_drift(nb, words))


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
    return "".join(
        o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream"
    )


@pytest.mark.slow
def test_notebook_runs(tmp_path: Path, python3_kernel: str):
    committed = nbformat.read(NOTEBOOK, as_version=4)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    try:
        execute(nb, cwd=cwd, kernel_name=python3_kernel)
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
    assert re.search(
        r"^At conf 0\.25, calibrated scores keep \d+ boxes instead of \d+", text, re.MULTILINE
    ), text
    m = re.search(
        r"^raw conf > 0\.25 keeps (\d+) boxes; calibrated conf > \S+ keeps (\d+)$",
        text,
        re.MULTILINE,
    )
    assert m and m.group(1) == m.group(2), m and m.groups()
    # step 8 (asserted in the notebook too), step 9, step 10
    assert "mAP identical: True" in text
    assert "calibrated.pt conf == sigmoid(logit / T)" in text
    m = re.search(r"^temperatures: (\{.*\})$", text, re.MULTILINE)
    assert m and "'nms'" in m.group(1), "no temperatures from det_calib.calibrate"

    # compare (two heads of the run) and check (the clean test split holds; blurred, detection changed)
    assert re.search(
        r"^ECE of the boxes kept at conf 0\.25, calibrated: lowest ", text, re.MULTILINE
    )
    assert re.search(r"^clean test: exit code 0$", text, re.MULTILINE), (
        "the clean split did not hold"
    )
    assert re.search(r"^blur, severity 5: exit code [45]$", text, re.MULTILINE)
    assert "[nms] detection quality: changed" in text
    # the default's choice, with every candidate's verdict
    assert re.search(r"^deployed: \{'nms': '\w+', 'e2e': '\w+'\}$", text, re.MULTILINE), (
        "no deployed methods"
    )

    # figures are displayed inline: reliability, per class, threshold, calibrators compared, thresholds
    pngs = [
        o
        for c in code
        for o in c.outputs
        if o.output_type == "display_data" and "image/png" in o.data
    ]
    assert len(pngs) >= MIN_FIGURES, (
        f"expected at least {MIN_FIGURES} inline figures, got {len(pngs)}"
    )
    # tables render as HTML (polars)
    assert any("text/html" in o.get("data", {}) for c in code for o in c.outputs)
    # and what it shows agrees with the committed outputs, figures and printed numbers
    assert notebook_drift(committed, nb) == []

    # what the notebook wrote: everything under one temporary folder (TMPDIR is under tmp_path here)
    works = list((tmp_path / "tmp").glob("det_calib_tutorial_*"))
    assert len(works) == 1, works
    work = works[0]
    for name in (
        "calibrated.pt",
        "run/calibration.json",
        "run/calibrated.pt",
        "run/report.html",
        "run/report.md",
        "run/thresholds.json",
    ):
        assert (work / name).is_file(), f"the notebook did not write {name}"
