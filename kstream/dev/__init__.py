"""Development servers for demos, tests and benchmarks: a local Kafka broker or cluster,
an S3-compatible server and a Schema Registry, on one server lifecycle (server), one JVM
process helper (jvm) and one Maven resolution (maven)."""
