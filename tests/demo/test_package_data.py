"""The embedded demo ships in the package: the demo models and the fixture split are package data
(pyproject.toml's ``package-data``), the demo ensemble's seed members are left out, the demo's paths
resolve inside the installed package, and a built wheel holds what the demo run needs."""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
import zipfile
from importlib.resources import files
from pathlib import Path

import pytest

from det_calib import InputError
from det_calib.demo import _demo_root, demo_model, demo_task_model, fixture_data_yaml

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "det_calib" / "demo"
#: What the demo run needs besides the code: the models, and the fixture split (relative to det_calib/demo).
SHIPPED = [
    "assets/yolo26n_shapes.pt",
    "assets/yolo26n_shapes_seg.pt",
    "assets/yolo26n_shapes_pose.pt",
    "assets/yolo26n_shapes_obb.pt",
    "assets/fixture/data.yaml",
]
#: The code that renders the demo data (relative to det_calib: the demo's, and each task's demo labels in its folder).
RENDERERS = [
    "demo/__init__.py",
    "demo/shapes.py",
    "demo/shifts.py",
    "demo/task_labels.py",
    "tasks/segment/demo_labels.py",
    "tasks/pose/demo_labels.py",
    "tasks/obb/demo_labels.py",
    "tasks/classify/demo_crops.py",
]
WHEEL_MAX_BYTES = 25_000_000  # the demo models (FP16) and the fixture, zipped: the wheel 24.9 MB with the classify demo


def _package_data() -> tuple[set[str], set[str]]:
    """The files under det_calib/demo/ that pyproject.toml's package-data globs include, and those it excludes."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]

    def matched(section: str) -> set[str]:
        return {
            p
            for g in tool[section]["det_calib.demo"]
            for p in glob.glob(g, root_dir=DEMO)
            if (DEMO / p).is_file()
        }

    return matched("package-data"), matched("exclude-package-data")


@pytest.mark.fast
def test_demo_paths_resolve_inside_the_package(monkeypatch):
    monkeypatch.delenv("DET_CALIB_DEMO_DIR", raising=False)
    assets = Path(str(files("det_calib") / "demo" / "assets"))
    assert _demo_root() == assets
    for path in (
        demo_model(),
        *(demo_task_model(t) for t in ("segment", "pose", "obb")),
        fixture_data_yaml(),
    ):
        assert path.is_file() and path.parent.is_relative_to(assets), path


@pytest.mark.fast
def test_package_data_ships_the_demo_and_leaves_the_seed_members_out():
    included, excluded = _package_data()
    shipped = included - excluded
    # every demo file but Ultralytics' label caches (labels/<split>.cache, written beside the labels by a val run)
    assets = {
        str(p.relative_to(DEMO))
        for p in (DEMO / "assets").rglob("*")
        if p.is_file() and p.suffix != ".cache"
    }
    seeds = {p for p in assets if "_seed" in Path(p).name}
    assert set(SHIPPED) <= shipped
    assert shipped == assets - seeds, sorted(
        shipped ^ (assets - seeds)
    )  # every other demo file ships
    assert excluded == seeds
    fixture = fixture_data_yaml().parent
    assert len([p for p in shipped if p.startswith("assets/fixture/images/")]) == 12
    assert len([p for p in shipped if p.startswith("assets/fixture/labels/")]) == 12
    assert (fixture / "images" / "fixture").is_dir()


@pytest.mark.fast
def test_demo_dir_overrides_the_package(monkeypatch, tmp_path):
    monkeypatch.setenv("DET_CALIB_DEMO_DIR", str(tmp_path))
    assert demo_model() == tmp_path / "yolo26n_shapes.pt"
    monkeypatch.setenv("DET_CALIB_DEMO_DIR", str(tmp_path / "gone"))
    with pytest.raises(InputError, match="DET_CALIB_DEMO_DIR names no folder .*gone"):
        demo_model()


@pytest.mark.slow
def test_built_wheel_holds_the_demo(tmp_path):
    """``pip wheel`` of the checkout's files (a clean copy, as .ci/run builds it): the demo models, the
    fixture split and the renderers are in the wheel, the seed members are not, and it stays small."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the files to build from are those git sees")
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    src = tmp_path / "src"
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("det_calib-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [
        p for p in [f"demo/{p}" for p in SHIPPED] + RENDERERS if f"det_calib/{p}" not in names
    ]
    assert not missing, missing
    assert sum(n.startswith("det_calib/demo/assets/fixture/") for n in names) == 1 + 12 + 12
    assert not [n for n in names if "_seed" in n]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "det-calib = det_calib.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    assert wheel.stat().st_size < WHEEL_MAX_BYTES, wheel.stat().st_size
