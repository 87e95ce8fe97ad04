"""The README and docs/: short README, set-up block as CI reads it, every page linked, every link
resolving, and every benchmark table embedded from the file its benchmark writes.

``python3 tests/system/test_docs.py --sync`` copies each generated file into the blocks that embed it
(after a benchmark run with ``--doc``).
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MAX_README_LINES = 250

BLOCK = re.compile(
    r"<!-- begin generated: (?P<path>[^ ]+) -->\n(?P<body>.*?)<!-- end generated -->", re.S
)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)\)|!\[[^\]]*\]\((?P<image>[^)\s]+)\)")
FOUR_DECIMALS = re.compile(r"(?<![\d.])\d\.\d{4}(?!\d)")
#: ``from det_calib.x import a, b`` (or a parenthesised list) in a page's text or code.
FROM_IMPORT = re.compile(r"from (det_calib[\w.]*) import (?:\(([\w, \n]+)\)|([\w, ]+))")
#: A dotted name in a code span: `det_calib.x.y`.
DOTTED = re.compile(r"`(det_calib(?:\.\w+)+)")
#: Code spans that look like names and are not: the Parquet metadata key of boxes.parquet, a pattern.
NOT_NAMES = {"det_calib.run", "det_calib.metrics.NAME"}


def _pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]


def _topic_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M):
        base = _slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return [m.group("target") or m.group("image") for m in LINK.finditer(text)]


def _broken_links(page: Path) -> list[str]:
    bad = []
    for target in _links(page):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
        if not dest.exists():
            bad.append(f"{page.relative_to(ROOT)}: {rel} (no such file)")
            continue
        if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{page.relative_to(ROOT)}: {target} (no heading with that anchor)")
    return bad


def test_the_readme_reads_in_five_minutes():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, (
        f"README.md has {n} lines (at most {MAX_README_LINES}: move detail to docs/)"
    )


def test_the_readme_set_up_block_holds_the_two_commands_ci_runs():
    """The same extraction as .ci/run: the fenced block under `## Set-up`, comments and blank lines out."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## Set-up\b.*?^```[a-z]*\n(.*?)^```", text, flags=re.M | re.S)
    assert m, "README.md has no fenced block under '## Set-up'"
    commands = [x for x in m.group(1).splitlines() if x.strip() and not x.lstrip().startswith("#")]
    assert len(commands) == 2, commands
    assert "det-calib calibrate" in commands[0] and "pytest" in commands[1], commands
    assert "## Set-up" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")  # what CI looks for


def test_every_docs_page_is_linked_from_the_readme():
    linked = {
        (ROOT / t.partition("#")[0]).resolve()
        for t in _links(ROOT / "README.md")
        if t.startswith("docs/")
    }
    missing = [p.relative_to(ROOT).as_posix() for p in _topic_pages() if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"
    assert (ROOT / "CONTRIBUTING.md").resolve() in {
        (ROOT / t).resolve() for t in _links(ROOT / "README.md")
    }


def test_every_link_resolves():
    bad = [b for p in _pages() for b in _broken_links(p)]
    assert not bad, "\n".join(bad)


def test_every_generated_block_equals_its_file():
    blocks = [(p, m) for p in _pages() for m in BLOCK.finditer(p.read_text(encoding="utf-8"))]
    assert blocks, "no generated block found: the docs embed benchmark tables between markers"
    for page, m in blocks:
        src = ROOT / m.group("path")
        assert src.is_file(), (
            f"{page.relative_to(ROOT)} embeds {m.group('path')}, which does not exist"
        )
        assert m.group("body") == src.read_text(encoding="utf-8"), (
            f"{page.relative_to(ROOT)}: the block of {m.group('path')} differs from the file "
            "(rerun the benchmark with --doc, then `python3 tests/system/test_docs.py --sync`)"
        )


def test_every_generated_file_is_embedded_or_linked():
    used = set()
    for p in _pages():
        text = p.read_text(encoding="utf-8")
        used |= {m.group("path") for m in BLOCK.finditer(text)}
        used |= {
            (p.parent / t.partition("#")[0]).resolve().relative_to(ROOT).as_posix()
            for t in _links(p)
            if "generated/" in t
        }
    files = {f.relative_to(ROOT).as_posix() for f in (DOCS / "generated").glob("*.md")}
    assert not files - used, f"generated tables no page shows: {sorted(files - used)}"


def test_no_hand_typed_figure_table_outside_generated_blocks():
    """A Markdown table row with three or more four-decimal figures is a benchmark's table: it
    belongs in a file its benchmark writes (docs/generated/), embedded between markers."""
    bad = []
    for p in _pages():
        if p.parent.name == "generated":
            continue
        text = BLOCK.sub("", p.read_text(encoding="utf-8"))
        for line in text.splitlines():
            if line.lstrip().startswith("|") and len(FOUR_DECIMALS.findall(line)) >= 3:
                bad.append(f"{p.relative_to(ROOT)}: {line.strip()[:100]}")
    assert not bad, "\n".join(bad)


def _user_texts() -> dict[str, str]:
    """The README, the topic pages and the tutorial notebook's cells: what users copy from."""
    out = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in _pages()}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        out[nb.relative_to(ROOT).as_posix()] = "\n".join("".join(c["source"]) for c in cells)
    return out


def _resolves(dotted: str) -> bool:
    """``det_calib.a.b.c`` names a module, or an attribute reached from the longest importable module."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            break
        except ImportError:
            continue
    else:
        return False
    for name in parts[i:]:
        if hasattr(obj, name):
            obj = getattr(obj, name)
            continue
        try:
            obj = importlib.import_module(f"{obj.__name__}.{name}")
        except (ImportError, AttributeError):
            return False
    return True


def _api_references(text: str) -> list[str]:
    refs = [m.group(1) for m in DOTTED.finditer(text)]
    for m in FROM_IMPORT.finditer(text):
        names = (m.group(2) or m.group(3)).replace("\n", ",").split(",")
        refs += [f"{m.group(1)}.{n.split(' as ')[0].strip()}" for n in names if n.strip()]
    return [r for r in refs if r not in NOT_NAMES]


def test_every_api_name_the_docs_show_exists():
    """Every ``det_calib`` name a page or the tutorial shows (a dotted name in a code span, a
    ``from det_calib... import`` line) imports: a renamed or privatised function breaks this, not a
    reader's first copy and paste."""
    bad = [
        f"{page}: {ref}"
        for page, text in _user_texts().items()
        for ref in dict.fromkeys(_api_references(text))
        if not _resolves(ref)
    ]
    assert not bad, "\n".join(bad)


def test_the_checks_catch_what_they_guard(tmp_path):
    """The checks above fail on a broken link, a stale anchor and a hand-edited block."""
    (tmp_path / "a.md").write_text(
        "# Title\n\n## Sub part\n\n[ok](#sub-part) [bad](#nope) [gone](b.md)\n"
    )
    page = tmp_path / "a.md"
    assert _anchors(page) == {"title", "sub-part"}
    assert _links(page) == ["#sub-part", "#nope", "b.md"]
    assert FOUR_DECIMALS.findall("| 0.0617 → 0.0564 | 0.286329 | 12.3456 |") == ["0.0617", "0.0564"]
    text = "<!-- begin generated: docs/generated/x.md -->\n| a |\n<!-- end generated -->\n"
    assert BLOCK.search(text).group("body") == "| a |\n"
    assert (
        _slug("Why mAP can move under Ultralytics val, and why it doesn't really")
        == "why-map-can-move-under-ultralytics-val-and-why-it-doesnt-really"
    )
    assert _slug("Reusing captured boxes: `--boxes`") == "reusing-captured-boxes---boxes"
    refs = _api_references(
        "see `det_calib.deploy.no_such_name(x)` and\nfrom det_calib.deploy import (\n    attach,\n"
        "    gone as g,\n)\nfrom det_calib.nowhere import x\n"
    )
    assert refs == [
        "det_calib.deploy.no_such_name",
        "det_calib.deploy.attach",
        "det_calib.deploy.gone",
        "det_calib.nowhere.x",
    ]
    assert [_resolves(r) for r in refs] == [False, True, False, False]
    assert _resolves("det_calib.check.CheckResult.read")


def sync() -> list[Path]:
    """Copy every generated file into the blocks that embed it; returns the pages changed."""
    changed = []
    for p in _pages():
        text = p.read_text(encoding="utf-8")
        new = BLOCK.sub(
            lambda m: (
                f"<!-- begin generated: {m.group('path')} -->\n"
                f"{(ROOT / m.group('path')).read_text(encoding='utf-8')}<!-- end generated -->"
            ),
            text,
        )
        if new != text:
            p.write_text(new, encoding="utf-8")
            changed.append(p)
    return changed


if __name__ == "__main__":
    if sys.argv[1:] == ["--sync"]:
        for p in sync():
            print(f"updated {p.relative_to(ROOT)}")
    else:
        sys.exit("usage: python3 tests/system/test_docs.py --sync")
