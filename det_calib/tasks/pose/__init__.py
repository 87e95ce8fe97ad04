"""The pose task's folder: what is a pose model's own, in every layer.

``task.py`` the task (:class:`~det_calib.tasks.pose.task.Pose`, registered in :mod:`det_calib.tasks`);
``labels.py`` its keypoint labels; ``matching.py`` its OKS matching; ``demo_labels.py`` the shapes demo's
keypoints (the demo layer); ``evaluation_map.py`` its keypoint mAP by pycocotools (the evaluation layer);
``report_panel.py`` its picture in the report's Matching section (the report layer). A part above the tasks
layer is reached through the task (``Task.part``), by the layer that calls it.
"""
