"""Capture: boxes and confs equal model.predict's on one image at a time, logits are the head's raw
scores, and one forward pass serves both heads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from det_calib.capture import available_heads, capture, load_detector
from det_calib.errors import InputError


def _predict_rows(yolo, images, *, head, imgsz, conf=0.001):
    """Plain Ultralytics predict, one image at a time (what a deployment runs)."""
    kw = {"nms": False} if head == "e2e" else {}
    res = [yolo.predict(str(p), conf=conf, imgsz=imgsz, verbose=False, **kw)[0] for p in images]
    return np.concatenate([r.boxes.data.cpu().numpy() for r in res]), [len(r.boxes) for r in res]


def _assert_exact(df, ref, counts):
    assert df.height == len(ref) == sum(counts)
    xyxy = df.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32)
    np.testing.assert_array_equal(xyxy, ref[:, :4])
    np.testing.assert_array_equal(df["conf"].to_numpy().astype(np.float32), ref[:, 4])
    np.testing.assert_array_equal(df["cls"].to_numpy(), ref[:, 5].astype(int))
    np.testing.assert_array_equal(np.bincount(df["image_id"].to_numpy(), minlength=len(counts)), counts)
    z = df["logit"].to_numpy()
    # float32 sigmoid of the captured logit reproduces Ultralytics' conf
    sig32 = torch.sigmoid(torch.tensor(z, dtype=torch.float32)).numpy()
    assert np.abs(sig32 - df["conf"].to_numpy()).max() <= 1e-6
    assert np.abs(1 / (1 + np.exp(-z)) - df["conf"].to_numpy()).max() <= 1e-6


@pytest.mark.parametrize("head", ["nms", "e2e"])
def test_demo_capture_equals_predict(demo_model_path, fixture_images, head):
    from ultralytics import YOLO

    yolo = YOLO(str(demo_model_path))
    df = capture(yolo, fixture_images, head=head, imgsz=320, progress=False)
    ref, counts = _predict_rows(YOLO(str(demo_model_path)), fixture_images, head=head, imgsz=320)
    _assert_exact(df, ref, counts)
    assert set(df["head"].unique()) == {head}
    # the demo detector is confident on some boxes and not on others
    assert df["conf"].max() > 0.5 and df["conf"].min() < 0.01


@pytest.mark.parametrize("cfg", ["yolov8n.yaml", "yolo11n.yaml", "yolo26n.yaml"])
def test_untrained_heads_capture_equals_predict(make_untrained, fixture_images, cfg):
    yolo = make_untrained(cfg)
    heads = available_heads(yolo)
    assert heads == (["nms", "e2e"] if cfg.startswith("yolo26") else ["nms"])
    for head in heads:
        df = capture(yolo, fixture_images[:4], head=head, imgsz=256, progress=False)
        ref, counts = _predict_rows(yolo, fixture_images[:4], head=head, imgsz=256)
        assert df.height > 100
        _assert_exact(df, ref, counts)


def test_all_logits_column_holds_the_class_logit(make_untrained, fixture_images):
    yolo = make_untrained("yolo26n.yaml")
    df = capture(yolo, fixture_images[:2], head="nms", imgsz=256, all_logits=True, progress=False)
    lg = np.array(df["logits"].to_list())
    assert lg.shape == (df.height, 80)
    np.testing.assert_allclose(lg[np.arange(df.height), df["cls"].to_numpy()], df["logit"].to_numpy(), rtol=0, atol=0)
    # the predicted class is the arg-max logit (single-label NMS)
    np.testing.assert_array_equal(lg.argmax(1), df["cls"].to_numpy())


def test_saturated_scores_keep_their_logits(demo_model_path, fixture_images):
    """Above z ~ 16.6 float32 sigmoid is exactly 1.0; the captured logit must still be the raw one."""
    from ultralytics import YOLO

    yolo = YOLO(str(demo_model_path))
    with torch.no_grad():
        for level in yolo.model.model[-1].cv3:
            level[-1].bias += 25.0  # every logit shifted by +25: most scores saturate
    df = capture(yolo, fixture_images[:2], head="nms", imgsz=320, progress=False)
    conf, z = df["conf"].to_numpy(), df["logit"].to_numpy()
    sat = conf == 1.0
    assert sat.sum() > 10
    assert z[sat].min() >= 16.6 and np.unique(z[sat]).size > 10  # distinct logits, not a rebuilt constant
    # a rebuilt logit log(p / (1 - p)) would be infinite here
    assert np.isfinite(z).all()


def test_capture_rejects_missing_head_and_bad_models(tmp_path, make_untrained, fixture_images):
    with pytest.raises(InputError, match="no one-to-one"):
        capture(make_untrained("yolov8n.yaml"), fixture_images[:1], head="e2e", progress=False)
    with pytest.raises(InputError, match="model file not found"):
        load_detector(tmp_path / "nope.pt")
    bad = tmp_path / "corrupt.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="cannot load model"):
        load_detector(bad)
    with pytest.raises(InputError, match="not `detect`"):
        load_detector("yolo26n-cls.yaml")
    with pytest.raises(InputError, match="head"):
        capture(make_untrained("yolo26n.yaml"), fixture_images[:1], head="both", progress=False)


def test_fixture_images_have_mixed_sizes(fixture_images):
    """The exactness tests above need images that letterbox to different shapes."""
    import cv2

    assert len({cv2.imread(str(p)).shape for p in fixture_images}) >= 2


@pytest.mark.parametrize("source", ["demo", "yolo26n.yaml"])
def test_both_heads_in_one_pass_equal_predict(demo_model_path, make_untrained, fixture_images, source):
    """heads=("nms", "e2e") runs the network once per image and decodes both branches; each head's
    rows are bit-identical to predict(nms=None) / predict(nms=False) on one image at a time, and to
    the single-head capture."""
    from ultralytics import YOLO

    imgsz = 320 if source == "demo" else 256
    images = fixture_images if source == "demo" else fixture_images[:4]
    yolo = YOLO(str(demo_model_path)) if source == "demo" else make_untrained(source)
    both = capture(yolo, images, heads=("nms", "e2e"), imgsz=imgsz, progress=False)
    assert both["head"].unique(maintain_order=True).to_list() == ["nms", "e2e"]
    for head in ("nms", "e2e"):
        part = both.filter(both["head"] == head)
        ref, counts = _predict_rows(yolo, images, head=head, imgsz=imgsz)
        _assert_exact(part, ref, counts)
        single = capture(yolo, images, head=head, imgsz=imgsz, progress=False)
        assert part.equals(single)
    assert capture(yolo, images[:2], heads="auto", imgsz=imgsz, progress=False)["head"].unique().sort().to_list() == [
        "e2e", "nms"]


def test_one_pass_runs_the_network_once_per_image(demo_model_path, fixture_images):
    """Counted on the first layer of the network: one call per image for both heads together."""
    from det_calib.capture import Capturer

    cap = Capturer(str(demo_model_path), heads=("nms", "e2e"), imgsz=320)
    calls = []
    cap.net.model[0].register_forward_hook(lambda m, i, o: calls.append(o.shape[0]))
    df = cap(fixture_images[:5], progress=False)
    assert sum(calls) == 5 and len(calls) == 5
    assert set(df["head"].unique()) == {"nms", "e2e"}


def test_batched_capture_groups_same_shapes_and_stays_close(demo_model_path, fixture_images):
    """batch > 1 puts only same-shape letterboxes in one pass: same boxes up to float rounding of
    batched convolution (documented), never the padding of a mixed-size batch."""
    from det_calib.capture import Capturer

    cap = Capturer(str(demo_model_path), heads=("nms",), imgsz=320, batch=8)
    shapes = []
    cap.net.model[0].register_forward_hook(lambda m, i, o: shapes.append(tuple(i[0].shape)))
    batched = cap(fixture_images, progress=False)
    one = capture(str(demo_model_path), fixture_images, head="nms", imgsz=320, progress=False)
    assert max(s[0] for s in shapes) > 1  # some pass held several images
    assert sorted({s[2:] for s in shapes}) == [(256, 320), (320, 256)]  # per-image letterbox shapes, no square pad
    # same images, same rows up to float rounding (a box near the conf floor may cross it)
    strong = [d.filter(d["conf"] > 0.01).sort("image_id", "conf") for d in (batched, one)]
    assert strong[0].height == strong[1].height > 50
    np.testing.assert_allclose(strong[0]["logit"].to_numpy(), strong[1]["logit"].to_numpy(), atol=1e-3)
    np.testing.assert_array_equal(strong[0]["cls"].to_numpy(), strong[1]["cls"].to_numpy())


def test_image_ids_and_names_of_a_shard(demo_model_path, fixture_images):
    """A shard passes the images' positions in the whole split: its rows equal the whole capture's."""
    whole = capture(str(demo_model_path), fixture_images, heads="auto", imgsz=320, progress=False)
    ids = [1, 4, 7]
    names = [f"img{i}" for i in range(len(fixture_images))]
    shard = capture(str(demo_model_path), [fixture_images[i] for i in ids], heads="auto", imgsz=320,
                    image_ids=ids, image_names=[names[i] for i in ids], progress=False)
    ref = whole.filter(whole["image_id"].is_in(ids))
    assert shard.drop("image").equals(ref.drop("image"))
    assert shard["image"].unique().sort().to_list() == ["img1", "img4", "img7"]
    with pytest.raises(InputError, match="one entry per image"):
        capture(str(demo_model_path), fixture_images[:2], image_ids=[0], progress=False)
    with pytest.raises(InputError, match="`head` or `heads`"):
        capture(str(demo_model_path), fixture_images[:1], head="nms", heads=("e2e",), progress=False)
    with pytest.raises(InputError, match="batch"):
        capture(str(demo_model_path), fixture_images[:1], batch=0, progress=False)
