"""What the calibrate, ensemble and check jobs share: their settings, the inputs and the pre-flight
checks, the reuse of earlier boxes, the capture of the splits, the clock and the thread settings."""
