"""The segment task's folder: what is a segment model's own, in every layer.

``task.py`` the task (:class:`~det_calib.tasks.segment.task.Segment`, registered in
:mod:`det_calib.tasks`); ``labels.py`` its polygon labels as RLE masks; ``matching.py`` its mask-IoU
matching; ``mask_rebuild.py`` the masks rebuilt from a capture's prototypes (the task's
``rebuild_payload`` hook, in the tasks layer); ``demo_labels.py`` the shapes demo's polygons (the
demo layer); ``evaluation_map.py`` its mask mAP by pycocotools (the evaluation layer);
``report_plots.py`` its picture in the report's Matching section (the report layer). A part above
the tasks layer is reached through the task (``Task.part``), by the layer that calls it.
"""
