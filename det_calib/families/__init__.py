"""Model families of the detect task beside the YOLO detect heads, one module each (registered in
:mod:`det_calib.capture.family_registry`): ``rtdetr``, Ultralytics' RT-DETR."""

__all__ = []
