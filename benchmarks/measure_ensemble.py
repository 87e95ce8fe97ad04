"""The demo ensemble's figures, as the README prints them, and its "Done when" lines, from a run folder.

Usage (from the repository root):

    det-calib ensemble --out /tmp/ens                  # the embedded demo ensemble (minutes)
    python3 benchmarks/measure_ensemble.py /tmp/ens    # members and ensemble, the fusion table, the verdicts

Prints, per head, members and the ensemble side by side (pycocotools mAP on each one's own boxes,
kept-set ECE at the lowest ``--conf`` raw and calibrated with its 95% interval, the calibrator, T),
then the fusion table (both orders under every score rule) and three lines:

- the ensemble's mAP50-95 against the best member's;
- the calibrated ensemble's kept-set ECE against the best calibrated member's upper interval bound
  ("best": the member with the lowest calibrated kept-set ECE);
- how many members agree on the fused boxes kept.

With ``--doc NAME`` the tables are also written to ``docs/generated/NAME.md`` (the demo
ensemble's: ``--doc ensemble_demo``, which docs/ensembles.md includes).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _f(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None else format(x, spec)


def _ece(op) -> str:
    ci = op.ece_ci
    return f"{_f(op.ece)} [{_f(ci[0])}, {_f(ci[1])}]" if ci else _f(op.ece)


def head_table(head: str, eh) -> list[str]:
    rows = [
        "| head | model | mAP50-95 | mAP50 | kept-set ECE at 0.25, raw | calibrated [95% interval] "
        "| "
        "calibrator | T |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in [*eh.members, eh.ensemble]:
        name = "**ensemble**" if m is eh.ensemble else f"`{m.name}`"
        rows.append(
            f"| `{head}` | {name} | {_f(m.map50_95)} | {_f(m.map50)} | "
            f"{_f(m.operating_before[0].ece)} | "
            f"{_ece(m.operating_after[0])} | {m.method} | {_f(m.temperature, '.3f')} |"
        )
    return rows


def verdicts(head: str, eh) -> list[str]:
    best_map = max(eh.members, key=lambda m: m.map50_95 or -1.0)
    best_cal = min(
        eh.members,
        key=lambda m: (
            m.operating_after[0].ece if m.operating_after[0].ece is not None else float("inf")
        ),
    )
    e, b = eh.ensemble, best_cal.operating_after[0]
    bound = b.ece_ci[1] if b.ece_ci else None
    n = len(eh.members)
    kept = sum(eh.agreement.values())
    return [
        f"{head}: mAP50-95 ensemble {_f(e.map50_95)} vs best member {_f(best_map.map50_95)} "
        f"({best_map.name}): "
        + ("met" if (e.map50_95 or 0) >= (best_map.map50_95 or 0) else "NOT met"),
        f"{head}: calibrated kept-set ECE ensemble {_f(e.operating_after[0].ece)} vs best "
        "calibrated member "
        f"{best_cal.name} {_ece(b)}, upper bound {_f(bound)}: "
        + ("met" if bound is not None and (e.operating_after[0].ece or 1) <= bound else "NOT met"),
        f"{head}: all {n} members present in {100 * eh.agreement.get(n, 0) / max(kept, 1):.1f}% of "
        f"the {kept} "
        "fused boxes kept",
    ]


def fusion_table(rec) -> list[str]:
    heads = list(rec.heads)
    head_cols = " | ".join(
        f"`{h}` fit mAP50-95, CV kept ECE | `{h}` mAP50-95 | `{h}` kept ECE as fused → "
        "calibrated [interval]"
        for h in heads
    )
    rows = [f"| order | score rule | {head_cols} |", "|---|---|" + "---|---|---|" * len(heads)]
    cells = {h: {(r.order, r.score): r for r in rec.heads[h].table} for h in heads}
    for key in cells[heads[0]]:
        parts = []
        for h in heads:
            r = cells[h][key]
            ci = r.kept_ece_calibrated_ci
            iv = f" [{_f(ci[0])}, {_f(ci[1])}]" if ci else ""
            mark = " **chosen**" if key == rec.fusion_of(h) else ""
            parts.append(
                f"{_f(r.fit_map50_95)}, {_f(r.cv_kept_ece)}{mark} | {_f(r.map50_95)} | "
                f"{_f(r.kept_ece_fused)} → {_f(r.kept_ece_calibrated)}{iv} ({r.method})"
            )
        rows.append(f"| {key[0]} | {key[1]} | " + " | ".join(parts) + " |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="an ensemble run folder (det-calib ensemble --out RUN)")
    ap.add_argument("--doc", metavar="NAME", help="also write the tables to docs/generated/NAME.md")
    args = ap.parse_args()

    from det_calib.record.run_result import RunResult

    result = RunResult.read(args.run / "calibration.json")
    rec = result.sections.get("ensemble")
    if rec is None:
        raise SystemExit(f"{args.run} is not an ensemble run")
    print(f"members: {rec.source}\n")
    tables = ["\n".join(head_table(h, eh)) for h, eh in rec.heads.items()]
    if all(rec.heads[h].table for h in rec.heads):
        tables.append("\n".join(fusion_table(rec)))
    print("\n\n".join(tables) + "\n")
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table(args.doc, "\n\n".join(tables), note=f"Members: {rec.source}.")
    for h, eh in rec.heads.items():
        print("\n".join(verdicts(h, eh)))
    cost = ", ".join(f"{k} {v:.3f}" for k, v in rec.seconds_per_image.items())
    print(f"\nCPU seconds per image: {cost}; run {result.seconds} s")


if __name__ == "__main__":
    main()
