"""Model families of the detect task beside the YOLO detect heads, one module each (registered in
:mod:`det_calib.capture.families`): ``rtdetr``, Ultralytics' RT-DETR."""
