"""kstream: stateful, event-time, exactly-once stream processing on Kafka.

Users import the topology API from here (see ``kstream.api``).
"""

__version__ = "0.1.0"
