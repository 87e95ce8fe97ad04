"""`det-calib compare` of real runs of the demo detector on the fixture split: three runs
(`--method temperature`, `--method platt`, the default `auto`) and the two heads of one run.
Every number the comparison prints is checked against the runs' calibration.json (or, for the
NLL and Brier intervals that a run does not store, against det_calib.metrics.calibration.bootstrap_ci over
the run's boxes), every printed interval contains its estimate, and the page renders in
headless Chromium."""

from __future__ import annotations

import base64
import re

import numpy as np
import polars as pl
import pytest
from conftest import printed_interval_violations
from test_run_report import _chromium, parse, rendered, summary_opening, tables
from test_verdict import WIDTH, measured

from det_calib.calibrators.base import calibrated_logits
from det_calib.cli import main
from det_calib.errors import InputError
from det_calib.metrics import calibration as metrics
from det_calib.record.calibrator_record import calibrator_of
from det_calib.record.run_result import Calibrator, RunResult
from det_calib.report import compare_runs
from det_calib.report.calibrators_section import _calibrator_words
from det_calib.report.common import f3, f4, fci
from det_calib.report.sections import _section_of, _sections_of
from det_calib.report.separation import separation_words

METHODS = ("temperature", "platt", "auto")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, demo_model_path, fixture_yaml):
    """One run per method on the fixture split, through the CLI (both heads, no val: fast)."""
    root = tmp_path_factory.mktemp("cmp_runs")
    out = {}
    for m in METHODS:
        args = [
            "calibrate",
            "--model",
            str(demo_model_path),
            "--data",
            str(fixture_yaml),
            "--n-boot",
            "50",
            "--no-val",
            "--no-report",
            "-q",
            "--out",
            str(root / m),
        ]
        if m != "auto":
            args += ["--method", m]
        assert main(args) == 0, m
        out[m] = root / m
    return out


@pytest.fixture(scope="module")
def three(runs, tmp_path_factory):
    """`det-calib compare` of the three runs (head nms), through the CLI."""
    out = tmp_path_factory.mktemp("cmp3")
    assert main(["compare", *(str(runs[m]) for m in METHODS), "--out", str(out)]) == 0
    return out


def _result(run) -> RunResult:
    return RunResult.read(run / "calibration.json")


def _summary(md: str) -> str:
    return md[md.index("## Summary") : md.index("## Reliability")]


def _eval_boxes(run, head):
    r = _result(run)
    b = pl.read_parquet(run / "boxes.parquet")
    return r, b.filter(
        (pl.col("head") == head) & (pl.col("split") == r.head(head).eval.split) & ~pl.col("ignore")
    )


# ------------------------------------------------------------------------------ the summary
def test_summary_gives_every_runs_operating_point_with_interval_and_floor(runs, three):
    md = (three / "compare.md").read_text()
    summary = _summary(md)
    page = parse(three / "compare.html")
    (op,) = tables(page, "compare-operating")
    (det,) = tables(page, "compare-detection")
    # one row per run and figure (ECE, LaECE_0) at the one --conf of the runs; one per run for what it keeps
    assert len(op["rows"]) == 2 * len(METHODS) and len(det["rows"]) == len(METHODS)
    for m, ece_row, laece_row, det_row in zip(
        METHODS, op["rows"][::2], op["rows"][1::2], det["rows"], strict=True
    ):
        r = _result(runs[m])
        hr = r.head("nms")
        o0, o1 = hr.eval.operating_before[0], hr.eval.operating_after[0]
        sh = hr.threshold_shift[0]
        assert o1.conf == 0.25 and o1.boxes > 0
        title = f"{m}:nms ({_calibrator_words(hr.calibrator, floor=hr.fit_floor)})"
        assert [c for c, _ in ece_row["cells"]] == [
            title,
            "0.25",
            "ECE (15 bins, IoU 0.5)",
            fci(o0.ece, o0.ece_ci),
            fci(o0.ece_floor, o0.ece_floor_range),
            fci(o1.ece, o1.ece_ci),
            fci(o1.ece_floor, o1.ece_floor_range),
        ]
        assert [c for c, _ in laece_row["cells"]] == [
            title,
            "0.25",
            "LaECE_0 (25 bins)",
            fci(o0.laece0, o0.laece0_ci),
            fci(o0.laece_floor, o0.laece_floor_range),
            fci(o1.laece0, o1.laece0_ci),
            fci(o1.laece_floor, o1.laece_floor_range),
        ]
        assert [c for c, _ in det_row["cells"]] == [
            title,
            "0.25",
            f"{o0.boxes} → {o1.boxes}",
            f"{f3(sh.precision_before)} → {f3(sh.precision_after)}",
            f"{f3(sh.recall_before)} → {f3(sh.recall_after)}",
            f"{f4(hr.eval.map50_95_before)} → {f4(hr.eval.map50_95_after)}",
        ]
        # the same figures, in words, in the summary of the Markdown
        assert (
            f"{fci(o1.ece, o1.ece_ci)} (a perfectly calibrated detector would score "
            f"{fci(o1.ece_floor, o1.ece_floor_range)}" in summary.replace("\\_", "_")
        ), m
        # and LaECE_0's floor (a real run records it for both kept sets)
        assert o0.laece_floor_range[0] <= o0.laece_floor <= o0.laece_floor_range[1]
        assert (
            f"{fci(o1.laece0, o1.laece0_ci)} (a perfectly calibrated detector would score "
            f"{fci(o1.laece_floor, o1.laece_floor_range)}" in summary.replace("\\_", "_")
        ), m


def test_each_run_opens_with_the_answer_line_of_its_report(runs, three):
    """The comparison's summary opens with each run's answer line, the line that opens the head's block
    in that run's own report (the same section function): the deployed map with its parameters, the ECE
    of the boxes kept at conf 0.25 raw → calibrated against its sampling floor, and mAP50-95."""
    from det_calib.report import write_report

    opening = summary_opening((three / "compare.html").read_text())[: len(METHODS)]
    for m, (kind, line) in zip(METHODS, opening, strict=True):
        hr = _result(runs[m]).head("nms")
        o0, o1 = hr.eval.operating_before[0], hr.eval.operating_after[0]
        words = (
            "raw scores kept (no calibrator)"
            if m == "auto"  # auto kept the raw scores on these images
            else _calibrator_words(hr.calibrator, floor=hr.fit_floor) + " deployed"
        )
        assert kind == "lead" and line == (
            f"{m}:nms: {words}; ECE of the boxes kept at conf 0.25: raw {f4(o0.ece)} → calibrated "
            f"{f4(o1.ece)}, "
            f"sampling floor {fci(o1.ece_floor, o1.ece_floor_range)}"
            + (" (at the floor)" if o1.at_floor else "")
            + f"; LaECE_0 raw {f4(o0.laece0)} → calibrated {f4(o1.laece0)}, sampling floor "
            f"{fci(o1.laece_floor, o1.laece_floor_range)}"
            + (" (at the floor)" if o1.laece_at_floor else "")
            + f"; mAP50-95 {f4(hr.eval.map50_95_before)} unchanged."
        ), line
        report = write_report(runs[m], out_dir=three / f"report_{m}")
        head_lines = summary_opening(report["html"].read_text())
        assert [k for k, _ in head_lines] == [
            "verdict",
            "answer",
            "verdict",
            "answer",
            "fig",
            "fig",
        ]
        verdict, items = (
            head_lines[0][1],
            head_lines[1][1],
        )  # the report's first screen for the head: the same figures
        assert verdict.startswith("nms: ") and ("at its sampling floor" in verdict) == bool(
            o1.at_floor
        ), verdict
        assert items[0].startswith(
            f"ECE of the boxes kept at conf 0.25: raw {f4(o0.ece)} → calibrated {f4(o1.ece)}; "
            f"sampling floor {fci(o1.ece_floor, o1.ece_floor_range)} "
        ), items[0]
        assert items[-1].startswith(f"mAP50-95 {f4(hr.eval.map50_95_before)} unchanged"), items[-1]


def test_summary_names_each_calibrator_with_its_parameters(runs, three):
    summary = _summary((three / "compare.md").read_text())
    t = _result(runs["temperature"]).head("nms").calibrator.temperature
    p = _result(runs["platt"]).head("nms").calibrator.params["map"]
    assert (
        _result(runs["auto"]).head("nms").calibrator.method == "none"
    )  # what auto chose on these 6 images
    for words in (
        f"temperature T = {t:.3f}",
        f"Platt a = {p['a']:.3g}, b = {p['b']:.3g}",
        "none: raw scores",
    ):
        assert words in summary, words
    text = (three / "compare.md").read_text() + (three / "compare.html").read_text()
    for wrong in ("not fitted", "No temperature was fitted", "T n/a", "platt map"):
        assert wrong not in text, wrong
    # every run fits a temperature: it is shown for the runs that deploy another map too
    page = parse(three / "compare.html")
    (info,) = tables(page, "compare-runs")
    for m, row in zip(METHODS, info["rows"], strict=True):
        tf = _result(runs[m]).head("nms").temperature_fit
        assert row["cells"][6][0].startswith(f"T = {tf.temperature:.3f} ("), m
        assert row["cells"][6][0].endswith("; deployed") == (m == "temperature")


def test_nll_and_brier_intervals_of_every_run_are_bootstrapped_from_its_boxes(runs, three):
    """The all-box NLL and Brier of every run, raw and calibrated: the estimates are calibration.json's,
    the intervals metrics.bootstrap_ci's over the boxes (resampling images, the run's settings), with
    the calibrated scores of the deployed calibrator (its logits for NLL, the `calibrated` column for Brier)."""
    page = parse(three / "compare.html")
    (m,) = tables(page, "compare-metrics")
    rows: dict[str, list[str]] = {}  # one row per metric and run: the run, raw, calibrated
    for r in m["rows"]:
        rows.setdefault(r["cells"][0][0].split(" (")[0], []).extend(c for c, _ in r["cells"][2:])
    assert list(rows) == ["ECE", "LaECE", "NLL", "Brier"]
    assert [r["cells"][1][0].split(":")[0] for r in m["rows"]] == list(METHODS) * 4
    interval = re.compile(r"([\d.e-]+) \[([\d.e-]+), ([\d.e-]+)\]")
    for k, meth in enumerate(METHODS):
        r, e = _eval_boxes(runs[meth], "nms")
        rec, ev, boot = r.head("nms").calibrator, r.head("nms").eval, r.settings.bootstrap
        z, y, img = e["logit"].to_numpy(), e["correct"].to_numpy(), e["image_id"].to_numpy()
        z1 = calibrated_logits(calibrator_of(rec), z, e["cls"].to_numpy())
        kw = dict(n_boot=boot.n_boot, seed=boot.seed, level=boot.level)
        p0, p1 = e["conf"].to_numpy(), e["calibrated"].to_numpy()
        want = {
            ("NLL", 0): (ev.before.nll, metrics.bootstrap_ci(metrics.nll_logits, img, z, y, **kw)),
            ("NLL", 1): (ev.after.nll, metrics.bootstrap_ci(metrics.nll_logits, img, z1, y, **kw)),
            ("Brier", 0): (ev.before.brier, metrics.bootstrap_ci(metrics.brier, img, p0, y, **kw)),
            ("Brier", 1): (ev.after.brier, metrics.bootstrap_ci(metrics.brier, img, p1, y, **kw)),
        }
        for (name, which), (v, (lo, hi)) in want.items():
            cell = rows[name][2 * k + which]
            got = interval.fullmatch(cell)
            assert got, (meth, name, cell)
            assert cell == f"{f4(v)} [{f4(lo)}, {f4(hi)}]", (meth, name, which)
            assert lo <= v <= hi
        assert rows["ECE"][2 * k + 1] == fci(ev.after.ece, ev.after.ece_ci)
        assert rows["LaECE"][2 * k + 1] == fci(ev.after.laece, ev.after.laece_ci)


def test_differences_the_intervals_cannot_separate_are_said_to_be_so(runs, three):
    summary = _summary((three / "compare.md").read_text())
    ops = {m: _result(runs[m]).head("nms").eval.operating_after[0] for m in METHODS}
    best = min(METHODS, key=lambda m: ops[m].ece)
    lead = next(
        line
        for line in summary.splitlines()
        if line.startswith("**ECE of the boxes kept at conf 0.25")
    )
    assert lead.count("**") == 2 and lead.endswith(".**")  # bold markup balanced
    assert f"lowest {best}:nms {fci(ops[best].ece, ops[best].ece_ci)}" in lead
    ties = [
        f"{m}:nms"
        for m in METHODS
        if m != best
        and ops[m].ece_ci[0] <= ops[best].ece_ci[1]
        and ops[best].ece_ci[0] <= ops[m].ece_ci[1]
    ]
    assert ties  # on 6 images, at least two of the three overlap
    assert f"it cannot be told apart from {' or '.join(ties)} on these images" in lead
    assert (
        "All-box figures, named as such" in summary and "all-box NLL, calibrated: lowest" in summary
    )
    for line in (three / "compare.md").read_text().splitlines():
        assert line.replace("\\*", "").count("**") % 2 == 0, line


def test_no_interval_excludes_its_estimate(three):
    for name in ("compare.md", "compare.html"):
        bad, n = printed_interval_violations((three / name).read_text())
        assert n >= 60 and not bad, (name, n, bad[:10])


# ------------------------------------------------------------------------------ figures
def test_per_class_heatmap_over_all_runs_is_written_and_embedded(runs, three):
    png = (three / "figures" / "compare_per_class_heatmap.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    html = (three / "compare.html").read_text()
    assert f"data:image/png;base64,{base64.b64encode(png).decode()}" in html
    assert "(figures/compare_per_class_heatmap.png)" in (three / "compare.md").read_text()
    assert not (
        three / "figures" / "compare_per_class_ece.png"
    ).exists()  # the pairwise chart: two runs only
    page = parse(three / "compare.html")
    (pc,) = tables(page, "compare-per-class")
    (kept,) = tables(page, "compare-per-class-kept")
    names = _result(runs["temperature"]).class_names
    # one row per class and run (three runs: no difference row)
    assert [r["cells"][0][0].removesuffix(" (few boxes)") for r in pc["rows"]] == [
        n for n in names for _ in METHODS
    ]
    assert [r["cells"][2][0] for r in pc["rows"]] == ["A", "B", "C"] * len(names)
    for k, m in enumerate(METHODS):
        per = {c.name: c for c in _result(runs[m]).head("nms").per_class}
        for row, krow in zip(pc["rows"][k :: len(METHODS)], kept["rows"], strict=True):
            c = per[krow["cells"][0][0]]
            assert row["cells"][0][0].endswith("(few boxes)") == any(
                p.few_boxes
                for p in [
                    {x.name: x for x in _result(runs[mm]).head("nms").per_class}[c.name]
                    for mm in METHODS
                ]
            )
            assert row["cells"][3][0] == str(c.boxes)
            assert row["cells"][4][0] == fci(c.ece_before, c.ece_before_ci)
            assert row["cells"][5][0] == fci(c.ece_after, c.ece_after_ci)
            sh = c.threshold_shift[0]
            assert krow["cells"][1 + 2 * k][0] == f"{sh.kept_before} → {sh.kept_after}"
            assert (
                krow["cells"][2 + 2 * k][0] == f"{f4(c.kept_ece_before)} → {f4(c.kept_ece_after)}"
            )


def test_kept_set_reliability_is_binned_as_calibrate_bins_its_ece(runs):
    """The operating-point reliability figure's bins give each run's kept-set ECE of calibration.json."""
    from det_calib.record.run_folder import load_run
    from det_calib.report.reliability_section import _kept_bins as _kept_bins

    for m in METHODS:
        run = load_run(runs[m])
        for h in run.heads:
            hb, ev = run.eval_boxes(h), run.head(h).eval
            for conf, o in (
                (hb.conf, ev.operating_before[0]),
                (hb.conf_after, ev.operating_after[0]),
            ):
                bins = _kept_bins(conf, hb.correct, 0.25, run.settings.ece_bins)
                assert int(np.sum(bins.count)) == o.boxes
                assert bins.ece() == pytest.approx(o.ece, abs=1e-9), (m, h)


# ------------------------------------------------------------------------------ two heads
def test_two_heads_of_one_run_each_named_with_its_own_map(runs, tmp_path):
    run = runs["platt"]
    r = _result(run)
    files = compare_runs(f"{run}:nms", f"{run}:e2e", out_dir=tmp_path / "heads")
    assert (
        "figures/compare_per_class_ece.png" in files
        and "figures/compare_per_class_heatmap.png" in files
    )
    summary = _summary(files["md"].read_text())
    page = parse(files["html"])
    (op,) = tables(page, "compare-operating")
    for h, row in zip(("nms", "e2e"), op["rows"][::2], strict=True):  # each run's ECE row
        mp = r.head(h).calibrator.params["map"]
        words = f"Platt a = {mp['a']:.3g}, b = {mp['b']:.3g}"
        assert row["cells"][0][0] == f"platt:{h} ({words})" and words in summary
        o1 = r.head(h).eval.operating_after[0]
        assert row["cells"][5][0] == fci(o1.ece, o1.ece_ci) and row["cells"][6][0] == fci(
            o1.ece_floor, o1.ece_floor_range
        )
    (pc,) = tables(page, "compare-per-class")
    pa = {c.name: c for c in r.head("nms").per_class}
    pb = {c.name: c for c in r.head("e2e").per_class}
    assert [row["cells"][2][0] for row in pc["rows"]] == ["A", "B", "B − A"] * len(pa)
    for row in pc["rows"][2::3]:  # each class's difference row
        n = row["cells"][0][0].removesuffix(" (few boxes)")
        assert row["cells"][1][0] == "both"
        assert row["cells"][5][0] == f4(pb[n].ece_after - pa[n].ece_after)
    for name in ("compare.md", "compare.html"):
        bad, n = printed_interval_violations(files[name.split(".")[1]].read_text())
        assert n >= 40 and not bad, (name, bad[:10])


def test_compare_prints_its_table_side_by_side_and_names_its_figures_readably(
    runs, tmp_path, capsys
):
    """`det-calib compare RUN:nms RUN:e2e` prints the figures side by side, one column per head, each the
    run's own (calibration.json), and writes them as compare.txt; the candidates' figures are named
    after the compared run and head (`candidates_auto-nms.png`), not letters run together."""
    run = runs["auto"]
    r = _result(run)
    out = tmp_path / "cmp"
    assert main(["compare", f"{run}:nms", f"{run}:e2e", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    table, wrote = printed.rstrip("\n").rsplit("\n", 1)
    assert wrote == f"wrote compare.txt, compare.md, compare.html (and figures/) to {out}"
    assert table + "\n" == (out / "compare.txt").read_text()
    width = table.splitlines()[0].index("auto:nms")
    cells = {
        ln[:width].strip(): [c.strip() for c in ln[width:].split("  ") if c.strip()]
        for ln in table.splitlines()[1:-1]
    }
    assert len(cells) == len(table.splitlines()) - 2  # every row named once
    assert table.splitlines()[0].split() == ["auto:nms", "auto:e2e"]
    for i, h in enumerate(("nms", "e2e")):
        e = r.head(h).eval
        o0, o1 = e.operating_before[0], e.operating_after[0]
        assert cells["ECE kept at conf 0.25"][i] == f"{f4(o0.ece)} -> {f4(o1.ece)}"
        assert cells["calibrated ECE, 95% interval"][i] == fci(o1.ece, o1.ece_ci)
        assert cells["its sampling floor"][i] == fci(o1.ece_floor, o1.ece_floor_range)
        assert cells["calibrated LaECE_0, 95% interval"][i] == fci(o1.laece0, o1.laece0_ci)
        assert cells["COCO mAP50-95"][i] == f"{f4(e.map50_95_before)} -> {f4(e.map50_95_after)}"
        sh = r.head(h).threshold_shift[0]
        assert cells["boxes kept at conf 0.25"][i] == f"{sh.kept_before:,} -> {sh.kept_after:,}"
        assert (
            cells["precision kept at conf 0.25"][i]
            == f"{f3(sh.precision_before)} -> {f3(sh.precision_after)}"
        )
    figures = sorted(p.name for p in (out / "figures").glob("candidates_*.png"))
    assert figures == ["candidates_auto-e2e.png", "candidates_auto-nms.png"]


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed")
def test_compare_renders_in_headless_chromium(three):
    page = rendered(three / "compare.html")
    h2 = [t for tag, t in page.headings if tag == "h2"]
    assert h2 == [
        "Summary",
        "Calibrators compared: auto:nms",
        "Reliability",
        "Per-class calibration",
        "Reliability by size",
        "Settings",
    ]
    # in the order of the one list of sections, as the report's (only the auto run has candidates)
    assert [_section_of(t).title for t in h2] == [
        s.title
        for s in _sections_of("compare")
        if not s.optional or s.title in ("Calibrators compared", "Reliability by size")
    ]
    figures = sorted(p.name for p in (three / "figures").glob("*.png"))
    assert len(page.imgs) == len(figures) == 4
    assert all(i["src"].startswith("data:image/png;base64,") for i in page.imgs)
    for css in (
        "compare-operating",
        "compare-detection",
        "compare-runs",
        "compare-metrics",
        "compare-per-class",
        "compare-per-class-kept",
    ):
        assert len(tables(page, css)) == 1, css
    assert len(tables(page, "compare-operating")[0]["rows"]) == 6


# ------------------------------------------------------------------------------ input and words
@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed")
def test_compare_page_fits_a_1400_px_window(runs, three, tmp_path):
    """In a 1400 px wide headless Chromium window, nothing on the comparison of three runs, nor on that of the
    two heads of one run, is wider than the window, and no table scrolls inside its own wrapper (the operating
    point, the all-box figures, per class and by size are stacked one row per run; paths wrap)."""
    heads = compare_runs(
        f"{runs['platt']}:nms", f"{runs['platt']}:e2e", out_dir=tmp_path / "heads"
    )["html"]
    for page in (three / "compare.html", heads):
        got = measured(page)
        assert got["inner_width"] == WIDTH
        assert got["scroll_width"] <= WIDTH and not got["wide"], (page, got["wide"][:10])
        assert not got["scrolling"], (page, got["scrolling"])
    assert (
        "compare-operating" in (three / "compare.html").read_text()
    )  # the tables measured are there


def test_compare_needs_two_runs_and_one_label_per_run(runs, tmp_path, capsys):
    with pytest.raises(InputError, match="at least two runs"):
        compare_runs(runs["platt"], out_dir=tmp_path / "x")
    with pytest.raises(InputError, match="3 non-empty names"):
        compare_runs(*runs.values(), out_dir=tmp_path / "x", labels=["a", "b"])
    with pytest.raises(InputError, match="3 different names"):
        compare_runs(*runs.values(), out_dir=tmp_path / "x", labels=["a", "b", "a"])
    assert main(["compare", str(runs["platt"]), "--out", str(tmp_path / "y")]) == 2
    assert "at least two runs" in capsys.readouterr().err
    files = compare_runs(*runs.values(), out_dir=tmp_path / "z", labels=["T", "P", "auto"])
    assert "Calibration comparison: T vs P vs auto" in files["html"].read_text()


def test_calibrator_words_of_every_fitted_map(runs):
    """The words of each map --method auto fitted and scored (temperature, Platt, spline, isotonic),
    read from the maps themselves."""
    r = _result(runs["auto"])
    seen = set()
    for c in r.head("e2e").candidates:
        mp = (c.eval or {}).get("calibrator")
        if mp is None:
            continue
        rec = Calibrator(c.calibrator.method, {"map": mp, "temperature": mp.get("temperature")})
        words = _calibrator_words(rec, floor=c.fit_min_conf)
        seen.add(rec.method)
        suffix = f" above raw conf {c.fit_min_conf:g}" if c.fit_min_conf else ""
        want = {
            "temperature": f"temperature T = {mp.get('temperature', 0):.3f}",
            "platt": f"Platt a = {mp.get('a', 0):.3g}, b = {mp.get('b', 0):.3g}",
            "spline": f"spline ({len(mp.get('knots', []))} knots)",
            "isotonic": f"isotonic ({len(mp.get('map', {}).get('x', []))} steps)",
        }.get(rec.method)
        if want is not None:
            assert words == want + suffix
    assert {"platt", "spline", "isotonic"} <= seen
    assert (
        _calibrator_words(Calibrator("class-platt", {"map": {"a": [0.8, 1.25], "b": [-0.5, 0.25]}}))
        == "class-platt (2 classes, a 0.8–1.25, b -0.5–0.25)"
    )
    assert (
        _calibrator_words(Calibrator("class-temperature", {"map": {"a": [0.5, 2.0]}}))
        == "class-temperature (2 classes, T 0.5–2)"
    )


def test_separation_words():
    assert (
        separation_words("x", [("A", 0.1, (0.05, 0.15)), ("B", 0.3, (0.2, 0.4))])
        == "x: lowest A 0.1000 [0.0500, 0.1500]; clearly lower than B (intervals do not overlap)"
    )
    assert (
        separation_words("x", [("A", 0.2, (0.1, 0.3)), ("B", 0.1, (0.05, 0.25))])
        == "x: lowest B 0.1000 [0.0500, 0.2500]; it cannot be told apart from A on these images "
        "(their intervals overlap)"
    )
    assert (
        separation_words("x", [("A", 0.2, None), ("B", 0.1, (0.05, 0.25))])
        == "x: lowest B 0.1000 [0.0500, 0.2500]; against A: no interval to tell"
    )
    assert (
        separation_words("x", [("A", 0.2, (0.1, 0.3)), ("B", None, None)])
        == "x: fewer than two runs have it"
    )


def test_runs_with_other_conf_thresholds(runs, tmp_path, demo_model_path, fixture_yaml):
    """Every --conf of the runs is a row; a run not calibrated at one says so, nothing is computed for it."""
    two = tmp_path / "two"
    assert (
        main(
            [
                "calibrate",
                "--model",
                str(demo_model_path),
                "--data",
                str(fixture_yaml),
                "--boxes",
                str(runs["temperature"]),
                "--method",
                "temperature",
                "--conf",
                "0.25",
                "--conf",
                "0.4",
                "--n-boot",
                "50",
                "--no-val",
                "--no-report",
                "-q",
                "--out",
                str(two),
            ]
        )
        == 0
    )
    files = compare_runs(two, runs["platt"], out_dir=tmp_path / "cmp", labels=["T2", "P"])
    page = parse(files["html"])
    (op,) = tables(page, "compare-operating")
    assert [(r["cells"][0][0].split(" (")[0], r["cells"][1][0]) for r in op["rows"]] == [
        ("T2", "0.25"),
        ("T2", "0.25"),
        ("T2", "0.4"),
        ("T2", "0.4"),
        ("P", "0.25"),
        ("P", "0.25"),
        ("P", "0.4"),
    ]
    o = _result(two).head("nms").eval.operating_after[1]
    assert o.conf == 0.4 and op["rows"][2]["cells"][5][0] == fci(o.ece, o.ece_ci)
    assert op["rows"][6]["cells"][2][0] == "not measured: this run's --conf is 0.25"
    (det,) = tables(page, "compare-detection")
    assert det["rows"][3]["cells"][2][0] == "n/a"
    summary = _summary(files["md"].read_text())
    assert "ECE of the boxes kept at conf 0.4, calibrated: fewer than two runs have it" in summary


def test_runs_evaluated_on_different_images_are_said_to_be(
    runs, three, tmp_path, capsys, demo_model_path, fixture_yaml
):
    """Runs evaluated on other images (here halves of the fixture split's first 8 images) get a warning
    with each run's images, in compare.txt and on the page; runs on the same images (the three methods)
    get none."""
    few = tmp_path / "few"
    args = ["--method", "platt", "--limit", "8", "--n-boot", "50", "--no-val", "--no-report", "-q"]
    common = ["--model", str(demo_model_path), "--data", str(fixture_yaml)]
    assert main(["calibrate", *common, *args, "--out", str(few)]) == 0
    out = tmp_path / "cmp"
    assert main(["compare", str(runs["platt"]), str(few), "--out", str(out)]) == 0
    capsys.readouterr()
    n_all, n_few = (_result(r).head("nms").eval.images for r in (runs["platt"], few))
    assert n_few == 4 < n_all
    said = "he runs were evaluated on different images (platt:nms: split val[eval-half] (halves of seed 0) of "
    text = (out / "compare.txt").read_text()
    assert f"(t{said}" in text and f", {n_all} images, " in text and ", 4 images, " in text
    assert f"T{said}" in (out / "compare.md").read_text()
    assert "different images" not in (three / "compare.md").read_text()
