"""``det-calib`` command line: argument parsing and calls, no logic.

Exit codes: 0 success, 2 bad input (one-line message on stderr, no traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from pathlib import Path

from det_calib.errors import DetCalibError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="det-calib",
        description="Calibrate the confidence of an Ultralytics YOLO detector (temperature scaling of box scores).",
    )
    p.add_argument("--version", action="version", version=f"det_calib {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser(
        "calibrate",
        help="capture logits, fit a temperature, verify mAP, report, write a calibrated checkpoint",
        description="With no arguments: runs on the embedded demo detector and dataset.",
    )
    c.add_argument("--model", type=Path, help="detector checkpoint .pt (default: the demo detector)")
    c.add_argument("--data", type=Path, help="data.yaml (default: the demo dataset, rendered on first use)")
    c.add_argument("--fit-split", help="split to fit on (default: calib; see README)")
    c.add_argument("--eval-split", help="split to report on (default: test)")
    c.add_argument("--head", choices=["auto", "nms", "e2e", "both"], default="auto",
                   help="nms: one-to-many head + NMS (Ultralytics default); e2e: NMS-free one-to-one head "
                        "(nms=False); both; auto (default): every head the model has")
    c.add_argument("--iou", type=float, default=0.5, help="IoU for a box to count as correct (default 0.5)")
    c.add_argument("--conf", type=float, action="append",
                   help="deployment conf threshold to report the kept-set shift at (repeatable; default 0.25)")
    c.add_argument("--fit-min-conf", type=float, default=0.0, help="fit only on boxes with raw conf >= this")
    c.add_argument("--conf-floor", type=float, default=0.001, help="capture conf floor (default 0.001, as val)")
    c.add_argument("--max-det", type=int, default=300)
    c.add_argument("--imgsz", type=int, help="inference size (default: the model's training size)")
    c.add_argument("--batch", type=int, default=16)
    c.add_argument("--device", help="torch device, e.g. cpu, 0, cuda:0 (default: Ultralytics' choice)")
    c.add_argument("--coco-gt", help="COCO JSON ground truth instead of YOLO txt labels")
    c.add_argument("--bins", type=int, default=15, help="ECE bins (default 15)")
    c.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for intervals (default 1000)")
    c.add_argument("--limit", type=int, help="use only the first N images of each split (quick runs)")
    c.add_argument("--no-val", action="store_true", help="skip the Ultralytics val runs")
    c.add_argument("--no-report", action="store_true", help="skip report.html/report.md")
    c.add_argument("--out", type=Path, default=Path("det_calib_out"), help="output folder (default det_calib_out)")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress output")

    k = sub.add_parser("capture", help="capture boxes and raw logits of one split into Parquet parts (shardable, Ray)",
                       description="Writes one Parquet part per run (per shard with --shard, per batch with --ray) "
                                   "into OUT; `calibrate --boxes OUT` and det_calib.parts.read_parts read them.")
    k.add_argument("--model", type=Path, required=True, help="detector checkpoint .pt")
    k.add_argument("--data", type=Path, required=True, help="data.yaml")
    k.add_argument("--split", required=True, help="split key in data.yaml")
    k.add_argument("--out", type=Path, required=True, help="folder of Parquet parts (shared by all shards)")
    k.add_argument("--shard", help="i/n: capture only shard i of n (images assigned by a hash of their name)")
    k.add_argument("--heads", nargs="+", choices=["auto", "nms", "e2e"], default=["auto"],
                   help="heads to capture in one pass (default auto: every head the model has)")
    k.add_argument("--conf-floor", type=float, default=0.001, help="capture conf floor (default 0.001, as val)")
    k.add_argument("--iou", type=float, default=0.7, help="NMS IoU (default 0.7, as predict)")
    k.add_argument("--max-det", type=int, default=300)
    k.add_argument("--imgsz", type=int, help="inference size (default: the model's training size)")
    k.add_argument("--batch", type=int, default=1,
                   help="images per forward pass, same letterbox shape only (default 1: exactly single-image predict)")
    k.add_argument("--device", help="torch device, e.g. cpu, 0 (default: Ultralytics' choice)")
    k.add_argument("--coco-gt", help="COCO JSON ground truth instead of YOLO txt labels (fingerprinted)")
    k.add_argument("--limit", type=int, help="use only the first N images of the split (quick runs)")
    k.add_argument("--ray", action="store_true", help="run as a Ray Data job (pip install 'det_calib[ray]')")
    k.add_argument("--ray-images-per-part", type=int, default=256, help="images per Ray batch and part (default 256)")
    k.add_argument("--ray-actors", type=int, help="Ray actor pool size (default: one per GPU, else one per 2 CPUs)")
    k.add_argument("-q", "--quiet", action="store_true", help="no progress output")

    a = sub.add_parser("apply", help="fold a calibration.json's temperatures into a checkpoint")
    a.add_argument("--model", type=Path, required=True, help="detector checkpoint .pt")
    a.add_argument("--calibration", type=Path, required=True, help="calibration.json of a calibrate run")
    a.add_argument("--out", type=Path, required=True, help="calibrated checkpoint to write")

    r = sub.add_parser("report", help="(re)write report.html and report.md of a calibrate output folder")
    r.add_argument("run_dir", type=Path)
    r.add_argument("--out", type=Path, help="write the report here instead of into RUN_DIR")

    m = sub.add_parser("compare", help="compare the calibration of two runs (or two heads: RUN:nms RUN:e2e)")
    m.add_argument("run_a")
    m.add_argument("run_b")
    m.add_argument("--out", type=Path, default=Path("det_calib_compare"))
    m.add_argument("--labels", nargs=2, metavar=("A", "B"), help="names for the two runs")

    d = sub.add_parser("demo-data", help="render the demo dataset into the cache and print its data.yaml path")
    d.add_argument("--with-train", action="store_true", help="also render the train split (for training)")
    return p


def _version() -> str:
    from det_calib import __version__

    return __version__


def _run(args: argparse.Namespace) -> int:
    if args.command == "calibrate":
        from det_calib.pipeline import calibrate, summary_text

        run = calibrate(
            args.model,
            args.data,
            out=args.out,
            fit_split=args.fit_split,
            eval_split=args.eval_split,
            head=args.head,
            iou=args.iou,
            conf=tuple(args.conf or (0.25,)),
            fit_min_conf=args.fit_min_conf,
            conf_floor=args.conf_floor,
            max_det=args.max_det,
            imgsz=args.imgsz,
            batch=args.batch,
            device=args.device,
            coco_gt=args.coco_gt,
            ece_bins=args.bins,
            n_boot=args.n_boot,
            limit=args.limit,
            run_val=not args.no_val,
            report=not args.no_report,
            progress=not args.quiet,
        )
        print(summary_text(run.summary))
        main_files = [p.name for k, p in run.files.items() if not k.startswith("figures/")]
        print(f"wrote {', '.join(sorted(main_files))} (and figures/) to {run.out_dir}")
        return 0
    if args.command == "capture":
        heads = "auto" if "auto" in args.heads else tuple(args.heads)
        kw = {"heads": heads, "conf": args.conf_floor, "iou": args.iou, "max_det": args.max_det, "imgsz": args.imgsz,
                  "batch": args.batch, "coco_gt": args.coco_gt, "limit": args.limit}
        if args.ray:
            from det_calib.ray_capture import capture_ray

            if args.shard:
                print("det-calib: error: --shard and --ray exclude each other", file=sys.stderr)
                return 2
            parts = capture_ray(args.model, args.data, args.split, args.out, images_per_part=args.ray_images_per_part,
                                actors=args.ray_actors, **kw)
            print(f"wrote {len(parts)} parts to {args.out}")
        else:
            from det_calib.parts import capture_to_parts

            part = capture_to_parts(args.model, args.data, args.split, args.out, shard=args.shard,
                                    device=args.device, progress=not args.quiet, **kw)
            print(f"wrote {part}")
        return 0
    if args.command == "apply":
        from det_calib.fold import temperatures_from_json, write_calibrated_checkpoint

        temps = temperatures_from_json(args.calibration)
        out = write_calibrated_checkpoint(args.model, args.out, temps, metadata={"calibration": str(args.calibration)})
        print(f"wrote {out} (T: {', '.join(f'{h}={t:.4f}' for h, t in temps.items())})")
        return 0
    if args.command == "report":
        from det_calib.report import write_report

        files = write_report(args.run_dir, out_dir=args.out)
        print(f"wrote {', '.join(str(p) for k, p in files.items() if k in ('html', 'md'))}")
        return 0
    if args.command == "compare":
        from det_calib.report import compare_runs

        files = compare_runs(args.run_a, args.run_b, out_dir=args.out, labels=args.labels)
        print(f"wrote {', '.join(str(p) for k, p in files.items() if k in ('html', 'md'))}")
        return 0
    if args.command == "demo-data":
        from det_calib.demo import demo_data_yaml

        print(demo_data_yaml(with_train=args.with_train))
        return 0
    raise AssertionError(args.command)  # pragma: no cover


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``det-calib``."""
    args = _parser().parse_args(argv)
    quiet = getattr(args, "quiet", False)
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format="%(message)s", stream=sys.stderr)
    os.environ.setdefault("YOLO_VERBOSE", "False")
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        logging.captureWarnings(True)
        try:
            return _run(args)
        except DetCalibError as e:
            print(f"det-calib: error: {e}", file=sys.stderr)
            return 2
        except OSError as e:  # unwritable --out, full disk, unreadable file
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            print(f"det-calib: error: {e.strerror or e}{where}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("det-calib: interrupted: earlier outputs in the folder were left as they were", file=sys.stderr)
            return 130
        except Exception as e:  # a bug: one line, and the traceback on request
            if os.environ.get("DET_CALIB_DEBUG"):
                raise
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            print(f"det-calib: internal error: {type(e).__name__}: {msg} (set DET_CALIB_DEBUG=1 for the traceback)",
                  file=sys.stderr)
            return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
