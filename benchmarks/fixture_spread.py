"""How much the pinned fixture run moves with torch's thread count and CPU code paths.

``tests/system/test_pipeline.py::test_calibration_json_pinned`` pins the ``calibration.json`` of
``calibrate(demo_model(), fixture_data_yaml(), n_boot=50)``. Its floats carry the rounding of the
CPU kernels that computed the logits (convolutions, activations, NMS inputs), which differs between
machines. This runs that pinned run once per variant, each in a fresh interpreter (the ISA
variables are read when torch loads), and prints, for every leaf of ``calibration.json``:

- the largest relative spread of any float over the variants (``|a - b| / max(|a|, |b|)``), the
  ten largest with their keys, and the largest absolute spread of floats below 1e-6 in size;
- every int, string, bool or list length that differs between variants (these are pinned exactly).

The reference itself (``tests/data/fixture_calibration.json``, written on another machine) is
compared as one more variant.

Variants: torch at 1, 2 and 4 threads per operator; oneDNN convolutions off
(``torch.backends.mkldnn.enabled = False``: ATen's own convolution, MKL GEMM); oneDNN capped at
AVX-512, AVX2, AVX and SSE4.1 (``ONEDNN_MAX_CPU_ISA``); ATen's vectorised kernels at AVX2 and at the scalar
default (``ATEN_CPU_CAPABILITY``); MKL capped at AVX2 with oneDNN off (``MKL_ENABLE_INSTRUCTIONS``).
Ultralytics resets torch's thread count to ``cpu_count - 1`` whenever it selects a device, so a
variant with a thread count holds it by replacing ``torch.set_num_threads`` in its own process.

Run from the repository root (about 1 min per variant on a 2-core CPU)::

    python3 benchmarks/fixture_spread.py                # every variant, then the comparison
    python3 benchmarks/fixture_spread.py --keep runs/spread   # keep each variant's calibration.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS: dict[str, dict[str, str]] = {
    "threads-1": {"SPREAD_THREADS": "1"},
    "threads-2": {"SPREAD_THREADS": "2"},
    "threads-4": {"SPREAD_THREADS": "4"},
    "mkldnn-off": {"SPREAD_MKLDNN": "0"},
    "onednn-avx512-core": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
    "onednn-avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "onednn-avx": {"ONEDNN_MAX_CPU_ISA": "AVX"},
    "onednn-sse41": {"ONEDNN_MAX_CPU_ISA": "SSE41"},
    "aten-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "aten-default": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl-avx2-mkldnn-off": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "SPREAD_MKLDNN": "0"},
}
DROPPED = ("created", "seconds")  # differ on every run
REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "tests" / "data" / "fixture_calibration.json"
sys.path.insert(0, str(REPO))  # measure this tree's det_calib, whichever one is installed


def run_variant(out: Path) -> None:
    """The pinned run in this process, under the variant its environment describes."""
    import torch

    threads = os.environ.get("SPREAD_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
        torch.set_num_threads = lambda n: None  # hold it: Ultralytics' select_device resets it
    if os.environ.get("SPREAD_MKLDNN") == "0":
        torch.backends.mkldnn.enabled = False
    from det_calib.demo import demo_model, fixture_data_yaml
    from det_calib.pipeline.calibrate_job import calibrate

    calibrate(demo_model(), fixture_data_yaml(), out=out, n_boot=50, progress=False, report=False)
    import det_calib

    info = {
        "threads": torch.get_num_threads(),
        "mkldnn": torch.backends.mkldnn.enabled,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "det_calib": det_calib.__file__,
    }
    (out / "variant.json").write_text(json.dumps(info))


def leaves(x, path: str = "") -> dict[str, object]:
    """Every leaf of a JSON value by its path; a list's length as a leaf ``path#len``."""
    if isinstance(x, dict):
        return {k: v for key in x for k, v in leaves(x[key], f"{path}.{key}").items()}
    if isinstance(x, list):
        out: dict[str, object] = {f"{path}#len": len(x)}
        for i, v in enumerate(x):
            out.update(leaves(v, f"{path}[{i}]"))
        return out
    return {path: x}


def spreads(
    docs: dict[str, dict],
) -> tuple[list[tuple[float, str, list]], list[tuple[float, str]], list[str]]:
    """(relative spread, key, values) of every float; (absolute spread, key) of floats below 1e-6;
    the keys of every exact leaf that differs."""
    flat = {
        name: leaves({k: v for k, v in d.items() if k not in DROPPED}) for name, d in docs.items()
    }
    keys = sorted(set().union(*flat.values()))
    rel, tiny, exact = [], [], []
    for k in keys:
        vals = [f.get(k, "<missing>") for f in flat.values()]
        if all(isinstance(v, float) for v in vals):
            finite = [v for v in vals if math.isfinite(v)]
            if len(finite) != len(vals):
                if not all(v == vals[0] or (math.isnan(v) and math.isnan(vals[0])) for v in vals):
                    exact.append(k)
                continue
            lo, hi = min(finite), max(finite)
            size = max(abs(lo), abs(hi))
            if size < 1e-6:
                tiny.append((hi - lo, k))
            else:
                rel.append(((hi - lo) / size, k, vals))
        elif any(type(v) is not type(vals[0]) or v != vals[0] for v in vals):
            exact.append(k)
    rel.sort(reverse=True)
    tiny.sort(reverse=True)
    return rel, tiny, exact


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument(
        "--keep", type=Path, help="keep each variant's calibration.json under this folder"
    )
    ap.add_argument("--only", nargs="*", default=None, help="variants to run (default: all)")
    a = ap.parse_args()
    if a.variant:
        run_variant(Path(a.out))
        return
    base = a.keep or Path(tempfile.mkdtemp(prefix="det_calib_spread_"))
    docs = {}
    for name in a.only or VARIANTS:
        out = base / name
        if not (out / "calibration.json").is_file():
            env = {**os.environ, **VARIANTS[name]}
            t = time.time()
            subprocess.run(
                [sys.executable, __file__, "--variant", name, "--out", str(out)],
                env=env,
                check=True,
            )
            print(
                f"{name}: {time.time() - t:.0f} s {(out / 'variant.json').read_text()}", flush=True
            )
        docs[name] = json.loads((out / "calibration.json").read_text())
    if REFERENCE.is_file():  # the pinned reference, written on another machine, as one more variant
        ref = json.loads(REFERENCE.read_text())
        for d in docs.values():  # as the pin test compares: keys added since, paths made relative
            for k in ("schema_version", "gt_counts"):
                d.pop(k, None)
            d["model"], d["data"] = ref["model"], ref["data"]
        docs["reference"] = ref
    rel, tiny, exact = spreads(docs)
    kept = {n: {k: v for k, v in d.items() if k not in DROPPED} for n, d in docs.items()}
    same = [[b for b in kept if kept[b] == kept[a]] for a in kept]
    print("bit-identical groups: " + "; ".join(sorted({", ".join(g) for g in same})))
    print(f"\n{len(rel)} floats, largest relative spread {rel[0][0]:.3g} ({rel[0][1]})")
    for r, k, vals in rel[:10]:
        print(f"  {r:.3g}  {k}  {min(vals)!r} .. {max(vals)!r}")
    print(
        f"floats with |value| < 1e-6: {len(tiny)}, largest absolute spread "
        f"{tiny[0][0] if tiny else 0:.3g}"
    )
    for r, k, _ in rel:
        if k.startswith(".temperature."):
            print(f"  {k}: relative spread {r:.3g}")
    moved = sum(r > 0 for r, _, _ in rel)
    print(f"floats that moved at all: {moved} of {len(rel)}")
    print(f"exact leaves (ints, strings, bools, lengths) that differ: {len(exact)}")
    for k in exact:
        print(f"  {k}: " + ", ".join(f"{n}={leaves(d).get(k)!r}" for n, d in docs.items()))


if __name__ == "__main__":
    main()
