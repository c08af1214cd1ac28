"""Checkpoints: the coordinator state machine and the control protocol."""
