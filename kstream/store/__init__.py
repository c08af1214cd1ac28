"""The checkpoint store: its interface and adapters, the layout of its paths, checkpoint metadata."""
