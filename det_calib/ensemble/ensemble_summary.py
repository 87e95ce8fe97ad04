"""``summary.txt`` of an ensemble run: ``calibrate``'s summary of the fused boxes, then the
ensemble's own lines (members, fusion, side by side, the fusion table, the cost per image).
"""

from __future__ import annotations

import numpy as np

from det_calib.ensemble.ensemble_record import AUTO, EnsembleRecord, ensemble_of, rule_words
from det_calib.record.run_result import RunResult

__all__ = ["ensemble_lines"]


def _f(x: float | None, spec: str = ".4f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and np.isnan(x)) else format(x, spec)


def ensemble_lines(result: RunResult) -> list[str]:
    """The ensemble's own lines of the summary: members, fusion, side by side, the fusion table."""
    rec: EnsembleRecord = ensemble_of(result)
    fz = rec.fusion
    thr = min(result.settings.conf_thresholds)
    chosen = " (chosen on the fit split's folds)" if AUTO in (fz.order, fz.score) else ""
    lines = [
        f"ensemble of {len(rec.members)} members: {rec.source}",
        f"fusion: weighted boxes fusion, IoU {fz.iou:g}; "
        + "; ".join(
            f"{h}: score {sc} ({rule_words(sc)}), {o}"
            for h in rec.heads
            for o, sc in [rec.fusion_of(h)]
        )
        + chosen,
    ]
    for i, m in enumerate(rec.members):
        lines.append(
            f"  member {i}: {m.name} ({m.kind}; imgsz "
            f"{'x'.join(map(str, m.imgsz)) if isinstance(m.imgsz, (list, tuple)) else m.imgsz}; heads "
            + ", ".join(f"{h}<-{v}" for h, v in m.heads.items())
            + ")"
        )
    for h, eh in rec.heads.items():
        lines.append(
            f"[{h}] side by side (eval split; COCO mAP; kept-set ECE at conf {thr:g} "
            "raw -> calibrated):"
        )
        for mf in [*eh.members, eh.ensemble]:
            o0, o1 = mf.operating_before[0], mf.operating_after[0]
            ci = "" if not o1.ece_ci else f" [{_f(o1.ece_ci[0])}, {_f(o1.ece_ci[1])}]"
            lines.append(
                f"[{h}]   {mf.name:<36} mAP50-95 {_f(mf.map50_95)} mAP50 {_f(mf.map50)}  "
                f"ECE {_f(o0.ece)} -> {_f(o1.ece)}{ci} ({mf.method}; T = "
                f"{_f(mf.temperature, '.3f')})"
            )
        total = sum(eh.agreement.values())
        if total:
            lines.append(
                f"[{h}] members present in the fused boxes kept at {thr:g}: "
                + ", ".join(f"{k}: {v / total:.1%}" for k, v in sorted(eh.agreement.items()))
            )
        if eh.table:
            cv = any(r.verdict for r in eh.table)
            lines.append(
                f"[{h}] fusion table (order, score rule: "
                + ("fit split mAP50-95 and CV kept ECE; " if cv else "")
                + "eval split mAP50-95, kept ECE as fused -> calibrated):"
            )
            for r in eh.table:
                fit = f"fit {_f(r.fit_map50_95)} CV {_f(r.cv_kept_ece)}  eval " if cv else ""
                mark = "  <- chosen" if r.chosen else ""
                lines.append(
                    f"[{h}]   {r.order:<20} {r.score:<8} {fit}{_f(r.map50_95)}  "
                    f"{_f(r.kept_ece_fused)} -> "
                    f"{_f(r.kept_ece_calibrated)} ({r.method}){mark}"
                )
    sec = rec.seconds_per_image
    each = [
        f"{rec.members[i].name} {sec[f'member {i}']:.3f}"
        for i in range(len(rec.members))
        if f"member {i}" in sec
    ]
    lines.append(
        "cost per image (CPU seconds): capture of all members "
        + _f(sec.get("capture"), ".3f")
        + (f" ({', '.join(each)})" if each else "")
        + "; fusion "
        + _f(sec.get("fusion"), ".4f")
        + " (wall, every head's fusion together)"
    )
    return lines
