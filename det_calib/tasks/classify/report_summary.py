"""The summary of a classify run (``summary.md``): the verdict first, then the figures.

Example:
    >>> r = {"method": "temperature", "map": {"temperature": 1.5}, "eval_split": "test", "images": {"test": 10},
    ...      "deployed_as": "calibrated.pt",
    ...      "keeps_top1": True, "top1_changed": 0, "val": None, "eval": {k: {
    ...      "top_label_ece": e, "ece_interval": [0, 1], "floor": 0.01, "floor_interval": [0.0, 0.02],
    ...      "at_floor": e <= 0.02, "classwise_ece": 0.1, "nll": 1.0, "brier": 0.5, "top1": 0.8, "top5": 1.0}
    ...      for k, e in (("raw", 0.1), ("calibrated", 0.01), ("deployed", 0.01))}, "reject": [{"target": 0.9,
    ...      "delta": 0.1, "certified": False}]}
    >>> summary_markdown(r).splitlines()[2]
    '**At its floor**: top-label ECE 0.1000 -> 0.0100 (deployed), sampling floor 0.0100 [0.0000, 0.0200].'
"""

from __future__ import annotations

__all__ = ["classifier_verdict", "classifier_deployed_words", "summary_markdown"]


def classifier_verdict(raw: dict, deployed: dict) -> str:
    if deployed["at_floor"] and raw["at_floor"]:
        return "**At its floor** (the raw scores already were)"
    if deployed["at_floor"]:
        return "**At its floor**"
    if deployed["top_label_ece"] < raw["top_label_ece"]:
        return "**Improved, still above its floor**"
    return "**Not improved: keep the raw scores**"


def classifier_deployed_words(record: dict) -> str:
    if record["deployed_as"] == "calibrated.pt":
        return "plain Ultralytics predicting with `calibrated.pt`"
    return "the engine's scores with `classifier_map.json` applied after it"


def summary_markdown(record: dict) -> str:
    """Markdown of a classify run's record (see :func:`det_calib.tasks.classify.pipeline_run.calibrate_classifier`)."""
    ev = record["eval"]
    raw, cal, dep = ev["raw"], ev["calibrated"], ev["deployed"]
    t = record["map"]["temperature"]
    what = (
        f"temperature T = {t:.4f}"
        if record["method"] == "temperature"
        else f"{record['method']} scaling"
    )
    if record["method"] == "none":
        what = "no map (the raw scores)"
    lines = [
        f"# Classifier calibration: {what}",
        "",
        f"{classifier_verdict(raw, dep)}: top-label ECE {raw['top_label_ece']:.4f} -> "
        f"{dep['top_label_ece']:.4f} "
        f"(deployed), sampling floor {dep['floor']:.4f} "
        f"[{dep['floor_interval'][0]:.4f}, {dep['floor_interval'][1]:.4f}].",
        "",
        f"On `{record['eval_split']}` ({record['images'][record['eval_split']]} images). Deployed: "
        f"{classifier_deployed_words(record)}.",
        "",
        "| figure | raw | calibrated | deployed |",
        "|---|---:|---:|---:|",
    ]
    for key, label in (
        ("top_label_ece", "top-label ECE (15 bins)"),
        ("classwise_ece", "class-wise ECE"),
        ("nll", "NLL"),
        ("brier", "Brier"),
        ("top1", "top-1"),
        ("top5", "top-5"),
    ):
        lines.append(f"| {label} | {raw[key]:.4f} | {cal[key]:.4f} | {dep[key]:.4f} |")
    keeps = (
        "keeps every image's top-1 class"
        if record["keeps_top1"]
        else f"can change the top-1 class: it changed {record['top1_changed']} image(s)"
    )
    lines += ["", f"The map {keeps}."]
    val = record["val"]
    if val:
        word = "identical" if val["identical"] else "CHANGED"
        lines.append(
            f"Ultralytics classify val: top-1 {val['raw']['top1']:.4f} -> "
            f"{val['calibrated']['top1']:.4f}, "
            f"top-5 {val['raw']['top5']:.4f} -> {val['calibrated']['top5']:.4f} ({word})."
        )
    lines += [
        "",
        "Reject option (answer only above a threshold; the accuracy among answered images "
        "guaranteed "
        f"with probability {1 - record['reject'][0]['delta']:.2f} over the fit split's images):",
        "",
        "| target accuracy | threshold | answered (fit) | answered (eval) | accuracy (eval) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in record["reject"]:
        if not r["certified"]:
            lines.append(f"| {r['target']:.2f} | cannot certify on these images | | | |")
            continue
        acc = "n/a" if r["eval_accuracy"] is None else f"{r['eval_accuracy']:.3f}"
        lines.append(
            f"| {r['target']:.2f} | {r['threshold']:.2f} | {r['answered']:.3f} | "
            f"{r['eval_answered']:.3f} | "
            f"{acc} |"
        )
    return "\n".join(lines) + "\n"
