"""Calibrators: maps from raw logits to calibrated logits."""

from __future__ import annotations

from det_calib.calibrators.temperature import TemperatureScaler, fit_temperature

__all__ = ['TemperatureScaler', 'fit_temperature']
