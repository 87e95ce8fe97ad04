"""The page builder every report page is written with: the run's report, the comparison, check's page.

A section adds blocks (:mod:`det_calib.report.document`) and figures to a :class:`Page`; the page is
then rendered once to HTML and Markdown and written atomically with its figures
(:meth:`Page.write`).

>>> from det_calib.report.document import Heading, Para
>>> page = Page()
>>> page.add(Heading(2, "Summary", "summary"), Para("nms: platt map deployed.", "lead"))
>>> [type(b).__name__ for b in page.blocks]
['Heading', 'Para']
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from det_calib.io import write_bytes, write_text

from .document import Block, Fig, to_html, to_markdown

__all__ = ["Page"]

_FIGURES_DIR = "figures"
"""Where a page's PNG figures are written, relative to the page (the Markdown file links them there)."""


class Page:
    """The blocks and figures of one page, in order.

    Attributes:
        blocks: The page's blocks, in the order they are shown.
        figures: Each figure's PNG by name (its file stem under ``figures/``).
    """

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.figures: dict[str, bytes] = {}

    def add(self, *blocks: Block) -> None:
        """Append blocks; a :class:`~det_calib.report.document.Fig` among them is registered as a figure."""
        for b in blocks:
            if isinstance(b, Fig):
                self.fig(b.name, b.png, b.caption, b.alt)
            else:
                self.blocks.append(b)

    def fig(self, name: str, png: bytes, caption: str, alt: str) -> None:
        """Append a figure. Raises ValueError when the page already has a figure of that name."""
        if name in self.figures:
            raise ValueError(f"duplicate figure name {name}")
        self.figures[name] = png
        self.blocks.append(Fig(name, png, caption, alt))

    def _take_figures(self) -> None:
        """Every figure as its PNG bytes: a figure still being drawn in a child process (a pending PNG,
        :func:`det_calib.report.plots.drawn_in_children`) is waited for."""
        self.figures = {
            n: png if isinstance(png, bytes) else png.result() for n, png in self.figures.items()
        }
        self.blocks = [
            dataclasses.replace(b, png=self.figures[b.name]) if isinstance(b, Fig) else b
            for b in self.blocks
        ]

    def write(
        self, out_dir: str | Path, stem: str, title: str, *, subtitle: str = "", footer: str = ""
    ) -> dict[str, Path]:
        """Write ``<stem>.html`` (self-contained), ``<stem>.md`` and ``figures/<name>.png`` into ``out_dir``,
        each atomically.

        Returns:
            Written paths: ``"html"``, ``"md"`` and, per figure, ``"figures/<name>.png"``.
        """
        self._take_figures()
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {}
        for name, png in self.figures.items():
            paths[f"{_FIGURES_DIR}/{name}.png"] = write_bytes(
                out / _FIGURES_DIR / f"{name}.png", png
            )
        md = to_markdown(
            title, self.blocks, figures_dir=_FIGURES_DIR, subtitle=subtitle, footer=footer
        )
        paths["md"] = write_text(out / f"{stem}.md", md)
        paths["html"] = write_text(
            out / f"{stem}.html", to_html(title, self.blocks, subtitle=subtitle, footer=footer)
        )
        return paths
