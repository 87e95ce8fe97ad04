"""Benchmark tables that the docs include: a benchmark run with ``--doc`` writes its table here.

Every figure table in ``docs/`` that a benchmark measures is a file under ``docs/generated/``
written by that benchmark, never typed by hand; a page embeds it between
``<!-- begin generated: docs/generated/NAME.md -->`` and ``<!-- end generated -->``, and
``tests/system/test_docs.py`` checks that each embedded block equals its file. To refresh a table, rerun
the benchmark with ``--doc`` and copy the file into the page's block (or run
``python3 tests/system/test_docs.py --sync``).
"""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "docs" / "generated"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def write_doc_table(name: str, body: str, *, note: str = "", command: str | None = None) -> Path:
    """Write ``docs/generated/NAME.md``: a provenance line (the command, the date, the commit), an
    optional note, then ``body`` (a Markdown table or a fenced block). Written atomically.

    ``command``: the command to record (default: this process's own command line); a benchmark whose
    arguments name a scratch folder passes its command without it, so the line can be rerun anywhere."""
    command = command or "python3 " + " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    head = f"<!-- written by benchmarks/{Path(sys.argv[0]).name}; rerun it with --doc to refresh, do not edit -->\n"
    text = (
        head
        + f"*Measured {when} on commit {_commit()}: `{command}`.*"
        + (f" {note}" if note else "")
        + "\n\n"
    )
    text += body.rstrip("\n") + "\n"
    GENERATED.mkdir(parents=True, exist_ok=True)
    path = GENERATED / f"{name}.md"
    fd, tmp = tempfile.mkstemp(dir=GENERATED, prefix=f".{name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    print(f"wrote {path.relative_to(ROOT)}")
    return path
