"""kqactors: a Kafka client for Python with librdkafka's semantics, built as an actor system on processes."""

__version__ = "0.1.0"
