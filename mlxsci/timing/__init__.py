"""Timing a pipeline run on a device (timers) and the noise of repeated runs."""
