"""Checkpoint storage (Flink's CheckpointStorage; not a state store, which is an operator's
keyed state: :mod:`kstream.state`): the checkpoint store's interface and adapters, the layout
of its paths, checkpoint metadata."""
