"""Kafka at the edges: the only package that imports ``confluent_kafka``."""
