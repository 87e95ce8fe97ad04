"""``compare``'s run for classify run folders: two or more classify runs side by side.

Every figure is the run's own, read from its ``calibration.json`` as ``calibrate`` wrote it (the
classify record of :mod:`det_calib.tasks.classify.pipeline_run`): the deployed map, the top-label ECE raw
-> deployed with its 90% image-bootstrap interval and sampling floor, class-wise ECE, NLL, Brier,
top-1 and top-5 (and Ultralytics' val of ``calibrated.pt``), and the reject option's certified
thresholds. Writes ``compare.txt`` (what the command prints), ``compare.md``, ``compare.html`` and
one figure: each run's top-label ECE raw and deployed with their intervals.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from det_calib.errors import InputError
from det_calib.io import write_bytes, write_text
from det_calib.report.document import Fig, Heading, Para, Table, to_html, to_markdown
from det_calib.report.plots import ClassECE, per_class_ece_chart
from det_calib.tasks.classify.report_summary import classifier_verdict
from det_calib.tasks.classify.task import is_classify_run
from det_calib.tasks.contract import TaskRun

__all__ = ["RUN", "compare_classifier_runs"]


def _f(v: float | None, digits: int = 4) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _ci(v: dict, key: str, interval: str) -> str:
    lo, hi = v[interval]
    return f"{_f(v[key])} [{_f(lo)}, {_f(hi)}]"


def _map_words(r: dict) -> str:
    if r["method"] == "none":
        return "none (the raw scores)"
    if r["method"] == "temperature":
        return f"temperature T = {r['map']['temperature']:.4f}"
    return f"{r['method']} scaling"


def _val_words(r: dict) -> str:
    v = r["val"]
    if not v:
        return "not run"
    return (
        f"top-1 {_f(v['raw']['top1'])} -> {_f(v['calibrated']['top1'])} "
        f"({'identical' if v['identical'] else 'CHANGED'})"
    )


def _reject_words(r: dict, target: float) -> str:
    rule = next((x for x in r["reject"] if abs(x["target"] - target) < 1e-9), None)
    if rule is None:
        return "n/a"
    if not rule["certified"]:
        return "cannot certify"
    return f"conf >= {rule['threshold']:.2f}, answers {rule['eval_answered']:.3f}"


def _rows(records: Sequence[dict], names: Sequence[str]) -> list[tuple[str, list[str]]]:
    evs = [(r["eval"]["raw"], r["eval"]["deployed"]) for r in records]
    rows = [
        ("", list(names)),
        ("model", [Path(r["model"]).name for r in records]),
        ("deployed map", [_map_words(r) for r in records]),
        ("eval images", [f"{r['images'][r['eval_split']]:,} ({r['eval_split']})" for r in records]),
        ("verdict", [classifier_verdict(raw, dep).replace("**", "") for raw, dep in evs]),
        (
            "top-label ECE",
            [f"{_f(raw['top_label_ece'])} -> {_f(dep['top_label_ece'])}" for raw, dep in evs],
        ),
        ("  deployed, 90% interval", [_ci(dep, "top_label_ece", "ece_interval") for _, dep in evs]),
        ("  its sampling floor", [_ci(dep, "floor", "floor_interval") for _, dep in evs]),
    ]
    for key, label in (
        ("classwise_ece", "class-wise ECE"),
        ("nll", "NLL"),
        ("brier", "Brier"),
        ("top1", "top-1"),
        ("top5", "top-5"),
    ):
        rows.append((label, [f"{_f(raw[key])} -> {_f(dep[key])}" for raw, dep in evs]))
    rows.append(("Ultralytics val", [_val_words(r) for r in records]))
    targets = sorted({x["target"] for r in records for x in r["reject"]})
    rows += [
        (f"reject option, accuracy {t:.2f}", [_reject_words(r, t) for r in records])
        for t in targets
    ]
    return rows


def _overlap_words(records: Sequence[dict], names: Sequence[str]) -> str:
    """Which runs' deployed ECE the intervals cannot tell apart from the best run's."""
    deps = [r["eval"]["deployed"] for r in records]
    best = min(range(len(deps)), key=lambda i: deps[i]["top_label_ece"])
    lo_best, hi_best = deps[best]["ece_interval"]
    tied = [
        names[i]
        for i, d in enumerate(deps)
        if i != best and d["ece_interval"][0] <= hi_best and lo_best <= d["ece_interval"][1]
    ]
    words = f"Lowest deployed top-label ECE: {names[best]} ({deps[best]['top_label_ece']:.4f})."
    if tied:
        words += f" Its interval overlaps {', '.join(tied)}'s: the split cannot tell them apart."
    return words


def _text(rows: list[tuple[str, list[str]]], note: str) -> str:
    first = max(len(name) for name, _ in rows)
    widths = [max(len(cells[i]) for _, cells in rows) for i in range(len(rows[0][1]))]
    lines = [
        "  ".join(
            [name.ljust(first), *(c.ljust(w) for c, w in zip(cells, widths, strict=True))]
        ).rstrip()
        for name, cells in rows
    ]
    return (
        "\n".join(
            [
                *lines,
                note,
                "(raw -> deployed; intervals: 90% image bootstrap; sampling floor: the ECE a "
                "perfectly calibrated classifier would score on the same images)",
            ]
        )
        + "\n"
    )


def _records(runs: Sequence[str | Path]) -> list[dict]:
    if len(runs) < 2:
        raise InputError(
            f"Expected at least two runs to compare (RUN RUN ...), but got {len(runs)}"
        )
    records = []
    for run in runs:
        record = is_classify_run(run)
        if record is None:
            raise InputError(
                f"{run} is not a classify run folder (no classify calibration.json): a classify "
                "run "
                "is compared with classify runs only"
            )
        records.append(record)
    return records


def _names(runs: Sequence[str | Path], labels: Sequence[str] | None) -> list[str]:
    names = [Path(str(r)).name for r in runs] if labels is None else list(labels)
    if len(names) != len(runs) or len(set(names)) != len(names) or not all(names):
        if labels is not None:
            raise InputError(
                f"Expected argument `labels` to be {len(runs)} different names, but got {', '.join(map(str, labels))}"
            )
        names = [f"{chr(65 + i)} ({n})" for i, n in enumerate(names)]
    return names


def compare_classifier_runs(
    runs: Sequence[str | Path], *, out_dir: str | Path, labels: Sequence[str] | None = None
) -> dict[str, Path]:
    """Compare two or more classify runs side by side; returns the written paths
    (``"txt"``, ``"md"``, ``"html"``, ``"figures/compare_ece.png"``).

    Raises:
        InputError: Fewer than two runs, a run folder that is not a classify run (a box run cannot be
            compared with a classify run), or ``labels`` not one distinct name per run.
    """
    records = _records(runs)
    names = _names(runs, labels)
    rows = _rows(records, names)
    note = _overlap_words(records, names)
    chart = per_class_ece_chart(
        [
            ClassECE(
                name,
                r["images"][r["eval_split"]],
                False,
                r["eval"]["raw"]["top_label_ece"],
                r["eval"]["deployed"]["top_label_ece"],
                tuple(r["eval"]["raw"]["ece_interval"]),
                tuple(r["eval"]["deployed"]["ece_interval"]),
            )
            for name, r in zip(names, records, strict=True)
        ],
        xlabel="top-label ECE (15 bins); whiskers: 90% interval",
        title="top-label ECE per run, raw and deployed",
        unit="images",
        after_label="deployed",
    )
    out = Path(out_dir)
    blocks = [
        Para(note, kind="verdict"),
        Table(
            ["", *names],
            [[n, *c] for n, c in rows[1:]],
            caption="raw -> deployed, each run's own figures (calibration.json)",
            css="figures",
        ),
        Heading(2, "Top-label ECE"),
        Fig(
            "compare_ece",
            chart,
            "Each run's top-label ECE, raw and deployed, with 90% intervals.",
            "top-label ECE per run",
        ),
    ]
    title = "Classifier calibration comparison: " + " vs ".join(names)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    files = {"figures/compare_ece.png": write_bytes(out / "figures" / "compare_ece.png", chart)}
    files["html"] = write_text(out / "compare.html", to_html(title, blocks))
    files["md"] = write_text(out / "compare.md", to_markdown(title, blocks))
    files["txt"] = write_text(out / "compare.txt", _text(rows, note))
    return files


def _compare_cli(args, _claim: bool) -> int:
    files = compare_classifier_runs(args.runs, out_dir=args.out, labels=args.labels)
    print(files["txt"].read_text(encoding="utf-8").rstrip("\n"))
    print(f"wrote compare.txt, compare.md, compare.html (and figures/) to {args.out}")
    return 0


RUN = TaskRun(
    claims=lambda args: any(is_classify_run(r) for r in args.runs) or None, run=_compare_cli
)
"""``compare``'s run where any compared folder is a classify run's (the others must be too)."""
