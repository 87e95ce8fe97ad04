"""The report of a classify run (``report.html``, ``report.md``): the answer first, then the pictures.

First screen: the verdict in words, the top-label ECE raw -> deployed against its sampling floor,
top-1 and top-5 before -> after (and Ultralytics' val), then the top-label reliability diagram.
Below: every figure raw / calibrated / deployed, the per-class one-vs-rest reliability, the map's
choice on held-out folds, and the reject option.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from det_calib.io import write_text
from det_calib.metrics.binning import reliability_bins
from det_calib.metrics.calibration import ece
from det_calib.report.document import Bullets, Fig, Heading, Para, Table, to_html, to_markdown
from det_calib.report.plots import reliability_figure, reliability_grid
from det_calib.tasks.classify.report_summary import classifier_deployed_words, classifier_verdict

__all__ = ["write_classifier_report"]


def _f(v: float | None, digits: int = 4) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _first_screen(r: dict) -> list:
    raw, dep = r["eval"]["raw"], r["eval"]["deployed"]
    items = [
        f"top-label ECE {_f(raw['top_label_ece'])} → {_f(dep['top_label_ece'])}; sampling floor "
        f"{_f(dep['floor'])} [{_f(dep['floor_interval'][0])}, {_f(dep['floor_interval'][1])}]",
        f"top-1 {_f(raw['top1'])} → {_f(dep['top1'])}, top-5 {_f(raw['top5'])} → {_f(dep['top5'])}"
        + ("" if r["keeps_top1"] else f" ({r['top1_changed']} image(s) changed top-1 class)"),
        f"deployed: {classifier_deployed_words(r)}",
    ]
    if r["val"]:
        v = r["val"]
        items.append(
            f"Ultralytics classify val: top-1 {_f(v['raw']['top1'])} → "
            f"{_f(v['calibrated']['top1'])}, top-5 "
            f"{_f(v['raw']['top5'])} → {_f(v['calibrated']['top5'])} "
            f"({'identical' if v['identical'] else 'CHANGED'})"
        )
    what = "no map (the raw scores)" if r["method"] == "none" else f"{r['method']} scaling"
    return [
        Para(f"{classifier_verdict(raw, dep).replace('**', '')}: {what}", kind="verdict"),
        Bullets(items, css="answer"),
    ]


def _per_class(
    names: list[str], p_raw: np.ndarray, p_dep: np.ndarray, y: np.ndarray
) -> tuple[Table, bytes]:
    rows, panels = [], []
    for k, name in enumerate(names):
        e0, e1 = ece(p_raw[:, k], y == k), ece(p_dep[:, k], y == k)
        top = p_dep.argmax(1) == k
        prec = float((y[top] == k).mean()) if top.any() else None
        rows.append([name, str(int((y == k).sum())), _f(e0), _f(e1), _f(prec, 3)])
        panels.append(
            (f"{name} (ECE {e1:.3f})", reliability_bins(p_dep[:, k], y == k), f"p({name})")
        )
    grid = reliability_grid(
        [panels[i : i + 4] for i in range(0, len(panels), 4)],
        title="one-vs-rest reliability per class (deployed)",
        shared=True,
        unit="images",
    )
    table = Table(
        ["class", "images", "ECE raw", "ECE deployed", "precision of top-1"],
        rows,
        caption="Per class: each class's probability against being that class",
        css="per-class",
    )
    return table, grid


def write_classifier_report(
    out: Path, r: dict, p_raw: np.ndarray, p_dep: np.ndarray, y: np.ndarray
) -> list[Path]:
    """Write ``report.html`` and ``report.md`` (figures under ``figures/``) of the classify run ``r``."""
    raw, cal, dep = (r["eval"][k] for k in ("raw", "calibrated", "deployed"))
    top = reliability_figure(
        [
            (
                f"raw (ECE {raw['top_label_ece']:.4f})",
                reliability_bins(p_raw.max(1), p_raw.argmax(1) == y),
                "top-1 confidence",
            ),
            (
                f"deployed (ECE {dep['top_label_ece']:.4f})",
                reliability_bins(p_dep.max(1), p_dep.argmax(1) == y),
                "top-1 confidence",
            ),
        ],
        title=f"top-label reliability on `{r['eval_split']}` ({y.size} images)",
        unit="images",
    )
    figures = [
        ("top-label ECE (15 bins)", "top_label_ece"),
        ("class-wise ECE", "classwise_ece"),
        ("NLL", "nll"),
        ("Brier", "brier"),
        ("top-1", "top1"),
        ("top-5", "top5"),
        ("mean confidence", "mean_confidence"),
    ]
    table = Table(
        ["figure", "raw", "calibrated", "deployed"],
        [[label, _f(raw[k]), _f(cal[k]), _f(dep[k])] for label, k in figures],
        css="figures",
    )
    per_class, grid = _per_class(r["names"], p_raw, p_dep, y)
    choice = r["choice"]
    blocks = [
        *_first_screen(r),
        Fig(
            "reliability",
            top,
            "Top-label reliability: each bin's accuracy against its mean top-1 confidence.",
            "reliability diagram before and after",
        ),
        Heading(2, "Figures"),
        table,
        Heading(2, "Per class"),
        per_class,
        Fig(
            "per_class_reliability",
            grid,
            "Each class's probability against the image being that class.",
            "per-class reliability",
        ),
    ]
    if choice:
        blocks += [
            Heading(2, "The map's choice"),
            Para(
                f"Held-out NLL on {choice['folds']} stratified folds x {choice['repeats']} repeats "
                "of the fit "
                "split; the simplest map within one standard error of the best is kept."
            ),
            Table(
                ["map", "held-out NLL", "SE of the difference from the best"],
                [[m, _f(v), _f(choice["se"][m])] for m, v in choice["nll"].items()],
                css="choice",
            ),
        ]
    blocks += [
        Heading(2, "Reject option"),
        Table(
            [
                "target accuracy",
                "threshold",
                "answered (fit)",
                "answered (eval)",
                "accuracy (eval)",
            ],
            [
                [
                    _f(x["target"], 2),
                    _f(x["threshold"], 2) if x["certified"] else "cannot certify",
                    _f(x["answered"], 3),
                    _f(x["eval_answered"], 3),
                    _f(x["eval_accuracy"], 3),
                ]
                for x in r["reject"]
            ],
            css="reject",
        ),
    ]
    title = f"Classifier calibration: {Path(r['model']).name}"
    (out / "figures").mkdir(exist_ok=True)
    for b in blocks:
        if isinstance(b, Fig):
            (out / "figures" / f"{b.name}.png").write_bytes(b.png)
    return [
        write_text(out / "report.html", to_html(title, blocks)),
        write_text(out / "report.md", to_markdown(title, blocks)),
    ]
