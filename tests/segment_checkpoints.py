"""Segment checkpoints for the tests of segment models: no trained seg weights are needed.

:func:`segment_checkpoint` builds a YOLO-seg from its yaml with the shapes demo's 8 classes, copies
the demo detector's layers where their shapes agree (backbone, neck, box and class branches:
realistic boxes and scores on the demo's images; without it, random weights with class scores
spread over (0, 1)), perturbs the mask branch and prototypes so that masks are neither empty nor
their boxes, and saves it as a checkpoint plain Ultralytics loads.
"""

from __future__ import annotations

from pathlib import Path

DEMO_NAMES = {
    0: "circle",
    1: "ellipse",
    2: "square",
    3: "rectangle",
    4: "triangle",
    5: "hexagon",
    6: "star",
    7: "cross",
}
MASK_NOISE = 0.5


def segment_checkpoint(
    out: Path, *, cfg: str = "yolo26n-seg.yaml", demo_detector: Path | None = None, seed: int = 0
) -> Path:
    """Write a seg checkpoint at ``out`` and return it (see the module's docstring).

    Args:
        out: Path of the ``.pt`` to write.
        cfg: Ultralytics model yaml (``yolo26n-seg.yaml`` for both heads, ``yolo11n-seg.yaml`` for one).
        demo_detector: The demo detector whose layers are copied (None: random weights, perturbed).
        seed: Seed of the random weights and the perturbation.
    """
    import torch
    from ultralytics.nn.tasks import SegmentationModel

    torch.manual_seed(seed)
    model = SegmentationModel(cfg, nc=len(DEMO_NAMES), verbose=False)
    head = model.model[-1]
    with torch.no_grad():
        if demo_detector is not None:
            src = torch.load(demo_detector, map_location="cpu", weights_only=False)
            src = (src.get("ema") or src["model"]).float().state_dict()
            own = model.state_dict()
            model.load_state_dict(
                {k: v for k, v in src.items() if k in own and own[k].shape == v.shape}, strict=False
            )
        else:
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
            for (
                level
            ) in head.cv3:  # scores spread over (0, 1), as a trained model's (the init gives ~1e-4)
                torch.nn.init.normal_(level[-1].weight, 0.0, 0.5)
                torch.nn.init.normal_(level[-1].bias, -2.0, 1.5)
        masks = [head.proto, head.cv4] + (
            [head.one2one_cv4] if getattr(head, "one2one_cv4", None) else []
        )
        for branch in masks:
            for p in branch.parameters():
                p.add_(torch.randn_like(p) * MASK_NOISE)
    model.names = dict(DEMO_NAMES)
    model.args = {"task": "segment", "imgsz": 320}
    model.task = "segment"
    torch.save(
        {
            "model": model.float().eval(),
            "train_args": {"task": "segment", "imgsz": 320},
            "ema": None,
            "optimizer": None,
            "epoch": -1,
        },
        out,
    )
    return Path(out)


def predict_table(
    checkpoint: Path, images: list, *, head: str = "nms", conf: float = 0.001, imgsz: int = 320
):
    """A segment model's box table as plain ``predict(retina_masks=True)`` gives it, one image at a time:
    ``image_id``, ``x1..y2``, ``conf``, ``logit`` (float64, from the float32 conf), ``cls`` and ``segm``
    (each box's mask as compressed RLE counts at the image's size, the capture's column)."""
    import numpy as np
    import polars as pl
    from pycocotools import mask as mask_utils
    from ultralytics import YOLO

    model = YOLO(str(checkpoint))
    rows: dict[str, list] = {
        k: [] for k in ("image_id", "x1", "y1", "x2", "y2", "conf", "cls", "segm")
    }
    for i, img in enumerate(images):
        r = model.predict(
            str(img),
            conf=conf,
            imgsz=imgsz,
            retina_masks=True,
            verbose=False,
            **({"nms": False} if head == "e2e" else {}),
        )[0]
        if not len(r.boxes):
            continue
        m = np.asfortranarray(r.masks.data.numpy().astype(np.uint8).transpose(1, 2, 0))
        b = r.boxes.xyxy.numpy().astype(np.float64)
        rows["image_id"] += [i] * len(b)
        for k, col in enumerate(("x1", "y1", "x2", "y2")):
            rows[col] += b[:, k].tolist()
        rows["conf"] += r.boxes.conf.numpy().astype(np.float64).tolist()
        rows["cls"] += r.boxes.cls.numpy().astype(int).tolist()
        rows["segm"] += [e["counts"] for e in mask_utils.encode(m)]
    p = np.clip(np.asarray(rows["conf"], dtype=np.float64), 1e-12, 1 - 1e-7)
    return pl.DataFrame(
        {
            **{k: v for k, v in rows.items() if k != "segm"},
            "logit": np.log(p) - np.log1p(-p),
            "segm": pl.Series(rows["segm"], dtype=pl.Binary),
        }
    ).with_columns(pl.col("image_id").cast(pl.Int64), pl.col("cls").cast(pl.Int32))


SEG_EXPORTS = {
    "onnx": {"format": "onnx"},
    "onnx_e2e": {"format": "onnx", "nms": False},
    "openvino": {"format": "openvino"},
    "openvino_e2e": {"format": "openvino", "nms": False},
}
"""Exports of the session's demo segment checkpoint (conftest's ``demo_seg_checkpoint``), at 320."""


def seg_export(tmp_path_factory, checkpoint: Path, name: str) -> Path:
    """``checkpoint`` (the session's ``demo_seg_checkpoint``) exported by Ultralytics as ``name`` (a key of
    :data:`SEG_EXPORTS`), made once per test session beside its own copy of the checkpoint and shared by
    the modules that ask for it. A test that writes beside an export copies it first."""
    import shutil

    from ultralytics import YOLO

    sub = tmp_path_factory.getbasetemp() / "seg_exports" / name
    done = sub / "export.txt"
    if done.is_file():
        return Path(done.read_text())
    shutil.rmtree(sub, ignore_errors=True)
    sub.mkdir(parents=True)
    shutil.copy(checkpoint, sub / "seg.pt")
    made = Path(YOLO(str(sub / "seg.pt")).export(imgsz=320, verbose=False, **SEG_EXPORTS[name]))
    done.write_text(str(made))
    return made
