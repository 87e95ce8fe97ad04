"""Every third-party module det_calib imports at run time is a declared dependency (pyproject.toml).

A module that only arrives through another package (PyYAML and Pillow come with Ultralytics today)
or only with the test extra (scikit-learn) would break `pip install -e . && det-calib calibrate` on a
fresh machine while CI, which installs the test extra, stays green.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "det_calib"

# Import name -> distribution, for when the distribution is not installed (packages_distributions()
# knows only installed ones).
KNOWN = {"cv2": "opencv-python", "PIL": "pillow", "yaml": "pyyaml", "sklearn": "scikit-learn"}

# Modules det_calib may import without declaring them, each with the reason. Only imports inside
# a function that is guarded for an optional extra belong here.
ALLOWED_UNDECLARED: dict[str, str] = {
    "ray": "optional extra `det_calib[ray]` (declared there): imported only inside "
    "det_calib.capture.ray_capture.capture_ray, which raises InputError naming the extra when it "
    "is missing",
    "onnx": "optional extra `det_calib[onnx]` (declared there): imported only inside the ONNX writer of "
    "det_calib.deploy.calibrated_export, after det_calib.capture.exported.ExportInfo.require_runtime raised "
    "InputError "
    "naming the extra when it is missing",
    "openvino": "optional extra `det_calib[openvino]` (declared there): imported only inside the OpenVINO writer of "
    "det_calib.deploy.calibrated_export, after det_calib.capture.exported.ExportInfo.require_runtime named "
    "the extra "
    "when it is missing",
    "ncnn": "optional extra `det_calib[ncnn]` (declared there): imported only inside the NCNN load check of "
    "det_calib.capture.exported.ExportCapturer, after det_calib.capture.exported.ExportInfo.require_runtime "
    "named the "
    "extra when it is missing",
}


def test_the_runtime_extras_are_declared_and_tested():
    """The export runtimes are extras (`onnx`, `openvino`) that the test extra also installs, so CI runs them."""
    extras = project()["optional-dependencies"]
    assert {"onnx", "onnxruntime"} <= declared(extras["onnx"]) and "openvino" in declared(
        extras["openvino"]
    )
    assert declared(extras["onnx"]) | declared(extras["openvino"]) <= declared(extras["test"])
    for module in ("onnx", "openvino"):
        assert module in ALLOWED_UNDECLARED and module in declared(extras[module])
    # LiteRT and NCNN too (deploy/test_mobile_engines must run in CI, not skip)
    assert {"litert-torch", "ai-edge-litert"} <= declared(extras["litert"]) and {
        "ncnn",
        "pnnx",
    } <= declared(extras["ncnn"])
    assert declared(extras["litert"]) | declared(extras["ncnn"]) <= declared(extras["test"])


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules(source: str) -> set[str]:
    """Top-level names of every absolute import in ``source`` (module level and inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def third_party(modules: set[str]) -> set[str]:
    return {
        m
        for m in modules
        if m not in sys.stdlib_module_names and m not in ("det_calib", "__future__")
    }


def declared(requirements: list[str]) -> set[str]:
    """Canonical distribution names of requirement strings (``"polars>=1"`` -> ``"polars"``)."""
    return {_canon(re.match(r"\s*([A-Za-z0-9_.\-]+)", r).group(1)) for r in requirements}


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    """``importlib.metadata.packages_distributions()``, read once: each call reads the file list of
    every installed distribution (about half a second here), and the walk asks it for every module."""
    return metadata.packages_distributions()


def distributions(module: str) -> set[str]:
    """Canonical names of the distributions that provide import name ``module``."""
    found = {_canon(d) for d in _packages_distributions().get(module, [])}
    if module in KNOWN:
        found.add(_canon(KNOWN[module]))
    return found or {_canon(module)}


def undeclared(modules: set[str], requirements: list[str]) -> dict[str, set[str]]:
    """Third-party modules none of whose distributions is among ``requirements``."""
    have = declared(requirements)
    return {
        m: distributions(m) for m in sorted(third_party(modules)) if not distributions(m) & have
    }


def runtime_imports() -> dict[str, set[str]]:
    """Third-party module -> the det_calib files importing it."""
    where: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for m in third_party(imported_modules(path.read_text(encoding="utf-8"))):
            where.setdefault(m, set()).add(str(path.relative_to(ROOT)))
    return where


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_every_runtime_import_is_declared():
    where = runtime_imports()
    missing = undeclared(set(where), project()["dependencies"])
    missing = {m: d for m, d in missing.items() if m not in ALLOWED_UNDECLARED}
    assert not missing, (
        "imported by det_calib but not in pyproject.toml [project] dependencies: "
        + "; ".join(
            f"{m} (from {', '.join(sorted(where[m]))}; distribution {' or '.join(sorted(d))})"
            for m, d in missing.items()
        )
    )


def test_the_walk_sees_what_det_calib_imports():
    """The walk finds imports at module level and inside functions (known imports of det_calib)."""
    where = runtime_imports()
    assert {
        "numpy",
        "polars",
        "torch",
        "ultralytics",
        "matplotlib",
        "cv2",
        "yaml",
        "PIL",
        "pycocotools",
    } <= set(where)
    assert (
        "det_calib/capture/predictor.py" in where["ultralytics"]
    )  # imported inside functions only


def test_an_undeclared_import_is_caught():
    source = "import numpy as np\nfrom scipy.special import expit\n\ndef f():\n    import yaml\n    from . import x\n"
    assert third_party(imported_modules(source)) == {"numpy", "scipy", "yaml"}
    assert set(undeclared(imported_modules(source), ["numpy>=1.24"])) == {"scipy", "yaml"}
    assert undeclared(imported_modules(source), ["numpy", "SciPy>=1.10", "PyYAML"]) == {}


def test_test_only_packages_are_not_runtime_dependencies():
    """scikit-learn stays test-only: det_calib does not import it at run time. SciPy is imported in one
    place only, the bootstrap's sparse product, and is a requirement (a run reusing boxes then never imports
    torch in its process), not an extra: a plain install, CI's command 1, has it."""
    where = runtime_imports()
    assert "sklearn" not in where
    assert where.get("scipy", set()) == {"det_calib/metrics/bootstrap_tables.py"}
    assert "scipy" in declared(project()["dependencies"])
    assert "scipy" not in ALLOWED_UNDECLARED
    assert "scikit-learn" in declared(project()["optional-dependencies"]["test"])


def test_allowed_exceptions_carry_a_reason():
    assert all(reason.strip() for reason in ALLOWED_UNDECLARED.values())
    extras = set().union(*(declared(reqs) for reqs in project()["optional-dependencies"].values()))
    for (
        module
    ) in ALLOWED_UNDECLARED:  # an allowed exception is still declared, in an optional extra
        assert {_canon(d) for d in distributions(module)} & extras, module
