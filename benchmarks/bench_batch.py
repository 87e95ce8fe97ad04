"""How far a batched capture moves a calibration run from the exact batch-1 capture.

``det-calib calibrate`` captures one image per forward pass by default on a CPU (exactly
single-image ``predict``) and :data:`~det_calib.capture.options.CUDA_BATCH` images per pass on a
CUDA device (about three times faster there; batched convolutions round differently, so it is not
bit-exact). This benchmark runs the same calibration twice on the same device, at ``--batch 1`` and
at ``--batch N`` (fresh processes, the embedded demo by default), and compares:

- **the boxes** of both splits, per head: how many lie above the conf floor, above 0.01 and above
  0.25 in each run; the boxes paired across the runs (same image and class, IoU above 0.9, best
  first), the largest difference of a paired box's logit, conf and corners; the boxes only one run
  has (removed by batching, added by it) and the highest conf among them (near the floor: a box
  that crosses it);
- **every summary figure** of each head (``calibration.json``): the kept-set ECE raw and
  calibrated, its sampling floor, LaECE_0 raw and calibrated, the all-box ECE, LaECE, NLL and
  Brier, precision and recall of the kept set at the first ``--conf``, COCO mAP50-95 and mAP50, the
  chosen map and the fitted temperature: each figure's value at batch 1 and N, the change, and the
  change against the figure's printed 95% interval (its half-width at batch 1; for precision and
  recall, which the summary prints without one, the binomial standard error of the batch-1 set).

A figure is *unchanged* when it agrees to the summary's four decimals. The Ultralytics val checks
and the report are left out by default (``--val`` keeps the checks): neither changes a figure above.

Run from the repository root::

    PYTHONPATH=. python benchmarks/bench_batch.py [--device 0] [--batch 16] [--json out.json] [--doc]
    PYTHONPATH=. python benchmarks/bench_batch.py --from-json out.json --doc   # the doc from a GPU run's file

``--doc`` writes ``docs/generated/batch_capture.md`` (``batch_capture_gpu.md`` for a run on a GPU),
which docs/speed.md links.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
PAIR_IOU = 0.9
"""Two boxes of the two runs are the same box when they share image and class and overlap above this."""
UNCHANGED = 5e-5
"""Below this a figure agrees to the summary's four decimals."""


def run_calibrate(out: Path, batch: int, args: argparse.Namespace, env: dict[str, str]) -> float:
    """``det-calib calibrate`` at ``batch`` into ``out`` in a fresh process; its wall seconds."""
    cmd = [
        sys.executable,
        "-m",
        "det_calib.cli",
        "calibrate",
        "--batch",
        str(batch),
        "--out",
        str(out),
        "-q",
    ]
    if args.model:
        cmd += ["--model", args.model, "--data", args.data]
    if args.device is not None:
        cmd += ["--device", args.device]
    if not args.val:
        cmd.append("--no-val")
    cmd += ["--no-report", *args.extra]
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t


# ------------------------------------------------------------------------------------ the boxes
def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` (n, 4) with every box of ``b`` (m, 4), xyxy."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / np.maximum(area(a)[:, None] + area(b)[None, :] - inter, 1e-12)


def pair_boxes(
    one: dict[str, np.ndarray], other: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(i, j)`` of the boxes of ``one`` and ``other`` (columns ``image_id``, ``cls``, ``xyxy``)
    that are the same box: same image and class, IoU above :data:`PAIR_IOU`, greedily by IoU (each
    box in at most one pair)."""
    pi, pj = [], []
    for key in np.unique(np.concatenate([one["key"], other["key"]])):
        ia, ib = np.flatnonzero(one["key"] == key), np.flatnonzero(other["key"] == key)
        if not len(ia) or not len(ib):
            continue
        m = _iou(one["xyxy"][ia], other["xyxy"][ib])
        m[one["cls"][ia][:, None] != other["cls"][ib][None, :]] = 0.0
        while True:
            k = int(m.argmax())
            r, c = divmod(k, m.shape[1])
            if m[r, c] <= PAIR_IOU:
                break
            pi.append(ia[r])
            pj.append(ib[c])
            m[r, :], m[:, c] = 0.0, 0.0
    return np.asarray(pi, dtype=np.int64), np.asarray(pj, dtype=np.int64)


def _columns(df) -> dict[str, np.ndarray]:
    return {
        "key": df["image_id"].to_numpy(),
        "cls": df["cls"].to_numpy(),
        "xyxy": df.select("x1", "y1", "x2", "y2").to_numpy(),
        "conf": df["conf"].to_numpy(),
        "logit": df["logit"].to_numpy(),
    }


def compare_boxes(one_dir: Path, other_dir: Path) -> list[dict]:
    """Per split and head: the two runs' boxes counted, paired and compared (see the module's words)."""
    import polars as pl

    a_all, b_all = (pl.read_parquet(d / "boxes.parquet") for d in (one_dir, other_dir))
    rows = []
    for split in a_all["split"].unique(maintain_order=True).to_list():
        for head in a_all["head"].unique(maintain_order=True).to_list():
            sel = (pl.col("split") == split) & (pl.col("head") == head)
            a, b = _columns(a_all.filter(sel)), _columns(b_all.filter(sel))
            i, j = pair_boxes(a, b)
            removed = np.setdiff1d(np.arange(len(a["conf"])), i)
            added = np.setdiff1d(np.arange(len(b["conf"])), j)
            rows.append(
                {
                    "split": split,
                    "head": head,
                    "boxes": [len(a["conf"]), len(b["conf"])],
                    "above_0.01": [int((a["conf"] > 0.01).sum()), int((b["conf"] > 0.01).sum())],
                    "above_0.25": [int((a["conf"] > 0.25).sum()), int((b["conf"] > 0.25).sum())],
                    "paired": len(i),
                    "removed": len(removed),
                    "added": len(added),
                    "max_conf_removed": float(a["conf"][removed].max()) if len(removed) else None,
                    "max_conf_added": float(b["conf"][added].max()) if len(added) else None,
                    "max_logit_diff": float(np.abs(a["logit"][i] - b["logit"][j]).max())
                    if len(i)
                    else None,
                    "max_conf_diff": float(np.abs(a["conf"][i] - b["conf"][j]).max())
                    if len(i)
                    else None,
                    "max_corner_diff_px": float(np.abs(a["xyxy"][i] - b["xyxy"][j]).max())
                    if len(i)
                    else None,
                }
            )
    return rows


# ------------------------------------------------------------------------------------ the figures
def head_figures(run_dir: Path) -> dict[str, list[dict]]:
    """Head -> the summary's figures of a run: name, value, its 95% interval's half-width (None: the
    summary prints none), and for a proportion the binomial standard error (``se``)."""
    sys.path.insert(0, str(REPO))
    from det_calib.record.run_result import RunResult

    r = RunResult.read(run_dir / "calibration.json")
    out: dict[str, list[dict]] = {}
    for head in r.heads:
        h = r.head(head)
        e = h.eval
        o0, o1 = e.operating_before[0], e.operating_after[0]
        sh = h.threshold_shift[0] if h.threshold_shift else None

        def fig(name: str, value, ci=None, n=None, kind: str = "num") -> dict:
            half = None if ci is None or value is None else (ci[1] - ci[0]) / 2
            se = None if n is None or value is None or not n else math.sqrt(value * (1 - value) / n)
            return {"name": name, "value": value, "half": half, "se": se, "kind": kind}

        at = f"at conf {o0.conf:g}"
        figs = [
            fig(f"kept boxes {at}, raw", o0.boxes, kind="count"),
            fig(f"kept boxes {at}, calibrated", o1.boxes, kind="count"),
            fig(f"kept-set ECE {at}, raw", o0.ece, o0.ece_ci),
            fig(f"kept-set ECE {at}, calibrated", o1.ece, o1.ece_ci),
            fig("sampling floor of the calibrated kept-set ECE", o1.ece_floor, o1.ece_floor_range),
            fig(f"kept-set LaECE_0 {at}, raw", o0.laece0, o0.laece0_ci),
            fig(f"kept-set LaECE_0 {at}, calibrated", o1.laece0, o1.laece0_ci),
            fig("all-box ECE, raw", e.before.ece, e.before.ece_ci),
            fig("all-box ECE, calibrated", e.after.ece, e.after.ece_ci),
            fig("all-box LaECE, raw", e.before.laece, e.before.laece_ci),
            fig("all-box LaECE, calibrated", e.after.laece, e.after.laece_ci),
            fig("all-box NLL, raw", e.before.nll),
            fig("all-box NLL, calibrated", e.after.nll),
            fig("all-box Brier, raw", e.before.brier),
            fig("all-box Brier, calibrated", e.after.brier),
        ]
        if sh is not None:
            figs += [
                fig(f"precision {at}, raw", sh.precision_before, n=sh.kept_before),
                fig(f"precision {at}, calibrated", sh.precision_after, n=sh.kept_after),
                fig(f"recall {at}, raw", sh.recall_before, n=sh.n_gt),
                fig(f"recall {at}, calibrated", sh.recall_after, n=sh.n_gt),
            ]
        figs += [
            fig("COCO mAP50-95", e.map50_95_before),
            fig("COCO mAP50", e.map50_before),
            fig("chosen map", h.calibrator.method if h.calibrator else None, kind="text"),
            fig(
                "temperature (fitted)", h.temperature_fit.temperature if h.temperature_fit else None
            ),
        ]
        out[head] = figs
    return out


def compare_figures(one: dict[str, list[dict]], other: dict[str, list[dict]]) -> list[dict]:
    """Each figure of each head at batch 1 and N: the change, and the change in interval half-widths
    (or binomial standard errors)."""
    rows = []
    for head, figs in one.items():
        for f1, fn in zip(figs, other[head], strict=True):
            v1, vn = f1["value"], fn["value"]
            row = {"head": head, "name": f1["name"], "kind": f1["kind"], "one": v1, "n": vn}
            if f1["kind"] == "text" or v1 is None or vn is None:
                row["changed"] = v1 != vn
            else:
                d = float(vn) - float(v1)
                row["diff"] = d
                row["changed"] = abs(d) >= (0.5 if f1["kind"] == "count" else UNCHANGED)
                scale, what = (
                    (f1["half"], "half-interval") if f1["half"] else (f1["se"], "binomial SE")
                )
                if scale:
                    row["in_units"], row["unit"] = abs(d) / scale, what
                    row["scale"] = scale
            rows.append(row)
    return rows


# ------------------------------------------------------------------------------------ the tables
def _f(v, fmt: str = ".4f") -> str:
    return (
        "-"
        if v is None
        else format(v, fmt)
        if isinstance(v, float)
        else f"{v:,}"
        if isinstance(v, int)
        else str(v)
    )


def box_table(rows: list[dict], batch: int) -> list[str]:
    lines = [
        f"| split / head | boxes above the floor (1 → {batch}) | above 0.01 | above 0.25 | paired "
        "| removed "
        "(highest conf) | added (highest conf) | largest logit difference | largest conf "
        "difference | "
        "largest corner difference (px) |",
        "|---|---|---|---|---:|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['split']} / {r['head']} | {r['boxes'][0]:,} → {r['boxes'][1]:,} | "
            f"{r['above_0.01'][0]:,} → {r['above_0.01'][1]:,} | {r['above_0.25'][0]:,} → "
            f"{r['above_0.25'][1]:,} | "
            f"{r['paired']:,} | {r['removed']} ({_f(r['max_conf_removed'])}) | {r['added']} "
            f"({_f(r['max_conf_added'])}) | {_f(r['max_logit_diff'], '.2e')} | "
            f"{_f(r['max_conf_diff'], '.2e')} | "
            f"{_f(r['max_corner_diff_px'], '.2e')} |"
        )
    return lines


def figure_table(rows: list[dict], batch: int) -> list[str]:
    lines = [
        f"| head | figure | batch 1 | batch {batch} | change | change against the interval |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        if r["kind"] == "text":
            change, units = ("same" if not r["changed"] else "DIFFERENT"), ""
        elif "diff" not in r:
            change, units = "-", ""
        else:
            change = (
                "none"
                if not r["changed"]
                else f"{r['diff']:+,.0f}"
                if r["kind"] == "count"
                else f"{r['diff']:+.4f}"
            )
            units = (
                ""
                if r["kind"] == "count"
                else f"{r['in_units']:.2f} of its {r['unit']} ({r['scale']:.4f})"
                if "in_units" in r
                else "no interval printed"
            )
        fmt = ".0f" if r["kind"] == "count" else ".4f"
        one = _f(r["one"], fmt) if r["kind"] != "count" else f"{r['one']:,}"
        n = _f(r["n"], fmt) if r["kind"] != "count" else f"{r['n']:,}"
        lines.append(f"| {r['head']} | {r['name']} | {one} | {n} | {change} | {units} |")
    return lines


def verdict(rows: list[dict]) -> str:
    """One sentence: which figures changed, and the largest change in interval units."""
    moved = [r for r in rows if r["changed"] and r["kind"] != "count"]
    if not moved:
        num = [r for r in rows if r["kind"] == "num" and "diff" in r]
        big = max(num, key=lambda r: abs(r["diff"])) if num else None
        return (
            "Every summary figure is unchanged to four decimals, and the chosen maps are the same"
            + (
                f" (the largest change: {big['diff']:+.1e}, the {big['head']} head's "
                f"{big['name']})."
                if big is not None
                else "."
            )
        )
    scaled = [r for r in moved if "in_units" in r]
    worst = max(scaled, key=lambda r: r["in_units"]) if scaled else None
    text = (
        f"{len(moved)} of {sum(r['kind'] != 'count' for r in rows)} figures changed in the fourth "
        "decimal or "
        "more (the counts aside)"
    )
    if worst is not None:
        text += (
            f"; the largest against its interval is the {worst['head']} head's {worst['name']}, by "
            f"{worst['diff']:+.4f} ({worst['in_units']:.2f} of its {worst['unit']})"
        )
    changed_maps = [r["head"] for r in rows if r["kind"] == "text" and r["changed"]]
    text += (
        "; the chosen maps are the same."
        if not changed_maps
        else f"; the chosen map changed on {', '.join(changed_maps)}."
    )
    return text


def render(res: dict) -> str:
    b = res["batch"]
    body = [
        f"On {res['device']}: both runs' wall {res['wall'][0]:.1f} s at batch 1 and "
        f"{res['wall'][1]:.1f} s "
        f"at batch {b} (capture stage {res['capture_wall'][0]:.1f} s and "
        f"{res['capture_wall'][1]:.1f} s).",
        "",
        "**The boxes** (both splits; a pair: same image and class, IoU above 0.9):",
        "",
        *box_table(res["boxes"], b),
        "",
        f"**The summary figures** (the eval split). {verdict(res['figures'])}",
        "",
        *figure_table(res["figures"], b),
    ]
    return "\n".join(body)


def _device_words(device: str | None) -> str:
    import torch

    if device not in (None, "cpu") and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})"
    return f"the CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__})"


def measure(args: argparse.Namespace) -> dict:
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )  # packages beside too
    env = {**os.environ, "PYTHONPATH": path, "YOLO_OFFLINE": "1"}
    with tempfile.TemporaryDirectory(prefix="bench_batch_") as tmp:
        dirs = [Path(tmp) / "batch1", Path(tmp) / f"batch{args.batch}"]
        wall = [run_calibrate(d, b, args, env) for d, b in zip(dirs, (1, args.batch), strict=True)]
        timings = [
            json.loads((d / "calibration.json").read_text()).get("timings") or {} for d in dirs
        ]
        cap = [t.get("stages", {}).get("capture", {}).get("wall", float("nan")) for t in timings]
        boxes = compare_boxes(*dirs)
        figures = compare_figures(head_figures(dirs[0]), head_figures(dirs[1]))
    return {
        "batch": args.batch,
        "device": _device_words(args.device),
        "wall": wall,
        "capture_wall": cap,
        "boxes": boxes,
        "figures": figures,
        "command": "python3 benchmarks/bench_batch.py"
        + (f" --device {args.device}" if args.device else "")
        + f" --batch {args.batch}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", help="detector .pt (default: the demo detector)")
    ap.add_argument("--data", help="data.yaml (default: the demo dataset)")
    ap.add_argument("--device", help="torch device of both runs (default: Ultralytics' choice)")
    ap.add_argument("--batch", type=int, default=16, help="the batched run's batch (default 16)")
    ap.add_argument(
        "--val",
        action="store_true",
        help="keep the Ultralytics val checks (off: no figure here reads them)",
    )
    ap.add_argument("--json", type=Path, help="also write the results to this JSON file")
    ap.add_argument(
        "--from-json",
        type=Path,
        help="print (and with --doc write) the tables of an earlier run's file",
    )
    ap.add_argument(
        "--doc",
        action="store_true",
        help="write docs/generated/batch_capture.md (batch_capture_gpu.md for a GPU run)",
    )
    ap.add_argument("extra", nargs="*", help="extra calibrate options (after --)")
    args = ap.parse_args()
    if (args.model is None) != (args.data is None):
        ap.error("give --model and --data together")
    res = json.loads(args.from_json.read_text()) if args.from_json else measure(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))
    text = render(res)
    print(text)
    if args.doc:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from doc_table import write_doc_table

        gpu = not res["device"].startswith(
            "the CPU"
        )  # a GPU run's table beside the CPU's, not over it
        write_doc_table(
            "batch_capture_gpu" if gpu else "batch_capture",
            text,
            command=res["command"],
            note="The embedded demo (both heads, calib + test), `calibrate --batch 1` and "
            f"`--batch {res['batch']}` on the same device, fresh processes, the val checks and the "
            "report off.",
        )


if __name__ == "__main__":
    main()
