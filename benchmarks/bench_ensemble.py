"""The demo ensemble's cost against calibrating one member plus capturing the members.

    python benchmarks/bench_ensemble.py [--repeats 1] [--doc bench_ensemble]

Runs ``det-calib calibrate`` (the demo, one member, as users run it) and ``det-calib ensemble`` (the
demo ensemble of three members), each in a fresh process, alternating (calibrate, ensemble, then
ensemble, calibrate, ...), and reads each run's own timings from its ``calibration.json`` (wall and CPU
seconds, per stage). Printed per repeat: the ensemble's seconds against those of one member's
calibrate plus the ensemble's capture stage (the members' captures), wall and CPU, and the fusion each
head chose.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(command: str, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "YOLO_OFFLINE": "1", "YOLO_VERBOSE": "False"}
    r = subprocess.run(
        [sys.executable, "-m", "det_calib.cli", command, "--out", str(out), "-q"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if r.returncode:
        raise SystemExit(f"bench_ensemble: {command} failed:\n{r.stderr[-3000:]}")
    return json.loads((out / "calibration.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--doc", metavar="NAME", help="also write the table to docs/generated/NAME.md")
    args = ap.parse_args()
    rows = [
        "| repeat | calibrate one member, s wall / CPU | ensemble, s wall / CPU | members' "
        "captures, s wall / CPU "
        "| ensemble / (calibrate + captures), wall / CPU | fusion chosen (nms; e2e) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            order = ("calibrate", "ensemble") if r % 2 == 0 else ("ensemble", "calibrate")
            runs = {c: _run(c, Path(tmp) / f"{c}{r}") for c in order}
            cal, ens = runs["calibrate"]["timings"], runs["ensemble"]["timings"]
            cap = ens["stages"]["capture"]
            heads = runs["ensemble"]["ensemble"]["heads"]
            chosen = "; ".join(f"{v['order']}, {v['score']}" for v in heads.values())
            rows.append(
                f"| {r + 1} | {cal['wall']:.1f} / {cal['cpu']:.1f} | {ens['wall']:.1f} / "
                f"{ens['cpu']:.1f} | "
                f"{cap['wall']:.1f} / {cap['cpu']:.1f} | "
                f"{ens['wall'] / (cal['wall'] + cap['wall']):.2f}x / "
                f"{ens['cpu'] / (cal['cpu'] + cap['cpu']):.2f}x | {chosen} |"
            )
            print(rows[-1], flush=True)
    note = (
        "Each run in a fresh process, alternating; seconds from each run's `calibration.json` "
        "timings. "
        "The target: the ensemble within 1.5x of one member's calibrate plus the members' captures."
    )
    print("\n".join(rows))
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table(args.doc, "\n".join(rows), note=note)


if __name__ == "__main__":
    main()
