"""The OBB task's folder: what is an OBB model's own, in every layer.

``task.py`` the task (:class:`~det_calib.tasks.obb.task.Obb`, registered in :mod:`det_calib.tasks`);
``labels.py`` its rotated-box labels; ``matching.py`` its rotated-IoU matching; ``demo_labels.py`` the shapes
demo's rotated boxes (the demo layer); ``report_panel.py`` its picture in the report's Matching section (the
report layer). A part above the tasks layer is reached through the task (``Task.part``), by the layer that
calls it.
"""
