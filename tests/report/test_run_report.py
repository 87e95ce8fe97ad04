"""Tests of det_calib.report: the HTML/Markdown report of a run and the comparison of two runs.

Runs are synthetic: :func:`make_run` writes a run directory exactly as the pipeline does
(``boxes.parquet`` with the box table schema, and ``calibration.json`` written by a
:class:`det_calib.record.run_result.RunResult`), with numbers computed by det_calib.metrics.calibration /
det_calib.evaluation.kept_set (through :func:`det_calib.evaluation.figures.scores_of`, as the pipeline) from the
same boxes.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from det_calib.data.box_table import SCHEMA
from det_calib.errors import InputError
from det_calib.evaluation import kept_set as thresholds
from det_calib.evaluation.figures import _kept_gaps, _scores_of
from det_calib.metrics import calibration as metrics
from det_calib.metrics.detection_metrics import box_features
from det_calib.record.eval_record import Thresholded
from det_calib.record.run_result import (
    Bootstrap,
    Calibrator,
    ClassResult,
    EvalResult,
    FitResult,
    HeadResult,
    RecordedSettings,
    RunResult,
    ValCheck,
    ValMap,
)
from det_calib.report import compare_runs, write_report
from det_calib.report.common import f4, parse_run_spec
from det_calib.report.sections import _sections_of

NAMES = ["circle", "ellipse", "square", "rectangle", "triangle", "hexagon"]
SECTIONS = [
    s.title for s in _sections_of("report") if not s.optional
]  # a run without thresholds, export, ensemble
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------------
# synthetic run directory


def calibrated_conf(logits: np.ndarray, temperature: float) -> np.ndarray:
    """``sigmoid(logit / T)`` as a temperature's deployed conf is computed (the package's sigmoid)."""
    from det_calib.numeric import sigmoid

    return sigmoid(np.asarray(logits, dtype=np.float64) / temperature)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _boxes(
    rng: np.random.Generator,
    *,
    split: str,
    head: str,
    n_images: int,
    per_image: int,
    scale: float,
    class_p: np.ndarray,
    image_offset: int,
) -> pl.DataFrame:
    n = n_images * per_image
    image_id = np.repeat(np.arange(n_images), per_image) + image_offset
    z = rng.normal(-2.2, 1.8, size=n)  # calibrated logit
    correct = rng.uniform(size=n) < _sigmoid(z)
    logit = z * scale  # scale > 1: over-confident raw scores
    conf = _sigmoid(logit)
    iou = np.where(correct, rng.uniform(0.5, 0.98, n), rng.uniform(0.0, 0.49, n))
    ignore = rng.uniform(size=n) < 0.01
    x1 = rng.uniform(0, 250, n)
    y1 = rng.uniform(0, 250, n)
    w = rng.uniform(5, 60, n)
    h = rng.uniform(5, 60, n)
    cls = rng.choice(len(class_p), size=n, p=class_p).astype(np.int32)
    df = pl.DataFrame(
        {
            "image": [f"{split}/{i:04d}.jpg" for i in image_id],
            "image_id": image_id.astype(np.int64),
            "split": [split] * n,
            "head": [head] * n,
            "x1": x1,
            "y1": y1,
            "x2": np.minimum(x1 + w, 320.0),
            "y2": np.minimum(y1 + h, 320.0),
            "img_w": np.full(n, 320, np.int32),
            "img_h": np.full(n, 320, np.int32),
            "cls": cls,
            "conf": conf,
            "logit": logit,
            "correct": correct,
            "iou": iou,
            "ignore": ignore,
            "loc_iou": np.where(iou >= 0.1, iou, 0.0),
        }
    )
    return df.with_columns([pl.col(c).cast(t) for c, t in SCHEMA.items()])


def _shift(
    conf_b: np.ndarray, conf_a: np.ndarray, correct: np.ndarray, t: float, n_gt: int, temp: float
):
    return thresholds.threshold_shift(conf_b, conf_a, correct, conf=t, n_gt=n_gt, temperature=temp)


def make_run(
    root: Path,
    *,
    heads: tuple[str, ...] = ("nms",),
    names: list[str] = NAMES,
    scale: dict | None = None,
    n_images: int = 40,
    per_image: int = 30,
    seed: int = 0,
    rare: int | None = 5,
    n_boot: int = 30,
    ultralytics: bool = True,
) -> Path:
    """Write a run directory (boxes.parquet + calibration.json) like the pipeline does.

    ``rare`` is a class id given about 1% of the boxes, so that it has few boxes.
    """
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    scale = scale or {"nms": 1.4, "e2e": 0.8}
    p = np.ones(len(names))
    if rare is not None:
        p[rare] = 0.05
    p /= p.sum()
    frames = []
    for head in heads:
        frames.append(
            _boxes(
                rng,
                split="calib",
                head=head,
                n_images=n_images,
                per_image=per_image,
                scale=scale[head],
                class_p=p,
                image_offset=0,
            )
        )
        frames.append(
            _boxes(
                rng,
                split="test",
                head=head,
                n_images=n_images,
                per_image=per_image,
                scale=scale[head],
                class_p=p,
                image_offset=0,
            )
        )
    boxes = pl.concat(frames)
    boxes.write_parquet(root / "boxes.parquet")
    ece_bins, laece_bins = 15, 25
    temps = {h: round(float(scale[h]), 4) for h in heads}
    results = {}
    for head in heads:
        t = temps[head]
        fit = boxes.filter(
            (pl.col("head") == head) & (pl.col("split") == "calib") & ~pl.col("ignore")
        )
        ev = boxes.filter(
            (pl.col("head") == head) & (pl.col("split") == "test") & ~pl.col("ignore")
        )
        y = ev["correct"].to_numpy()
        z = ev["logit"].to_numpy()
        cb, ca = ev["conf"].to_numpy(), calibrated_conf(z, t)
        cls = ev["cls"].to_numpy()
        img = ev["image_id"].to_numpy()
        tgt = np.where(y, ev["loc_iou"].to_numpy(), 0.0)
        n_gt = int(y.sum() * 1.2)
        feats = box_features(
            *(ev[c].to_numpy() for c in ("x1", "y1", "x2", "y2", "img_w", "img_h"))
        )
        common = dict(
            logit=z,
            loc_iou=tgt,
            cls_id=cls,
            features=feats,
            image_id=img,
            ece_bins=ece_bins,
            laece_bins=laece_bins,
            dece_bins=[8, 3, 3, 3, 3],
            n_boot=n_boot,
            seed=0,
        )
        # D-ECE left out (null): it must render "n/a"
        before = dataclasses.replace(_scores_of(cb, y, temperature=1.0, **common), dece=None)
        after = dataclasses.replace(_scores_of(ca, y, temperature=t, **common), dece=None)
        e = EvalResult(
            split="test",
            images=n_images,
            boxes=ev.height,
            correct=int(y.sum()),
            n_gt=n_gt,
            ignored=int(
                boxes.filter((pl.col("head") == head) & (pl.col("split") == "test"))["ignore"].sum()
            ),
            corrupt_images=0,
            before=before,
            after=after,
            thresholded=[
                Thresholded(
                    conf=0.25,
                    boxes_before=int((cb > 0.25).sum()),
                    ece_before=metrics.ece(cb[cb > 0.25], y[cb > 0.25], n_bins=ece_bins),
                    boxes_after=int((ca > 0.25).sum()),
                    ece_after=metrics.ece(ca[ca > 0.25], y[ca > 0.25], n_bins=ece_bins),
                )
            ],
            map50_95_before=0.6123,
            map50_95_after=0.6123,
            map50_before=0.8345,
            map50_after=0.8345,
            map_identical=True,
        )
        pcs = []
        for k in np.unique(cls):
            m = cls == k
            n_gt_k = int(y[m].sum() * 1.2)
            pcs.append(
                ClassResult(
                    cls=int(k),
                    name=names[k],
                    boxes=int(m.sum()),
                    correct=int(y[m].sum()),
                    n_gt=n_gt_k,
                    few_boxes=bool(m.sum() < 50),
                    ece_before=metrics.ece(cb[m], y[m], n_bins=ece_bins),
                    ece_before_ci=metrics.bootstrap_ci(
                        metrics.ece, img[m], cb[m], y[m], n_boot=n_boot
                    ),
                    laece_before=metrics.laece(cb[m], tgt[m], cls[m], n_bins=laece_bins),
                    ece_after=metrics.ece(ca[m], y[m], n_bins=ece_bins),
                    ece_after_ci=metrics.bootstrap_ci(
                        metrics.ece, img[m], ca[m], y[m], n_boot=n_boot
                    ),
                    laece_after=metrics.laece(ca[m], tgt[m], cls[m], n_bins=laece_bins),
                    threshold_shift=[_shift(cb[m], ca[m], y[m], 0.25, n_gt_k, t)],
                )
            )
        val = ValCheck(
            split="test",
            original=ValMap(conf=0.001, map50_95=0.6011, map50=0.8201),
            calibrated=ValMap(conf=0.001, map50_95=0.6009, map50=0.8199),
            calibrated_equivalent_floor=ValMap(
                conf=float(thresholds.equivalent_threshold(0.001, t)), map50_95=0.6011, map50=0.8201
            ),
            identical_at_equivalent_floor=True,
            note="same floor keeps more low boxes after calibration",
        )
        results[head] = HeadResult(
            calibrator=Calibrator.temperature_scaling(t),
            fit=FitResult(
                split="calib",
                images=n_images,
                boxes=fit.height,
                correct=int(fit["correct"].sum()),
                nll_before=metrics.nll_logits(fit["logit"], fit["correct"]),
                nll_after=metrics.nll_logits(fit["logit"], fit["correct"], temperature=t),
                iterations=6,
            ),
            eval=e,
            threshold_shift=[_shift(cb, ca, y, 0.25, n_gt, t)],
            per_class=pcs,
            ultralytics_val=val if ultralytics else None,
        )
    settings = RecordedSettings(
        iou_match=0.5,
        loc_iou_match=0.1,
        fit_min_conf=0.0,
        conf_floor=0.001,
        nms_iou=0.7,
        max_det=300,
        imgsz=320,
        conf_thresholds=(0.25,),
        ece_bins=ece_bins,
        laece_bins=laece_bins,
        dece_bins=(8, 3, 3, 3, 3),
        min_class_boxes=50,
        bootstrap=Bootstrap(n_boot=n_boot, seed=0),
        fit_split="calib",
        eval_split="test",
        coco_gt=None,
    )
    RunResult(
        model="/abs/best.pt",
        data="/abs/data.yaml",
        class_names=list(names),
        heads=list(heads),
        settings=settings,
        results=results,
        det_calib_version="0.1.0",
        created="2026-11-29T12:00:00+00:00",
    ).write(root / "calibration.json")  # as the pipeline writes it
    return root


# --------------------------------------------------------------------------------------------
# HTML parsing


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.headings: list[tuple[str, str]] = []
        self.imgs: list[dict[str, str]] = []
        self.tables: list[dict] = []
        self.scripts = 0
        self.links: list[str] = []
        self._h: str | None = None
        self._text: list[str] = []
        self._row: dict | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("h1", "h2", "h3"):
            self._h, self._text = tag, []
        elif tag == "img":
            self.imgs.append(a)
        elif tag == "script":
            self.scripts += 1
        elif tag == "link":
            self.links.append(a.get("href", ""))
        elif tag == "table":
            self.tables.append({"class": a.get("class", ""), "attrs": a, "rows": [], "header": []})
        elif tag == "tr" and self.tables:
            self._row = {"attrs": a, "cells": []}
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == self._h:
            self.headings.append((tag, "".join(self._text).strip()))
            self._h = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row["cells"].append(("".join(self._cell).strip(), tag))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            t = self.tables[-1]
            if all(k == "th" for _, k in self._row["cells"]):
                t["header"] = [c for c, _ in self._row["cells"]]
            else:
                t["rows"].append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._h:
            self._text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def tables(page: _Page, css: str, head: str | None = None) -> list[dict]:
    return [
        t
        for t in page.tables
        if t["class"] == css and (head is None or t["attrs"].get("data-head") == head)
    ]


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def run_two(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    run = make_run(tmp_path_factory.mktemp("run2"), heads=("nms", "e2e"))
    return run, write_report(run)


@pytest.fixture(scope="module")
def run_one(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    run = make_run(
        tmp_path_factory.mktemp("run1"), heads=("e2e",), seed=3, ultralytics=False, rare=None
    )
    out = tmp_path_factory.mktemp("out1")
    return run, write_report(run, out_dir=out)


# --------------------------------------------------------------------------------------------
# write_report


def test_report_files_and_sections(run_two):
    run, paths = run_two
    assert paths["html"] == run / "report.html" and paths["md"] == run / "report.md"
    assert {p.name for p in (run / "figures").iterdir()} == {
        Path(k).name for k in paths if k.startswith("figures/")
    }
    page = parse(paths["html"])
    h2 = [t for tag, t in page.headings if tag == "h2"]
    assert h2 == SECTIONS  # every section, in the order of the one list
    assert SECTIONS == [
        "Summary",
        "Reliability",
        "Per-class calibration",
        "Threshold shift",
        "mAP verification",
        "Settings",
    ]
    assert page.scripts == 0 and not page.links  # nothing to fetch
    md = paths["md"].read_text()
    positions = [md.index(f"## {s}") for s in SECTIONS]
    assert positions == sorted(positions)
    assert not list(run.glob(".*.tmp")) and not list(
        (run / "figures").glob(".*.tmp")
    )  # atomic writes left nothing


def test_report_images_are_embedded_pngs(run_two):
    run, paths = run_two
    page = parse(paths["html"])
    figs = sorted(k for k in paths if k.startswith("figures/"))
    for head in ("nms", "e2e"):
        for stem in (
            "reliability",
            "confidence",
            "per_class_reliability",
            "per_class_ece",
            "threshold",
        ):
            assert f"figures/{stem}_{head}.png" in figs
    assert len(page.imgs) == len(figs)  # one <img> per figure
    for img in page.imgs:
        src = img["src"]
        assert src.startswith("data:image/png;base64,")
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data.startswith(PNG_MAGIC) and data.endswith(b"IEND\xaeB`\x82")
        assert data == paths[f"figures/{img['data-figure']}.png"].read_bytes()
        assert img.get("alt")
    md = paths["md"].read_text()
    for f in figs:
        assert f"]({f})" in md  # relative reference


def test_figures_drawn_in_children_are_the_same_bytes(run_two, tmp_path, monkeypatch):
    """On a machine of many cores the report draws its figures in forked children (at most two at once
    here), while it builds the next ones: every PNG and the HTML byte for byte those drawn in the process;
    a child that fails, or a fork that fails, leaves its figure to be drawn in the process, the same
    bytes again."""
    run, _ = run_two
    forks = []
    real_fork = os.fork

    def counted_fork():
        forks.append(1)
        return real_fork()

    monkeypatch.setattr("det_calib.report.run_report.figure_workers", lambda: 0)
    alone = write_report(run, out_dir=tmp_path / "alone")
    monkeypatch.setattr("det_calib.report.run_report.figure_workers", lambda: 2)
    monkeypatch.setattr("os.fork", counted_fork)
    forked = write_report(run, out_dir=tmp_path / "forked")
    figs = sorted(k for k in alone if k.startswith("figures/"))
    assert len(forks) == len(figs) >= 10  # every figure drawn in a child
    assert figs == sorted(k for k in forked if k.startswith("figures/"))
    for k in [*figs, "html", "md"]:
        assert forked[k].read_bytes() == alone[k].read_bytes(), k
    # a child that fails (its drawing raises there): the figure is drawn in the process instead
    plots = sys.modules["det_calib.report.plots"]
    parent, real_draw = os.getpid(), plots._draw

    def draw_fails_in_child(fig, post):
        if os.getpid() != parent:
            raise RuntimeError("a child's drawing failed")
        return real_draw(fig, post)

    monkeypatch.setattr(plots, "_draw", draw_fails_in_child)
    fallback = write_report(run, out_dir=tmp_path / "fallback")
    for k in [*figs, "html"]:
        assert fallback[k].read_bytes() == alone[k].read_bytes(), k
    assert not plots._RUNNING  # every child waited for

    def no_fork():
        raise BlockingIOError("Resource temporarily unavailable")

    monkeypatch.setattr(
        "os.fork", no_fork
    )  # no process to spare: every figure drawn in the process
    unforked = write_report(run, out_dir=tmp_path / "unforked")
    for k in [*figs, "html"]:
        assert unforked[k].read_bytes() == alone[k].read_bytes(), k


def test_report_numbers_match_calibration_json(run_two):
    run, paths = run_two
    calib = json.loads((run / "calibration.json").read_text())
    html = paths["html"].read_text()
    md = paths["md"].read_text()
    for head in ("nms", "e2e"):
        ev = calib["eval"][head]
        for key in (
            "ece_before",
            "ece_after",
            "nll_before",
            "brier_after",
            "laece_before",
            "ace_after",
            "mce_before",
        ):
            assert f"{f4(ev[key])}" in html, key
        lo, hi = ev["ece_after_ci"]
        assert f"{f4(ev['ece_after'])} [{f4(lo)}, {f4(hi)}]" in html
        assert f"{calib['temperature'][head]:.3f}" in html
        sh = calib["threshold_shift"][head][0]
        assert f"keep {sh['kept_after']:,} boxes instead of {sh['kept_before']:,}" in html
        assert f"{sh['precision_before']:.3f}" in html and f"{sh['recall_after']:.3f}" in html
        assert f"{sh['equivalent_conf']:.3f}" in html
    assert "too extreme" in html and "too timid" in html  # nms T=1.4, e2e T=0.8
    assert "ECE (15 bins, IoU 0.5)" in html and "LaECE (25 bins, loc. IoU 0.1)" in html
    assert "n/a" in html  # D-ECE is null in the JSON
    assert f"{f4(calib['eval']['nms']['ece_before'])}" in md
    assert "files may not come from the same run" not in html  # parquet and JSON agree
    # the settings say which temperature is deployed; the fit table names the deployed map
    t = calib["temperature"]
    assert f"| nms T = {t['nms']:.4f} (deployed), e2e T = {t['e2e']:.4f} (deployed) |" in md
    assert "**Fit of the deployed map (on the fit split, in sample)**" in md
    assert "| nms | temperature | " in md


def test_report_per_class_table(run_two):
    run, paths = run_two
    calib = json.loads((run / "calibration.json").read_text())
    page = parse(paths["html"])
    for head in ("nms", "e2e"):
        (t,) = tables(page, "per-class", head)
        pcs = calib["per_class"][head]
        assert len(t["rows"]) == len(pcs)  # one row per class
        assert sorted(int(r["attrs"]["data-cls"]) for r in t["rows"]) == sorted(
            p["cls"] for p in pcs
        )
        key = [
            (r["attrs"].get("class") == "few", -float(r["cells"][4][0].split()[0]))
            for r in t["rows"]
        ]
        assert key == sorted(key)  # sorted by raw ECE, classes with few boxes last
        by_cls = {p["cls"]: p for p in pcs}
        for r in t["rows"]:
            p = by_cls[int(r["attrs"]["data-cls"])]
            assert r["cells"][0][0] == f"{p['name']} ({p['cls']})"
            assert r["cells"][1][0] == f"{p['boxes']:,}"
            lo, hi = p["ece_before_ci"]
            assert r["cells"][4][0] == f"{f4(p['ece_before'])} [{f4(lo)}, {f4(hi)}]"
        (tc,) = tables(page, "threshold-shift-per-class", head)
        assert len(tc["rows"]) == len(pcs)


def test_few_boxes_flag(run_two):
    run, paths = run_two
    calib = json.loads((run / "calibration.json").read_text())
    page = parse(paths["html"])
    (t,) = tables(page, "per-class", "nms")
    few = {p["cls"] for p in calib["per_class"]["nms"] if p["boxes"] < 50}
    assert few == {5}  # the rare class of make_run
    for r in t["rows"]:
        flagged = r["attrs"].get("class") == "few"
        assert flagged == (int(r["attrs"]["data-cls"]) in few)
        assert (r["cells"][-1][0] == "few boxes") == flagged
    # shown, not hidden: the rare class is in the table, and named in the chart caption's figure
    assert any(int(r["attrs"]["data-cls"]) == 5 for r in t["rows"])
    # the flag is derived from min_class_boxes when the JSON lacks it
    calib2 = json.loads((run / "calibration.json").read_text())
    for p in calib2["per_class"]["nms"]:
        p.pop("few_boxes")
    calib2["min_class_boxes"] = 10_000
    d2 = run.parent / (run.name + "_nofew")
    d2.mkdir()
    shutil.copy(run / "boxes.parquet", d2 / "boxes.parquet")
    (d2 / "calibration.json").write_text(json.dumps(calib2))
    page2 = parse(write_report(d2)["html"])
    (t2,) = tables(page2, "per-class", "nms")
    assert all(r["attrs"].get("class") == "few" for r in t2["rows"])


def test_one_head_and_nulls(run_one):
    run, paths = run_one
    assert paths["html"].parent != run  # out_dir honoured
    assert not (run / "report.html").exists()
    page = parse(paths["html"])
    assert [t for tag, t in page.headings if tag == "h2"] == SECTIONS
    # no per-head subsections with one head; the all-box figures under a heading that says so
    assert [t for tag, t in page.headings if tag == "h3"] == ["All boxes, down to conf 0.001"]
    assert len(page.imgs) == 5
    (t,) = tables(page, "map-ultralytics")
    assert t["rows"][0]["cells"][1][0] == "n/a (not run)"
    html = paths["html"].read_text()
    assert "too timid" in html and "T = 0.800 &lt; 1" in html
    assert "T = 0.800 < 1" in paths["md"].read_text()


def test_a_reference_on_other_images_or_of_another_head_is_said(tmp_path, run_two):
    """``report RUN --reference OTHER``: the engines table says when the runs were evaluated on other
    images, or when a row is another head, before their figures are read side by side."""
    run, _ = run_two
    other = make_run(tmp_path / "other", heads=("nms", "e2e"), n_images=24, seed=5)
    out = write_report(run, out_dir=tmp_path / "r1", reference=f"{other}:e2e")
    md = out["md"].read_text()
    engines = md[md.index("## Engines") :]
    assert "The runs were evaluated on different images (other: split" in engines
    assert "The rows are of different heads (other: e2e, " in engines
    same = write_report(run, out_dir=tmp_path / "r2", reference=str(run))["md"].read_text()
    assert "evaluated on different images" not in same and "different heads" not in same


def test_report_survives_missing_values(tmp_path):
    run = make_run(tmp_path / "r", heads=("nms",), n_images=10, per_image=20, n_boot=5)
    calib = json.loads((run / "calibration.json").read_text())
    calib["eval"]["nms"] = dict.fromkeys(calib["eval"]["nms"])
    calib["threshold_shift"] = None
    calib["per_class"]["nms"] = None
    calib["fit"] = None
    calib["temperature"]["nms"] = None  # no fit: raw only
    calib["conf_thresholds"] = None
    (run / "calibration.json").write_text(json.dumps(calib))
    paths = write_report(run)
    page = parse(paths["html"])
    assert [t for tag, t in page.headings if tag == "h2"] == SECTIONS
    assert "not fitted" in paths["html"].read_text()


def test_missing_and_corrupt_inputs(tmp_path):
    with pytest.raises(InputError, match="run directory not found"):
        write_report(tmp_path / "nope")
    run = make_run(tmp_path / "r", n_images=5, per_image=10, n_boot=5)
    (run / "calibration.json").write_text("{not json")
    with pytest.raises(InputError, match=r"calibration\.json") as e:
        write_report(run)
    assert "\n" not in str(e.value)
    (run / "calibration.json").unlink()
    with pytest.raises(InputError, match=r"calibration file not found: .*calibration\.json"):
        write_report(run)
    run = make_run(tmp_path / "r2", n_images=5, per_image=10, n_boot=5)
    (run / "boxes.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(InputError, match=r"boxes\.parquet") as e:
        write_report(run)
    assert "\n" not in str(e.value)
    (run / "boxes.parquet").unlink()
    with pytest.raises(InputError, match=r"box table not found: .*boxes\.parquet"):
        write_report(run)
    run = make_run(tmp_path / "r3", n_images=5, per_image=10, n_boot=5)
    pl.read_parquet(run / "boxes.parquet").drop("correct").write_parquet(run / "boxes.parquet")
    with pytest.raises(InputError, match=r"boxes\.parquet.*missing columns"):
        write_report(run)
    run = make_run(tmp_path / "r4", n_images=5, per_image=10, n_boot=5)
    calib = json.loads((run / "calibration.json").read_text())
    calib["heads"] = ["yolo"]
    (run / "calibration.json").write_text(json.dumps(calib))
    with pytest.raises(InputError, match=r"calibration\.json.*heads"):
        write_report(run)


def test_class_without_boxes(tmp_path):
    """A class with ground truth but no box (the pipeline writes null metrics) gets a row, not a crash."""
    run = make_run(tmp_path / "r", n_images=10, per_image=20, n_boot=5, rare=None)
    calib = json.loads((run / "calibration.json").read_text())
    calib["class_names"].append("octagon")
    calib["per_class"]["nms"].append(
        {
            "cls": 6,
            "name": "octagon",
            "boxes": 0,
            "correct": 0,
            "n_gt": 4,
            "few_boxes": True,
            "ece_before": None,
            "ece_after": None,
            "ece_before_ci": None,
            "ece_after_ci": None,
            "laece_before": None,
            "laece_after": None,
            "threshold_shift": [],
        }
    )
    (run / "calibration.json").write_text(json.dumps(calib))
    paths = write_report(run)
    (t,) = tables(parse(paths["html"]), "per-class", "nms")
    last = t["rows"][-1]
    assert last["attrs"]["data-cls"] == "6" and last["attrs"]["class"] == "few"
    assert [c for c, _ in last["cells"][1:6]] == ["0", "0", "4", "n/a", "n/a"]
    html = paths["html"].read_text()
    assert "D-ECE (bins 8×3×3×3×3 over conf, x, y, w, h, IoU 0.5)" in html


@pytest.mark.fast
def test_metric_format():
    assert f4(0.04931) == "0.0493" and f4(4.3e-05) == "4.3e-05" and f4(0.0) == "0.0000"
    assert f4(None) == "n/a" and f4(float("nan")) == "n/a" and f4(True) == "n/a"


def test_report_flags_mismatched_files(tmp_path):
    run = make_run(tmp_path / "r", n_images=10, per_image=20, n_boot=5)
    calib = json.loads((run / "calibration.json").read_text())
    calib["eval"]["nms"]["ece_before"] += 0.05
    (run / "calibration.json").write_text(json.dumps(calib))
    html = write_report(run)["html"].read_text()
    assert "may not come from the same run" in html


# --------------------------------------------------------------------------------------------
# the precision/recall curve and the threshold maths the report draws


@pytest.mark.fast
def test_precision_recall_vs_conf_known_answer():
    conf = np.array([0.9, 0.8, 0.6, 0.3, 0.25, 0.1])
    correct = np.array([True, False, True, True, False, False])
    grid = np.array([0.0, 0.25, 0.5, 0.85, 0.95])
    _, p, r, kept = thresholds.precision_recall_vs_conf(conf, correct, n_gt=5, grid=grid)
    assert kept.tolist() == [
        6,
        4,
        3,
        1,
        0,
    ]  # strictly above the threshold: 0.25 is not kept at 0.25
    np.testing.assert_allclose(p[:4], [3 / 6, 3 / 4, 2 / 3, 1.0])
    assert math.isnan(p[4])
    np.testing.assert_allclose(r, [3 / 5, 3 / 5, 2 / 5, 1 / 5, 0.0])


def test_curve_agrees_with_shift_table(run_two):
    """The curve drawn at the operating point gives the precision/recall the table reports."""
    run, _ = run_two
    calib = json.loads((run / "calibration.json").read_text())
    df = pl.read_parquet(run / "boxes.parquet").filter(
        (pl.col("head") == "nms") & (pl.col("split") == "test") & ~pl.col("ignore")
    )
    t = calib["temperature"]["nms"]
    sh = calib["threshold_shift"]["nms"][0]
    y = df["correct"].to_numpy()
    ca = calibrated_conf(df["logit"].to_numpy(), t)
    grid = np.array([0.25, sh["equivalent_conf"]])
    _, p, r, kept = thresholds.precision_recall_vs_conf(ca, y, n_gt=sh["n_gt"], grid=grid)
    assert kept[0] == sh["kept_after"]
    assert math.isclose(p[0], sh["precision_after"]) and math.isclose(r[0], sh["recall_after"])
    assert (
        abs(kept[1] - sh["kept_before"]) <= 1
    )  # the equivalent threshold keeps the raw set (up to a tie at the edge)


@pytest.mark.fast
def test_calibrated_conf_and_spec():
    z = np.array([-800.0, -2.0, 0.0, 3.0, 800.0])
    c = calibrated_conf(z, 2.0)
    assert np.all(np.isfinite(c)) and c[2] == 0.5
    np.testing.assert_allclose(c[1:4], 1 / (1 + np.exp(-z[1:4] / 2)))
    assert parse_run_spec("out:nms") == (Path("out"), "nms")
    assert parse_run_spec("out") == (Path("out"), None)
    assert parse_run_spec("C:/runs/x") == (Path("C:/runs/x"), None)  # a colon that is not a head


# --------------------------------------------------------------------------------------------
# compare_runs


def test_compare_two_runs(tmp_path, run_two):
    run_a, _ = run_two
    # hexagon only in A, pentagon only in B
    names_b = ["circle", "ellipse", "square", "rectangle", "triangle", "pentagon"]
    run_b = make_run(
        tmp_path / "b",
        heads=("nms",),
        names=names_b,
        scale={"nms": 1.1},
        seed=7,
        n_boot=10,
        rare=None,
    )
    paths = compare_runs(
        f"{run_a}:nms", run_b, out_dir=tmp_path / "cmp", labels=["yolo-a", "yolo-b"]
    )
    assert set(paths) == {
        "html",
        "md",
        "txt",
        "figures/compare_reliability.png",
        "figures/compare_per_class_ece.png",
        "figures/compare_operating_reliability.png",
        "figures/compare_per_class_heatmap.png",
    }
    assert (
        paths["html"] == tmp_path / "cmp" / "compare.html"
        and paths["md"] == tmp_path / "cmp" / "compare.md"
    )
    assert paths["txt"] == tmp_path / "cmp" / "compare.txt"
    page = parse(paths["html"])
    h2 = [t for tag, t in page.headings if tag == "h2"]
    assert h2 == [s.title for s in _sections_of("compare") if not s.optional]
    assert h2 == ["Summary", "Reliability", "Per-class calibration", "Settings"]
    assert len(page.imgs) == 4
    for img in page.imgs:
        assert base64.b64decode(img["src"].split(",", 1)[1]).startswith(PNG_MAGIC)
    (m,) = tables(page, "compare-metrics")
    # one row per metric and run
    assert [r["cells"][0][0].split(" (")[0] for r in m["rows"]] == [
        "ECE",
        "ECE",
        "LaECE",
        "LaECE",
        "NLL",
        "NLL",
        "Brier",
        "Brier",
    ]
    assert [r["cells"][1][0].split(" (")[0] for r in m["rows"]] == ["yolo-a", "yolo-b"] * 4
    for r in m["rows"]:
        assert len(r["cells"]) == 4
        for cell, _ in r["cells"][2:]:
            assert re.fullmatch(r"[\d.e-]+ \[[\d.e-]+, [\d.e-]+\]", cell), (
                r["cells"][0],
                cell,
            )  # value + 95% CI
    ca = json.loads((run_a / "calibration.json").read_text())
    cb = json.loads((run_b / "calibration.json").read_text())
    assert m["rows"][0]["cells"][2][0].startswith(f"{f4(ca['eval']['nms']['ece_before'])} [")
    assert m["rows"][5]["cells"][2][0].startswith(f"{f4(cb['eval']['nms']['nll_before'])} [")
    (pc,) = tables(page, "compare-per-class")
    by: dict[str, dict[str, dict]] = {}  # class -> run (A, B, and the difference B − A) -> row
    for r in pc["rows"]:
        by.setdefault(r["cells"][0][0].removesuffix(" (few boxes)"), {})[r["cells"][2][0]] = r
    assert set(by) == set(NAMES) | {"pentagon"}  # one-run classes listed, not dropped
    assert all(list(rows) == ["A", "B", "B − A"] for rows in by.values())
    assert (
        by["hexagon"]["A"]["cells"][1][0] == "A only"
        and by["pentagon"]["A"]["cells"][1][0] == "B only"
    )
    assert by["hexagon"]["B"]["cells"][3][0] == "n/a"
    pa = {p["name"]: p for p in ca["per_class"]["nms"]}
    pb = {p["name"]: p for p in cb["per_class"]["nms"]}
    assert (
        by["circle"]["B − A"]["cells"][5][0]
        == f"{f4(pb['circle']['ece_after'] - pa['circle']['ece_after'])}"
    )
    assert all(r["attrs"].get("class") == "few" for r in by["hexagon"].values())  # few boxes in A
    assert by["hexagon"]["A"]["cells"][0][0] == "hexagon (few boxes)"
    html = paths["html"].read_text()
    assert "Only in yolo-a: hexagon" in html


def test_compare_heads_of_one_run(tmp_path, run_two):
    run, _ = run_two
    paths = compare_runs(f"{run}:nms", f"{run}:e2e", out_dir=tmp_path / "heads")
    html = paths["html"].read_text()
    assert f"{run.name}:nms vs {run.name}:e2e" in html
    with pytest.raises(InputError, match="no head 'e2e'"):
        compare_runs(
            f"{run}:nms",
            f"{make_run(tmp_path / 'one', n_images=5, per_image=10, n_boot=5)}:e2e",
            out_dir=tmp_path / "x",
        )
    with pytest.raises(InputError, match="labels"):
        compare_runs(run, run, out_dir=tmp_path / "y", labels=["only one"])


# --------------------------------------------------------------------------------------------
# the page as a browser sees it


def _chromium() -> str | None:
    return (
        shutil.which("chromium")
        or shutil.which("chromium-browser")
        or shutil.which("google-chrome")
    )


def rendered(html: Path) -> _Page:
    """The page as headless Chromium builds it (its DOM after loading, parsed)."""
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run(
            [
                _chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--dump-dom",
                html.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert res.returncode == 0, res.stderr[-2000:]
    page = _Page()
    page.feed(res.stdout)
    return page


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed")
def test_report_in_headless_chromium(run_two):
    run, paths = run_two
    page = rendered(paths["html"])
    assert [t for tag, t in page.headings if tag == "h2"] == SECTIONS
    n_figs = len([k for k in paths if k.startswith("figures/")])
    assert len(page.imgs) == n_figs
    assert all(i["src"].startswith("data:image/png;base64,") for i in page.imgs)
    assert len(tables(page, "per-class", "nms")) == 1 and len(tables(page, "per-class", "e2e")) == 1
    assert len(tables(page, "per-class", "nms")[0]["rows"]) == len(NAMES)


@pytest.mark.fast
def test_image_level_bootstrap_equals_box_level():
    """The compare page's fast NLL/Brier intervals equal metrics.bootstrap_ci over boxes."""
    from det_calib.data.box_view import BoxView
    from det_calib.record.run_folder import HeadBoxes
    from det_calib.record.run_result import Bootstrap
    from det_calib.report.separation import _boot_mean as boot_mean

    rng = np.random.default_rng(1)
    n = 600
    img = rng.integers(0, 37, n) * 3 + 5  # unsorted, non-contiguous image ids
    z = rng.normal(-1, 2, n)
    y = rng.uniform(size=n) < _sigmoid(z)
    hb = HeadBoxes(
        BoxView(
            logit=z,
            conf=_sigmoid(z),
            correct=y,
            cls=np.zeros(n, np.int64),
            image_id=img,
            head="nms",
            split="test",
        ),
        None,
        1.3,
    )
    boot = Bootstrap(n_boot=200, seed=4, level=0.9)
    fast = boot_mean(metrics.brier, hb, [hb.conf, hb.correct], boot)
    slow = metrics.bootstrap_ci(
        metrics.brier, img, hb.conf, hb.correct, n_boot=200, seed=4, level=0.9
    )
    np.testing.assert_allclose(fast, slow, rtol=1e-12)
    nll_t = lambda zz, yy, weights=None: metrics.nll_logits(
        zz, yy, temperature=1.3, weights=weights
    )  # noqa: E731
    fast = boot_mean(nll_t, hb, [hb.logit, hb.correct], boot)
    slow = metrics.bootstrap_ci(nll_t, img, hb.logit, hb.correct, n_boot=200, seed=4, level=0.9)
    np.testing.assert_allclose(fast, slow, rtol=1e-12)


def test_conf_thresholds_section_when_the_run_has_thresholds_json(tmp_path):
    """The section appears (after "Threshold shift") only with a thresholds.json; a thresholds.json
    tuned with another temperature is flagged; a corrupt one is a warning, not a failed report."""
    from det_calib.thresholds.per_class import tune_run

    run = make_run(tmp_path / "r", heads=("nms",), n_images=20, per_image=20, n_boot=5)
    calib = json.loads((run / "calibration.json").read_text())
    n_gt = {sp: dict.fromkeys(range(len(NAMES)), 60) for sp in calib["splits"].values()}
    tune_run(run, head="nms", target_precision=0.7, delta=0.1, n_gt=n_gt, n_boot=20)
    want = [
        s.title for s in _sections_of("report") if not s.optional or s.title == "Conf thresholds"
    ]
    assert want == [*SECTIONS[:4], "Conf thresholds", *SECTIONS[4:]]
    page = parse(write_report(run)["html"])
    assert [t for tag, t in page.headings if tag == "h2"] == want
    rows = tables(page, "thresholds", "nms")[0]["rows"]
    assert len(rows) == 1 + len(NAMES)  # global + every class
    html = (run / "report.html").read_text()
    assert 'id="fig-thresholds_pr_nms"' in html and "was tuned with T" not in html

    doc = json.loads((run / "thresholds.json").read_text())
    doc["heads"]["nms"]["score"]["temperature"] = 2.5
    (run / "thresholds.json").write_text(json.dumps(doc))
    assert "thresholds.json was tuned with T = 2.5000" in write_report(run)["html"].read_text()

    (run / "thresholds.json").write_text(
        json.dumps({"format": "det_calib.thresholds", "version": 99, "heads": {}})
    )
    paths = write_report(run)
    page = parse(paths["html"])
    assert [t for tag, t in page.headings if tag == "h2"] == want
    assert "thresholds.json could not be shown" in paths["html"].read_text()


def test_figures_use_no_mathtext(tmp_path, monkeypatch):
    """No figure of a report or a comparison goes through mathtext: its fonts (STIX, Computer
    Modern) are not needed, so a matplotlib font cache written by another environment cannot
    make a run print "findfont" warnings. Log count axes are labelled 1, 10, 100, 1k, ..."""
    from matplotlib.mathtext import MathTextParser

    parsed = []
    real = MathTextParser.parse

    def spy(self, s, *args, **kwargs):
        parsed.append(s)
        return real(self, s, *args, **kwargs)

    monkeypatch.setattr(MathTextParser, "parse", spy)
    run = make_run(tmp_path / "run", heads=("nms", "e2e"), n_boot=5)
    paths = write_report(run, out_dir=tmp_path / "report")
    assert sum(k.startswith("figures/") for k in paths) >= 10
    compare_runs(f"{run}:nms", f"{run}:e2e", out_dir=tmp_path / "cmp")
    assert parsed == []


@pytest.mark.fast
def test_log_count_labels():
    from det_calib.report.plots import _count

    assert [_count(v) for v in (1, 10, 100, 1000, 25_000, 3e6, 0.5)] == [
        "1",
        "10",
        "100",
        "1k",
        "25k",
        "3M",
        "0.5",
    ]


# --------------------------------------------------------------------------------------------
# the section contract, and the answer first


def summary_opening(html: str) -> list[tuple[str, Any]]:
    """The blocks that open the Summary, in order, up to the first block that is none of these: an
    answer line (``<p class="lead">``: ``("lead", text)``), a head's verdict (``<p class="verdict">``:
    ``("verdict", text)``), the figures under it (``<ul class="answer">``: ``("answer", [item, ...])``)
    and a figure (``("fig", name)``)."""
    import html as html_lib

    body = html[html.index('<h2 id="summary">') :]
    body = body[body.index("</h2>") + 5 :]
    out = []
    pattern = (
        r'\s*(?:<p class="(lead|verdict)">(.*?)</p>|<ul class="answer">(.*?)</ul>'
        r'|<figure id="fig-([^"]+)">.*?</figure>)'
    )
    for m in re.finditer(pattern, body, re.S):
        if m.start() != (out[-1][2] if out else 0):
            break
        if m.group(1) is not None:
            out.append((m.group(1), html_lib.unescape(m.group(2)), m.end()))
        elif m.group(3) is not None:
            items = [html_lib.unescape(i) for i in re.findall(r"<li>(.*?)</li>", m.group(3), re.S)]
            out.append(("answer", items, m.end()))
        else:
            out.append(("fig", m.group(4), m.end()))
    return [(k, v) for k, v, _ in out]


def with_operating_figures(run: Path) -> dict:
    """Give a synthetic run the kept-set figures the pipeline records (ECE of the boxes kept at conf 0.25
    raw and calibrated, computed here from the boxes, and a sampling floor; the second head also a LaECE_0
    floor) and return its calibration.json."""
    calib = json.loads((run / "calibration.json").read_text())
    boxes = pl.read_parquet(run / "boxes.parquet")
    for k, head in enumerate(calib["heads"]):
        ev = boxes.filter(
            (pl.col("head") == head) & (pl.col("split") == "test") & ~pl.col("ignore")
        )
        y, z = ev["correct"].to_numpy(), ev["logit"].to_numpy()
        cb, ca = ev["conf"].to_numpy(), calibrated_conf(z, calib["temperature"][head])
        ops = []
        for j, conf in enumerate((cb, ca)):
            kept = conf > 0.25
            ops.append(
                {
                    "conf": 0.25,
                    "boxes": int(kept.sum()),
                    "correct": int(y[kept].sum()),
                    "ece": metrics.ece(conf[kept], y[kept], n_bins=15),
                    "ece_floor": 0.031 + k / 100,
                    "ece_floor_range": [0.012 + k / 100, 0.055 + k / 100],
                    "laece0": 0.12 + k / 100 - j / 100,
                }
            )
            if (
                k == 1
            ):  # the second head's LaECE_0 floor (0.12 calibrated: at it); the first's as in older runs
                ops[-1].update({"laece_floor": 0.1, "laece_floor_range": [0.09, 0.125]})
        calib["eval"][head]["operating_before"], calib["eval"][head]["operating_after"] = (
            [ops[0]],
            [ops[1]],
        )
        calib["eval"][head]["kept_gaps_after"] = [
            dataclasses.asdict(g) for g in _kept_gaps(ca, y, threshold=0.25, n_bins=15)
        ]
    (run / "calibration.json").write_text(json.dumps(calib))
    return calib


def test_each_head_opens_with_its_verdict_then_its_kept_set_diagram(tmp_path):
    """The Summary opens with each head's verdict and the figures it rests on (the kept-set ECE raw →
    calibrated against its sampling floor, the boxes kept with precision and recall raw → calibrated and
    the calibrated threshold that keeps the raw set, LaECE_0, mAP), then each head's reliability diagram
    of the kept boxes; the definitions of the floor and the intervals come after them, the all-box diagrams
    in the Reliability section under a heading that says they are all boxes."""
    run = make_run(tmp_path / "r", heads=("nms", "e2e"), n_images=20, per_image=20, n_boot=5)
    calib = with_operating_figures(run)
    ece = {
        h: [calib["eval"][h][k][0]["ece"] for k in ("operating_before", "operating_after")]
        for h in calib["heads"]
    }
    worse = {h: b + 1e-6 < a for h, (b, a) in ece.items()}
    assert worse == {
        "nms": False,
        "e2e": True,
    }  # T = 1.4 helps the kept boxes here, T = 0.8 does not
    paths = write_report(run)
    html = paths["html"].read_text()
    opening = summary_opening(html)
    assert [k for k, _ in opening] == ["verdict", "answer", "verdict", "answer", "fig", "fig"]
    assert [v for k, v in opening if k == "fig"] == ["kept_reliability_nms", "kept_reliability_e2e"]
    for (_, line), (_, items), head in zip(
        opening[0:4:2], opening[1:4:2], ("nms", "e2e"), strict=True
    ):
        o0, o1 = (calib["eval"][head][k][0] for k in ("operating_before", "operating_after"))
        lo, hi = o1["ece_floor_range"]
        sh = calib["threshold_shift"][head][0]
        if worse[head]:
            assert line == (
                f"{head}: worse: keep the raw scores (calibrated, the {o1['boxes']:,} boxes kept "
                "at "
                "conf 0.25 score a higher ECE than raw"
                + (", although still within its sampling floor's range" if o1["ece"] <= hi else "")
                + ")"
            ), line
        else:  # better than raw, above its floor: the two bins with the most of the ECE left
            g = calib["eval"][head]["kept_gaps_after"][:2]
            assert o1["ece"] > hi and len(g) == 2 and g[0]["share"] >= g[1]["share"] > 0
            sides = ["over" if x["accuracy"] < x["conf"] else "under" for x in g]
            assert line == (
                f"{head}: improved, still above its floor; most of the ECE left, {f4(o1['ece'])}, "
                "comes "
                f"from conf {g[0]['lo']:.2f}–{g[0]['hi']:.2f} ({sides[0]}-confident: "
                f"{f4(g[0]['share'])} "
                f"of it) and {g[1]['lo']:.2f}–{g[1]['hi']:.2f} ({sides[1]}-confident: "
                f"{f4(g[1]['share'])})"
            ), line
        assert items[0] == (
            f"ECE of the boxes kept at conf 0.25: raw {f4(o0['ece'])} → calibrated "
            f"{f4(o1['ece'])}; "
            f"sampling floor {f4(o1['ece_floor'])} [{f4(lo)}, {f4(hi)}] (what a perfectly "
            "calibrated "
            "detector scores on these boxes, 95% range)"
        ), items[0]
        assert items[1] == (
            f"Boxes kept at conf 0.25: {sh['kept_before']:,} → {sh['kept_after']:,}; precision "
            f"{sh['precision_before']:.3f} → {sh['precision_after']:.3f}, recall "
            f"{sh['recall_before']:.3f} → {sh['recall_after']:.3f}; raw 0.25 = calibrated "
            f"{sh['equivalent_conf']:.3f} (the calibrated threshold that keeps the raw set)"
        ), items[1]
        assert items[2].startswith(
            f"LaECE_0 of the boxes kept at conf 0.25: raw {f4(o0['laece0'])} → calibrated "
            f"{f4(o1['laece0'])}; sampling floor "
        ), items[2]
        assert items[3].startswith(
            f"mAP50-95 {f4(calib['eval'][head]['map50_95_before'])} unchanged (the same boxes "
            "rescored); Ultralytics val mAP50-95 "
        ), items[3]
        assert items[3].endswith(f"; deployed: temperature T = {calib['temperature'][head]:.3f}"), (
            items[3]
        )
    first_table = html.index("<table")
    assert html.index('data-figure="kept_reliability_e2e"') < first_table
    for definition in (
        "ECE floor: the kept-set ECE a perfectly calibrated detector",
        "Intervals: 95% image bootstrap",
    ):
        assert (
            html.index(definition) > first_table
        )  # below the operating-point table, not in its caption
    assert "docs/report.md" in html
    reliability = html[html.index('<h2 id="reliability">') :]
    for head in ("nms", "e2e"):  # the all-box diagram of each head, under a heading that says so
        h3 = reliability.index(f'<h3 id="head-{head}')
        assert (
            "all boxes, down to conf 0.001</h3>"
            in reliability[h3 : reliability.index("</h3>", h3) + 5]
        )
        assert h3 < reliability.index(f'data-figure="reliability_{head}"')
    assert html.index('data-figure="reliability_nms"') > html.index('<h2 id="reliability">')
    md = paths["md"].read_text()
    assert (
        md[md.index("## Summary") :].split("\n")[2].startswith("**nms: improved, still above")
    )  # the answer, first


def test_opening_of_a_run_without_kept_set_figures(run_one):
    """A run that predates the operating-point figures says so, gives the all-box ECE, named as such, and
    draws no kept-set diagram."""
    run, paths = run_one
    calib = json.loads((run / "calibration.json").read_text())
    ev = calib["eval"]["e2e"]
    sh = calib["threshold_shift"]["e2e"][0]
    (kind, line), (answer, items) = summary_opening(paths["html"].read_text())
    assert (kind, answer) == ("verdict", "answer")
    assert (
        line == "e2e: no verdict: this run records no kept-set figures (it predates them); all-box "
        "figures below"
    )
    assert (
        items[0] == f"All-box ECE (every box down to conf 0.001): {f4(ev['ece_before'])} → "
        f"{f4(ev['ece_after'])}"
    )
    assert items[1].startswith(
        f"Boxes kept at conf 0.25: {sh['kept_before']:,} → {sh['kept_after']:,}; precision "
    )
    assert items[2] == (
        f"mAP50-95 {f4(ev['map50_95_before'])} unchanged (the same boxes rescored); deployed: "
        "temperature T = 0.800"
    )


def test_pages_follow_the_one_list_of_sections(tmp_path, monkeypatch):
    """write_report and compare_runs write exactly the list's sections for their page, in its order, with
    the same section functions (a comparison re-writes none of them); compare.py builds no block itself."""
    import inspect

    from det_calib.report import compare as compare_module
    from det_calib.report import sections

    calls: list[tuple[str, str]] = []

    def spy(sec):
        def build(page, ctx):
            calls.append((ctx.kind, sec.title))
            return sec.build(page, ctx)

        return dataclasses.replace(sec, build=build)

    monkeypatch.setattr(sections, "_SECTIONS", tuple(spy(s) for s in sections._SECTIONS))
    run = make_run(tmp_path / "r", heads=("nms", "e2e"), n_images=10, per_image=20, n_boot=5)
    write_report(run)
    compare_runs(f"{run}:nms", f"{run}:e2e", out_dir=tmp_path / "cmp")
    assert [t for k, t in calls if k == "report"] == [s.title for s in _sections_of("report")]
    assert [t for k, t in calls if k == "compare"] == [s.title for s in _sections_of("compare")]
    shared = {"Summary", "Reliability", "Per-class calibration", "Conf thresholds", "Settings"}
    assert shared <= {s.title for s in _sections_of("report")} & {
        s.title for s in _sections_of("compare")
    }
    src = inspect.getsource(compare_module)
    assert "Heading(" not in src and "Table(" not in src and "Para(" not in src


def test_a_section_writes_only_its_own_headings(tmp_path):
    """build_page holds every section to its entry: a heading of another section, or none where the
    section is not optional, is a defect it reports."""
    from det_calib.record.run_folder import load_run
    from det_calib.report import sections
    from det_calib.report.document import Heading
    from det_calib.report.run_report import _report_context as report_context

    run = make_run(tmp_path / "r", n_images=5, per_image=10, n_boot=5)
    ctx = report_context(load_run(run))
    page = sections.build_page(ctx)
    assert [b.text for b in page.blocks if isinstance(b, Heading) and b.level == 2] == SECTIONS
    assert sections._section_of("Calibrators compared: A").title == "Calibrators compared"
    assert (
        sections._section_of("Engines (nms head)").title == "Engines"
        and sections._section_of("Engine") is None
    )
    bad = sections.Section("Settings", lambda page, ctx: page.add(Heading(2, "Options")))
    silent = sections.Section("Settings", lambda page, ctx: None)
    for wrong in (bad, silent):
        orig = sections._SECTIONS
        try:
            sections._SECTIONS = (*orig[:-1], wrong)
            with pytest.raises(ValueError, match="section 'Settings' wrote the headings"):
                sections.build_page(ctx)
        finally:
            sections._SECTIONS = orig


def test_a_report_written_while_its_run_is_verified_is_the_complete_runs_page(
    tmp_path, monkeypatch
):
    """draft_report (calibrate, while its Ultralytics val runs beside the report) writes every section but
    the checked ones from the record it is given; ReportDraft.write writes those from the complete record,
    in their places, and gives the page the complete run's folder gives, byte for byte. The report calls
    nothing back: the job hands it the complete record."""
    from det_calib.report import sections
    from det_calib.report.run_report import draft_report

    run = make_run(tmp_path / "r", heads=("nms", "e2e"), n_images=10, per_image=20, n_boot=5)
    complete = RunResult.read(run / "calibration.json")
    assert all(complete.head(h).ultralytics_val is not None for h in complete.heads)
    pending = tmp_path / "pending"
    shutil.copytree(run, pending)
    (pending / "calibration.json").unlink()  # the run being written: its record is not on disk yet
    early = RunResult.read(run / "calibration.json")
    for h in early.heads:  # what the record holds before the verification is in
        early.results[h] = dataclasses.replace(early.results[h], ultralytics_val=None)
    early.seconds = 1.0

    calls: list[str] = []

    def spy(sec):
        def build(page, ctx):
            calls.append(sec.title)
            return sec.build(page, ctx)

        return dataclasses.replace(sec, build=build)

    monkeypatch.setattr(sections, "_SECTIONS", tuple(spy(s) for s in sections._SECTIONS))
    draft = draft_report(pending, early, shown_dir=run)
    titles = [s.title for s in _sections_of("report")]
    checked = [s.title for s in _sections_of("report") if s.checked]
    assert {"mAP verification", "Settings"} <= set(checked)
    assert calls == [t for t in titles if t not in checked] and not (pending / "report.md").exists()
    a = draft.write(complete)
    assert calls[len(titles) - len(checked) :] == checked
    b = write_report(run, out_dir=tmp_path / "b")
    assert (
        a["html"].read_bytes() == b["html"].read_bytes()
        and a["md"].read_text() == b["md"].read_text()
    )
    figs = sorted(k for k in a if k.startswith("figures/"))
    assert figs == sorted(k for k in b if k.startswith("figures/")) and list(a) == list(b)
    assert all(a[k].read_bytes() == b[k].read_bytes() for k in figs)
    assert f4(complete.head("nms").ultralytics_val.original.map50_95) in a["md"].read_text()
