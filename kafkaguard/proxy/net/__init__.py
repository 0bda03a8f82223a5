"""The asyncio shell around the core: accepting connections (``listener.py``), peeking at what
precedes the Kafka bytes (``peek.py``), carrying out the exchange's commands
(``connection.py``) and the upstream cluster (``cluster.py``) (docs/design.md#layers)."""
