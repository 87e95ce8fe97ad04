"""The report's first screen (det_calib.report.verdict): each head's verdict in its three cases, and the page
as a 1400 x 900 headless Chromium window shows it."""

from __future__ import annotations

import html as html_lib
import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from test_run_report import _chromium, make_run, with_operating_figures

from det_calib.record.run_folder import load_run
from det_calib.report import write_report
from det_calib.report.common import f3, f4
from det_calib.report.sections import subject
from det_calib.report.verdict import _verdict_line, answer_blocks

WIDTH, HEIGHT = 1400, 900

# Measures the loaded page (before it adds anything) and leaves the figures, as JSON, in a hidden <pre>
# that --dump-dom returns: the document's width, every element wider than the window, every table that
# scrolls inside its wrapper, and the box of each verdict and of each line under it (document pixels).
_MEASURE = """<script>window.addEventListener('load', () => {
 const box = e => { const b = e.getBoundingClientRect();
   return [b.left, b.top + scrollY, b.right, b.bottom + scrollY]; };
 const out = {inner_width: innerWidth, scroll_width: document.documentElement.scrollWidth,
  wide: [...document.body.querySelectorAll('*')].filter(e => e.getBoundingClientRect().right > innerWidth + 0.5)
    .map(e => e.tagName.toLowerCase() + '.' + e.className),
  scrolling: [...document.querySelectorAll('.table-wrap')].filter(w => w.scrollWidth > w.clientWidth)
    .map(w => w.firstElementChild.className),
  lines: [...document.querySelectorAll('p.verdict, ul.answer > li, figure')]
    .map(e => [e.tagName.toLowerCase(), box(e), e.textContent])};
 const pre = document.createElement('pre'); pre.id = 'measured'; pre.style.display = 'none';
 pre.textContent = JSON.stringify(out); document.body.appendChild(pre); });</script>"""


def _chromium_args(profile: str) -> list[str]:
    return [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={WIDTH},{HEIGHT}",
    ]


def measured(page: Path) -> dict:
    """What a 1400 px wide Chromium window lays out for ``page`` (the page itself has no script: a copy
    with :data:`_MEASURE` added is loaded)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "page.html"
        copy.write_text(
            page.read_text(encoding="utf-8").replace("</body>", _MEASURE + "</body>"),
            encoding="utf-8",
        )
        res = subprocess.run(
            [*_chromium_args(f"{tmp}/profile"), "--dump-dom", copy.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r'<pre id="measured"[^>]*>(.*?)</pre>', res.stdout, re.S)
    assert m, res.stdout[-2000:]
    return json.loads(html_lib.unescape(m.group(1)))


def screenshot(page: Path, png: Path) -> Path:
    """The first screen of ``page`` in a 1400 x 900 window, as a PNG."""
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run(
            [*_chromium_args(f"{tmp}/profile"), f"--screenshot={png}", page.resolve().as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert res.returncode == 0 and png.is_file(), res.stderr[-2000:]
    return png


@pytest.fixture(scope="module")
def two_heads(tmp_path_factory) -> tuple[dict, dict[str, Path]]:
    """The demo-shaped report: two heads, each with its kept-set figures (nms improved, still above its
    floor; e2e worse than raw)."""
    run = make_run(
        tmp_path_factory.mktemp("first_screen"),
        heads=("nms", "e2e"),
        n_images=20,
        per_image=20,
        n_boot=5,
    )
    calib = with_operating_figures(run)
    for head in calib[
        "heads"
    ]:  # every figure with its interval and floor, as wide as a real run's cells
        for o in (calib["eval"][head][k][0] for k in ("operating_before", "operating_after")):
            o.update(
                {
                    "ece_ci": [o["ece"] * 0.8, o["ece"] * 1.3],
                    "laece0_ci": [o["laece0"] - 0.02, o["laece0"] + 0.02],
                    "laece_floor": 0.0912,
                    "laece_floor_range": [0.0801, 0.1034],
                }
            )
    (run / "calibration.json").write_text(json.dumps(calib))
    return calib, write_report(run)


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed")
def test_first_screen_answers_for_every_head_in_a_1400x900_window(two_heads, tmp_path):
    """In a 1400 x 900 window, before any scrolling, each head's verdict, its kept-set ECE raw → calibrated
    with its sampling floor, and its boxes kept with precision and recall raw → calibrated are all in view;
    nothing on the page is wider than the window and no table scrolls."""
    calib, paths = two_heads
    got = measured(paths["html"])
    assert got["inner_width"] == WIDTH
    assert got["scroll_width"] <= WIDTH and not got["wide"], got["wide"]  # no horizontal scrollbar
    assert not got["scrolling"], got["scrolling"]  # and no table hides columns behind its own
    lines = got["lines"]
    verdicts = [i for i, (tag, _, _) in enumerate(lines) if tag == "p"]
    assert [lines[i][2].split(":")[0] for i in verdicts] == ["nms", "e2e"]
    first_fig = next(i for i, (tag, _, _) in enumerate(lines) if tag == "figure")
    assert verdicts[-1] < first_fig  # both heads' answers before any figure
    for i, head in zip(verdicts, ("nms", "e2e"), strict=True):
        o0, o1 = (calib["eval"][head][k][0] for k in ("operating_before", "operating_after"))
        sh = calib["threshold_shift"][head][0]
        lo, hi = o1["ece_floor_range"]
        want = {
            "verdict": lines[i][2],
            "ece": (
                f"raw {f4(o0['ece'])} → calibrated {f4(o1['ece'])}; sampling floor "
                f"{f4(o1['ece_floor'])} "
                f"[{f4(lo)}, {f4(hi)}]"
            ),
            "kept": (
                f"Boxes kept at conf 0.25: {sh['kept_before']:,} → {sh['kept_after']:,}; precision "
                f"{f3(sh['precision_before'])} → {f3(sh['precision_after'])}, recall "
                f"{f3(sh['recall_before'])} "
                f"→ {f3(sh['recall_after'])}"
            ),
        }
        block = lines[i : i + 5]
        for what, text in want.items():
            (box,) = [b for _, b, t in block if text in t]
            left, top, right, bottom = box
            assert 0 <= left and right <= WIDTH and 0 < top < bottom <= HEIGHT, (head, what, box)
    assert lines[verdicts[0]][2].startswith(
        "nms: improved, still above its floor; most of the ECE left"
    )
    assert lines[verdicts[1]][2].startswith("e2e: worse: keep the raw scores")
    png = screenshot(paths["html"], tmp_path / "first_screen.png")
    assert png.read_bytes()[16:24] == WIDTH.to_bytes(4, "big") + HEIGHT.to_bytes(
        4, "big"
    )  # the PNG's IHDR size


@pytest.mark.fast
def test_verdict_in_its_three_cases(tmp_path):
    """The verdict reads the calibrated kept set against the raw one and against its sampling floor's range:
    worse than raw (whatever the floor), inside the range, or better than raw and above it (with where);
    a raw-scores run and a run without a floor say so."""
    run_dir = make_run(tmp_path / "r", heads=("nms",), n_images=10, per_image=20, n_boot=5)
    calib = with_operating_figures(run_dir)
    ev = calib["eval"]["nms"]
    gaps = [
        {"lo": 0.8, "hi": 0.8667, "boxes": 20, "conf": 0.83, "accuracy": 0.6, "share": 0.012},
        {"lo": 0.3333, "hi": 0.4, "boxes": 30, "conf": 0.37, "accuracy": 0.5, "share": 0.007},
    ]

    def line(
        ece_before: float,
        ece_after: float,
        floor_range: list[float] | None,
        method: str | None = None,
    ) -> str:
        ev["operating_before"][0]["ece"], ev["operating_after"][0]["ece"] = ece_before, ece_after
        ev["operating_after"][0]["ece_floor_range"] = floor_range
        ev["kept_gaps_after"] = gaps
        c = dict(calib)
        if method == "none":
            c["calibrators"] = {"nms": {"method": "none", "params": {}}}
            c["temperature"] = {"nms": None}
        (run_dir / "calibration.json").write_text(json.dumps(c))
        return _verdict_line(subject(load_run(run_dir), "nms", name="nms"))

    n = f"{ev['operating_after'][0]['boxes']:,}"
    assert line(0.05, 0.06, [0.02, 0.07]) == (
        f"nms: worse: keep the raw scores (calibrated, the {n} boxes kept at "
        "conf 0.25 score a higher ECE than raw, although still within its "
        "sampling floor's range)"
    )
    assert line(0.05, 0.09, [0.02, 0.07]) == (
        f"nms: worse: keep the raw scores (calibrated, the {n} boxes kept at "
        "conf 0.25 score a higher ECE than raw)"
    )
    assert line(0.09, 0.06, [0.02, 0.07]) == (
        f"nms: at its sampling floor: the {n} boxes kept at conf 0.25 are as "
        "well calibrated as that many boxes can show"
    )
    assert line(0.09, 0.08, [0.02, 0.07]) == (
        "nms: improved, still above its floor; most of the ECE left, 0.0800, "
        "comes from conf 0.80–0.87 (over-confident: 0.0120 of it) and "
        "0.33–0.40 (under-confident: 0.007)"
    )
    assert line(0.08, 0.08, [0.02, 0.07]).startswith(
        "nms: not improved, still above its floor; most of the ECE"
    )
    assert (
        line(0.09, 0.08, None)
        == f"nms: improved (this run records no sampling floor for the {n} boxes kept at "
        "conf 0.25)"
    )
    assert line(0.08, 0.08, [0.02, 0.07], method="none") == (
        "nms: raw scores kept (no calibrator beat them on held-out folds); above its sampling floor"
    )
    # --target iou: the verdict reads LaECE_0 (here worse than raw, while the ECE improved), said to be the target
    calib["target"] = "iou"
    ev["operating_before"][0]["laece0"], ev["operating_after"][0]["laece0"] = 0.10, 0.12
    ev["operating_after"][0]["laece_floor"], ev["operating_after"][0]["laece_floor_range"] = (
        0.09,
        [0.08, 0.11],
    )
    assert line(0.09, 0.06, [0.02, 0.07]) == (
        f"nms: worse: keep the raw scores (calibrated, the {n} boxes kept at "
        "conf 0.25 score a higher LaECE_0 than raw)"
    )
    s = subject(load_run(run_dir), "nms", name="nms")
    (first, _, ece, *_) = answer_blocks(s)[1].items
    assert first == (
        "LaECE_0 of the boxes kept at conf 0.25 (the target): raw 0.1000 → calibrated 0.1200; "
        "sampling "
        "floor 0.0900 [0.0800, 0.1100]"
    )
    assert ece.startswith("ECE of the boxes kept at conf 0.25: raw 0.0900 → calibrated 0.0600")
    # the default target: a LaECE_0 the map raised says why (the map fits correctness, not IoU); one it
    # lowered says nothing more
    calib["target"] = "correct"
    (run_dir / "calibration.json").write_text(json.dumps(calib))
    (_, _, la, *_) = answer_blocks(subject(load_run(run_dir), "nms", name="nms"))[1].items
    assert la == (
        "LaECE_0 of the boxes kept at conf 0.25: raw 0.1000 → calibrated 0.1200; sampling floor 0.0900 "
        "[0.0800, 0.1100] (higher after: the map makes conf the chance that a box is correct at IoU "
        "0.5, and LaECE_0 compares conf with the IoU a box reaches; --target iou fits that instead)"
    )
    ev["operating_after"][0]["laece0"] = 0.08
    (run_dir / "calibration.json").write_text(json.dumps(calib))
    (_, _, la, *_) = answer_blocks(subject(load_run(run_dir), "nms", name="nms"))[1].items
    assert la.endswith("calibrated 0.0800; sampling floor 0.0900 [0.0800, 0.1100]"), la
