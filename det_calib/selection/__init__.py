"""Selection: ``--method auto``'s paired cross-validation over the registered calibrators."""

from __future__ import annotations

from det_calib.selection.cross_validation import Selection, fit_calibrator, select_calibrator

__all__ = ['Selection', 'select_calibrator', 'fit_calibrator']
