"""Kafka topics as sources and sinks (``connector = 'kafka'``), over aiokafka.

Importing this package registers the ``kafka`` source and sink. aiokafka itself is imported
only when a connector is created or used; without it, creating one raises an error that
names the extra to install (``pip install 'datum-sql[kafka]'``).
"""

from datum_sql.connectors.kafka import decode, options, sink, source
from datum_sql.connectors.kafka.sink import KafkaSink
from datum_sql.connectors.kafka.source import KafkaSource

__all__ = ["KafkaSink", "KafkaSource", "decode", "options", "sink", "source"]
