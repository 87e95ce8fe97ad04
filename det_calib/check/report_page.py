"""The page of ``det-calib check`` (``write_check_report``): check.html, check.md, figures/.

Numbers come from the :class:`~det_calib.check.run_check.CheckResult`; the reliability diagrams are drawn
from the run's eval-split boxes (then) and the new boxes (now), both kept at the check's threshold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.check.drift_tests import CROWDED_FACTOR, CROWDED_MIN_BOXES
from det_calib.check.verdicts import question_level
from det_calib.data.box_view import BoxView
from det_calib.metrics import reliability_bins
from det_calib.record.eval_record import OperatingFigures
from det_calib.record.run_folder import Run
from det_calib.record.size_record import SizeFigures
from det_calib.report import plots
from det_calib.report.common import f3, f4, fci, fint
from det_calib.report.document import Bullets, Heading, Para, Table
from det_calib.report.page import Page
from det_calib.report.size_section import bin_label

__all__ = ["write_check_report"]


def _p(p: Any) -> str:
    if p is None:
        return "n/a"
    return "< 1e-4" if p < 1e-4 else f"{p:.3g}"


def _crowded_cell(boxes: int | None, observed: int | None, expected: float | None) -> str:
    return "none" if not boxes else f"{boxes} boxes: {observed} / {expected:.1f}"


def _kept(df: pl.DataFrame, head: str, conf: float, split: str | None = None) -> BoxView:
    """The boxes of ``head`` (and ``split``) kept at ``conf`` under the scores their run wrote."""
    return BoxView.from_boxes(df, head=head, split=split, geometry=False).as_recorded().kept(conf)


def _operating_rows(now: list[OperatingFigures], then: list[OperatingFigures]) -> list[list[str]]:
    rows = []
    for label, ops in (("then (run's eval split)", then), ("now", now)):
        for o in ops:
            rows.append(
                [
                    label,
                    f"{o.conf:g}",
                    fint(o.boxes),
                    fint(o.correct),
                    fci(o.ece, o.ece_ci),
                    fci(o.ece_floor, o.ece_floor_range),
                    "yes" if o.at_floor else "no" if o.at_floor is False else "n/a",
                    fci(o.laece0, o.laece0_ci),
                    fci(o.laece_floor, o.laece_floor_range),
                ]
            )
    return rows


def _operating_table(now: list[OperatingFigures], then: list[OperatingFigures]) -> Table:
    """Kept-set ECE and LaECE_0 with their sampling floors, then (the run's records) and now."""
    return Table(
        [
            "",
            "conf",
            "kept boxes",
            "correct",
            "kept-set ECE [95% CI]",
            "sampling floor [range]",
            "at floor",
            "LaECE_0 [95% CI]",
            "LaECE_0 sampling floor [range]",
        ],
        _operating_rows(now, then),
        caption="Kept-set ECE and LaECE_0 then and now (image bootstrap intervals); the floors are what a "
        "perfectly calibrated detector would score on the same kept boxes (n/a: a run written "
        "before the LaECE_0 floor).",
        css="check-operating",
    )


def _size_table(now: list[SizeFigures], then: list[SizeFigures]) -> Table:
    """Calibrated kept-set ECE and LaECE_0 of each box size, then (the run's records) and now."""
    before = {(f.scheme, f.bin): f for f in then}
    rows = []
    for f in now:
        t = before.get((f.scheme, f.bin))
        rows.append(
            [
                bin_label(f),
                "n/a" if t is None else fint(t.boxes_after),
                fint(f.boxes_after),
                "n/a" if t is None else fci(t.ece_after, t.ece_after_ci),
                fci(f.ece_after, f.ece_after_ci),
                "n/a" if t is None else fci(t.laece0_after, t.laece0_after_ci),
                fci(f.laece0_after, f.laece0_after_ci),
            ]
        )
    return Table(
        [
            "size",
            "kept then",
            "kept now",
            "ECE then [95% CI]",
            "ECE now [95% CI]",
            "LaECE_0 then",
            "LaECE_0 now",
        ],
        rows,
        caption="Calibrated kept-set ECE and LaECE_0 by box size (COCO sizes in pixels, relative-area bins), "
        "then (the run's eval split; n/a for runs written before the figures existed) and now.",
        css="check-by-size",
    )


def _calibration_table(r: Any, t: Any) -> Table:
    """The calibration tests of one head, then and now, with their p-values."""
    return Table(
        ["test", "then (run's eval split)", "now", "p-value"],
        [
            ["kept boxes", fint(t.boxes_then), fint(t.boxes), ""],
            ["mean calibrated conf", f3(t.mean_conf_then), f3(t.mean_conf), ""],
            ["fraction correct", f3(t.fraction_correct_then), f3(t.fraction_correct), ""],
            [
                "calibration in the large, z",
                f"{t.z_then:.2f}" if t.z_then is not None else "n/a",
                f"{t.z:.2f}" if t.z is not None else "n/a",
                _p(t.p_value),
            ],
            [
                f"Hosmer–Lemeshow chi-square ({t.hl_groups or 'n/a'} equal-mass bins)",
                "",
                f3(t.hl_statistic),
                _p(t.hl_p_value),
            ],
            [
                "crowded images (share of images: change p)",
                fint(t.crowded_images_then),
                fint(t.crowded_images),
                _p(t.crowded_rate_p),
            ],
            [
                "kept boxes in crowded images: correct / expected",
                _crowded_cell(
                    t.crowded_boxes_then, t.crowded_observed_then, t.crowded_expected_then
                ),
                _crowded_cell(t.crowded_boxes, t.crowded_observed, t.crowded_expected),
                "",
            ],
            [
                "outside them: correct / expected (z)",
                "",
                f"{fint(t.rest_observed)} / {f3(t.rest_expected)} ({f3(t.rest_z)})",
                _p(t.rest_p_value),
            ],
            [
                "gap outside crowded images: fraction correct − mean conf (change z)",
                f3(t.gap_then),
                f3(t.gap),
                f"{_p(t.change_p)} (z {f3(t.change_z)})",
            ],
            [
                f"binned change, then vs now ({t.binned_change_bins or 'n/a'} bins, chi-square)",
                "",
                f3(t.binned_change_statistic),
                _p(t.binned_change_p),
            ],
            ["design effect of image clustering", "", f3(t.design_effect), ""],
            [
                "gap the boxes outside crowded images can show (p = 0.05)",
                "",
                f3(t.detectable_gap),
                "",
            ],
        ],
        caption=f"Calibration of the boxes kept at conf {r.conf:g} (calibrated). Expected correct: {t.expected:.1f}, "
        f"observed: {t.observed}. The verdict tests the change against the run's eval split (in "
        "the large, "
        "binned, per class, outside the crowded images of either side; and the share of crowded "
        "images) at "
        f"family-wise level {question_level(r.alpha):g} (half the check's {r.alpha:g}; the other "
        "half is "
        f"detection quality's), Bonferroni over {t.tests} tests; the absolute tests of the new "
        "boxes are shown beside it.",
        css="check-calibration",
    )


def _crowded_table(crowded: list[Any]) -> Table:
    """The crowded images of the new kept boxes, one row each."""
    return Table(
        [
            "image",
            "kept boxes",
            "share of kept boxes",
            "correct / expected",
            "share of the clustered variance",
        ],
        [
            [
                x.image or "",
                fint(x.boxes),
                f"{x.box_share:.1%}",
                f"{x.observed} / {x.expected:.1f}",
                "n/a" if x.variance_share is None else f"{x.variance_share:.1%}",
            ]
            for x in crowded
        ],
        caption=f"Crowded images of the new kept boxes (at least {CROWDED_FACTOR} times the median kept "
        f"boxes per image, and at least {CROWDED_MIN_BOXES}): set apart from the change tests, "
        "whose image-clustered variance they would set alone.",
        css="check-crowded",
    )


def _labelled(b: Page, r: Any, h: str, c: Any, new: pl.DataFrame, run: Run) -> None:
    t, d = c.calibration, c.detection
    b.add(
        Heading(2, f"Head {h} ({c.method})"),
        Para(c.calibration_line, "lead"),
        Para(c.detection_line, "lead"),
    )
    b.add(_calibration_table(r, t))
    if c.crowded:
        b.add(_crowded_table(c.crowded))
    b.add(_operating_table(c.operating, c.operating_then))
    b.add(
        Table(
            ["figure", "then", "now", "z", "p-value"],
            [
                ["images", fint(d.images_then), fint(d.images), "", ""],
                ["kept boxes", fint(d.kept_then), fint(d.kept), "", ""],
                ["kept per image", f3(d.kept_per_image_then), f3(d.kept_per_image), "", ""],
                [
                    "precision",
                    f3(d.precision_then),
                    f3(d.precision),
                    f3(d.precision_z),
                    _p(d.precision_p),
                ],
                ["recall", f3(d.recall_then), f3(d.recall), f3(d.recall_z), _p(d.recall_p)],
                ["mAP50 (calibrated scores)", f4(d.map50_then), f4(d.map50), "", ""],
                ["mAP50-95", f4(d.map50_95_then), f4(d.map50_95), "", ""],
            ],
            caption=f"Detection quality at conf {d.conf:g}: two-ratio z-tests with image-clustered variances.",
            css="check-detection",
        )
    )
    b.add(
        Table(
            [
                "class",
                "kept then",
                "kept now",
                "correct / expected",
                "z",
                "p-value",
                "change p",
                "tested",
                "kept ECE",
                "precision then → now",
                "recall then → now",
            ],
            [
                [
                    c_.name or str(c_.cls),
                    fint(c_.kept_then),
                    fint(c_.kept),
                    f"{c_.observed} / {c_.expected:.1f}" if c_.expected is not None else "n/a",
                    f3(c_.z),
                    _p(c_.p_value),
                    _p(c_.change_p),
                    ("drifted" if c_.drifted else "yes") if c_.tested else "few boxes",
                    f4(c_.kept_ece),
                    f"{f3(c_.precision_then)} → {f3(c_.precision)}",
                    f"{f3(c_.recall_then)} → {f3(c_.recall)}",
                ]
                for c_ in c.per_class
            ],
            caption=f"Per class, boxes kept at conf {r.conf:g}; a class is tested with at least {r.min_boxes} "
            "kept boxes.",
            css="check-per-class",
        )
    )
    n_bins = run.settings.ece_bins
    then = _kept(run.boxes, h, r.conf, r.reference_split)
    now = _kept(new, h, r.conf)
    panels = [
        (
            f"then: {r.reference_split} ({then.n} kept)",
            reliability_bins(then.conf, then.correct, n_bins=n_bins) if then.n else None,
            "calibrated confidence",
        ),
        (
            f"now: {c.split} ({now.n} kept)",
            reliability_bins(now.conf, now.correct, n_bins=n_bins) if now.n else None,
            "calibrated confidence",
        ),
    ]
    b.fig(
        f"reliability_{h}",
        plots.reliability_figure(panels, title=f"{h}: kept boxes at conf {r.conf:g}"),
        f"Reliability of the boxes kept at conf {r.conf:g}, then (the run's eval split) and now.",
        f"Reliability diagrams of head {h} then and now",
    )


def _unlabelled(b: Page, r: Any, h: str, s: Any, new: pl.DataFrame, run: Run) -> None:
    t = s.tests
    b.add(Heading(2, f"Head {h} ({s.method})"), Para(s.line, "lead"))
    b.add(
        Table(
            ["figure", "then (run's eval split)", "now", "statistic", "permutation p"],
            [
                ["images", fint(t.images_then), fint(t.images), "", ""],
                ["kept boxes", fint(t.kept_then), fint(t.kept), "", ""],
                [
                    "kept per image",
                    f3(t.kept_per_image_then),
                    f3(t.kept_per_image),
                    "",
                    _p(t.per_image_p),
                ],
                [
                    "mean calibrated conf of kept boxes",
                    f3(t.mean_conf_then),
                    f3(t.mean_conf),
                    f"KS {f3(t.ks)}",
                    _p(t.ks_p),
                ],
                ["class mix", "", "", f"chi-square {f3(t.class_chi2)}", _p(t.class_chi2_p)],
            ],
            caption=f"Boxes kept at conf {r.conf:g}; p-values from {t.n_perm} image-level permutations.",
            css="check-shift",
        )
    )
    names = run.class_names
    b.add(
        Table(
            ["class", "kept then", "share then", "kept now", "share now"],
            [
                [
                    names[k] if k < len(names) else str(k),
                    fint(a),
                    f3(a / max(1, sum(s.class_counts_then))),
                    fint(n),
                    f3(n / max(1, sum(s.class_counts))),
                ]
                for k, (a, n) in enumerate(zip(s.class_counts_then, s.class_counts))
            ],
            caption="Class mix of the kept boxes.",
            css="check-class-mix",
        )
    )
    then = _kept(run.boxes, h, 0.0, r.reference_split)
    now = new.filter(pl.col("head") == h)
    b.fig(
        f"scores_{h}",
        plots.confidence_histograms(
            [
                (
                    f"then: {r.reference_split}",
                    then.conf,
                    then.correct,
                    "calibrated confidence",
                    [(r.conf, f"conf {r.conf:g}")],
                ),
                (
                    "now (no labels: all drawn as incorrect)",
                    now["calibrated"].to_numpy(),
                    np.zeros(now.height, dtype=bool),
                    "calibrated confidence",
                    [(r.conf, f"conf {r.conf:g}")],
                ),
            ],
            title=f"{h}: calibrated confidence of every box",
        ),
        "Calibrated confidence of every captured box then and now (the new images have no labels).",
        f"Confidence histograms of head {h} then and now",
    )


def write_check_report(
    out_dir: str | Path, result: Any, boxes: pl.DataFrame, run: Run
) -> dict[str, Path]:
    """Write ``check.html``, ``check.md`` and ``figures/*.png`` into ``out_dir``.

    Args:
        result: The check.
        boxes: The new boxes (every head, with ``calibrated``).
        run: The run checked (its eval-split boxes are the "then").

    Returns:
        Written paths: ``"html"``, ``"md"`` and each figure's relative path.
    """
    b = Page()
    where = (
        f"{result.data} split {result.split}"
        if result.kind == "labelled"
        else f"unlabelled images in {result.images}"
    )
    verdicts = (
        [
            f"calibration: {result.calibration_verdict}",
            f"detection quality: {result.detection_verdict}",
        ]
        if result.kind == "labelled"
        else [f"output: {result.shift_verdict}"]
    )
    b.add(
        Heading(2, "Verdict"),
        Bullets(verdicts + [f"exit code {result.exit_code}: {result.exit_meaning}"]),
    )
    seen = result.seen_images
    if seen:
        b.add(
            Para(
                f"{sum(seen.values())} of these images are images the run itself used ("
                + ", ".join(f"{n} of its split `{name}`" for name, n in seen.items())
                + "): on them the check compares the run with itself. Check on images the run "
                "never saw.",
                "note",
            )
        )
    if result.kind == "unlabelled":
        b.add(
            Para(
                "Without labels this detects a shift of what the detector outputs against the "
                "run's eval split "
                "(score distribution, boxes per image, class mix), not a miscalibration: a shifted "
                "output can "
                "still be calibrated, and only labelled images (`--data`) can tell.",
                "note",
            )
        )
    for h in result.heads:
        if h in result.labelled:
            _labelled(b, result, h, result.labelled[h], boxes, run)
            if result.labelled[h].by_size:
                b.add(_size_table(result.labelled[h].by_size, run.head(h).by_size))
        elif h in result.unlabelled:
            _unlabelled(b, result, h, result.unlabelled[h], boxes, run)
    b.add(
        Heading(2, "Settings"),
        Bullets(
            [
                f"run: {result.run} (model {result.model}); the run's eval split "
                f"`{result.reference_split}` is the reference",
                f"operating threshold: conf {result.conf:g} (the run's lowest); family-wise level "
                f"{result.alpha:g} (labelled: "
                f"{question_level(result.alpha):g} for each of calibration and detection quality); "
                f"calibration verdicts need {result.min_boxes} kept boxes",
                f"intervals: 95% image bootstrap ({result.n_boot} resamples, seed {result.seed}), "
                "each containing its estimate",
            ]
        ),
    )
    return b.write(
        Path(out_dir),
        "check",
        "det_calib check",
        subtitle=where,
        footer=f"det_calib {result.det_calib_version}, {result.created}",
    )
