"""Development servers for demos, tests and benchmarks: a local Kafka broker or cluster
and an S3-compatible server, on one JVM process helper and one Maven resolution."""
