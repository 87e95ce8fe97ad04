"""The bootstrap's CSR product: SciPy's (a requirement of det_calib), or torch's in a process that imported
torch and not SciPy's sparse matrices; the same sums bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from det_calib.metrics.bootstrap_tables import csr_product, csr_table


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
