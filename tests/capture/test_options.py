"""CaptureOptions: one typed object for the options every capture path shares."""

from __future__ import annotations

import dataclasses

import pytest

from det_calib.capture.options import _CUDA_BATCH, CaptureOptions, resolve_batch
from det_calib.capture.parts import split_options
from det_calib.errors import InputError

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


def test_defaults_are_predicts_and_frozen():
    o = CaptureOptions()
    assert (
        o.head,
        o.heads,
        o.conf,
        o.iou,
        o.max_det,
        o.imgsz,
        o.batch,
        o.device,
        o.all_logits,
        o.workers,
    ) == (None, None, 0.001, 0.7, 300, None, None, None, False, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.conf = 0.5  # type: ignore[misc]
    assert CaptureOptions(heads=["e2e", "nms"]).heads == (
        "e2e",
        "nms",
    )  # a list becomes a tuple (hashable)
    assert hash(CaptureOptions(heads=["nms"])) == hash(CaptureOptions(heads=("nms",)))


def test_of_applies_changes_and_names_unknown_options():
    base = CaptureOptions(conf=0.01, heads="auto")
    assert CaptureOptions.of(base) is base
    changed = CaptureOptions.of(base, batch=4, device="cpu")
    assert (changed.conf, changed.heads, changed.batch, changed.device) == (0.01, "auto", 4, "cpu")
    assert base.batch is None
    with pytest.raises(InputError, match="unknown capture option `confidence`"):
        CaptureOptions.of(confidence=0.5)


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"conf": 1.0}, "`conf` in \\[0, 1\\), but got 1.0"),
        ({"conf": -0.1}, "`conf` in \\[0, 1\\)"),
        ({"iou": 1.5}, "`iou` in \\[0, 1\\], but got 1.5"),
        ({"max_det": 0}, "`max_det` to be a positive integer, but got 0"),
        ({"batch": 0}, "`batch` to be a positive integer, but got 0"),
    ],
)
def test_bad_values_one_line(kw, msg):
    with pytest.raises(InputError, match=msg):
        CaptureOptions(**kw)


def test_split_options_default_every_head_and_settings_record():
    assert split_options().heads == "auto"
    assert split_options(heads=("nms",)).heads == ("nms",)
    assert split_options(CaptureOptions(head="e2e")).head == "e2e"
    o = CaptureOptions(
        conf=0.01, iou=0.6, max_det=100, batch=2, all_logits=True, device="cpu", workers=1
    )
    # the record of a part: what changes the output, with the resolved size; not device or workers
    assert o.settings(imgsz=(320, 320)) == {
        "conf": 0.01,
        "iou": 0.6,
        "max_det": 100,
        "imgsz": [320, 320],
        "batch": 2,
        "all_logits": True,
    }
    assert o.settings(imgsz=[640, 640], batch=1)["batch"] == 1
    # no batch asked for: the record holds the batch the device resolves to (1 on a CPU)
    assert CaptureOptions(device="cpu").settings(imgsz=(320, 320))["batch"] == 1


def test_default_batch_is_16_on_cuda_and_1_elsewhere(monkeypatch):
    """The batch a capture runs when none is asked for: CUDA_BATCH on a CUDA device (a torch device or
    a string Ultralytics reads as one), 1 on a CPU or MPS; an asked-for batch is kept anywhere. With no
    device named, it follows whether torch sees CUDA (Ultralytics' own choice of device)."""
    import torch

    assert _CUDA_BATCH == 16
    assert [
        resolve_batch(None, d) for d in ("cpu", "CPU", "mps", "mps:0", torch.device("cpu"))
    ] == [1] * 5
    assert resolve_batch(None, torch.device("cuda", 0)) == _CUDA_BATCH
    assert [resolve_batch(4, d) for d in ("cpu", torch.device("cuda", 0), None)] == [4, 4, 4]
    for available, want in ((True, _CUDA_BATCH), (False, 1)):
        monkeypatch.setattr(torch.cuda, "is_available", lambda a=available: a)
        assert [resolve_batch(None, d) for d in (None, "", "0", "cuda:0", "0,1")] == [want] * 5
        assert resolve_batch(None, "cpu") == 1
