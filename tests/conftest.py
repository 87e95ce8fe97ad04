"""Shared fixtures: the committed demo detector, the fixture split, small untrained models."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("YOLO_VERBOSE", "False")
os.environ.setdefault("YOLO_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "det_calib" / "demo" / "assets" / "fixture"


def pytest_configure(config):
    """numpy's OpenBLAS on one thread, and the young collection every 50,000 new objects, as the
    command line runs its process (det_calib.job.process_tuning): the suite's calibrations are library
    calls, which leave the process's threads and collector as they find them. Neither changes a number
    a test computes; with the collector's default (every 700 objects), its full collections, each a
    walk over every object the process holds (torch, Ultralytics, the session's fixtures), took 12%
    to 19% of the CPU of the report, pipeline, thresholds and metrics tests."""
    import gc

    from det_calib.job.process_tuning import _set_blas_threads

    _set_blas_threads(1)
    gc.set_threshold(50_000, *gc.get_threshold()[1:])


@pytest.fixture(scope="session")
def demo_model_path() -> Path:
    from det_calib.demo import demo_model

    path = demo_model()
    assert path.is_file(), f"the committed demo detector is missing: {path}"
    return path


@pytest.fixture(scope="session")
def fixture_yaml() -> Path:
    return FIXTURE / "data.yaml"


@pytest.fixture(scope="session")
def polygon_fixture_yaml(tmp_path_factory) -> Path:
    """The fixture split with each box label written as a 4-point polygon (segment labels: a mask each)."""
    import shutil

    root = tmp_path_factory.mktemp("polygon_fixture")
    shutil.copytree(FIXTURE / "images", root / "images")
    (root / "labels" / "fixture").mkdir(parents=True)
    for f in (FIXTURE / "labels" / "fixture").glob("*.txt"):
        lines = []
        for line in f.read_text().splitlines():
            c, cx, cy, w, h = line.split()
            x1, y1 = float(cx) - float(w) / 2, float(cy) - float(h) / 2
            x2, y2 = x1 + float(w), y1 + float(h)
            lines.append(
                f"{c} {x1:.6f} {y1:.6f} {x2:.6f} {y1:.6f} {x2:.6f} {y2:.6f} {x1:.6f} {y2:.6f}"
            )
        (root / "labels" / "fixture" / f.name).write_text("\n".join(lines) + "\n")
    shutil.copy(FIXTURE / "data.yaml", root / "data.yaml")
    return root / "data.yaml"


@pytest.fixture(scope="session")
def fixture_images() -> list[Path]:
    images = sorted((FIXTURE / "images" / "fixture").glob("*.jpg"))
    assert len(images) == 12
    return images


# The first images of each split of the demo datasets, rendered once per test session (the demo
# renders image i of a split alone, from the seed, the split and i: the first images of a small
# rendering are the first images of the full one, file for file and label for label).
SMALL_DEMO_SIZES = {"train": 0, "calib": 8, "test": 20}


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory) -> dict[str, Path]:
    """Task (``detect``, ``segment``, ``pose``, ``obb``) -> the ``data.yaml`` of its demo data with
    :data:`SMALL_DEMO_SIZES` images a split, rendered once per session into a cache folder of the
    session's own, so that unit-level tests read demo images and labels without rendering the full
    demo (hundreds of images a split) into the machine's cache."""
    from det_calib.demo import demo_data_yaml
    from det_calib.demo.shapes import SPLIT_SIZES

    cache = tmp_path_factory.getbasetemp() / "small_demo_cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DET_CALIB_CACHE", str(cache))
        for split, n in SMALL_DEMO_SIZES.items():
            mp.setitem(SPLIT_SIZES, split, n)
        return {
            "detect": demo_data_yaml(),
            "segment": demo_data_yaml(task="segment"),
            "pose": demo_data_yaml(task="pose"),
            "obb": demo_data_yaml(task="obb"),
        }


def untrained_detector(cfg: str, *, seed: int = 0, bias_mean: float = -2.0):
    """A detector built from a yaml, with random class-conv weights and biases so that its
    scores spread over (0, 1) like a trained model's (the default bias init makes every score
    ~1e-4, below any useful floor)."""
    import torch
    from ultralytics import YOLO

    torch.manual_seed(seed)
    yolo = YOLO(cfg)
    head = yolo.model.model[-1]
    branches = [head.cv3] + (
        [head.one2one_cv3] if getattr(head, "one2one_cv3", None) is not None else []
    )
    with torch.no_grad():
        for branch in branches:
            for level in branch:
                conv = level[-1]
                torch.nn.init.normal_(conv.weight, 0.0, 0.05)
                torch.nn.init.normal_(conv.bias, bias_mean, 1.5)
    yolo.model.eval()
    return yolo


@pytest.fixture
def make_untrained():
    return untrained_detector


def benchmark_module(name: str):
    """``benchmarks/NAME.py`` imported as module ``NAME`` (registered, so that its dataclasses find it)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def load_benchmark():
    """:func:`benchmark_module`: a test imports a benchmark script's functions with it."""
    return benchmark_module


def shapes_segment_model(folder: Path, demo_model: Path, *, seed: int = 0) -> Path:
    """A YOLO26n-seg checkpoint for the shapes demo's 8 classes: built from Ultralytics' yaml, the
    demo detector's layers copied in (``load``: realistic boxes and scores on both heads), the
    mask branches (``proto``, ``cv4``, ``one2one_cv4``) at their initial weights perturbed so
    that masks are not their boxes. Saved (half precision, as Ultralytics saves) as
    ``folder/shapes_seg.pt``."""
    import torch
    import ultralytics
    import yaml
    from ultralytics import YOLO

    cfg = yaml.safe_load(
        (Path(ultralytics.__file__).parent / "cfg/models/26/yolo26-seg.yaml").read_text()
    )
    cfg["nc"] = 8
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "yolo26n-seg.yaml"  # the `n` in the name selects the scale
    spec.write_text(yaml.safe_dump(cfg, sort_keys=False))
    torch.manual_seed(seed)
    yolo = YOLO(str(spec)).load(str(demo_model))
    head = yolo.model.model[-1]
    with torch.no_grad():
        for branch in (head.proto, head.cv4, head.one2one_cv4):
            for p in branch.parameters():
                p.add_(torch.randn_like(p) * 0.5)  # mask branches unlike their boxes
    yolo.model.names = dict(YOLO(str(demo_model)).names)
    path = folder / "shapes_seg.pt"
    yolo.save(str(path))
    return path


@pytest.fixture(scope="session")
def shapes_seg_path(tmp_path_factory, demo_model_path) -> Path:
    return shapes_segment_model(tmp_path_factory.mktemp("seg"), demo_model_path)


@pytest.fixture(scope="session")
def demo_seg_checkpoint(tmp_path_factory, demo_model_path) -> Path:
    """``segment_checkpoint(demo_detector=the demo detector)`` (tests/segment_checkpoints.py): a
    YOLO26n-seg with the demo detector's layers and perturbed mask branches, built once per session.
    A test that writes beside it (an export, a calibrated copy) copies it into a folder of its own."""
    from segment_checkpoints import segment_checkpoint

    return segment_checkpoint(
        tmp_path_factory.mktemp("demo_seg") / "yolo26n-seg.pt", demo_detector=demo_model_path
    )


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray instance (2 CPUs, no dashboard) shared by the tests that capture with Ray: a
    start-up costs seconds, so the first of them starts it and it is shut down after the last of
    them (:func:`pytest_runtest_teardown`), not left idle beside the rest of the suite. None where
    Ray is not installed (the test skips at its Ray step, ``pytest.importorskip("ray")``)."""
    try:
        import ray
    except ImportError:
        yield None
        return
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


_LAST_RAY_TEST: list = []  # the last collected test that uses ``local_ray``


def pytest_collection_finish(session):
    users = [item for item in session.items if "local_ray" in getattr(item, "fixturenames", ())]
    _LAST_RAY_TEST[:] = users[-1:]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last test that uses ``local_ray``, its Ray instance is shut down."""
    yield  # the test's own teardown, whatever its outcome
    if _LAST_RAY_TEST and item is _LAST_RAY_TEST[0]:
        import sys

        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()


@pytest.fixture(scope="session")
def demo_task_runs(tmp_path_factory) -> dict:
    """Task (``pose``, ``obb``) -> the Python API's run of its demo model, made once per session:
    the first 16 images of each split of the task's demo data, both heads, the temperature, 20
    bootstrap draws, Ultralytics val and the report (``det_calib.calibrate``'s return value; its
    folder is ``.out_dir``). Tests read the folders; a test that writes into one copies it first."""
    import det_calib
    from det_calib.demo import demo_task_model

    root = tmp_path_factory.mktemp("demo_task_runs")
    return {
        task: det_calib.calibrate(
            model,
            out=root / task,
            limit=16,
            head="both",
            method="temperature",
            n_boot=20,
            progress=False,
        )
        for task, model in (("pose", demo_task_model("pose")), ("obb", demo_task_model("obb")))
    }


# The start of a script run in a fresh interpreter where importing det_calib fails, so nothing of
# det_calib can be involved in loading or running a checkpoint (plain Ultralytics only).
NO_DET_CALIB = textwrap.dedent(
    """
    import json, sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "det_calib" or name.startswith("det_calib."):
                raise ImportError("det_calib is blocked in this process")
    sys.meta_path.insert(0, Block())
    try:
        import det_calib  # noqa
        raise SystemExit("det_calib importable")
    except ImportError:
        pass
    from ultralytics import YOLO
    """
)


# ------------------------------------------------------------------ intervals and their estimates
_PRINTED_INTERVAL = re.compile(r"(-?\d+\.\d+) \[(-?\d+\.\d+), (-?\d+\.\d+)\]")


#: A floor gap's ranges (``floor_gap`` of a head's eval record) and the ECE beside each, which the
#: gap's reason places inside it (``images``, ``sampling``) or above it (``score``: no map reaches it)
_GAP_RANGES = {"floor_without_range": "ece_without", "refit_floor_range": "refit_ece"}


def _estimate_key(key: str) -> str | None:
    """The estimate an interval key belongs to: ``ece_before_ci`` -> ``ece_before``, ``ece_ci`` ->
    ``ece``, ``ece_floor_range`` -> ``ece_floor``, a floor gap's range -> its ECE
    (:data:`_GAP_RANGES`); None for a key that is not an interval."""
    if key in _GAP_RANGES:
        return _GAP_RANGES[key]
    if key.endswith("_ci"):
        return key[:-3]
    if key.endswith("_range"):
        return key[:-6]
    return None


def interval_violations(doc, where: str = "") -> tuple[list[str], int]:
    """Every interval of a ``calibration.json`` object that does not contain its estimate (or has
    no estimate beside it), and how many intervals were checked. A floor gap's range holds its ECE
    where the gap's reason says so, and lies below it where the reason is ``score``."""
    bad, n = [], 0
    if isinstance(doc, dict):
        for k, v in doc.items():
            est = _estimate_key(k)
            if est is not None and isinstance(v, list) and len(v) == 2:
                if est not in doc:
                    bad.append(f"{where}.{k}: no estimate `{est}` beside it")
                    continue
                x, (lo, hi) = doc[est], v
                n += 1
                if x is None or lo is None or hi is None:
                    continue
                if k in _GAP_RANGES and doc.get("reason") == "score":
                    if not x > hi:
                        bad.append(f"{where}.{k}: {x} not above [{lo}, {hi}] (reason score)")
                elif not lo - 1e-12 <= x <= hi + 1e-12:
                    bad.append(f"{where}.{k}: {x} not in [{lo}, {hi}]")
            else:
                b, m = interval_violations(v, f"{where}.{k}")
                bad, n = bad + b, n + m
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            b, m = interval_violations(v, f"{where}[{i}]")
            bad, n = bad + b, n + m
    return bad, n


def printed_interval_violations(text: str) -> tuple[list[str], int]:
    """Every ``estimate [low, high]`` printed in a text whose interval does not contain its estimate."""
    bad, n = [], 0
    for m in _PRINTED_INTERVAL.finditer(text):
        x, lo, hi = (float(g) for g in m.groups())
        n += 1
        if not lo <= x <= hi:
            bad.append(m.group(0))
    return bad, n


def assert_intervals_contain_estimates(folder: Path) -> int:
    """``calibration.json``, ``summary.txt`` and ``report.md`` of a run: every interval contains its
    estimate. Returns how many intervals of ``calibration.json`` were checked."""
    doc = json.loads((folder / "calibration.json").read_text())
    bad, checked = interval_violations(doc)
    assert checked > 20 and not bad, (checked, bad[:10])
    for name in ("summary.txt", "report.md"):
        bad, n = printed_interval_violations((folder / name).read_text())
        assert n > 5 and not bad, (name, n, bad[:10])
    return checked
