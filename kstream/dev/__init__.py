"""Development tools: a local Kafka broker for demos, tests and benchmarks."""
