"""The Settings section: the options recorded in calibration.json, the fit and the evaluation data."""

from __future__ import annotations

from det_calib.record.run_folder import BOXES_FILE, CALIBRATION_FILE, HeadBoxes, Run
from det_calib.record.run_result import HeadResult

from .common import (
    MAX_ABSENT_NAMED,
    f4,
    fint,
    fmt_value,
    head_eval,
)
from .context import ReportContext, Subject
from .document import Heading, Para, Table
from .page import Page

__all__ = ["settings_section"]


def settings_section(page: Page, ctx: ReportContext) -> None:
    """The Settings section: the run's options with their meaning (a report), or every run's side by side."""
    page.add(Heading(2, "Settings", "settings"))
    if ctx.compared:
        _compare_settings(page, list(ctx.subjects))
    else:
        _report_settings(page, ctx.run, ctx.hbs)


_SETTING_HELP = {
    "schema_version": "layout version of calibration.json",
    "det_calib_version": "det_calib version that wrote the run",
    "created": "when calibration.json was written",
    "model": "detector weights",
    "data": "dataset YAML",
    "heads": "heads calibrated (nms: one-to-many + NMS; e2e: one-to-one)",
    "iou_match": "IoU a box needs with a same-class ground truth to count as correct (ECE, NLL, Brier, reliability)",
    "loc_iou_match": "IoU threshold of the matching used for the localisation-aware LaECE / LaACE",
    "fit_min_conf": "boxes below this raw conf are left out of the fit (null: --method auto chose per head)",
    "method": "calibration method asked for (auto: chosen per head by cross-validation)",
    "fit_range": "fit range asked for (all, operating, a raw conf floor; null: the default)",
    "criterion": "what --method auto minimises on held-out folds (above the lowest conf threshold)",
    "cv_folds": "folds of --method auto's cross-validation, grouped by image",
    "cv_repeats": "fold assignments of --method auto's cross-validation (each candidate scored on all of them)",
    "auto_per_class": "whether --method auto also considered the per-class maps (--per-class)",
    "target": "what the calibrators were fitted to (--target): correct (the matched flag at iou_match; headline "
    "kept-set ECE) or iou (the IoU of the box's LaECE_0 match, 0 when none; headline kept-set "
    "LaECE_0)",
    "auto_size_maps": "whether --method auto also considered the size-conditioned maps (--size-maps)",
    "conf_floor": "capture conf floor: boxes below it were never recorded",
    "max_det": "maximum detections per image",
    "imgsz": "inference image size",
    "conf_thresholds": "operating thresholds whose kept set is compared before/after",
    "ece_bins": "equal-width bins of ECE, MCE and reliability diagrams (equal-mass for ACE)",
    "laece_bins": "equal-width bins of LaECE",
    "min_class_boxes": "classes with fewer boxes are flagged 'few boxes'",
    "bootstrap": "image bootstrap of the 95% intervals",
    "splits": "fit split (temperature) and eval split (every metric and figure)",
    "nms_iou": "IoU of non-maximum suppression (nms head)",
    "dece_bins": "D-ECE bins: confidence, then normalised centre x, centre y, width, height",
    "coco_gt": "COCO JSON ground truth (instead of YOLO txt labels)",
    "matching": "a segment, pose or OBB model's run: what the IoU compared (by: box, mask, oks or rotated), --match, "
    "and why (and the OKS sigmas)",
    "seconds": "run time of the calibration job",
}


_PER_HEAD_KEYS = {
    "temperature",
    "calibrators",
    "calibration_candidates",
    "detection_change",
    "fit",
    "eval",
    "threshold_shift",
    "per_class",
    "ultralytics_val",
    "corrupt_images",
    "class_names",
    "gt_counts",
    "temperature_fit",
    "by_size",
}


def _temperature_words(head: HeadResult) -> str:
    """A head's temperature in the settings table: T, and whether it is the deployed map."""
    tf, cal = head.temperature_fit, head.calibrator
    t = tf.temperature if tf is not None and tf.temperature is not None else head.temperature
    if t is None:
        return "n/a"
    deployed = cal is not None and cal.method == "temperature"
    return f"T = {t:.4f} ({'deployed' if deployed else 'for comparison'})"


def _report_settings(b: Page, run: Run, hbs: dict[str, HeadBoxes]) -> None:
    """The recorded options with their meaning, the fit and the evaluation data of every head."""
    c = run.result.to_dict()
    iou = run.settings.iou_match
    rows = [
        [k, fmt_value(v), _SETTING_HELP.get(k, "")] for k, v in c.items() if k not in _PER_HEAD_KEYS
    ]
    rows.append(
        [
            "temperature",
            ", ".join(f"{h} {_temperature_words(run.head(h))}" for h in run.heads) or "n/a",
            "the NLL-optimal temperature per head on the fit split, conf = sigmoid(logit / T): "
            "deployed where it is the head's map, else fitted for comparison",
        ]
    )
    b.add(
        Table(
            ["Setting", "Value", "Meaning"],
            rows,
            caption=f"Options recorded in {CALIBRATION_FILE}",
            css="settings",
            align_numbers=False,
        )
    )
    frows = []
    for h in run.heads:
        f = run.head(h).fit
        cal = run.head(h).calibrator
        frows.append(
            [h, "n/a"] + ["n/a"] * 7
            if f is None
            else [
                h,
                "n/a" if cal is None else cal.method,
                f.split or "n/a",
                fint(f.images),
                fint(f.boxes),
                fint(f.correct),
                f4(f.nll_before),
                f4(f.nll_after),
                fint(f.iterations),
            ]
        )
    b.add(
        Table(
            [
                "Head",
                "Deployed map",
                "Split",
                "Images",
                "Boxes",
                "Correct",
                f"NLL raw (IoU {iou:g})",
                "NLL after the map",
                "Iterations",
            ],
            frows,
            caption="Fit of the deployed map (on the fit split, in sample)",
            css="fit",
        )
    )
    erows = []
    for h in run.heads:
        ev = head_eval(run, h)
        erows.append(
            [
                h,
                ev.split or "n/a",
                fint(ev.images),
                fint(ev.boxes),
                fint(ev.correct),
                fint(ev.ignored),
                fint(ev.n_gt),
                fint(ev.corrupt_images),
                f"{hbs[h].n:,}",
            ]
        )
    b.add(
        Table(
            [
                "Head",
                "Split",
                "Images",
                "Boxes",
                "Correct",
                "Crowd-matched (excluded)",
                "GT objects",
                "Corrupt images",
                f"Boxes used for curves (from {BOXES_FILE})",
            ],
            erows,
            caption="Evaluation data",
            css="eval-data",
        )
    )
    corrupt = run.result.corrupt_images
    named = ", ".join(map(str, corrupt[:MAX_ABSENT_NAMED]))
    more = (
        f" and {len(corrupt) - MAX_ABSENT_NAMED:,} more (all in calibration.json)"
        if len(corrupt) > MAX_ABSENT_NAMED
        else ""
    )
    b.add(Para("Corrupt images skipped: " + (named + more if corrupt else "none") + ".", "note"))
    for h in run.heads[:1]:  # one val pass reads the split for every head
        uv = run.head(h).ultralytics_val
        if uv is not None and uv.skipped:
            b.add(
                Para(
                    f"Images Ultralytics val skipped ({len(uv.skipped):,} of "
                    f"{fint(uv.images_expected)}; "
                    "its mAP is not reported): "
                    + "; ".join(uv.skipped[:MAX_ABSENT_NAMED])
                    + (
                        f"; and {len(uv.skipped) - MAX_ABSENT_NAMED:,} more (in calibration.json)"
                        if len(uv.skipped) > MAX_ABSENT_NAMED
                        else ""
                    )
                    + ".",
                    "note",
                )
            )
    bad = run.result.bad_labels
    if bad:
        b.add(
            Para(
                f"Malformed label files ({len(bad):,}; their images are among those skipped): "
                + "; ".join(bad[:5])
                + (
                    f"; and {len(bad) - 5:,} more (bad_labels in calibration.json)"
                    if len(bad) > 5
                    else ""
                )
                + ".",
                "note",
            )
        )
    b.add(
        Para(
            f"Curves are recomputed from {run.run_dir / BOXES_FILE} on the evaluation split, boxes "
            "matched to crowd "
            "annotations excluded; the numbers in the tables are those of "
            f"{run.run_dir / CALIBRATION_FILE}.",
            "note",
        )
    )


def _compare_settings(b: Page, cols: list[Subject]) -> None:
    """Every run's settings side by side, the differing ones marked."""
    docs = [c.run.result.to_dict() for c in cols]
    keys = [
        k
        for k in dict.fromkeys(k for d in docs for k in d)
        if k not in _PER_HEAD_KEYS | {"temperature_fit"}
    ]
    srows = [
        [
            k,
            *[fmt_value(d.get(k)) for d in docs],
            "" if all(d.get(k) == docs[0].get(k) for d in docs) else "differs",
        ]
        for k in keys
    ]
    srows.append(["run directory", *[str(c.run.run_dir) for c in cols], ""])
    srows.append(["head", *[c.head for c in cols], ""])
    srows.append(["deployed calibrator", *[c.words for c in cols], ""])
    b.add(
        Table(
            ["Setting", *[c.name for c in cols], ""],
            srows,
            caption="Settings of every run",
            css="settings",
            align_numbers=False,
        )
    )
