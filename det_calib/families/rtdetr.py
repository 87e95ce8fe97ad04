"""RT-DETR (``RTDETR``, ``RTDETRDecoder``) as a model family of the detect task: its one head mode ``detr``,
its capture through Ultralytics' own ``RTDETRPredictor``, where its class logits are made (for the fold) and
its validator (``RTDETRValidator``).

How an RT-DETR scores: the encoder's ``enc_score_head`` picks the ``num_queries`` feature positions the decoder
starts from (the query selection); the decoder refines them layer after layer, and at inference only the last
layer's (``eval_idx``) class head ``dec_score_head[eval_idx]``, an ``nn.Linear(hd, nc)``, scores them: the score
of class ``c`` for query ``q`` is ``sigmoid(z_qc)``. The head's postprocess keeps the top ``num_queries``
(query, class) pairs of those scores (one query may give rows of several classes), and the predictor keeps the
rows above ``conf`` (at most ``max_det``). There is no NMS. The capture reads ``z`` of every kept row: its
query and class are the head's own top-k index on the same scores.

The fold touches ``dec_score_head[eval_idx]`` only: an affine map scales its weight and bias per class, a
piecewise-linear map is appended after it as stock ``Linear`` + ``ReLU`` layers. The encoder's query selection
(``enc_score_head``) and the boxes (``dec_bbox_head``) are untouched, so the calibrated checkpoint selects the
same queries and returns the same boxes; a map the same for every class keeps the top-k's order too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from det_calib.capture.family_capture import PredictorCapturer
from det_calib.capture.family_registry import Family
from det_calib.deploy.fold import hinge_layers
from det_calib.errors import InputError

__all__ = ["RTDETRCapturer", "RTDETRFamily"]

_RTDETR_HEAD = "detr"
"""The head mode of an RT-DETR: the last decoder layer's scores of its queries, no NMS."""


def _logit_predictor_class():
    """Ultralytics' ``RTDETRPredictor`` whose ``postprocess`` also hands back, for each image's kept rows,
    their query and every class's logit (the stock postprocess makes the ``Results``)."""
    import torch
    from ultralytics.models.rtdetr.predict import RTDETRPredictor
    from ultralytics.nn.modules.head import Detect

    class LogitPredictor(RTDETRPredictor):
        """The stock RT-DETR predictor; each ``Results`` it returns carries ``det_calib_logits``: the (n, nc)
        class logits of its n boxes, in its boxes' order."""

        def postprocess(self, preds, img, orig_imgs):
            results = super().postprocess(preds, img, orig_imgs)
            y, raw = preds[0], preds[1]
            logits = raw[1][-1]  # the decoder's class logits at eval_idx: (batch, queries, nc)
            nc = logits.shape[-1]
            # the head's own top-k (RTDETRDecoder.postprocess) on the same scores: each row's (query, class)
            top, index = Detect._grouped_topk(logits.sigmoid().flatten(1), y.shape[1], 1)
            if not torch.equal(top, y[..., 4]):
                raise RuntimeError(
                    "the decoder's top-k differs from the capture's: Ultralytics' RTDETRDecoder "
                    "postprocess changed"
                )
            if self.args.classes is not None:
                raise InputError("the capture keeps every class: `classes` must be None")
            for b, r in enumerate(
                results
            ):  # the predictor's kept rows: score above conf, the first max_det
                keep = (y[b, :, 4] > self.args.conf).nonzero().squeeze(1)[: self.args.max_det]
                query = torch.div(index[b, keep], nc, rounding_mode="floor")
                cls = index[b, keep] - query * nc
                if not torch.equal(cls.float(), r.boxes.cls):
                    raise RuntimeError("the kept rows' classes differ from the predictor's")
                r.det_calib_logits = logits[b, query].float().cpu().numpy()
            return results

    return LogitPredictor


class RTDETRCapturer(PredictorCapturer):
    """An RT-DETR prepared once for capture, run through Ultralytics' own ``RTDETRPredictor`` (its
    ``scale_fill`` resize to ``imgsz``, its forward pass, its postprocess): the boxes, classes and confs of
    the table are those of ``RTDETR(path).predict(image, conf=floor)``, bit for bit, with each box's raw class
    logit beside them. The table is a :class:`~det_calib.capture.predictor.Capturer`'s (its ``head`` ``detr``).
    """

    def _logit_predictor(self) -> type:
        return _logit_predictor_class()

    def _check_model(self) -> None:
        if self.hooks.payload:
            raise InputError(
                f"an RT-DETR of task `{self.task}`: det_calib calibrates RT-DETR detectors only"
            )


def _linear_hinge_layers(maps: list, nc: int) -> torch.nn.Sequential:
    """:func:`det_calib.deploy.fold.hinge_layers` for channels last: the same map on each class of a
    (..., nc) tensor as stock ``Linear`` + ``ReLU`` + ``Linear`` layers (each grouped 1x1 conv as the dense
    linear layer it equals: zero outside its class's block)."""
    import torch

    expand, relu, collapse = hinge_layers(maps, nc)
    k = expand.out_channels // nc
    w1 = torch.zeros(nc * k, nc)
    w2 = torch.zeros(nc, nc * k)
    for c in range(nc):
        w1[c * k : (c + 1) * k, c] = expand.weight.detach()[c * k : (c + 1) * k, 0, 0, 0]
        w2[c, c * k : (c + 1) * k] = collapse.weight.detach()[c, :, 0, 0]
    first, last = torch.nn.Linear(nc, nc * k), torch.nn.Linear(nc * k, nc)
    with torch.no_grad():
        first.weight.copy_(w1)
        first.bias.copy_(expand.bias.detach())
        last.weight.copy_(w2)
        last.bias.copy_(collapse.bias.detach())
    return torch.nn.Sequential(first, relu, last)


class RTDETRFamily(Family):
    """Ultralytics' RT-DETR: ``RTDETRDecoder``, head mode ``detr``."""

    name = "rtdetr"
    head_classes = ("RTDETRDecoder",)
    heads = (_RTDETR_HEAD,)
    val_words = (
        "the original's figures come from a stock Ultralytics val of the original checkpoint with "
        "RTDETRValidator, the calibrated checkpoint's from another"
    )

    def capturer(self, yolo: Any, options: Any, /, **kw: Any) -> RTDETRCapturer:
        return RTDETRCapturer(yolo, options, **kw)

    @staticmethod
    def _eval_index(model: Any) -> tuple[Any, int]:
        det = model.model[-1]
        return det, int(det.decoder.eval_idx)

    def score_layers(self, model: Any, head: str) -> list:
        import torch

        if head != _RTDETR_HEAD:
            raise InputError(f"an RT-DETR has one head, `{_RTDETR_HEAD}`, not `{head}`")
        det, i = self._eval_index(model)
        layer = det.dec_score_head[i]
        last = layer[-1] if isinstance(layer, torch.nn.Sequential) else layer
        if (
            not isinstance(last, torch.nn.Linear)
            or last.bias is None
            or last.out_features != det.nc
        ):
            raise InputError(
                f"unexpected class layer {type(last).__name__} in dec_score_head[{i}]: expected a "
                f"Linear with bias and {det.nc} outputs"
            )
        return [last]

    def append_map(self, model: Any, head: str, maps: list, nc: int) -> None:
        import torch

        self.score_layers(model, head)  # checks the head and its layer
        det, i = self._eval_index(model)
        layer = det.dec_score_head[i]
        layers = list(layer) if isinstance(layer, torch.nn.Sequential) else [layer]
        det.dec_score_head[i] = torch.nn.Sequential(
            *layers, *_linear_hinge_layers(maps, nc)
        ).float()

    def validator(self) -> type:
        from ultralytics.models.rtdetr.val import RTDETRValidator

        return RTDETRValidator

    def predictor_class(self) -> type:
        from ultralytics.models.rtdetr.predict import RTDETRPredictor

        return RTDETRPredictor


FAMILY = RTDETRFamily()
"""The family this module declares (the registry registers it when it imports the module)."""
