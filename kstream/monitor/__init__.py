"""Watching a running job: the control topic folded into a view, status and history tables."""
