"""Every figure of ``calibration.json`` recomputed from ``boxes.parquet`` and the ground truth.

The product computes its figures with vectorised numpy (binning by searchsorted-like indexing,
weighted bincounts, a weighted bootstrap). Here each one is recomputed through another path:
pycocotools for mAP (the ground truth read straight from the YOLO label files), plain Python
loops for every binned error, the kept sets counted box by box, NLL/Brier per box, LaECE_0 at
each operating threshold by a plain-Python matching with the reference toolkit's conventions, the
ground-truth counts from the label files, the bootstrap intervals replayed from the documented seed
and resampling (images drawn uniformly with replacement with
``numpy.random.default_rng(seed).integers(0, n_images, n_images)``, every box of a drawn image once
per draw; the bias-corrected percentile interval, the normal one for LaECE_0, both written here from
the replicates), and the temperature re-minimised with scipy.

Real runs of the demo detector on the committed fixture split (12 images, halved into fit
and eval): the default one (both heads); the same detector with COCO JSON ground truth and two
extra thresholds placed *exactly* on a raw and on a calibrated score of the run (so ``conf > t``
and ``conf >= t`` give different kept sets); the detector with its logits multiplied by 20,
whose raw float64 scores saturate to 1.0 (ties that the calibrated scores break), so that mAP
"after" ranked by the raw scores differs from mAP ranked by the calibrated ones; and a Platt
run (one head) whose "after" figures come from the recorded ``a`` and ``b``. (A run with
``--fit-min-conf`` on a score is checked too.)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist

import cv2
import numpy as np
import polars as pl
import pytest
import torch

import det_calib
from det_calib.cli import main
from det_calib.demo import fixture_data_yaml

FIX_ROOT = fixture_data_yaml().parent
LABELS = FIX_ROOT / "labels" / "fixture"
IMAGES = FIX_ROOT / "images" / "fixture"
N_BOOT = 200
REL = 1e-9


# ----------------------------------------------------------------------------- runs
@pytest.fixture(scope="module")
def main_run(tmp_path_factory, demo_model_path):
    out = tmp_path_factory.mktemp("figures") / "main"
    det_calib.calibrate(
        demo_model_path,
        fixture_data_yaml(),
        out=out,
        run_val=False,
        report=False,
        n_boot=N_BOOT,
        progress=False,
        method="temperature",
    )
    return out


def _sig(z: float, t: float) -> float:
    """The calibrated score as a plain float (the recomputation's own formula)."""
    return 1.0 / (1.0 + math.exp(-z / t))


def _exact_thresholds(run: Path) -> tuple[float, float]:
    """A raw conf of an eval box, and a calibrated score of another eval box on which the
    product's formula and this file's agree to the last bit (so the box sits exactly on it)."""
    s = json.loads((run / "calibration.json").read_text())
    t = s["temperature"]["nms"]
    b = pl.read_parquet(run / "boxes.parquet").filter(
        (pl.col("head") == "nms") & (pl.col("split") == s["splits"]["eval"])
    )
    # below 0.25: the lowest threshold, the one of the per-class kept ECE
    conf = sorted(set(b.filter((pl.col("conf") > 0.1) & (pl.col("conf") < 0.25))["conf"].to_list()))
    t_raw = conf[len(conf) // 2]
    for z in sorted(b.filter(pl.col("conf") > 0.3)["logit"].to_list()):
        p = _sig(z, t)
        if p == 0.5 * (1.0 + math.tanh(0.5 * z / t)) and p not in conf and abs(p - t_raw) > 1e-3:
            return t_raw, p
    raise AssertionError("no calibrated score both formulas agree on")


def _coco_json_from_yolo(path: Path) -> Path:
    """COCO JSON of the fixture split, written from its YOLO labels (pixels; ids 1-based; names)."""
    names = det_calib.demo.CLASS_NAMES
    images, anns = [], []
    for k, img in enumerate(sorted(IMAGES.glob("*.jpg")), start=1):
        h, w = cv2.imread(str(img)).shape[:2]
        images.append({"id": k, "file_name": img.name, "width": w, "height": h})
        for line in (LABELS / f"{img.stem}.txt").read_text().splitlines():
            c, cx, cy, bw, bh = (float(v) for v in line.split())
            x1, y1 = cx * w - bw * w / 2, cy * h - bh * h / 2
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": k,
                    "category_id": int(c) + 10,
                    "iscrowd": 0,
                    "bbox": [x1, y1, bw * w, bh * h],
                    "area": bw * w * bh * h,
                }
            )
    cats = [{"id": i + 10, "name": n} for i, n in enumerate(names)]
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return path


@pytest.fixture(scope="module")
def coco_run(tmp_path_factory, demo_model_path, main_run):
    tmp = tmp_path_factory.mktemp("figures_coco")
    t_raw, t_cal = _exact_thresholds(main_run)
    out = tmp / "coco"
    code = main(
        [
            "calibrate",
            "--model",
            str(demo_model_path),
            "--data",
            str(fixture_data_yaml()),
            "--head",
            "nms",
            "--coco-gt",
            str(_coco_json_from_yolo(tmp / "gt.json")),
            "--conf",
            "0.25",
            "--conf",
            repr(t_raw),
            "--conf",
            repr(t_cal),
            "--n-boot",
            str(N_BOOT),
            "--method",
            "temperature",
            "--no-val",
            "--no-report",
            "-q",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    return out, t_raw, t_cal


@pytest.fixture(scope="module")
def hot_run(tmp_path_factory, demo_model_path):
    """Logits x 50: raw float64 scores of confident boxes are all exactly 1.0 (ties)."""
    from det_calib.deploy.fold import write_calibrated_checkpoint

    tmp = tmp_path_factory.mktemp("figures_hot")
    hot = write_calibrated_checkpoint(demo_model_path, tmp / "hot.pt", {"nms": 0.02})
    out = tmp / "hot"
    # which saturated scores tie depends on the logits' last bits, and those on torch's thread
    # count (its convolution sums in another order): one thread, whatever the machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        det_calib.calibrate(
            hot,
            fixture_data_yaml(),
            out=out,
            head="nms",
            conf_floor=1e-12,
            method="temperature",
            run_val=False,
            report=False,
            n_boot=50,
            progress=False,
        )
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="module")
def fmc_run(tmp_path_factory, demo_model_path, main_run):
    """`--fit-min-conf` exactly on the raw conf of a fit-split box (which must enter the fit)."""
    s = json.loads((main_run / "calibration.json").read_text())
    b = pl.read_parquet(main_run / "boxes.parquet").filter(
        (pl.col("head") == "nms") & (pl.col("split") == s["splits"]["fit"])
    )
    fmc = sorted(b["conf"].to_list(), reverse=True)[29]
    out = tmp_path_factory.mktemp("figures_fmc") / "fmc"
    _nms_run(demo_model_path, out, fit_min_conf=fmc, method="temperature", n_boot=20)
    return out, fmc


def _nms_run(model, out, **kw) -> None:
    """One nms-head run on the fixture split, no Ultralytics val, no report."""
    det_calib.calibrate(
        model,
        fixture_data_yaml(),
        out=out,
        head="nms",
        run_val=False,
        report=False,
        progress=False,
        **kw,
    )


@pytest.fixture(scope="module")
def platt_run(tmp_path_factory, demo_model_path):
    """Platt scaling (sigmoid(a z + b)) on one head: the `after` figures come from its a and b."""
    out = tmp_path_factory.mktemp("figures_platt") / "platt"
    _nms_run(demo_model_path, out, method="platt", n_boot=50)
    return out


# ----------------------------------------------------------------------------- ground truth
def _gt(images: list[str]) -> list[list[tuple[int, float, float, float, float]]]:
    """Per image (in the given order): (cls, x1, y1, x2, y2) in pixels from the YOLO label file."""
    out = []
    for name in images:
        h, w = cv2.imread(str(IMAGES / name)).shape[:2]
        rows = []
        for line in (LABELS / f"{Path(name).stem}.txt").read_text().splitlines():
            c, cx, cy, bw, bh = (float(v) for v in line.split())
            rows.append(
                (int(c), (cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h)
            )
        out.append(rows)
    return out


# ----------------------------------------------------------------------------- plain-loop metrics
def _bin(p: float, m: int) -> int:
    """Equal-width bin of p: [k/M, (k+1)/M), the last closed at 1 (edges as np.linspace)."""
    edges = np.linspace(0.0, 1.0, m + 1).tolist()
    k = 0
    while k < m - 1 and p >= edges[k + 1]:
        k += 1
    return k


def _binned(keys, conf, target) -> tuple[float, float]:
    """(sum_b |sum target - sum conf| / n, max_b |mean target - mean conf|) over non-empty bins."""
    cnt, sc, st = {}, {}, {}
    for k, c, t in zip(keys, conf, target):
        cnt[k] = cnt.get(k, 0) + 1
        sc[k] = sc.get(k, 0.0) + c
        st[k] = st.get(k, 0.0) + t
    n = len(conf)
    return sum(abs(st[k] - sc[k]) for k in cnt) / n, max(abs(st[k] - sc[k]) / cnt[k] for k in cnt)


def ece_loop(conf, y, m):
    return _binned([_bin(c, m) for c in conf], conf, y)[0]


def mce_loop(conf, y, m):
    return _binned([_bin(c, m) for c in conf], conf, y)[1]


def ace_loop(conf, y, m):
    order = sorted(range(len(conf)), key=lambda i: conf[i])  # stable
    keys = [0] * len(conf)
    for r, i in enumerate(order):
        keys[i] = r * m // len(conf)
    return _binned(keys, conf, y)[0]


def dece_loop(conf, y, feats, bins):
    keys = [
        tuple([_bin(c, bins[0])] + [_bin(f, b) for f, b in zip(fs, bins[1:])])
        for c, fs in zip(conf, feats)
    ]
    return _binned(keys, conf, y)[0]


def laece_loop(conf, tgt, cls, m):
    per = []
    for c in sorted(set(cls)):
        idx = [i for i in range(len(conf)) if cls[i] == c]
        per.append(ece_loop([conf[i] for i in idx], [tgt[i] for i in idx], m))
    return sum(per) / len(per)


def laace_loop(conf, tgt, cls):
    per = []
    for c in sorted(set(cls)):
        idx = [i for i in range(len(conf)) if cls[i] == c]
        per.append(sum(abs(tgt[i] - conf[i]) for i in idx) / len(idx))
    return sum(per) / len(per)


def nll_loop(z, y, t):
    # -log sigmoid(u) = log(1 + exp(-u)), written per sign to stay finite
    def softplus(u):
        return u + math.log1p(math.exp(-u)) if u > 0 else math.log1p(math.exp(u))

    return sum(softplus(-zi / t) if yi else softplus(zi / t) for zi, yi in zip(z, y)) / len(z)


def brier_loop(p, y):
    return sum((pi - yi) ** 2 for pi, yi in zip(p, y)) / len(p)


def features(r) -> list[float]:
    w, h = r["img_w"], r["img_h"]
    f = [
        (r["x1"] + r["x2"]) / 2 / w,
        (r["y1"] + r["y2"]) / 2 / h,
        (r["x2"] - r["x1"]) / w,
        (r["y2"] - r["y1"]) / h,
    ]
    return [min(max(v, 0.0), 1.0) for v in f]


# ----------------------------------------------------------------------------- bootstrap replay
def _np_bins(p: np.ndarray, m: int) -> np.ndarray:
    return np.minimum(np.searchsorted(np.linspace(0, 1, m + 1), p, side="right") - 1, m - 1)


def _np_ece(p, y, m):
    k = _np_bins(p, m)
    return np.abs(np.bincount(k, y - p, minlength=m)).sum() / len(p)


def _np_laece(p, t, c, m):
    return float(np.mean([_np_ece(p[c == k], t[c == k], m) for k in np.unique(c)]))


def boot_draws(stat, img, arrays, n_boot, seed) -> list[float]:
    """The documented bootstrap's replicates, with the resampled boxes materialised (no weights)."""
    uniq, inv = np.unique(img, return_inverse=True)
    rows_of = [np.flatnonzero(inv == k) for k in range(len(uniq))]
    rng = np.random.default_rng(seed)
    stats = []
    for _ in range(n_boot):
        draw = rng.integers(0, len(uniq), size=len(uniq))
        idx = np.concatenate([rows_of[k] for k in draw])
        stats.append(float(stat(*[a[idx] for a in arrays])))
    return stats


def bc_interval(draws: list[float], estimate: float, level: float = 0.95) -> list[float]:
    """Bias-corrected percentile interval (Efron): z0 = Phi^-1(share of replicates below the
    estimate, ties counted half, clamped to [1/2n, 1 - 1/2n]), then the Phi(2 z0 -+ z) percentiles.
    nan replicates are dropped. A replicate within 1e-12 of the estimate is a tie: an image draw
    that is a permutation of the split gives the estimate, up to the summation order."""
    good = [d for d in draws if not math.isnan(d)]
    nd = NormalDist()
    tol = 1e-12 * max(1.0, abs(estimate))
    below = sum(d < estimate - tol for d in good) + 0.5 * sum(
        abs(d - estimate) <= tol for d in good
    )
    share = min(max(below / len(good), 0.5 / len(good)), 1.0 - 0.5 / len(good))
    z0, za = nd.inv_cdf(share), nd.inv_cdf(0.5 + level / 2)
    return np.percentile(good, [100 * nd.cdf(2 * z0 - za), 100 * nd.cdf(2 * z0 + za)]).tolist()


def normal_interval(draws: list[float], estimate: float, level: float = 0.95) -> list[float]:
    """estimate -+ z * SD of the (non-nan) replicates (n - 1 in the SD)."""
    good = [d for d in draws if not math.isnan(d)]
    mean = sum(good) / len(good)
    sd = math.sqrt(sum((d - mean) ** 2 for d in good) / (len(good) - 1))
    half = NormalDist().inv_cdf(0.5 + level / 2) * sd
    return [estimate - half, estimate + half]


def bc_or_normal(draws: list[float], estimate: float, level: float = 0.95) -> list[float]:
    """The interval printed next to a binned error: BC where it contains the estimate, else the
    normal interval with its low end raised to min(lowest replicate, estimate)."""
    lo, hi = bc_interval(draws, estimate, level)
    if lo <= estimate <= hi:
        return [lo, hi]
    lo, hi = normal_interval(draws, estimate, level)
    good = [d for d in draws if not math.isnan(d)]
    return [max(lo, min(min(good), estimate)), hi]


def boot_bc(stat, img, arrays, n_boot, seed):
    """The interval of ``stat`` replayed (:func:`bc_or_normal`): the estimate from the full arrays,
    the replicates redrawn."""
    return bc_or_normal(boot_draws(stat, img, arrays, n_boot, seed), float(stat(*arrays)))


# ----------------------------------------------------------------------------- LaECE_0, reference conventions
def _iou(d, g) -> float:
    iw = max(0.0, min(d[2], g[2]) - max(d[0], g[0]))
    ih = max(0.0, min(d[3], g[3]) - max(d[1], g[1]))
    inter = iw * ih
    union = (d[2] - d[0]) * (d[3] - d[1]) + (g[2] - g[0]) * (g[3] - g[1]) - inter
    return inter / union if union > 0 else 0.0


def laece0_targets(rows, scores, gt_by_image, thr, max_dets=100) -> list[tuple[int, float, float]]:
    """(box index, score, target) of each scored box at ``thr``: boxes with score > thr; per image
    and class the ``max_dets`` highest (ties: higher logit, then input order); visited by score, each
    takes the best still-free same-class GT whatever its IoU (tau = 0; on equal IoU the later GT
    of the label file), target its IoU, 0 when no GT is left."""
    groups: dict = {}
    for i, r in enumerate(rows):
        if scores[i] > thr:
            groups.setdefault((r["image"], r["cls"]), []).append(i)
    out = []
    for (image, c), idx in groups.items():
        idx = sorted(idx, key=lambda i: (-scores[i], -rows[i]["logit"], i))[:max_dets]
        gts = [g[1:] for g in gt_by_image.get(image, []) if g[0] == c]
        taken = [False] * len(gts)
        for i in idx:
            r = rows[i]
            d = (r["x1"], r["y1"], max(r["x1"], r["x2"]), max(r["y1"], r["y2"]))
            best, best_iou = -1, -1.0
            for k, g in enumerate(gts):
                if not taken[k] and _iou(d, g) >= best_iou:
                    best, best_iou = k, _iou(d, g)
            if best >= 0:
                taken[best] = True
            out.append((i, scores[i], best_iou if best >= 0 else 0.0))
    return out


def laece0_of(conf, target, cls, gt_classes, m=25) -> float:
    """Class mean of sum_b |sum conf - sum target| / N_c, bins [0, 1/M] then (k/M, (k+1)/M], over
    classes with GT and boxes; a class at exactly 0 is left out; nan when none is left."""
    per = []
    for c in sorted(set(cls) & set(gt_classes)):
        sums: dict = {}
        n = 0
        for p, t, k in zip(conf, target, cls):
            if k != c:
                continue
            b = 0
            while b < m - 1 and p > (b + 1) / m:
                b += 1
            sc, st = sums.get(b, (0.0, 0.0))
            sums[b] = (sc + p, st + t)
            n += 1
        v = sum(abs(sc - st) for sc, st in sums.values()) / n
        if v != 0.0:
            per.append(v)
    return sum(per) / len(per) if per else float("nan")


# ----------------------------------------------------------------------------- mAP with pycocotools
def _map_with_ties_by_iou(rows: list[dict], scores: list[float], gt, max_dets: int, sign: int):
    """COCO mAP with ties among equal scores broken by IoU: highest first (sign -1), lowest first (+1)."""
    order = sorted(range(len(rows)), key=lambda i: (-scores[i], sign * rows[i]["iou"]))
    return coco_map_independent([rows[i] for i in order], [scores[i] for i in order], gt, max_dets)


def coco_map_independent(
    rows: list[dict], scores: list[float], gt_per_image, max_dets: int
) -> tuple[float, float]:
    import contextlib
    import io

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    images = [{"id": i + 1} for i in range(len(gt_per_image))]
    anns = []
    for i, g in enumerate(gt_per_image):
        for c, x1, y1, x2, y2 in g:
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": i + 1,
                    "category_id": c + 1,
                    "iscrowd": 0,
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "area": (x2 - x1) * (y2 - y1),
                }
            )
    cats = [{"id": c + 1} for c in range(len(det_calib.demo.CLASS_NAMES))]
    dets = [
        {
            "image_id": r["_img"] + 1,
            "category_id": r["cls"] + 1,
            "score": s,
            "bbox": [r["x1"], r["y1"], max(r["x2"] - r["x1"], 0.0), max(r["y2"] - r["y1"], 0.0)],
        }
        for r, s in zip(rows, scores)
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": images, "annotations": anns, "categories": cats}
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(dets), "bbox")
        ev.params.maxDets = [max_dets]
        ev.evaluate()
        ev.accumulate()
    prec = ev.eval["precision"][:, :, :, 0, 0]  # all areas, the one maxDets
    ap = lambda x: float(np.mean(x[x > -1]))
    return ap(prec), ap(prec[0])


# ----------------------------------------------------------------------------- the check
def _approx(x):
    return pytest.approx(x, rel=REL, abs=1e-12)


def split_images(out: Path) -> tuple[list[str], list[str]]:
    """Fit and eval images of a run whose boxes reach every image (the seeded halves of `val`)."""
    s = json.loads((out / "calibration.json").read_text())
    boxes = pl.read_parquet(out / "boxes.parquet")
    fit = sorted(set(boxes.filter(pl.col("split") == s["splits"]["fit"])["image"].to_list()))
    ev = sorted(set(boxes.filter(pl.col("split") == s["splits"]["eval"])["image"].to_list()))
    assert sorted(fit + ev) == sorted(p.name for p in IMAGES.glob("*.jpg"))
    return fit, ev


def calibration_map(s: dict, head: str):
    """(calibrated logit of a raw logit, T or None) from the calibrator recorded in calibration.json."""
    rec = s.get("calibrators", {}).get(head)  # written when a calibrator is not a temperature
    if rec is None:
        assert s["method"] == "temperature"
        t = s["temperature"][head]
        return (lambda z: z / t), t
    if rec["method"] == "temperature":
        t = rec["params"]["temperature"]
        assert t == s["temperature"][head]
        return (lambda z: z / t), t
    if rec["method"] == "platt":
        a, b = rec["params"]["map"]["a"], rec["params"]["map"]["b"]
        assert head not in s["temperature"]
        return (lambda z: a * z + b), None
    raise AssertionError(f"no recomputation for method {rec['method']!r}")


def check_run(out: Path, halves: tuple[list[str], list[str]]) -> dict:
    s = json.loads((out / "calibration.json").read_text())
    boxes = pl.read_parquet(out / "boxes.parquet")
    M, ML = s["ece_bins"], s["laece_bins"]
    assert (M, ML) == (15, 25)
    assert s["bootstrap"]["level"] == 0.95 and s["bootstrap"]["unit"] == "image"
    seed, n_boot = s["bootstrap"]["seed"], s["bootstrap"]["n_boot"]
    names = s["class_names"]
    assert names == list(det_calib.demo.CLASS_NAMES)
    fit_name, ev_name = s["splits"]["fit"], s["splits"]["eval"]
    fit_images, ev_images = halves
    assert s["gt_counts"] == {
        fit_name: _gt_counts(fit_images, len(names)),
        ev_name: _gt_counts(ev_images, len(names)),
    }
    for head in s["heads"]:
        cal, T = calibration_map(s, head)
        hb = boxes.filter(pl.col("head") == head)

        # ---- fit figures
        f = s["fit"][head]
        fb = hb.filter(
            (pl.col("split") == fit_name)
            & ~pl.col("ignore")
            & (pl.col("conf") >= s["fit_min_conf"])
        )
        zf, yf, pf = fb["logit"].to_list(), fb["correct"].to_list(), fb["conf"].to_list()
        pf1 = [_sig(cal(z), 1.0) for z in zf]
        assert (f["split"], f["images"], f["boxes"], f["correct"]) == (
            fit_name,
            len(fit_images),
            len(zf),
            sum(yf),
        )
        assert f["nll_before"] == _approx(nll_loop(zf, yf, 1.0))
        assert f["nll_after"] == _approx(nll_loop([cal(z) for z in zf], yf, 1.0))
        assert f["ece_before"] == _approx(ece_loop(pf, yf, M))
        assert f["ece_after"] == _approx(ece_loop(pf1, yf, M))
        assert f["brier_before"] == _approx(brier_loop(pf, yf))
        assert f["brier_after"] == _approx(brier_loop(pf1, yf))
        if T is not None:
            assert f["iterations"] >= 1
            # T minimises the fit NLL (scipy, in log T)
            from scipy.optimize import minimize_scalar

            za, ya = np.asarray(zf), np.asarray(yf)
            obj = lambda u, za=za, ya=ya: float(
                np.mean(np.logaddexp(0, np.where(ya, -za, za) / math.exp(u)))
            )
            best = minimize_scalar(obj, bracket=(-1.0, 1.0), tol=1e-10)
            assert T == pytest.approx(math.exp(best.x), rel=1e-4)

        # ---- eval figures
        e = s["eval"][head]
        eb_all = hb.filter(pl.col("split") == ev_name)
        assert set(eb_all["image"].to_list()) <= set(ev_images)
        assert set(hb.filter(pl.col("split") == fit_name)["image"].to_list()) <= set(fit_images)
        assert e["images"] == len(ev_images) and e["split"] == ev_name
        eb = eb_all.filter(~pl.col("ignore"))
        rows = eb.to_dicts()
        z = [r["logit"] for r in rows]
        y = [r["correct"] for r in rows]
        cls = [r["cls"] for r in rows]
        loc = [r["loc_iou"] for r in rows]
        p0 = [r["conf"] for r in rows]
        u1 = [cal(zi) for zi in z]
        p1 = [_sig(ui, 1.0) for ui in u1]
        gt = _gt(ev_images)
        gt_cls = [g[0] for im in gt for g in im]
        assert (e["boxes"], e["correct"], e["n_gt"], e["ignored"]) == (
            len(rows),
            sum(y),
            len(gt_cls),
            eb_all.height - len(rows),
        )
        feats = [features(r) for r in rows]
        for tag, p, u in (("before", p0, z), ("after", p1, u1)):
            assert e[f"ece_{tag}"] == _approx(ece_loop(p, y, M)), tag
            assert e[f"ace_{tag}"] == _approx(ace_loop(p, y, M)), tag
            assert e[f"mce_{tag}"] == _approx(mce_loop(p, y, M)), tag
            assert e[f"nll_{tag}"] == _approx(nll_loop(u, y, 1.0)), tag
            assert e[f"brier_{tag}"] == _approx(brier_loop(p, y)), tag
            assert e[f"dece_{tag}"] == _approx(dece_loop(p, y, feats, s["dece_bins"])), tag
            assert e[f"laece_{tag}"] == _approx(laece_loop(p, loc, cls, ML)), tag
            assert e[f"laace_{tag}"] == _approx(laace_loop(p, loc, cls)), tag
        # ---- thresholded ECE and the kept sets
        assert [th["conf"] for th in e["thresholded"]] == s["conf_thresholds"]
        for th in e["thresholded"]:
            t = th["conf"]
            for tag, p in (("before", p0), ("after", p1)):
                kept = [i for i in range(len(p)) if p[i] > t]
                assert th[f"boxes_{tag}"] == len(kept), (tag, t)
                want = ece_loop([p[i] for i in kept], [y[i] for i in kept], M) if kept else None
                assert th[f"ece_{tag}"] == (None if want is None else _approx(want)), (tag, t)
        shifts = s["threshold_shift"][head]
        assert [sh["conf"] for sh in shifts] == s["conf_thresholds"]
        for sh in shifts:
            assert sh == _shift_by_hand(sh["conf"], p0, p1, y, len(gt_cls), T, cal)
        # ---- mAP, pycocotools on the same boxes (crowd-matched ones included), scores in float64
        img_index = {name: k for k, name in enumerate(ev_images)}
        all_rows = [dict(r, _img=img_index[r["image"]]) for r in eb_all.to_dicts()]
        m0 = coco_map_independent(
            all_rows, [_sig(r["logit"], 1.0) for r in all_rows], gt, s["max_det"]
        )
        m1 = coco_map_independent(
            all_rows, [_sig(cal(r["logit"]), 1.0) for r in all_rows], gt, s["max_det"]
        )
        raw = [_sig(r["logit"], 1.0) for r in all_rows]
        if len(set(raw)) == len(raw):
            assert (e["map50_95_before"], e["map50_before"]) == (_approx(m0[0]), _approx(m0[1]))
        else:
            # tied raw scores (saturated at 1.0): COCO's order among ties is arbitrary, so the
            # reported mAP must lie between the tie orders that put the best and the worst IoU first
            best, worst = (
                _map_with_ties_by_iou(all_rows, raw, gt, s["max_det"], sign) for sign in (-1, 1)
            )
            for k, key in enumerate(("map50_95_before", "map50_before")):
                assert worst[k] - 1e-9 <= e[key] <= best[k] + 1e-9, key
        assert (e["map50_95_after"], e["map50_after"]) == (_approx(m1[0]), _approx(m1[1]))
        if len(set(raw)) == len(raw):
            assert e["map_identical"] == (m0 == m1)
        else:
            same = (
                e["map50_95_before"] == e["map50_95_after"]
                and e["map50_before"] == e["map50_after"]
            )
            assert e["map_identical"] == same

        # ---- per class
        pcs = {pc["cls"]: pc for pc in s["per_class"][head]}
        assert set(pcs) == set(cls) | set(gt_cls)
        for c, pc in pcs.items():
            idx = [i for i in range(len(rows)) if cls[i] == c]
            n_gt_c = gt_cls.count(c)
            assert (pc["name"], pc["boxes"], pc["correct"], pc["n_gt"]) == (
                names[c],
                len(idx),
                sum(y[i] for i in idx),
                n_gt_c,
            )
            assert pc["few_boxes"] == (len(idx) < s["min_class_boxes"])
            for tag, p in (("before", p0), ("after", p1)):
                if not idx:
                    assert pc[f"ece_{tag}"] is None and pc[f"laece_{tag}"] is None
                    continue
                pc_p, pc_y = [p[i] for i in idx], [y[i] for i in idx]
                assert pc[f"ece_{tag}"] == _approx(ece_loop(pc_p, pc_y, M)), (c, tag)
                assert pc[f"laece_{tag}"] == _approx(ece_loop(pc_p, [loc[i] for i in idx], ML)), (
                    c,
                    tag,
                )
                kept = [i for i in idx if p[i] > min(s["conf_thresholds"])]
                want = ece_loop([p[i] for i in kept], [y[i] for i in kept], M) if kept else None
                assert pc[f"kept_ece_{tag}"] == (None if want is None else _approx(want)), (c, tag)
            for sh in pc["threshold_shift"]:
                want = _shift_by_hand(
                    sh["conf"],
                    [p0[i] for i in idx],
                    [p1[i] for i in idx],
                    [y[i] for i in idx],
                    n_gt_c,
                    T,
                    cal,
                )
                assert sh == want, (c, sh["conf"])

        # ---- bootstrap intervals, replayed
        img = eb["image_id"].to_numpy()
        a_p0, a_p1, a_y, a_loc, a_cls = (np.asarray(v, dtype=float) for v in (p0, p1, y, loc, cls))
        ece_m = lambda p, yy: _np_ece(p, yy, M)
        lae_m = lambda p, t, c: _np_laece(p, t, c, ML)
        for tag, p in (("before", a_p0), ("after", a_p1)):
            assert e[f"ece_{tag}_ci"] == pytest.approx(
                boot_bc(ece_m, img, [p, a_y], n_boot, seed), rel=1e-9
            )
            assert e[f"laece_{tag}_ci"] == pytest.approx(
                boot_bc(lae_m, img, [p, a_loc, a_cls], n_boot, seed), rel=1e-9
            )
            for c, pc in pcs.items():
                m = a_cls == c
                if m.any():
                    # a class's boxes of the split's images drawn (every image, the split's own draws)
                    of_c = lambda q, yy, kk, c=c: (
                        _np_ece(q[kk == c], yy[kk == c], M) if (kk == c).any() else float("nan")
                    )
                    want = bc_or_normal(
                        boot_draws(of_c, img, [p, a_y, a_cls], n_boot, seed),
                        _np_ece(p[m], a_y[m], M),
                    )
                    assert pc[f"ece_{tag}_ci"] == pytest.approx(want, rel=1e-9), (c, tag)

        # ---- the operating points: kept-set ECE and LaECE_0 at each --conf
        gt_by_image = dict(zip(ev_images, gt))
        gt_classes = sorted(set(gt_cls))
        for tag, p, a_p in (("before", p0, a_p0), ("after", p1, a_p1)):
            ops = e[f"operating_{tag}"]
            assert [o["conf"] for o in ops] == s["conf_thresholds"]
            for o in ops:
                t = o["conf"]
                kept = [i for i in range(len(p)) if p[i] > t]
                assert (o["boxes"], o["correct"]) == (len(kept), sum(y[i] for i in kept)), (tag, t)
                if not kept:
                    assert o["ece"] is None and o["ece_ci"] is None and o["laece0"] is None, (
                        tag,
                        t,
                    )
                    continue
                want = ece_loop([p[i] for i in kept], [y[i] for i in kept], M)
                assert o["ece"] == _approx(want), (tag, t)
                kept_m = lambda q, yy, t=t: (
                    _np_ece(q[q > t], yy[q > t], M) if (q > t).any() else float("nan")
                )
                assert o["ece_ci"] == pytest.approx(
                    bc_or_normal(boot_draws(kept_m, img, [a_p, a_y], n_boot, seed), want), rel=1e-9
                ), (tag, t)
                scored = laece0_targets(rows, p, gt_by_image, t)
                la = laece0_of(
                    [q for _, q, _ in scored],
                    [g for _, _, g in scored],
                    [cls[i] for i, _, _ in scored],
                    gt_classes,
                )
                assert o["laece0"] == (None if math.isnan(la) else _approx(la)), (tag, t)
                # replicates: a box keeps its image's match (an image drawn twice: its boxes twice)
                use, tgt = np.zeros(len(p), dtype=bool), np.zeros(len(p))
                for i, _, g in scored:
                    use[i], tgt[i] = True, g
                la_m = lambda q, g, k, u, gc=gt_classes: laece0_of(
                    q[u].tolist(), g[u].tolist(), k[u].tolist(), gc
                )
                draws = boot_draws(la_m, img, [a_p, tgt, a_cls, use], n_boot, seed)
                assert o["laece0_ci"] == pytest.approx(normal_interval(draws, la), rel=1e-9), (
                    tag,
                    t,
                )
    return s


def _gt_counts(images: list[str], n_classes: int) -> list[int]:
    """Ground-truth boxes per class id, counted from the label files."""
    counts = [0] * n_classes
    for name in images:
        for line in (LABELS / f"{Path(name).stem}.txt").read_text().splitlines():
            counts[int(float(line.split()[0]))] += 1
    return counts


def _shift_by_hand(t, p0, p1, y, n_gt, T, cal=None) -> dict:
    """The threshold shift at t; its equivalent threshold is the calibrated conf of raw t
    (closed form for a temperature T, else ``cal``, the map of a raw logit; both maps increase)."""
    kb = [p > t for p in p0]
    ka = [p > t for p in p1]
    added = [a and not b for a, b in zip(ka, kb)]
    removed = [b and not a for a, b in zip(ka, kb)]
    tp_b = sum(k and c for k, c in zip(kb, y))
    tp_a = sum(k and c for k, c in zip(ka, y))

    def ratio(a, n):
        return _approx(a / n) if n else None  # JSON null for nan

    return {
        "conf": t,
        "equivalent_conf": (
            _approx(1 / (1 + ((1 - t) / t) ** (1 / T)))
            if T is not None
            else None
            if cal is None
            else _approx(_sig(cal(math.log(t / (1 - t))), 1.0))
        ),
        "n_gt": n_gt,
        "kept_before": sum(kb),
        "kept_after": sum(ka),
        "added": sum(added),
        "added_correct": sum(a and c for a, c in zip(added, y)),
        "removed": sum(removed),
        "removed_correct": sum(r and c for r, c in zip(removed, y)),
        "precision_before": ratio(tp_b, sum(kb)),
        "precision_after": ratio(tp_a, sum(ka)),
        "recall_before": ratio(tp_b, n_gt),
        "recall_after": ratio(tp_a, n_gt),
    }


# ----------------------------------------------------------------------------- tests
def test_every_figure_of_the_default_run(main_run):
    s = check_run(main_run, split_images(main_run))
    assert s["heads"] == ["nms", "e2e"]
    assert s["conf_thresholds"] == [0.25] and s["bootstrap"]["n_boot"] == N_BOOT
    assert any(
        np.subtract(*s["eval"][h]["ece_before_ci"]) < 0 for h in s["heads"]
    )  # a real interval somewhere
    for head in s["heads"]:
        e = s["eval"][head]
        # the recomputation is not vacuous: the temperature moves the figures
        assert e["ece_after"] != e["ece_before"] and e["nll_after"] < e["nll_before"] + 0.05
        # and the interval holds its estimate (on a 6-image half the BC interval may collapse onto it)
        lo, hi = e["ece_before_ci"]
        assert lo <= e["ece_before"] <= hi
        # the operating point is scored, and calibration moves it
        o0, o1 = e["operating_before"][0], e["operating_after"][0]
        assert o0["laece0"] is not None and o0["laece0_ci"][0] < o0["laece0"] < o0["laece0_ci"][1]
        assert (o0["ece"], o0["laece0"]) != (o1["ece"], o1["laece0"])


def test_figures_with_thresholds_exactly_on_scores(main_run, coco_run):
    """Thresholds placed exactly on a raw conf and on a calibrated score: `conf > t` only."""
    out, t_raw, t_cal = coco_run
    s = check_run(out, split_images(main_run))
    assert s["conf_thresholds"] == [0.25, t_raw, t_cal]
    b = pl.read_parquet(out / "boxes.parquet").filter(
        (pl.col("split") == s["splits"]["eval"]) & ~pl.col("ignore")
    )
    assert (b["conf"] == t_raw).sum() >= 1  # a box sits on the threshold: it is not kept
    T = s["temperature"]["nms"]
    assert sum(_sig(z, T) == t_cal for z in b["logit"].to_list()) >= 1


def test_coco_gt_run_agrees_with_the_yolo_label_run(main_run, coco_run):
    out, _, _ = coco_run
    a = json.loads((main_run / "calibration.json").read_text())
    b = json.loads((out / "calibration.json").read_text())
    assert b["coco_gt"] and b["heads"] == ["nms"]
    assert b["temperature"]["nms"] == a["temperature"]["nms"]  # same boxes, same labels: same fit
    ea, eb = a["eval"]["nms"], b["eval"]["nms"]
    for k, v in ea.items():
        if k == "thresholded":
            assert eb[k][0] == pytest.approx(v[0], rel=1e-9)
        elif k in ("operating_before", "operating_after"):  # the coco run has two more thresholds
            assert eb[k][0].keys() == v[0].keys()
            for kk, vv in v[0].items():
                assert eb[k][0][kk] == pytest.approx(vv, rel=1e-9, abs=1e-12), (k, kk)
        elif (
            k == "kept_gaps_after"
        ):  # at the lowest threshold, which the coco run's extra two are below
            assert len(eb[k]) == len(v) and all(g.keys() == h.keys() for g, h in zip(eb[k], v))
        elif isinstance(v, (float, list)):
            assert eb[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
        else:
            assert eb[k] == v, k
    assert b["threshold_shift"]["nms"][0] == pytest.approx(
        a["threshold_shift"]["nms"][0], rel=1e-12
    )
    fa, fb = a["fit"]["nms"], b["fit"]["nms"]
    assert fa.keys() == fb.keys()
    for k, v in fa.items():  # numbers to 1e-12, the split name and counts exactly
        assert fb[k] == (pytest.approx(v, rel=1e-12) if isinstance(v, float) else v), k
    ta = pl.read_parquet(main_run / "boxes.parquet").filter(pl.col("head") == "nms")
    tb = pl.read_parquet(out / "boxes.parquet")
    assert ta.select("image", "split", "cls", "logit", "correct").equals(
        tb.select("image", "split", "cls", "logit", "correct")
    )
    assert np.allclose(ta["loc_iou"].to_numpy(), tb["loc_iou"].to_numpy(), rtol=0, atol=1e-9)


def test_figures_when_raw_scores_tie(main_run, hot_run):
    """Logits x 50: raw float64 scores saturate to 1.0 and tie, calibrated ones don't, so the
    COCO ranking (and mAP) of the raw and calibrated scores differ; each is recomputed."""
    s = check_run(hot_run, split_images(main_run))
    e = s["eval"]["nms"]
    assert s["temperature"]["nms"] > 10
    b = pl.read_parquet(hot_run / "boxes.parquet").filter(pl.col("split") == s["splits"]["eval"])
    assert sum(_sig(z, 1.0) == 1.0 for z in b["logit"].to_list()) >= 2
    assert e["map50_95_before"] != e["map50_95_after"] and not e["map_identical"]


def test_fit_min_conf_exactly_on_a_score(main_run, fmc_run):
    out, fmc = fmc_run
    s = check_run(out, split_images(main_run))
    assert s["fit_min_conf"] == fmc
    b = pl.read_parquet(out / "boxes.parquet").filter(pl.col("split") == s["splits"]["fit"])
    assert (b["conf"] == fmc).sum() >= 1  # on the boundary: in the fit (conf >= fit_min_conf)
    assert s["fit"]["nms"]["boxes"] == (b["conf"] >= fmc).sum() < b.height


def test_platt_run_figures_from_its_parameters(main_run, platt_run):
    """`--method platt`: every `after` figure recomputed from the recorded a and b."""
    s = check_run(platt_run, split_images(main_run))
    assert s["method"] == "platt" and s["heads"] == ["nms"] and s["temperature"] == {}
    m = s["calibrators"]["nms"]["params"]["map"]
    assert (m["a"], m["b"]) != (1.0, 0.0)
    e = s["eval"]["nms"]
    assert e["ece_after"] != e["ece_before"]
    assert e["operating_after"][0]["laece0"] != e["operating_before"][0]["laece0"]
    # the equivalent threshold of a Platt map: sigmoid(a * logit(0.25) + b), keeping the raw set at 0.25
    sh = s["threshold_shift"]["nms"][0]
    assert sh["equivalent_conf"] == _approx(
        1 / (1 + math.exp(-(m["a"] * math.log(1 / 3) + m["b"])))
    )
    assert sh["equivalent_conf"] != 0.25 and sh["kept_before"] > 0


@pytest.mark.fast
def test_laece0_recomputation_on_the_edge_cases():
    """The plain-Python LaECE_0 against the product's on boxes the fixture runs do not produce:
    scores exactly on bin edges, a class with exactly zero error, a class without ground truth,
    a box whose best GT is taken by a higher-scored one, equal-IoU GTs, more than 100 boxes."""
    from det_calib.metrics.operating_point import LaECE0Targets, laece0

    gt = {
        "a": [(0, 0.0, 0.0, 10.0, 10.0), (0, 20.0, 0.0, 30.0, 10.0), (1, 0.0, 0.0, 10.0, 10.0)],
        "b": [],
    }
    gt["b"] = [(2, 0.0, 0.0, 8.0, 8.0)]
    gt["c"] = [(4, 0.0, 0.0, 10.0, 10.0), (4, 100.0, 0.0, 110.0, 10.0)]
    rows, scores = [], []

    def box(image, c, x1, y1, x2, y2, score):
        rows.append(dict(image=image, cls=c, x1=x1, y1=y1, x2=x2, y2=y2, logit=score))
        scores.append(score)

    box("a", 0, 0.0, 0.0, 10.0, 8.0, 0.8)  # IoU 0.8 with the first GT
    box("a", 0, 0.0, 0.0, 10.0, 9.0, 0.4)  # its best GT is taken: the second one, IoU 0
    box("a", 0, 50.0, 50.0, 60.0, 60.0, 0.2)  # no GT left
    box("a", 1, 0.0, 0.0, 10.0, 10.0, 1.0)  # IoU 1, conf 1: exactly zero error, dropped
    box("a", 3, 0.0, 0.0, 5.0, 5.0, 0.6)  # class without ground truth: left out
    for k in range(120):  # class 2 on image b: > 100 boxes, scores on the bin edges k/25
        box("b", 2, 0.0, 0.0, 8.0, 8.0 - k / 100, (k % 24 + 1) / 25)
    # image c: 0.08 = 2/25 exactly, in (1/25, 2/25] with 0.05; the opposite gaps cancel in that bin
    box(
        "c", 4, 200.0, 200.0, 210.0, 210.0, 0.08
    )  # IoU 0 with both GTs: takes the later one, target 0
    box("c", 4, 0.0, 0.0, 10.0, 3.0, 0.05)  # the first GT, target 0.3
    im = {"a": 0, "b": 1, "c": 2}
    det = (
        [im[r["image"]] for r in rows],
        [[r["x1"], r["y1"], r["x2"], r["y2"]] for r in rows],
        [r["cls"] for r in rows],
    )
    gts = [im[k] for k, v in gt.items() for _ in v], [g[1:] for v in gt.values() for g in v]
    gts += ([g[0] for v in gt.values() for g in v],)
    pipeline_path = LaECE0Targets(*det, [r["logit"] for r in rows], *gts)
    for thr in (0.0, 0.2, 0.4, 1 / 25):
        scored = laece0_targets(rows, scores, gt, thr)
        got = laece0_of(
            [q for _, q, _ in scored],
            [g for _, _, g in scored],
            [rows[i]["cls"] for i, _, _ in scored],
            sorted({g[0] for v in gt.values() for g in v}),
        )
        assert got == pytest.approx(laece0(*det, scores, *gts, threshold=thr), rel=1e-12), thr
        assert got == pytest.approx(
            pipeline_path.laece(np.asarray(scores), threshold=thr), rel=1e-12
        ), thr
    scored = laece0_targets(rows, scores, gt, 0.0)
    assert sum(rows[i]["cls"] == 2 for i, _, _ in scored) == 100
    assert [g for i, _, g in scored if i < 3] == [pytest.approx(0.8), 0.0, 0.0]
    c_only = [(q, g) for i, q, g in scored if rows[i]["cls"] == 4]
    assert c_only == [(0.08, 0.0), (0.05, pytest.approx(0.3))]
    assert laece0_of(*zip(*c_only), [4, 4], [4]) == pytest.approx(abs(0.13 - 0.3) / 2)  # one bin


@pytest.mark.fast
def test_kept_set_and_nll_figures_on_small_arrays():
    """No run needed: the kept-set ECE at a threshold that keeps no box is null (not 0), the
    --bins setting reaches it, and a calibrator without a temperature (Platt) gets the NLL of its
    own calibrated logits."""
    from det_calib.calibrators import calibrator_from_dict
    from det_calib.data.box_view import BoxView
    from det_calib.evaluation import figures as pipeline
    from det_calib.job.settings import Settings

    rng = np.random.default_rng(0)
    n = 240
    z = rng.normal(-1.0, 2.0, n)
    y = rng.random(n) < 1 / (1 + np.exp(-0.6 * z))
    cal = calibrator_from_dict(
        {"format": "det_calib.PlattScaler", "version": 1, "a": 0.5, "b": 0.3}
    )
    t1 = cal.transform_logits(z)
    p0 = 1 / (1 + np.exp(-z))
    x1, y1 = rng.uniform(0, 500, n), rng.uniform(0, 300, n)
    raw = BoxView(
        logit=z,
        conf=p0,
        correct=y,
        cls=np.zeros(n, dtype=np.int64),
        image_id=np.arange(n) // 4,
        loc_iou=np.where(y, 0.8, 0.0),
        xyxy=np.column_stack([x1, y1, x1 + 40, y1 + 30]),
        extra={"img_w": np.full(n, 640), "img_h": np.full(n, 480)},
    )
    scored = raw.scored(cal)
    p1 = scored.conf
    np.testing.assert_allclose(p1, 1 / (1 + np.exp(-t1)), rtol=1e-12, atol=1e-15)
    s = Settings(conf=(0.3, 0.9999), ece_bins=4, n_boot=20)
    assert max(p0.max(), p1.max()) < 0.9999
    t03, t_top = pipeline._thresholded(raw, scored, s)
    kb, ka = p0 > 0.3, p1 > 0.3
    assert (t03.boxes_before, t03.boxes_after) == (kb.sum(), ka.sum())
    assert t03.ece_before == pytest.approx(ece_loop(p0[kb].tolist(), y[kb].tolist(), 4), abs=1e-12)
    assert t03.ece_after == pytest.approx(ece_loop(p1[ka].tolist(), y[ka].tolist(), 4), abs=1e-12)
    assert t03.ece_before != pytest.approx(ece_loop(p0[kb].tolist(), y[kb].tolist(), 15), abs=1e-6)
    assert (t_top.boxes_before, t_top.ece_before, t_top.boxes_after, t_top.ece_after) == (
        0,
        None,
        0,
        None,
    )
    before, after = pipeline._all_box_scores(raw, scored, cal, s)
    assert before.nll == pytest.approx(nll_loop(z.tolist(), y.tolist(), 1.0), rel=1e-9)
    assert after.nll == pytest.approx(nll_loop(t1.tolist(), y.tolist(), 1.0), rel=1e-9)
    assert after.ece == pytest.approx(ece_loop(p1.tolist(), y.tolist(), 4), abs=1e-12)


@pytest.mark.fast
def test_map_check_honours_max_det_on_both_branches():
    """mAP before/after against pycocotools (the plain helper above) with --max-det 1, for a map that
    keeps the global order (a temperature) and one that changes it (per-class slopes)."""
    from det_calib.calibrators.affine import ClassAffineScaler
    from det_calib.calibrators.temperature import TemperatureScaler
    from det_calib.data.ground_truth import Split
    from det_calib.evaluation import figures as pipeline
    from det_calib.job.settings import Settings

    gt_rows = [
        (i, c, *box) for i in (0, 1) for c, box in ((0, (10, 10, 50, 50)), (1, (60, 60, 90, 90)))
    ]
    gt = pl.DataFrame(
        gt_rows, schema=["image_id", "cls", "x1", "y1", "x2", "y2"], orient="row"
    ).with_columns(pl.col("x1", "y1", "x2", "y2").cast(pl.Float64), pl.lit(False).alias("crowd"))
    det_rows = []
    for i in (0, 1):  # per (image, class): a correct box and a higher-scored false positive
        det_rows += [
            (i, 0, 10.0, 10.0, 50.0, 48.0, 0.5 + i),
            (i, 0, 0.0, 0.0, 8.0, 8.0, 1.0 + i),
            (i, 1, 60.0, 60.0, 90.0, 88.0, -0.5 - i),
            (i, 1, 92.0, 92.0, 99.0, 99.0, 2.0),
        ]
    boxes = pl.DataFrame(
        det_rows, schema=["image_id", "cls", "x1", "y1", "x2", "y2", "logit"], orient="row"
    )
    split = Split(name="tiny", images=[], sizes=np.array([[100, 100], [100, 100]]), gt=gt)
    rows = [dict(_img=r[0], cls=r[1], x1=r[2], y1=r[3], x2=r[4], y2=r[5]) for r in det_rows]
    gt_per_image = [[(c, *map(float, box)) for i_, c, *box in gt_rows if i_ == i] for i in (0, 1)]
    class_map = ClassAffineScaler.from_dict(
        {
            "format": "det_calib.ClassAffineScaler",
            "version": 1,
            "kind": "platt",
            "a": [3.0, 0.5],
            "b": [0.0, 0.0],
            "global_a": 1.0,
            "global_b": 0.0,
        }
    )
    for cal, scale in (
        (TemperatureScaler.of_temperature(2.0), lambda r: r[6] / 2.0),
        (class_map, lambda r: r[6] * (3.0 if r[1] == 0 else 0.5)),
    ):
        for max_det in (1, 300):
            m = pipeline.map_check(boxes, split, cal, Settings(max_det=max_det))
            m0 = coco_map_independent(
                rows, [_sig(r[6], 1.0) for r in det_rows], gt_per_image, max_det
            )
            m1 = coco_map_independent(
                rows, [_sig(scale(r), 1.0) for r in det_rows], gt_per_image, max_det
            )
            assert (m["map50_95_before"], m["map50_before"]) == (_approx(m0[0]), _approx(m0[1]))
            assert (m["map50_95_after"], m["map50_after"]) == (_approx(m1[0]), _approx(m1[1]))
        assert (
            m0[1]
            > coco_map_independent(rows, [_sig(r[6], 1.0) for r in det_rows], gt_per_image, 1)[1]
        )


@pytest.mark.fast
def test_per_class_figures_on_small_arrays():
    """Which classes are listed (boxes or GT; not a class with neither), and every per-class
    figure with non-default --bins, LaECE bins and seed (small arrays, no run)."""
    from det_calib.calibrators import calibrator_from_dict
    from det_calib.data.box_view import BoxView
    from det_calib.evaluation import figures as pipeline
    from det_calib.job.settings import Settings

    rng = np.random.default_rng(1)
    n = 160
    z = rng.normal(-0.5, 2.0, n)
    y = rng.random(n) < 1 / (1 + np.exp(-0.7 * z))
    cls = np.where(np.arange(n) % 3 == 0, 1, 0)  # boxes of classes 0 and 1
    gt_cls = np.array([0] * 40 + [2] * 5 + [4] * 3)  # GT of classes 0, 2 and 4; class 3 has neither
    cal = calibrator_from_dict(
        {"format": "det_calib.PlattScaler", "version": 1, "a": 0.6, "b": 0.2}
    )
    t1 = cal.transform_logits(z)
    p0 = 1 / (1 + np.exp(-z))
    loc = np.where(y, rng.uniform(0.5, 1.0, n), 0.0)
    img = np.arange(n) // 4
    raw = BoxView(logit=z, conf=p0, correct=y, cls=cls, image_id=img, loc_iou=loc)
    scored = raw.scored(cal)
    p1 = scored.conf
    np.testing.assert_allclose(p1, 1 / (1 + np.exp(-t1)), rtol=1e-12, atol=1e-15)
    s = Settings(conf=(0.3,), ece_bins=4, laece_bins=5, n_boot=30, seed=7)
    out = pipeline._per_class_figures(raw, scored, gt_cls, cal, s, ["a", "b", "c", "d", "e"])
    assert [(r.cls, r.name, r.boxes, r.n_gt) for r in out] == [
        (0, "a", int((cls == 0).sum()), 40),
        (1, "b", int((cls == 1).sum()), 0),
        (2, "c", 0, 5),
        (4, "e", 0, 3),
    ]
    assert (
        out[2].ece_before is None and out[2].ece_before_ci is None and out[2].kept_ece_after is None
    )
    for r in out[:2]:
        m = cls == r.cls
        assert r.correct == int(y[m].sum())
        for tag, p in (("before", p0), ("after", p1)):
            assert getattr(r, f"ece_{tag}") == pytest.approx(
                ece_loop(p[m].tolist(), y[m].tolist(), 4), abs=1e-12
            )
            lae = laece_loop(p[m].tolist(), loc[m].tolist(), cls[m].tolist(), 5)
            assert getattr(r, f"laece_{tag}") == pytest.approx(lae, abs=1e-12)
            k = m & (p > 0.3)
            assert getattr(r, f"kept_ece_{tag}") == pytest.approx(
                ece_loop(p[k].tolist(), y[k].tolist(), 4), abs=1e-12
            )
            want = boot_bc(lambda pp, yy: _np_ece(pp, yy, 4), img[m], [p[m], y[m]], 30, 7)
            assert list(getattr(r, f"ece_{tag}_ci")) == pytest.approx(want, rel=1e-9)
