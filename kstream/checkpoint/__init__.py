"""Checkpoints: coordinator state machine, control protocol, checkpoint store, metadata."""
