"""Snapshots of a task's keyed state in the checkpoint store: upload (content-addressed files,
the manifest last), restore (checked against the manifest), retention and garbage
collection. The backends behind them (how state lives, and the local snapshot a backend
takes: :class:`kstream.state.base.SnapshottingBackend`) are :mod:`kstream.state`."""
