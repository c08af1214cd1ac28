"""Operators: what a stage of a job runs, each registered for its spec (`@implements(Spec)`,
:mod:`kstream.operators.core`): stateless ones, windows, joins, rolling aggregations,
process functions, and what they share (keyed state views, Avro state schemas, firing
in slices). The task engine that drives them: :mod:`kstream.runtime`."""
