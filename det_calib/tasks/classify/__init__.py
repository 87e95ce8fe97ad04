"""The classify task's folder: what is a classify model's own, in every layer, and its own runs.

``task.py`` the task (:class:`~det_calib.tasks.classify.task.Classify`, registered in :mod:`det_calib.tasks`);
``class_folders.py`` its data (one folder per class per split, read and checked as Ultralytics reads it);
``capture_logits.py`` its logits before the softmax (the capture layer); ``metrics.py`` its calibration
metrics (the metrics layer); ``selection_choice.py`` its map chosen on held-out folds (the selection layer);
``evaluation_figures.py`` and ``evaluation_val.py`` its figures and Ultralytics' classify val (the evaluation
layer); ``demo_crops.py`` the shapes demo's objects as crops in class folders (the demo layer);
``thresholds_reject.py`` its reject option (the thresholds layer); ``deploy_fold.py`` its map folded into the
last linear layer (the deploy layer); ``report_summary.py`` and ``report_page.py`` its summary and report (the
report layer); ``pipeline_run.py`` its ``calibrate`` run and ``check_run.py`` its ``check`` run, each a
:class:`~det_calib.tasks.contract.TaskRun` the command line dispatches through the registry. Its maps
before the softmax are its own too (``softmax_maps.py``: temperature, vector and matrix scaling, the
temperature fitted by the calibrators' :class:`~det_calib.calibrators.temperature.TemperatureScaler`).
"""
