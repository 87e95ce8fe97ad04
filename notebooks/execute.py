"""Execute the tutorial notebook in place, as it is committed: with its outputs.

Runs ``notebooks/tutorial.ipynb`` top to bottom in a fresh ``python3`` kernel of this interpreter
(about two minutes on a 2-core CPU, plus rendering the demo data on first use), from the
``notebooks`` folder, and writes it back with its outputs. Timing metadata are dropped, so the
file changes only where an output does. ``tests/system/test_notebook.py`` re-executes it and checks the
printed figures against the committed ones; run this after a change that moves them::

    python3 notebooks/execute.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parent / "tutorial.ipynb"
CELL_TIMEOUT = 600  # seconds per cell


def execute(nb: nbformat.NotebookNode, *, cwd: Path, kernel_name: str = "python3") -> nbformat.NotebookNode:
    """Run every cell of ``nb`` (in place) in a fresh kernel started in ``cwd``; strip timing metadata."""
    nbclient.NotebookClient(nb, kernel_name=kernel_name, timeout=CELL_TIMEOUT,
                            resources={"metadata": {"path": str(cwd)}}).execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    return nb


def main() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    execute(nb, cwd=NOTEBOOK.parent)
    nbformat.write(nb, NOTEBOOK)
    print(f"wrote {NOTEBOOK} ({NOTEBOOK.stat().st_size / 1e3:.0f} kB)", file=sys.stderr)


if __name__ == "__main__":
    main()
