"""Bootstrap replicates of per-class binned errors from pooled (image, cell) tables.

An image bootstrap replicate weighs every box by its image's draw count, so a binned statistic's
sums in a replicate are the draw counts times each (image, cell) pair's sums of the boxes in
it. :func:`laece_tables` pools the boxes into those pairs once (an image's boxes of one class and
bin: a COCO-shaped split has 0.4 pairs per box) into one sparse matrix of (cell x image) sums,
so that a block of replicates' sums are one sparse matrix product with their draw counts
(SciPy's CSR product, one thread), instead of three weighted bin counts over every box per
replicate: about 20 times faster on a COCO-shaped split. The numbers equal those of
:func:`det_calib.metrics.calibration.laece` with the draw counts as weights up to float summation order
(``tests/metrics/test_calibration.py`` checks the intervals against the per-box path).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable

import numpy as np

from det_calib.metrics.binning import dense_ids

__all__ = ["csr_product", "csr_table", "laece_tables"]


def laece_tables(
    img: np.ndarray,
    n_img: int,
    c: np.ndarray,
    t: np.ndarray,
    k: np.ndarray,
    bins: np.ndarray,
    n_bins: int,
) -> Callable[[np.ndarray], np.ndarray]:
    """The replicate function of LaECE: ``(r, n_img)`` draw counts -> ``(r,)`` values.

    Args:
        img: (n,) image index of each box in ``range(n_img)``.
        c, t: (n,) confidence and IoU target of each box.
        k: (n,) class ids.
        bins: (n,) bin of each box's confidence in ``range(n_bins)``.
    """
    if c.size == 0:
        return lambda mult: np.full(mult.shape[0], np.nan)
    _, cls_idx = dense_ids(k)
    n_cells = (int(cls_idx.max()) + 1) * n_bins
    cell = cls_idx.ravel().astype(np.int64) * n_bins + bins
    pair, inv = np.unique(img.astype(np.int64) * n_cells + cell, return_inverse=True)
    inv = inv.ravel()
    cnt = np.bincount(inv).astype(np.float64)
    gap = np.bincount(inv, weights=np.asarray(t, dtype=np.float64) - c)  # target - conf sums
    p_img, p_cell = pair // n_cells, pair % n_cells
    cells, row = np.unique(
        p_cell, return_inverse=True
    )  # the cells with boxes, in (class, bin) order
    n_rows = len(cells)
    cls_starts = np.flatnonzero(np.r_[True, cells[1:] // n_bins != cells[:-1] // n_bins])
    # a cell's term needs its count and |s_tgt - s_conf| only: two rows a cell (the sums of
    # target - conf, not the two sums apart), a third less of the product than three
    table = csr_table(
        np.concatenate([row, row + n_rows]),
        np.tile(p_img, 2),
        np.concatenate([cnt, gap]),
        (2 * n_rows, n_img),
    )

    def batch(mult: np.ndarray) -> np.ndarray:
        sums = csr_product(table, mult)
        count, s_gap = sums[:n_rows], sums[n_rows:]
        n_c = np.add.reduceat(count, cls_starts, axis=0)
        g_c = np.add.reduceat(np.abs(s_gap), cls_starts, axis=0)
        present = n_c > 0  # a class whose boxes all weigh 0 (none drawn) is not averaged in
        per = np.divide(g_c, n_c, out=np.zeros_like(g_c), where=present)
        return np.array([per[m, j].mean() if m.any() else np.nan for j, m in enumerate(present.T)])

    return batch


def csr_product(table, mult: np.ndarray) -> np.ndarray:
    """``(rows, r)`` float64: ``table`` (a :func:`csr_table` of ``(rows, n_img)``) times the draw counts
    ``mult.T`` (``mult``: ``(r, n_img)``): each row's entries summed in column order, one thread. SciPy's
    product for SciPy's table, torch's for torch's (:func:`csr_table` chooses; torch is not imported for
    it where it was not: a run reusing boxes never needs torch); the two give the same sums, bit for bit
    (tested)."""
    dense = np.ascontiguousarray(mult.T, dtype=np.float64)
    if not _is_torch(table):
        return np.asarray(table @ dense)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a sparse product of this size gains nothing from a second thread
    try:
        return (table @ torch.from_numpy(dense)).numpy()
    finally:
        torch.set_num_threads(threads)


def _is_torch(table) -> bool:
    return type(table).__module__.startswith("torch")


def csr_table(
    rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, shape: tuple[int, int], *, torch_csr=None
):
    """A CSR float64 matrix of the (row, col, value) entries (no two share a position): torch's where the
    process has imported torch and not SciPy's sparse matrices (a run that captured boxes: importing
    SciPy for this product alone cost about 0.08 s of CPU, more than the demo's products), else SciPy's
    (a run reusing boxes never imports torch in its process: about 0.47 GiB less at COCO scale); the two
    give the same sums bit for bit (:func:`csr_product`). ``torch_csr``: True for torch's, False for
    SciPy's, None (default) as above (the tests compare the two)."""
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    crow = np.zeros(shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=shape[0]), out=crow[1:])
    cols, vals = cols.astype(np.int64), vals.astype(np.float64)
    if torch_csr is None:
        torch_csr = "torch" in sys.modules and "scipy.sparse" not in sys.modules
    if not torch_csr:
        from scipy.sparse import csr_matrix  # here: a run that never needs it does not pay for it

        return csr_matrix((vals, cols, crow), shape=shape, copy=False)
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(
            torch.from_numpy(crow), torch.from_numpy(cols), torch.from_numpy(vals), size=shape
        )


# the draw counts of the last seeded replicates, kept (in the smallest unsigned dtype that holds them: a
# count is rarely above 255) while they fit in this many bytes together. A run asks for the same draws
# one use after another, so a few suffice: on the 5,000-image COCO-shaped set (benchmarks/bench_scale.py)
# 16 MiB kept 249 of the 253 hits 64 MiB kept, the figures' CPU seconds the same, the run's peak 55 MB lower
_CACHE_BYTES = 16 << 20
# the last draws kept whatever their size: at 50,000 images a draw (one byte a count) is 48 MiB, over
# the budget alone, and its next use is the next interval (a class's calibrated scores after its raw ones,
# LaECE after ECE; a size bin's images, then every image, in turn): without them every interval redrew
_KEEP_LAST = 2
# ... unless one draw is over this alone (over 268,000 images at 1,000 replicates): drawn as it is used,
# block by block, never held whole (two such draws kept would be half a GiB and more)
_KEEP_MAX_BYTES = 256 << 20
_cache: dict[tuple, list[np.ndarray]] = {}


def seeded_multiplicities(
    seed: int,
    n_img: int,
    n_boot: int,
    draw: Callable,
    chunk: int,
    dtype=np.int64,
    columns: np.ndarray | None = None,
) -> Iterable[np.ndarray]:
    """The draw-count blocks of ``draw(np.random.default_rng(seed), n_img, n_boot)``
    (:func:`det_calib.metrics.calibration._multiplicities`, whose blocks ``chunk`` sizes), the last
    ones kept: a run bootstraps the same images with the same seed several times (raw and calibrated
    scores, ECE and LaECE, each size bin's and class's images in turn), and the draws depend on nothing
    else, so they are drawn once. Kept compact (uint8 where every count is below 256, as at any
    realistic image count) and given back as the blocks ``draw`` gives, one at a time, in ``dtype``
    (the same counts: float64 for a batch statistic, whose products take them so, converted once).
    The draws kept are the most recent ones within :data:`_CACHE_BYTES`, and the last
    :data:`_KEEP_LAST` whatever their size up to :data:`_KEEP_MAX_BYTES` each (a larger one is drawn
    block by block as it is used, each time). ``columns``: only these images' counts (each block's
    columns, taken before the conversion to ``dtype``: a subset of the images bootstrapped from the
    draws of them all)."""
    key = (int(seed), int(n_img), int(n_boot), int(chunk), draw)
    hit = _cache.pop(key, None)
    if hit is None:
        if n_img * n_boot > _KEEP_MAX_BYTES:  # not kept: over the bound at one byte a count
            return (
                _take(b, columns, dtype) for b in draw(np.random.default_rng(seed), n_img, n_boot)
            )
        hit = [_compact(b) for b in draw(np.random.default_rng(seed), n_img, n_boot)]
    _cache[key] = hit  # the most recently used last
    while len(_cache) > _KEEP_LAST and _kept_bytes() > _CACHE_BYTES:
        _cache.pop(next(iter(_cache)))  # the least recently used first
    return (_take(b, columns, dtype) for b in hit)


def _take(block: np.ndarray, columns: np.ndarray | None, dtype) -> np.ndarray:
    return np.asarray(block if columns is None else block[:, columns], dtype=dtype)


def _kept_bytes() -> int:
    return sum(b.nbytes for v in _cache.values() for b in v)


def _compact(block: np.ndarray) -> np.ndarray:
    """``block`` (non-negative counts) in the smallest unsigned dtype that holds its values exactly."""
    top = int(block.max()) if block.size else 0
    dt = (
        np.uint8
        if top <= np.iinfo(np.uint8).max
        else np.uint16
        if top <= np.iinfo(np.uint16).max
        else np.int64
    )
    return block.astype(dt)
