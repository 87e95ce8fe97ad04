"""Capture benchmarks: overhead vs plain predict, one pass for both heads, scaling, memory.

    python benchmarks/bench_capture.py overhead   # capture vs plain model.predict, per head
    python benchmarks/bench_capture.py heads      # one pass for both heads vs one pass per head
    python benchmarks/bench_capture.py scaling --sizes 400 1600 3200   # time and peak memory per image
    python benchmarks/bench_capture.py deploy     # single-image capture vs the old batched capture

``overhead`` and ``heads`` alternate the runs they compare (a, b, a, b...) so machine load hits
both alike, and compare medians. ``scaling`` runs each size in a fresh process (so the peak RSS
is that run's alone), on a split the demo generator renders once into the cache
(``shapes-scale-seed0``; the first N images of one 3,200-image split), samples the process RSS
after every image, and prints time and peak memory per image. ``deploy`` counts the ``nms``
boxes kept at conf 0.25 on the demo test split and their ECE (15 bins, IoU 0.5), for this
capture and for the previous capture, which passed the split to ``predict`` as a list (Ultralytics
decodes a list whole and letterboxes it to one shape: ``batch`` was ignored), run from git
history (``--old-rev``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("YOLO_VERBOSE", "False")


def _demo_images(split: str, n: int) -> list[str]:
    from det_calib.data.ground_truth import list_images, load_data_yaml
    from det_calib.demo import demo_data_yaml

    ds = load_data_yaml(demo_data_yaml())
    return [str(p) for p in list_images(ds.splits[split], split=split)[:n]]


def overhead(args) -> None:
    from ultralytics import YOLO

    from det_calib.capture.predictor import capture, default_imgsz

    model = args.model or _demo_model()
    images = _demo_images("test", args.images)
    yolo = YOLO(model)
    imgsz = default_imgsz(yolo)
    print(
        f"{len(images)} images, imgsz {imgsz}, batch 1 (both sides), device {args.device}, conf "
        "0.001"
    )
    print(
        f"{'head':5s} {'plain predict [s]':>18s} {'capture [s]':>12s} {'ratio':>7s} {'boxes':>7s}"
    )
    for head in ("nms", "e2e"):
        kw = {"conf": 0.001, "imgsz": imgsz, "batch": 1, "device": args.device, "verbose": False}
        if head == "e2e":
            kw["nms"] = False
        plain, cap, n = [], [], 0
        list(yolo.predict(images[:2], stream=True, **kw))  # warm-up
        for _ in range(args.repeats):
            t = time.perf_counter()
            n_plain = sum(len(r.boxes) for r in yolo.predict(images, stream=True, **kw))
            plain.append(time.perf_counter() - t)
            t = time.perf_counter()
            df = capture(model, images, head=head, imgsz=imgsz, device=args.device, progress=False)
            cap.append(time.perf_counter() - t)
            n = df.height
            assert n == n_plain, (n, n_plain)
        p, c = statistics.median(plain), statistics.median(cap)
        print(f"{head:5s} {p:18.2f} {c:12.2f} {c / p:7.3f} {n:7d}")


def heads(args) -> None:
    from det_calib.capture.predictor import Capturer

    model = args.model or _demo_model()
    images = _demo_images("test", args.images)
    both = Capturer(model, heads=("nms", "e2e"), device=args.device)
    single = {h: Capturer(model, head=h, device=args.device) for h in ("nms", "e2e")}
    both(images[:2], progress=False)  # warm-up
    for c in single.values():
        c(images[:2], progress=False)
    one, two, one_cpu, two_cpu = [], [], [], []
    for _ in range(args.repeats):
        t, c = time.perf_counter(), time.process_time()
        df = both(images, progress=False)
        one.append(time.perf_counter() - t)
        one_cpu.append(time.process_time() - c)
        t, c = time.perf_counter(), time.process_time()
        parts = [c_(images, progress=False) for c_ in single.values()]
        two.append(time.perf_counter() - t)
        two_cpu.append(time.process_time() - c)
        assert df.height == sum(p.height for p in parts)
    a, b = statistics.median(one), statistics.median(two)
    ac, bc = statistics.median(one_cpu), statistics.median(two_cpu)
    print(
        f"{len(images)} images, both heads, device {args.device}, {args.repeats} paired runs "
        "(median)"
    )
    print(
        f"one pass for both heads : wall {a:7.2f} s ({len(images) / a:6.1f} images/s)  cpu "
        f"{ac:7.2f} s"
    )
    print(
        f"one pass per head (x2)  : wall {b:7.2f} s ({len(images) / b:6.1f} images/s)  cpu "
        f"{bc:7.2f} s"
    )
    print(f"ratio one/two           : wall {a / b:7.3f}  cpu {ac / bc:7.3f}")


def _scale_split(n: int) -> list[str]:
    from det_calib.data.ground_truth import list_images
    from det_calib.demo import cache_dir
    from det_calib.demo.shapes import generate

    root = cache_dir() / "shapes-scale-seed0"
    folder = root / "images" / "scale"
    have = len(list(folder.glob("*.png"))) if folder.is_dir() else 0
    if have < n:
        generate(root, seed=0, splits={"scale": max(n, 3200)})
    return [str(p) for p in list_images([folder], split="scale")[:n]]


def _one_size(args) -> None:
    """Child process of ``scaling``: capture N images, print one JSON line."""
    import threading

    import psutil

    from det_calib.capture.predictor import Capturer

    images = _scale_split(args.n)
    proc = psutil.Process()
    cap = Capturer(args.model or _demo_model(), heads="auto", device=args.device)
    cap(images[:2], progress=False)  # warm-up: first-call allocations are not per-image
    base = proc.memory_info().rss
    peak = [base]
    stop = threading.Event()

    def sample() -> None:  # RSS every 20 ms while the capture runs
        while not stop.wait(0.02):
            peak[0] = max(peak[0], proc.memory_info().rss)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t, c = time.perf_counter(), time.process_time()
    df = cap(images, progress=False)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    stop.set()
    th.join()
    peak[0] = max(peak[0], proc.memory_info().rss)
    print(
        json.dumps(
            {
                "n": args.n,
                "wall": wall,
                "cpu": cpu,
                "rss_before": base,
                "rss_peak": peak[0],
                "rows": df.height,
                "table_bytes": df.estimated_size(),
            }
        )
    )


def scaling(args) -> None:
    model = args.model or _demo_model()
    _scale_split(max(args.sizes))  # render once, outside the timed children
    print(
        f"both heads, batch 1, device {args.device}; each size in a fresh process; RSS sampled "
        "every 20 ms"
    )
    print(
        f"{'images':>7s} {'wall [s]':>9s} {'ms/image':>9s} {'cpu ms/image':>13s} {'rows':>8s} "
        f"{'table MiB':>10s} "
        f"{'RSS start MiB':>14s} {'RSS peak MiB':>13s} {'growth KiB/image':>17s}"
    )
    table = [
        "| images | wall ms / image | CPU ms / image | box rows | table MiB | RSS start → peak MiB "
        "|",
        "|---|---|---|---|---|---|",
    ]
    for n in args.sizes:
        cmd = [
            sys.executable,
            __file__,
            "_one",
            "--n",
            str(n),
            "--model",
            model,
            "--device",
            args.device,
        ]
        out = (
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        r = json.loads(out)
        mib = 1 << 20
        print(
            f"{n:7d} {r['wall']:9.1f} {1e3 * r['wall'] / n:9.1f} {1e3 * r['cpu'] / n:13.1f} "
            f"{r['rows']:8d} "
            f"{r['table_bytes'] / mib:10.1f} "
            f"{r['rss_before'] / mib:14.0f} {r['rss_peak'] / mib:13.0f} "
            f"{(r['rss_peak'] - r['rss_before']) / 1024 / n:17.1f}"
        )
        table.append(
            f"| {n:,} | {1e3 * r['wall'] / n:.1f} | {1e3 * r['cpu'] / n:.1f} | {r['rows']:,} | "
            f"{r['table_bytes'] / mib:.1f} | {r['rss_before'] / mib:.0f} → "
            f"{r['rss_peak'] / mib:.0f} |"
        )
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table(
            "capture_scaling",
            "\n".join(table),
            note="Both heads, batch 1, each size in a fresh process, RSS sampled every 20 ms.",
        )


def deploy(args) -> None:
    """Kept set at 0.25 of the nms head on the demo test split: this capture vs the old batched one."""
    import importlib.util
    import tempfile
    from pathlib import Path

    from det_calib.capture.predictor import capture
    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.demo import demo_data_yaml
    from det_calib.matching.one_to_one import match_table
    from det_calib.metrics.calibration import ece

    sp = load_split(load_data_yaml(demo_data_yaml()), "test")
    model = args.model or _demo_model()
    repo = Path(__file__).resolve().parents[1]
    src = subprocess.run(
        ["git", "-C", str(repo), "show", f"{args.old_rev}:det_calib/capture.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "old_capture.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location("old_capture", path)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        runs = {
            f"old capture, one list ({args.old_rev})": old.capture(
                model, sp.images, head="nms", batch=16, progress=False
            ),
            "this capture, batch 1": capture(model, sp.images, head="nms", progress=False),
        }
    print(
        f"demo test split ({len(sp.images)} images), nms head, kept = conf > 0.25, ECE 15 bins, "
        "IoU 0.5"
    )
    for name, df in runs.items():
        m = match_table(df, sp.gt, iou_threshold=0.5)
        conf, ok, ign = df["conf"].to_numpy(), m["correct"].to_numpy(), m["ignore"].to_numpy()
        kept = (conf > 0.25) & ~ign
        print(
            f"{name:32s} kept {int(kept.sum()):5d}  ECE {ece(conf[kept], ok[kept], n_bins=15):.4f} "
            " "
            f"(all boxes {df.height})"
        )
    a, b = runs.values()
    print(f"identical tables: {a.equals(b)}")


def _demo_model() -> str:
    from det_calib.demo import demo_model

    return str(demo_model())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["overhead", "heads", "scaling", "deploy", "_one"])
    ap.add_argument("--model", default=None, help="detector .pt (default: the demo detector)")
    ap.add_argument("--images", type=int, default=96, help="overhead/heads: test images")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--sizes", type=int, nargs="+", default=[400, 1600, 3200], help="scaling: images per run"
    )
    ap.add_argument(
        "--doc", action="store_true", help="scaling: also write docs/generated/capture_scaling.md"
    )
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--old-rev", default="de5b95c", help="deploy: git revision of the old capture")
    args = ap.parse_args()
    {"overhead": overhead, "heads": heads, "scaling": scaling, "deploy": deploy, "_one": _one_size}[
        args.what
    ](args)


if __name__ == "__main__":
    main()
