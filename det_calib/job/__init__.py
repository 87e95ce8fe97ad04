"""What the calibrate, ensemble and check jobs share: their settings, the inputs and the pre-flight
checks, where their boxes come from (the capture, or earlier boxes), the one clock of their stages and
the command line's process tuning."""
