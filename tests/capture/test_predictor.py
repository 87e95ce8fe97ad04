"""Capture: boxes and confs equal model.predict's on one image at a time, logits are the head's raw
scores, and one forward pass serves both heads."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from det_calib.capture.predictor import available_heads, capture, load_detector
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
    np.testing.assert_array_equal(
        np.bincount(df["image_id"].to_numpy(), minlength=len(counts)), counts
    )
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


@pytest.mark.fast
def test_all_logits_column_holds_the_class_logit(make_untrained, fixture_images):
    yolo = make_untrained("yolo26n.yaml")
    df = capture(yolo, fixture_images[:2], head="nms", imgsz=256, all_logits=True, progress=False)
    lg = np.array(df["logits"].to_list())
    assert lg.shape == (df.height, 80)
    np.testing.assert_allclose(
        lg[np.arange(df.height), df["cls"].to_numpy()], df["logit"].to_numpy(), rtol=0, atol=0
    )
    # the predicted class is the arg-max logit (single-label NMS)
    np.testing.assert_array_equal(lg.argmax(1), df["cls"].to_numpy())


def test_all_logits_into_a_store_give_each_box_its_row(make_untrained, fixture_images):
    # calibrate's capture (a LogitStore on the capturer): the table carries each box's row in the store in place
    # of the `logits` column, every other column unchanged, and the store holds the column's logits in float16
    from det_calib.capture.predictor import Capturer
    from det_calib.data.box_table import LOGITS_ROW
    from det_calib.thresholds.class_sets import LogitStore

    yolo = make_untrained("yolo26n.yaml")
    want = capture(
        yolo, fixture_images[:3], heads=["nms", "e2e"], imgsz=256, all_logits=True, progress=False
    )
    cap = Capturer(yolo, heads=["nms", "e2e"], imgsz=256)
    store = LogitStore(cap.nc)
    store.attach(cap)
    got = cap(fixture_images[:3], progress=False)
    assert LOGITS_ROW in got.columns and "logits" not in got.columns
    assert got.drop(LOGITS_ROW).equals(want.drop("logits"))
    rows = got[LOGITS_ROW].to_numpy()
    assert store.n == got.height and sorted(rows.tolist()) == list(range(got.height))
    np.testing.assert_array_equal(
        store.gather(rows), np.array(want["logits"].to_list(), dtype=np.float16)
    )
    store.close()


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
    assert (
        z[sat].min() >= 16.6 and np.unique(z[sat]).size > 10
    )  # distinct logits, not a rebuilt constant
    # a rebuilt logit log(p / (1 - p)) would be infinite here
    assert np.isfinite(z).all()


@pytest.mark.fast
def test_capture_rejects_missing_head_and_bad_models(tmp_path, make_untrained, fixture_images):
    with pytest.raises(InputError, match="no one-to-one"):
        capture(make_untrained("yolov8n.yaml"), fixture_images[:1], head="e2e", progress=False)
    with pytest.raises(InputError, match="model file not found"):
        load_detector(tmp_path / "nope.pt")
    bad = tmp_path / "corrupt.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="cannot load model .*: not a PyTorch checkpoint"):
        load_detector(bad)
    bad.write_bytes(b"PK\x03\x04 a truncated zip")  # looks like torch.save's zip, is not one
    with pytest.raises(InputError, match="cannot load model"):
        load_detector(bad)
    with pytest.raises(
        InputError, match="a classify model is calibrated on a folder of class folders"
    ):
        load_detector("yolo26n-cls.yaml")
    with pytest.raises(InputError, match="head"):
        capture(make_untrained("yolo26n.yaml"), fixture_images[:1], head="both", progress=False)


@pytest.mark.fast
def test_progress_bar_shows_no_eta_until_the_speed_is_known(monkeypatch):
    """Model set-up and the first batch take long: the ETA waits for one more full batch and then
    reflects the steady speed (4 images per 2 s here), not the first result's 30 s."""
    import io

    from det_calib.capture import image_source as cap

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(
        sys, "stderr", terminal
    )  # the bar is drawn on stderr, when it is a terminal
    clock = iter([30.0, 30.1, 30.1, 30.1, 32.0])  # results arrive in batches of 4
    monkeypatch.setattr(cap.time, "monotonic", lambda: next(clock))  # the bar's speed clock
    bar = cap.progress_bar(12, "capture", enabled=True, batch=4)
    for _ in range(4):
        bar.update(1)
    assert bar.total is None  # no total, so Ultralytics' bar shows no percentage and no ETA
    assert bar._format_rate(0.01) == ""  # and no speed
    bar.update(1)  # the first result of the second batch: 4 images in 2 s since the first result
    assert bar.total == 12 and bar.last_rate == pytest.approx(2.0)
    assert bar._format_rate(2.0) != ""
    monkeypatch.undo()
    bar.close()
    assert bar.total == 12 and "capture" in terminal.getvalue()
    assert isinstance(cap.progress_bar(3, "x", enabled=False, batch=4), cap._NoBar)


@pytest.mark.fast
def test_progress_bar_only_on_a_terminal(monkeypatch, capsys):
    """stderr redirected to a file or a pipe (a log, CI): no bar and no carriage-return frames, on
    either stream; the stage's log line says what runs."""
    from det_calib.capture import image_source as cap

    assert not sys.stderr.isatty()  # pytest captures it
    bar = cap.progress_bar(3, "capture", enabled=True, batch=1)
    assert isinstance(bar, cap._NoBar)
    for _ in range(3):
        bar.update(1)
    bar.close()
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


@pytest.mark.fast
def test_fixture_images_have_mixed_sizes(fixture_images):
    """The exactness tests above need images that letterbox to different shapes."""
    import cv2

    assert len({cv2.imread(str(p)).shape for p in fixture_images}) >= 2


@pytest.mark.parametrize("source", ["demo", "yolo26n.yaml"])
def test_both_heads_in_one_pass_equal_predict(
    demo_model_path, make_untrained, fixture_images, source
):
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
    assert capture(yolo, images[:2], heads="auto", imgsz=imgsz, progress=False)[
        "head"
    ].unique().sort().to_list() == ["e2e", "nms"]


def test_one_pass_runs_the_network_once_per_image(demo_model_path, fixture_images):
    """Counted on the first layer of the network: one call per image for both heads together."""
    from det_calib.capture.predictor import Capturer

    cap = Capturer(str(demo_model_path), heads=("nms", "e2e"), imgsz=320, workers=2)
    calls = []
    for backend in cap.backends:  # every worker's network
        backend.model.model[0].register_forward_hook(lambda m, i, o: calls.append(o.shape[0]))
    df = cap(fixture_images[:5], progress=False)
    assert sum(calls) == 5 and len(calls) == 5
    assert set(df["head"].unique()) == {"nms", "e2e"}


def test_the_e2e_rows_anchors_are_the_ones_its_own_top_k_chose(
    monkeypatch, demo_model_path, fixture_images
):
    """The NMS-free head's top-k runs once per image (in the head's own postprocess; the capture keeps its
    anchors instead of running it again), each e2e row's logit read at the anchor it chose (its sigmoid is
    the row's conf), and the head is left without the capture's wrapper; the table is the one a capture
    that runs the top-k again gives."""
    from ultralytics.nn.modules.head import Detect

    from det_calib.capture.predictor import Capturer

    calls = []
    own = Detect.get_topk_index

    def counted(self, scores, max_det):
        calls.append(scores.shape[0])
        return own(self, scores, max_det)

    monkeypatch.setattr(Detect, "get_topk_index", counted)
    cap = Capturer(str(demo_model_path), heads=("nms", "e2e"), imgsz=320, workers=2)
    df = cap(fixture_images[:5], progress=False)
    assert sum(calls) == 5 and len(calls) == 5
    assert all("get_topk_index" not in vars(b.model.model[-1]) for b in cap.backends)
    e2e = df.filter(df["head"] == "e2e")
    assert e2e.height > 0
    sig = torch.sigmoid(torch.tensor(e2e["logit"].to_numpy(), dtype=torch.float32)).numpy()
    assert np.abs(sig - e2e["conf"].to_numpy()).max() <= 1e-6

    class Again:  # the anchors of a second top-k on the same scores, as the capture ran it before
        anchors = None

        def __init__(self, head):
            pass

        def close(self):
            pass

    monkeypatch.setattr("det_calib.capture.predictor._TopK", Again)
    again = Capturer(str(demo_model_path), heads=("nms", "e2e"), imgsz=320, workers=1)
    assert again(fixture_images[:5], progress=False).equals(df)


def test_parallel_workers_give_the_one_worker_table(tmp_path, demo_model_path, fixture_images):
    """Workers capture images at once (threads, a network each): the same table, bit for bit, as one
    worker, an unreadable image skipped the same way, and every image run exactly once."""
    from det_calib.capture.predictor import Capturer

    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"not an image")
    images = [*fixture_images[:4], bad, *fixture_images[4:]]
    one = Capturer(str(demo_model_path), heads="auto", imgsz=320, workers=1)
    many = Capturer(str(demo_model_path), heads="auto", imgsz=320, workers=3)
    assert len(many.backends) == 3 and len({id(b) for b in many.backends}) == 3
    calls = []
    for backend in many.backends:
        backend.model.model[0].register_forward_hook(lambda m, i, o: calls.append(o.shape[0]))
    with pytest.warns(UserWarning, match="skipped 1 of"):
        a = one(images, progress=False)
    with pytest.warns(UserWarning, match="skipped 1 of"):
        b = many(images, progress=False)
    assert len(calls) == len(fixture_images)  # each readable image once, over all workers
    assert a.height > 100 and b.equals(a)
    assert 4 not in set(b["image_id"].to_list())  # the broken image has no rows


@pytest.mark.fast
def test_auto_workers_use_idle_cores_only_where_the_numbers_stay_the_same():
    """One worker per core only on a CPU, at batch 1, with torch on one thread per operator (as
    Ultralytics sets it on a two-core machine); workers are a positive integer, 1 when batched."""
    import os

    from det_calib.capture.predictor import auto_workers

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        cores = len(os.sched_getaffinity(0))
        assert auto_workers(torch.device("cpu"), 1) == max(1, min(cores, 8))
        assert auto_workers(torch.device("cpu"), 4) == 1
        assert auto_workers(torch.device("cuda", 0), 1) == 1
        torch.set_num_threads(
            2
        )  # predict would run each operator on two threads: the rounding follows
        assert auto_workers(torch.device("cpu"), 1) == 1
    finally:
        torch.set_num_threads(before)


def test_workers_argument_is_checked(demo_model_path, fixture_images):
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InputError, match="`workers`"):
            capture(str(demo_model_path), fixture_images[:1], workers=bad, progress=False)
    with pytest.raises(InputError, match="`workers` to be 1 with `batch` 2"):
        capture(str(demo_model_path), fixture_images[:1], workers=2, batch=2, progress=False)


def test_batched_capture_groups_same_shapes_and_stays_close(demo_model_path, fixture_images):
    """batch > 1 puts only same-shape letterboxes in one pass: same boxes up to float rounding of
    batched convolution (documented), never the padding of a mixed-size batch."""
    from det_calib.capture.predictor import Capturer

    cap = Capturer(str(demo_model_path), heads=("nms",), imgsz=320, batch=8)
    shapes = []
    cap.net.model[0].register_forward_hook(lambda m, i, o: shapes.append(tuple(i[0].shape)))
    batched = cap(fixture_images, progress=False)
    one = capture(str(demo_model_path), fixture_images, head="nms", imgsz=320, progress=False)
    assert max(s[0] for s in shapes) > 1  # some pass held several images
    assert sorted({s[2:] for s in shapes}) == [
        (256, 320),
        (320, 256),
    ]  # per-image letterbox shapes, no square pad
    # same images, same rows up to float rounding (a box near the conf floor may cross it)
    strong = [d.filter(d["conf"] > 0.01).sort("image_id", "conf") for d in (batched, one)]
    assert strong[0].height == strong[1].height > 50
    np.testing.assert_allclose(
        strong[0]["logit"].to_numpy(), strong[1]["logit"].to_numpy(), atol=1e-3
    )
    np.testing.assert_array_equal(strong[0]["cls"].to_numpy(), strong[1]["cls"].to_numpy())


def test_image_ids_and_names_of_a_shard(demo_model_path, fixture_images):
    """A shard passes the images' positions in the whole split: its rows equal the whole capture's."""
    whole = capture(str(demo_model_path), fixture_images, heads="auto", imgsz=320, progress=False)
    ids = [1, 4, 7]
    names = [f"img{i}" for i in range(len(fixture_images))]
    shard = capture(
        str(demo_model_path),
        [fixture_images[i] for i in ids],
        heads="auto",
        imgsz=320,
        image_ids=ids,
        image_names=[names[i] for i in ids],
        progress=False,
    )
    ref = whole.filter(whole["image_id"].is_in(ids))
    assert shard.drop("image").equals(ref.drop("image"))
    assert shard["image"].unique().sort().to_list() == ["img1", "img4", "img7"]
    with pytest.raises(InputError, match="one entry per image"):
        capture(str(demo_model_path), fixture_images[:2], image_ids=[0], progress=False)
    with pytest.raises(InputError, match="`head` or `heads`"):
        capture(
            str(demo_model_path), fixture_images[:1], head="nms", heads=("e2e",), progress=False
        )
    with pytest.raises(InputError, match="batch"):
        capture(str(demo_model_path), fixture_images[:1], batch=0, progress=False)


# --- Parquet parts: plain, sharded and Ray captures give the same table ----------------------------


@pytest.fixture(scope="module")
def plain_parts(tmp_path_factory, demo_model_path, fixture_yaml):
    from det_calib.capture.parts import capture_to_parts

    out = tmp_path_factory.mktemp("plain")
    capture_to_parts(demo_model_path, fixture_yaml, "fixture", out, progress=False)
    return out


def test_parts_of_all_shards_equal_one_plain_run(
    tmp_path, demo_model_path, fixture_yaml, fixture_images, plain_parts
):
    from det_calib.capture.parts import (
        _part_meta as part_meta,
    )
    from det_calib.capture.parts import (
        _shard_of as shard_of,
    )
    from det_calib.capture.parts import (
        capture_to_parts,
        read_parts,
        read_parts_with_meta,
    )

    plain, meta = read_parts_with_meta(plain_parts)
    assert meta["heads"] == ["nms", "e2e"] and meta["n_images"] == 12 and meta["n_parts"] == 1
    # the plain part is the in-memory capture of the split, same names and ids
    direct = capture(
        str(demo_model_path),
        fixture_images,
        heads="auto",
        progress=False,
        image_names=[f"{p.name}" for p in fixture_images],
        split="fixture",
    )
    assert plain.equals(direct)
    n = 3
    assert sorted(set(shard_of([p.name for p in fixture_images], n).tolist())) == [
        0,
        1,
        2,
    ]  # no empty shard
    for i in (2, 0, 1):
        capture_to_parts(
            demo_model_path, fixture_yaml, "fixture", tmp_path, shard=f"{i}/{n}", progress=False
        )
    files = sorted(tmp_path.glob("*.parquet"))
    assert [f.name for f in files] == [f"part-{i:05d}-of-00003.parquet" for i in range(3)]
    assert sorted(i for f in files for i in part_meta(f)["image_ids"]) == list(range(12))
    assert read_parts(tmp_path).equals(plain)
    # the assignment is the same in every process: shard 1 again writes the same file content
    again = tmp_path / "again"
    capture_to_parts(demo_model_path, fixture_yaml, "fixture", again, shard="1/3", progress=False)
    assert read_parts(again, allow_partial=True).equals(read_parts(files[1], allow_partial=True))


def test_read_parts_refuses_other_model_data_and_incomplete_parts(
    tmp_path, demo_model_path, fixture_yaml, plain_parts
):
    import shutil

    from det_calib.capture.parts import (
        capture_to_parts,
        data_fingerprint,
        model_fingerprint,
        read_parts,
    )
    from det_calib.data.ground_truth import load_data_yaml, load_split

    sp = load_split(load_data_yaml(fixture_yaml), "fixture")
    fp = data_fingerprint(sp.images, names=sp.image_names())
    ok = read_parts(plain_parts, expect_model=demo_model_path, expect_data=fp)
    assert ok.height > 1000
    other = tmp_path / "other.pt"
    other.write_bytes(demo_model_path.read_bytes() + b"\0")
    with pytest.raises(InputError, match="captured with another model"):
        read_parts(plain_parts, expect_model=other)
    # the same images with one label changed are other data
    data = tmp_path / "data"
    shutil.copytree(fixture_yaml.parent, data)
    label = sorted((data / "labels" / "fixture").glob("*.txt"))[3]
    label.write_text(label.read_text() + "0 0.5 0.5 0.1 0.1\n")
    sp2 = load_split(load_data_yaml(data / "data.yaml"), "fixture")
    fp2 = data_fingerprint(sp2.images, names=sp2.image_names())
    assert fp2 != fp
    with pytest.raises(InputError, match="captured on other data"):
        read_parts(plain_parts, expect_data=fp2)
    assert model_fingerprint(demo_model_path) == model_fingerprint(
        model_fingerprint(demo_model_path)
    )
    # one shard missing
    part = tmp_path / "partial"
    capture_to_parts(
        demo_model_path, fixture_yaml, "fixture", part, shard="0/2", heads=("nms",), progress=False
    )
    with pytest.raises(InputError, match="cover .* of 12 images"):
        read_parts(part)
    # the same image in two parts
    shutil.copy(plain_parts / "part-all.parquet", part)
    with pytest.raises(InputError, match="disagree on heads|captured in two parts"):
        read_parts(part)
    # parts of runs with different settings
    mixed = tmp_path / "mixed"
    capture_to_parts(
        demo_model_path, fixture_yaml, "fixture", mixed, shard="0/2", heads=("nms",), progress=False
    )
    capture_to_parts(
        demo_model_path,
        fixture_yaml,
        "fixture",
        mixed,
        shard="1/2",
        heads=("nms",),
        conf=0.01,
        progress=False,
    )
    with pytest.raises(InputError, match="disagree on settings"):
        read_parts(mixed)
    with pytest.raises(InputError, match="no capture parts"):
        read_parts(tmp_path / "nothing")
    with pytest.raises(InputError, match="shard"):
        capture_to_parts(
            demo_model_path, fixture_yaml, "fixture", tmp_path / "x", shard="2/2", progress=False
        )


def test_ray_capture_equals_plain_run(
    tmp_path, demo_model_path, fixture_yaml, plain_parts, local_ray
):
    """A Ray Data job on a local 2-CPU Ray instance (the session's, conftest's ``local_ray``) writes
    parts with the same content."""
    pytest.importorskip("ray")  # the step needs Ray (conftest's local_ray is None without it)
    from det_calib.capture.parts import _part_meta as part_meta
    from det_calib.capture.parts import read_parts
    from det_calib.capture.ray_capture import capture_ray

    files = capture_ray(
        demo_model_path, fixture_yaml, "fixture", tmp_path, images_per_part=5, actors=2
    )
    assert len(files) >= 3 and all(f.is_file() for f in files)  # 12 images, 5 per part
    assert all(part_meta(f)["part"].startswith("ray ") for f in files)
    assert read_parts(tmp_path, expect_model=demo_model_path).equals(read_parts(plain_parts))


def test_cli_capture_writes_parts(tmp_path, demo_model_path, fixture_yaml, plain_parts, capsys):
    from det_calib.capture.parts import read_parts
    from det_calib.cli import main

    out = tmp_path / "parts"
    for i in range(2):
        assert (
            main(
                [
                    "capture",
                    "--model",
                    str(demo_model_path),
                    "--data",
                    str(fixture_yaml),
                    "--split",
                    "fixture",
                    "--out",
                    str(out),
                    "--shard",
                    f"{i}/2",
                    "-q",
                ]
            )
            == 0
        )
    assert read_parts(out).equals(read_parts(plain_parts))
    assert (
        main(
            [
                "capture",
                "--model",
                str(demo_model_path),
                "--data",
                str(fixture_yaml),
                "--split",
                "fixture",
                "--out",
                str(out),
                "--shard",
                "2of2",
                "-q",
            ]
        )
        == 2
    )
    assert "shard" in capsys.readouterr().err


def test_capture_nms_has_no_time_budget(demo_model_path, fixture_images):
    """Ultralytics' NMS stops after a wall-clock budget and returns no boxes for the batch's other
    images; the capture's budget is infinite, and the budget it sets does reach the NMS: forced to
    zero, the images after the first of each batch lose every box."""
    import math

    from det_calib.capture.predictor import Capturer, nms_max_time_img

    assert nms_max_time_img(None, 8) == math.inf
    cap = Capturer(str(demo_model_path), heads=("nms",), imgsz=320, batch=8)
    assert cap.nms_time_limit == math.inf
    full = cap(fixture_images, progress=False)
    per_image = np.bincount(full["image_id"].to_numpy(), minlength=len(fixture_images))
    assert (per_image > 0).all()
    cap.nms_time_limit = 0.0
    passes = []
    cap.net.model[0].register_forward_hook(lambda m, i, o: passes.append(i[0].shape[0]))
    cut = cap(fixture_images, progress=False)
    kept = np.bincount(cut["image_id"].to_numpy(), minlength=len(fixture_images))
    assert sum(passes) == len(fixture_images) and max(passes) > 1
    # the first image of each pass keeps its boxes, every other one loses them all
    assert (kept > 0).sum() == len(passes) and ((kept == per_image) | (kept == 0)).all()
