"""The worker: one process of consumer group ``<app>`` running its tasks (see :mod:`kstream.worker.loop`)."""
