"""Checkpoint averaging moved to `keras_transformer.runs.averaging`; this import path is
kept for one release."""

from keras_transformer.runs.averaging import average_checkpoints, in_last_fraction  # noqa: F401
