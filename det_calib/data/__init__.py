"""Data: the dataset's images and ground truth (``ground_truth``) and the box table every later
stage reads and writes (``box_table``)."""

from __future__ import annotations

from det_calib.data.ground_truth import Dataset, Split, check_class_names, load_data_yaml, load_split

__all__ = ['Dataset', 'Split', 'check_class_names', 'load_data_yaml', 'load_split']
