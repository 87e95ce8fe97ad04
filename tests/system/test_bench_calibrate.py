"""benchmarks/bench_calibrate.py's preparation of a checkout: the bytecode of its det_calib written before the
runs, as installing the package writes it, even where the environment forbids writing bytecode on import."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_calibrate")


def test_a_checkout_gets_the_bytecode_of_every_module(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as PYTHONDONTWRITEBYTECODE=1 sets it
    sources = [tmp_path / "det_calib" / "__init__.py", tmp_path / "det_calib" / "sub" / "mod.py"]
    for src in sources:
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text("X = 1\n")
    assert not any(Path(importlib.util.cache_from_source(str(s))).exists() for s in sources)
    bench._compiled(tmp_path)
    assert all(Path(importlib.util.cache_from_source(str(s))).is_file() for s in sources)
