"""Stream elements: what flows into, between and out of tasks: events (barriers,
watermarks), records (inputs, outputs, dead letters), the decoding of input batches
(reader), user-function errors turned into dead letters (errors)."""
