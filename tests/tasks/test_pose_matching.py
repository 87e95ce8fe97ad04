"""OKS one-to-one matching: parity with pycocotools COCOeval(iouType="keypoints") and Ultralytics' kpt_iou."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from det_calib.errors import InputError
from det_calib.tasks.pose.matching import COCO_SIGMAS, match_keypoints, oks, oks_sigmas

pytestmark = pytest.mark.fast

KEYS = (
    "det_image",
    "det_cls",
    "det_score",
    "det_kpts",
    "gt_image",
    "gt_cls",
    "gt_kpts",
    "gt_area",
    "gt_xyxy",
    "gt_crowd",
    "gt_num_keypoints",
)


def _gt_object(rng, k: int):
    x1, y1 = rng.uniform(0, 200, 2)
    w, h = rng.uniform(8, 80, 2)
    kp = np.c_[
        rng.uniform(x1, x1 + w, k), rng.uniform(y1, y1 + h, k), rng.choice([0, 1, 2, 2, 2], k)
    ]
    if rng.random() < 0.1:
        kp[:, 2] = 0  # no labelled keypoint: COCO ignores it
    kp[kp[:, 2] == 0, :2] = 0
    return kp, [x1, y1, x1 + w, y1 + h], w * h * rng.uniform(0.4, 0.9)


def _detections_of(rng, kp, box, n: int):
    out = []
    w = box[2] - box[0]
    for _ in range(n):
        noise = rng.normal(0, rng.choice([0.01, 0.05, 0.15]) * w, size=(len(kp), 2))
        base = np.where(kp[:, 2:] > 0, kp[:, :2], rng.uniform(box[0], box[2], size=(len(kp), 2)))
        out.append(base + noise)
    return out


def make_case(seed: int, k: int) -> dict:
    """Random images with GT poses (some crowd, some with no labelled keypoint), detections that are
    noisy copies of GTs (sometimes of the wrong class, several per GT), random false ones, tied scores."""
    rng = np.random.default_rng(seed)
    c: dict[str, list] = {key: [] for key in KEYS}
    for img in range(int(rng.integers(1, 5))):
        for _ in range(int(rng.integers(0, 6))):
            kp, box, area = _gt_object(rng, k)
            cls = int(rng.integers(0, 3))
            crowd = bool(rng.random() < 0.1)
            for key, v in zip(
                KEYS[4:], (img, cls, kp, area, box, crowd, int((kp[:, 2] > 0).sum()))
            ):
                c[key].append(v)
            for d in _detections_of(rng, kp, box, int(rng.choice([0, 1, 1, 2, 3]))):
                (
                    c["det_image"].append(img),
                    c["det_cls"].append(cls if rng.random() < 0.8 else int(rng.integers(3))),
                )
                c["det_kpts"].append(d)
        for _ in range(int(rng.integers(0, 3))):
            kp, box, _ = _gt_object(rng, k)
            (
                c["det_image"].append(img),
                c["det_cls"].append(int(rng.integers(3))),
                c["det_kpts"].append(kp[:, :2]),
            )
    n = len(c["det_image"])
    c["det_score"] = list(
        rng.choice([0.2, 0.5, 0.5, 0.9], size=n) if seed % 2 else rng.uniform(0, 1, size=n)
    )
    out = {key: np.asarray(v) for key, v in c.items()}
    out["det_kpts"] = np.asarray(c["det_kpts"], dtype=np.float64).reshape(n, k, 2)
    out["gt_kpts"] = np.asarray(c["gt_kpts"], dtype=np.float64).reshape(-1, k, 3)
    out["gt_xyxy"] = np.asarray(c["gt_xyxy"], dtype=np.float64).reshape(-1, 4)
    out["gt_crowd"] = out["gt_crowd"].astype(bool)
    return out


def _coco(case: dict, sigmas: np.ndarray, t: float, max_dets: int) -> COCOeval:
    images = sorted(set(case["det_image"].tolist()) | set(case["gt_image"].tolist())) or [0]
    gt = COCO()
    gt.dataset = {
        "images": [{"id": int(i)} for i in images],
        "categories": [{"id": int(c)} for c in range(3)],
        "annotations": [
            {
                "id": j + 1,
                "image_id": int(img),
                "category_id": int(c),
                "keypoints": kp.reshape(-1).tolist(),
                "num_keypoints": int(nk),
                "area": float(a),
                "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]],
                "iscrowd": int(cr),
            }
            for j, (img, c, kp, a, b, cr, nk) in enumerate(zip(*(case[key] for key in KEYS[4:])))
        ],
    }
    dets = [
        {
            "image_id": int(img),
            "category_id": int(c),
            "score": float(s),
            "keypoints": np.c_[kp, np.ones(len(kp))].reshape(-1).tolist(),
        }
        for img, c, s, kp in zip(*(case[key] for key in KEYS[:4]))
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(dets), "keypoints")
        ev.params.kpt_oks_sigmas = sigmas
        ev.params.iouThrs = np.array([t])
        ev.params.maxDets = [max_dets]
        ev.params.areaRng = [[0, 1e10]]
        ev.params.areaRngLbl = ["all"]
        ev.evaluate()
    return ev


def coco_reference(case: dict, t: float, max_dets: int, sigmas: np.ndarray):
    """pycocotools' per-detection (matched, dtIgnore, matched GT index or -1)."""
    n = len(case["det_image"])
    matched, ignored, gt_index = np.zeros(n, bool), np.zeros(n, bool), np.full(n, -1, np.int64)
    if n == 0:
        return matched, ignored, gt_index
    for e in _coco(case, sigmas, t, max_dets).evalImgs:
        if e is None:
            continue
        ids = np.asarray(e["dtIds"], dtype=np.int64) - 1
        dtm = e["dtMatches"][0]
        matched[ids], ignored[ids] = dtm > 0, e["dtIgnore"][0].astype(bool)
        gt_index[ids] = np.where(dtm > 0, dtm.astype(np.int64) - 1, -1)
    return matched, ignored, gt_index


def _assert_parity(case: dict, t: float, max_dets: int):
    sigmas = oks_sigmas(case["gt_kpts"].shape[1])
    ref_m, ref_i, ref_g = coco_reference(case, t, max_dets, sigmas)
    r = match_keypoints(*(case[k] for k in KEYS), oks_threshold=t, max_dets=max_dets)
    np.testing.assert_array_equal(r.correct | r.ignore, ref_m)
    np.testing.assert_array_equal(r.ignore, ref_i)
    np.testing.assert_array_equal(r.gt_index, ref_g)
    assert not (r.correct & r.ignore).any()
    return r


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize(("t", "max_dets"), [(0.5, 20), (0.75, 20), (0.9, 20), (0.5, 2)])
def test_parity_with_pycocotools_keypoints(seed, t, max_dets):
    _assert_parity(make_case(seed, 17 if seed % 3 == 0 else 5), t, max_dets)


def test_cases_are_not_vacuous():
    n_ok = n_bad = n_ign = n_ign_plain = n_tie = 0
    for seed in range(20):
        case = make_case(seed, 17 if seed % 3 == 0 else 5)
        r = match_keypoints(*(case[k] for k in KEYS), oks_threshold=0.5, max_dets=20)
        n_ok, n_bad = n_ok + r.correct.sum(), n_bad + (~r.correct & ~r.ignore).sum()
        n_ign += r.ignore.sum()
        n_ign_plain += sum(not case["gt_crowd"][g] for g in r.gt_index[r.ignore])
        n_tie += len(case["det_score"]) - len(np.unique(case["det_score"]))
    assert n_ok >= 30 and n_bad >= 30 and n_ign >= 3 and n_ign_plain >= 1 and n_tie >= 20


def test_oks_values_equal_pycocotools_compute_oks():
    for seed in range(6):
        case = make_case(seed, 17 if seed % 2 else 5)
        sigmas = oks_sigmas(case["gt_kpts"].shape[1])
        ev = _coco(case, sigmas, 0.5, 10_000)
        for (img, cat), ref in ev.ious.items():
            if len(ref) == 0:
                continue
            d = np.flatnonzero((case["det_image"] == img) & (case["det_cls"] == cat))
            d = d[np.argsort(-case["det_score"][d], kind="stable")]
            g = np.flatnonzero((case["gt_image"] == img) & (case["gt_cls"] == cat))
            ours = oks(
                case["det_kpts"][d], case["gt_kpts"][g], case["gt_area"][g], case["gt_xyxy"][g]
            )
            np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-15)


def test_oks_equals_ultralytics_kpt_iou_for_labelled_ground_truth():
    """Ultralytics' pose validator (kpt_iou, sigmas 1/K for K != 17, COCO's for 17) gives the same
    OKS for a ground truth with labelled keypoints (up to its 1e-7 guards)."""
    import torch
    from ultralytics.utils.metrics import OKS_SIGMA, kpt_iou

    np.testing.assert_allclose(COCO_SIGMAS, OKS_SIGMA)
    for k in (5, 17):
        case = make_case(3, k)
        keep = case["gt_kpts"][:, :, 2].sum(1) > 0
        g, area, box = case["gt_kpts"][keep], case["gt_area"][keep], case["gt_xyxy"][keep]
        ours = oks(case["det_kpts"], g, area, box)
        sigma = OKS_SIGMA if k == 17 else np.ones(k) / k
        ref = kpt_iou(
            torch.from_numpy(g), torch.from_numpy(case["det_kpts"]), torch.from_numpy(area), sigma
        )
        np.testing.assert_allclose(ours, ref.numpy().T, atol=1e-6)


def test_an_ignored_ground_truth_absorbs_one_detection_a_crowd_any():
    """Two detections on a GT with no labelled keypoint: the first is ignored, the second is a false
    positive (COCO: an ignored non-crowd GT is matched once); on a crowd GT both are ignored."""
    kp = np.zeros((1, 2, 3))
    det = np.array([[[12.0, 12.0], [14.0, 14.0]], [[13.0, 12.0], [14.0, 15.0]]])
    args = ([0, 0], [0, 0], [0.9, 0.8], det, [0], [0], kp, [400.0], [[10, 10, 30, 30]])
    r = match_keypoints(*args)
    assert r.ignore.tolist() == [True, False] and r.correct.tolist() == [False, False]
    r = match_keypoints(*args, gt_crowd=[True])
    assert r.ignore.tolist() == [True, True] and r.gt_index.tolist() == [0, 0]
    case = {k: np.asarray(v) for k, v in zip(KEYS, (*args, [False], [0]))}
    case["gt_kpts"], case["det_kpts"] = kp, det
    _assert_parity(case, 0.5, 20)


def test_invisible_keypoints_count_as_labelled():
    """v = 1 (labelled, not visible) counts in OKS as v = 2 does; v = 0 does not count."""
    g = np.array([[[10.0, 10.0, 2], [30.0, 10.0, 1]], [[10.0, 10.0, 2], [30.0, 10.0, 0]]])
    d = np.array([[[10.0, 10.0], [60.0, 60.0]]])
    val = oks(d, g, [400.0, 400.0], [[5, 5, 35, 15]] * 2)[0]
    # sigma 1/2 for K = 2: e = (30^2 + 50^2) / (2 sigma)^2 / 400 / 2 on the second keypoint
    assert val[0] == pytest.approx((1 + np.exp(-3400 / 400 / 2)) / 2, abs=1e-12) and val[1] == 1.0


def test_sigmas_rule_and_bad_input():
    assert np.array_equal(oks_sigmas(17), COCO_SIGMAS) and oks_sigmas(5).tolist() == [0.2] * 5
    assert oks_sigmas(2, [0.1, 0.3]).tolist() == [0.1, 0.3]
    with pytest.raises(InputError, match="`sigmas` to be 2 positive numbers"):
        oks_sigmas(2, [0.1, -1])
    with pytest.raises(InputError, match=r"`gt_kpts` to be of shape \(1, 2, 3\)"):
        match_keypoints(
            [0],
            [0],
            [0.5],
            np.zeros((1, 2, 2)),
            [0],
            [0],
            np.zeros((1, 3, 3)),
            [1.0],
            [[0, 0, 1, 1]],
        )
    with pytest.raises(InputError, match="`iou_threshold` to be a number in"):
        match_keypoints(
            [0],
            [0],
            [0.5],
            np.zeros((1, 2, 2)),
            [0],
            [0],
            np.zeros((1, 2, 3)),
            [1.0],
            [[0, 0, 1, 1]],
            oks_threshold=2,
        )
    r = match_keypoints(
        [], [], [], np.zeros((0, 2, 2)), [0], [0], np.ones((1, 2, 3)), [1.0], [[0, 0, 1, 1]]
    )
    assert len(r) == 0


def test_parity_on_the_demo_keypoints(tmp_path):
    """Synthetic detections (noisy copies of the demo's ground truth and of other objects' keypoints)
    on 12 demo images: the labels equal pycocotools'."""
    from det_calib.data.ground_truth import load_data_yaml
    from det_calib.demo.shapes import CLASS_NAMES
    from det_calib.tasks import load_task_split
    from det_calib.tasks.pose.demo_labels import write_pose_split
    from det_calib.tasks.pose.labels import AREA_COLUMN, NUM_KEYPOINTS_COLUMN, split_keypoints

    write_pose_split(tmp_path, "test", 12)
    names = "\n".join(f"  {i}: {n}" for i, n in enumerate(CLASS_NAMES))
    (tmp_path / "data.yaml").write_text(
        f"path: {tmp_path}\ntest: images/test\nnames:\n{names}\nkpt_shape: [5, 3]\n"
    )
    sp = load_task_split(load_data_yaml(tmp_path / "data.yaml"), "test", task="pose")
    gkp = split_keypoints(sp)
    rng = np.random.default_rng(0)
    reps = rng.integers(0, 3, size=sp.gt.height)
    src = np.repeat(np.arange(sp.gt.height), reps)
    size = np.sqrt(sp.gt[AREA_COLUMN].to_numpy())[src]
    dk = (
        gkp[src, :, :2]
        + rng.normal(0, 1, size=(len(src), 5, 2))
        * (rng.choice([0.02, 0.1, 0.3], len(src)) * size)[:, None, None]
    )
    case = {
        "det_image": sp.gt["image_id"].to_numpy()[src],
        "det_cls": sp.gt["cls"].to_numpy()[src],
        "det_score": rng.uniform(size=len(src)),
        "det_kpts": dk,
        "gt_image": sp.gt["image_id"].to_numpy(),
        "gt_cls": sp.gt["cls"].to_numpy(),
        "gt_kpts": gkp,
        "gt_area": sp.gt[AREA_COLUMN].to_numpy(),
        "gt_xyxy": sp.gt.select("x1", "y1", "x2", "y2").to_numpy(),
        "gt_crowd": sp.gt["crowd"].to_numpy(),
        "gt_num_keypoints": sp.gt[NUM_KEYPOINTS_COLUMN].to_numpy(),
    }
    case["gt_cls"] = case["gt_cls"] % 3  # the reference harness knows classes 0..2
    case["det_cls"] = case["det_cls"] % 3
    for t in (0.5, 0.75, 0.95):
        r = _assert_parity(case, t, 20)
    assert 10 < r.correct.sum() < len(src)
