"""A tiny document model rendered to both self-contained HTML and Markdown.

The report is built once as a list of blocks; :func:`to_html` and :func:`to_markdown` render the
same blocks, so the two files can never disagree. HTML embeds every figure as a base64 PNG data
URI with inline CSS and no script at all, so it opens from disk and can be mailed as one file;
Markdown references ``figures/<name>.png`` next to it.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field

__all__ = ["Heading", "Para", "Bullets", "Table", "Fig", "Block", "to_html", "to_markdown", "slug"]


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    anchor: str | None = None


@dataclass(frozen=True)
class Para:
    """A paragraph. ``kind`` is "" (plain), "lead" (emphasised), "verdict" (a head's verdict, the report's
    first lines), "note" or "warn"."""

    text: str
    kind: str = ""


@dataclass(frozen=True)
class Bullets:
    """A list; ``css`` is the class of the ``<ul>`` (e.g. ``answer``, the figures under a verdict)."""

    items: list[str]
    css: str = ""


@dataclass(frozen=True)
class Table:
    """A table of already formatted strings.

    Attributes:
        columns: Header cells.
        rows: Body rows, each as long as ``columns``.
        caption: Shown above the table.
        css: Class of the ``<table>`` (e.g. ``per-class``), also its identity in tests.
        attrs: Extra ``data-*`` attributes of the ``<table>``.
        row_css: Optional class per row (e.g. ``few``), parallel to ``rows``.
        row_attrs: Optional ``data-*`` attributes per row.
        align_numbers: Right-align cells that hold a number (except the first column).

    A table whose column names are all empty has no header row in HTML.
    """

    columns: list[str]
    rows: list[list[str]]
    caption: str | None = None
    css: str = ""
    attrs: dict[str, str] = field(default_factory=dict)
    row_css: list[str] | None = None
    row_attrs: list[dict[str, str]] | None = None
    align_numbers: bool = True


@dataclass(frozen=True)
class Fig:
    """A PNG figure; ``name`` is its file stem under ``figures/``."""

    name: str
    png: bytes
    caption: str
    alt: str


Block = Heading | Para | Bullets | Table | Fig

_CSS = """
:root { --fg:#1d1d1f; --muted:#5f6368; --line:#d9dce1; --zebra:#f6f7f9; --accent:#0077bb; }
* { box-sizing: border-box; }
body { font-family: "DejaVu Sans", "Segoe UI", Helvetica, Arial, sans-serif; color: var(--fg);
       max-width: 1240px; margin: 0 auto; padding: 24px 28px 64px; line-height: 1.45; font-size: 15px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 21px; margin: 40px 0 10px; padding-bottom: 4px; border-bottom: 2px solid var(--line); }
h3 { font-size: 17px; margin: 26px 0 8px; }
p { margin: 8px 0; }
p.lead { font-size: 16px; background: #eef5fb; border-left: 4px solid var(--accent); padding: 8px 12px; }
p.verdict { font-size: 17px; font-weight: 600; background: #eef5fb; border-left: 4px solid var(--accent);
            padding: 6px 12px; margin: 14px 0 2px; }
ul.answer { margin: 0 0 12px; padding: 4px 12px 4px 38px; font-size: 14.5px; border-left: 4px solid var(--line); }
ul.answer li { margin: 2px 0; }
p.note { color: var(--muted); font-size: 13.5px; }
p.warn { background: #fff4e5; border-left: 4px solid #ee7733; padding: 8px 12px; }
ul { margin: 6px 0 10px 0; padding-left: 22px; }
li { margin: 3px 0; }
nav.toc { font-size: 14px; color: var(--muted); margin: 6px 0 18px; }
nav.toc a { color: var(--accent); text-decoration: none; margin-right: 14px; }
.table-wrap { overflow-x: auto; margin: 8px 0 16px; }
table { border-collapse: collapse; font-size: 13.5px; }
caption { caption-side: top; text-align: left; font-weight: bold; padding: 4px 0 6px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #eceef2; font-weight: 600; vertical-align: bottom; }
td:first-child { white-space: nowrap; }
table.compare-operating td:first-child, table.compare-detection td:first-child,
table.compare-metrics td:first-child, table.compare-metrics td:nth-child(2) { white-space: normal; }
table.compare-runs td, table.settings td { overflow-wrap: anywhere; }
tbody tr:nth-child(even) { background: var(--zebra); }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.few td { color: #7a7a7a; font-style: italic; }
figure { margin: 14px 0 22px; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 13.5px; margin-top: 4px; }
footer { margin-top: 48px; color: var(--muted); font-size: 12.5px; }
"""

_NUMERIC = re.compile(r"^[\s+\-−]*[\d.,]+(\s*\[.*\])?(\s*\(.*\))?%?$|^n/a$")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _attrs(d: dict[str, str] | None) -> str:
    return "".join(
        f' {html.escape(k)}="{html.escape(str(v), quote=True)}"' for k, v in (d or {}).items()
    )


def _html_table(t: Table) -> str:
    out = [f'<div class="table-wrap"><table class="{html.escape(t.css)}"{_attrs(t.attrs)}>']
    if t.caption:
        out.append(f"<caption>{html.escape(t.caption)}</caption>")
    if any(t.columns):
        out.append(
            "<thead><tr>"
            + "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
            + "</tr></thead>"
        )
    out.append("<tbody>")
    for i, row in enumerate(t.rows):
        css = t.row_css[i] if t.row_css else ""
        ra = t.row_attrs[i] if t.row_attrs else None
        cls_attr = f' class="{html.escape(css)}"' if css else ""
        cells = []
        for j, cell in enumerate(row):
            num = t.align_numbers and j > 0 and bool(_NUMERIC.match(cell))
            cells.append(
                f'<td class="num">{html.escape(cell)}</td>'
                if num
                else f"<td>{html.escape(cell)}</td>"
            )
        out.append(f"<tr{cls_attr}{_attrs(ra)}>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def to_html(title: str, blocks: list[Block], *, subtitle: str = "", footer: str = "") -> str:
    """Render blocks as one self-contained HTML page (figures inline, CSS inline, no script)."""
    toc = [b for b in blocks if isinstance(b, Heading) and b.level == 2]
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            anchor = b.anchor or slug(b.text)
            body.append(
                f'<h{b.level} id="{html.escape(anchor)}">{html.escape(b.text)}</h{b.level}>'
            )
        elif isinstance(b, Para):
            cls = f' class="{b.kind}"' if b.kind else ""
            body.append(f"<p{cls}>{html.escape(b.text)}</p>")
        elif isinstance(b, Bullets):
            cls = f' class="{html.escape(b.css)}"' if b.css else ""
            body.append(
                f"<ul{cls}>" + "".join(f"<li>{html.escape(i)}</li>" for i in b.items) + "</ul>"
            )
        elif isinstance(b, Table):
            body.append(_html_table(b))
        elif isinstance(b, Fig):
            data = base64.b64encode(b.png).decode("ascii")
            body.append(
                f'<figure id="fig-{html.escape(b.name)}"><img src="data:image/png;base64,{data}" '
                f'alt="{html.escape(b.alt, quote=True)}" data-figure="{html.escape(b.name)}">'
                f"<figcaption>{html.escape(b.caption)}</figcaption></figure>"
            )
        else:  # pragma: no cover - the Block union is closed
            raise TypeError(f"unknown block {type(b).__name__}")
    nav = ""
    if toc:
        links = "".join(
            f'<a href="#{html.escape(h.anchor or slug(h.text))}">{html.escape(h.text)}</a>'
            for h in toc
        )
        nav = f'<nav class="toc">{links}</nav>'
    sub = f'<p class="note">{html.escape(subtitle)}</p>' if subtitle else ""
    foot = f"<footer>{html.escape(footer)}</footer>" if footer else ""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n{sub}\n{nav}\n"
        + "\n".join(body)
        + f"\n{foot}\n</body>\n</html>\n"
    )


def _md_cell(s: str) -> str:
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_text(s: str) -> str:
    # keep the text readable; only neutralise what would start markup
    return s.replace("\n", " ").replace("*", "\\*").replace("_", "\\_") if s else s


def to_markdown(
    title: str,
    blocks: list[Block],
    *,
    figures_dir: str = "figures",
    subtitle: str = "",
    footer: str = "",
) -> str:
    """Render blocks as Markdown; figures are referenced as ``figures_dir/<name>.png``."""
    out = [f"# {_md_text(title)}", ""]
    if subtitle:
        out += [_md_text(subtitle), ""]
    for b in blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + _md_text(b.text), ""]
        elif isinstance(b, Para):
            text = _md_text(b.text)
            if b.kind in ("lead", "verdict"):
                text = f"**{text}**"
            elif b.kind == "warn":
                text = f"> **Warning:** {text}"
            elif b.kind == "note":
                text = f"*{text}*"
            out += [text, ""]
        elif isinstance(b, Bullets):
            out += [f"- {_md_text(i)}" for i in b.items] + [""]
        elif isinstance(b, Table):
            if b.caption:
                out += [f"**{_md_text(b.caption)}**", ""]
            cols = b.columns if any(b.columns) else [" "] * len(b.columns)
            out.append("| " + " | ".join(_md_cell(c) for c in cols) + " |")
            out.append("|" + "|".join("---" for _ in b.columns) + "|")
            for row in b.rows:
                out.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
            out.append("")
        elif isinstance(b, Fig):
            alt = b.alt.replace("]", ")").replace("[", "(")
            out += [f"![{alt}]({figures_dir}/{b.name}.png)", "", f"*{_md_text(b.caption)}*", ""]
    if footer:
        out += ["---", "", _md_text(footer), ""]
    return "\n".join(out)
