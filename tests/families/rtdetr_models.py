"""The RT-DETR models the tests use, in one place: the demo recipe's yaml (a small RTDETRDecoder on YOLO26n's
backbone and neck), built with the demo detector's backbone and neck and random class heads whose scores
spread (an untrained decoder), and the trained demo weights the lead commits (not in the wheel)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RTDETR_YAML = REPO / "datasets" / "shapes" / "rtdetr-shapes.yaml"
"""The demo RT-DETR's recipe (datasets/shapes/train_rtdetr.py trains it)."""
RTDETR_DEMO = REPO / "datasets" / "shapes" / "rtdetr_shapes.pt"
"""The trained demo RT-DETR (MODEL_CARD_RTDETR.md); tests that need it are skipped while it is missing."""
DETECTOR = REPO / "det_calib" / "demo" / "assets" / "yolo26n_shapes.pt"


def untrained_rtdetr(out: Path, *, seed: int = 0) -> Path:
    """Save at ``out`` the recipe's RT-DETR: backbone and neck from the demo detector (every tensor of the
    same name and shape, as the training script starts), the decoder random, its class heads (encoder and
    every decoder layer) drawn so that scores spread over (0, 1) and do not tie."""
    import torch
    from ultralytics import RTDETR, YOLO

    torch.manual_seed(seed)
    model = RTDETR(str(RTDETR_YAML))
    own = model.model.state_dict()
    detector = YOLO(str(DETECTOR))
    own.update(
        {
            k: v
            for k, v in detector.model.float().state_dict().items()
            if k in own and own[k].shape == v.shape
        }
    )
    model.model.load_state_dict(own)
    det = model.model.model[-1]
    with torch.no_grad():
        for layer in [det.enc_score_head, *det.dec_score_head]:
            torch.nn.init.normal_(layer.weight, 0.0, 0.1)
            torch.nn.init.normal_(layer.bias, -2.0, 1.5)
    model.model.names = dict(detector.names)  # the shapes' classes, as the demo RT-DETR has
    model.model.eval()
    model.save(str(out))
    return out
