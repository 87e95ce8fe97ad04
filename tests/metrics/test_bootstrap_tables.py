"""The bootstrap's CSR product: SciPy's where SciPy is installed (torch's in a process that imported torch and
not SciPy's sparse matrices), torch's where it is not (SciPy is not
among det_calib's requirements), the same sums bit for bit."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

from det_calib.metrics import bootstrap, bootstrap_tables
from det_calib.metrics.bootstrap_tables import csr_product, csr_table

pytest.importorskip("scipy")
pytest.importorskip("torch")


def _entries(rng, n_rows=300, n_img=500, nnz=6000):
    flat = rng.choice(n_rows * n_img, size=nnz, replace=False)  # no two entries share a position
    rows, cols = np.divmod(flat, n_img)
    vals = rng.standard_normal(nnz) * 10 ** rng.uniform(
        -3, 3, nnz
    )  # magnitudes apart: order matters
    return rows, cols, vals, (n_rows, n_img)


@pytest.mark.fast
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scipy_and_torch_products_are_the_same_sums(seed):
    rng = np.random.default_rng(seed)
    rows, cols, vals, shape = _entries(rng)
    mult = rng.poisson(1.0, size=(64, shape[1])).astype(np.uint8)  # draw counts, as the bootstrap's
    scipy_table = csr_table(rows, cols, vals, shape, torch_csr=False)
    torch_table = csr_table(rows, cols, vals, shape, torch_csr=True)
    assert type(scipy_table).__module__.startswith("scipy")
    assert type(torch_table).__module__.startswith("torch")
    a, b = csr_product(scipy_table, mult), csr_product(torch_table, mult)
    np.testing.assert_array_equal(a, b)
    dense = np.zeros(shape)
    dense[rows, cols] = vals
    np.testing.assert_allclose(a, dense @ mult.T.astype(np.float64), rtol=1e-9, atol=1e-9)


@pytest.mark.fast
def test_without_scipy_the_table_is_torchs(monkeypatch):
    real = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name.startswith("scipy"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_scipy)
    rng = np.random.default_rng(3)
    rows, cols, vals, shape = _entries(rng, n_rows=20, n_img=30, nnz=100)
    table = csr_table(rows, cols, vals, shape)
    assert type(table).__module__.startswith("torch")
    mult = rng.poisson(1.0, size=(8, shape[1]))
    dense = np.zeros(shape)
    dense[rows, cols] = vals
    np.testing.assert_allclose(csr_product(table, mult), dense @ mult.T, rtol=1e-12, atol=1e-12)


@pytest.mark.fast
def test_a_process_with_torch_and_without_scipy_sparse_gets_torchs_table(monkeypatch):
    """The default table is torch's where torch is imported and SciPy's sparse matrices are not (a run that
    captured its boxes does not import SciPy for this product), and SciPy's once they are imported; the
    sums are the same either way."""
    import sys

    rng = np.random.default_rng(4)
    rows, cols, vals, shape = _entries(rng, n_rows=40, n_img=60, nnz=500)
    mult = rng.poisson(1.0, size=(16, shape[1])).astype(np.uint8)
    import scipy.sparse  # noqa: F401

    with_scipy = csr_table(rows, cols, vals, shape)
    assert type(with_scipy).__module__.startswith("scipy")
    for name in [m for m in sys.modules if m == "scipy.sparse" or m.startswith("scipy.sparse.")]:
        monkeypatch.delitem(sys.modules, name)
    table = csr_table(rows, cols, vals, shape)
    assert type(table).__module__.startswith("torch")
    assert "scipy.sparse" not in sys.modules
    np.testing.assert_array_equal(csr_product(table, mult), csr_product(with_scipy, mult))
    assert type(csr_table(rows, cols, vals, shape, torch_csr=False)).__module__.startswith("scipy")


def test_the_last_draws_are_kept_whatever_their_size(monkeypatch):
    """A budget below one draw still keeps the last two draws (a class's raw then calibrated scores;
    a size bin's images then every image): each drawn once, given back as drawn, in the dtype asked;
    a third draw evicts the least recently used."""
    monkeypatch.setattr(bootstrap_tables, "_CACHE_BYTES", 10)
    monkeypatch.setattr(bootstrap_tables, "_cache", {})
    calls = []

    def draw(rng, n_img, n_boot):
        calls.append(n_img)
        return bootstrap._multiplicities(rng, n_img, n_boot)

    def blocks(n_img, dtype=np.int64):
        return list(bootstrap_tables.seeded_multiplicities(5, n_img, 30, draw, 1 << 20, dtype))

    want = {
        n: np.concatenate(list(bootstrap._multiplicities(np.random.default_rng(5), n, 30)))
        for n in (40, 41, 42)
    }
    for n, dtype in ((40, np.int64), (41, np.float64), (40, np.float64), (41, np.int64)):
        got = blocks(n, dtype)
        assert all(b.dtype == dtype for b in got)
        assert np.array_equal(np.concatenate(got), want[n])
    assert calls == [40, 41]  # each drawn once
    assert np.array_equal(np.concatenate(blocks(42)), want[42])
    assert np.array_equal(np.concatenate(blocks(41)), want[41])
    assert calls == [40, 41, 42]  # 41 still kept; 40, the least recently used, went
    assert np.array_equal(np.concatenate(blocks(40)), want[40])
    assert calls == [40, 41, 42, 40]
