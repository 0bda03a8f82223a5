"""What precedes the Kafka bytes on a connection, parsed without I/O: the PROXY protocol
header (``proxy_protocol.py``) and the TLS ClientHello's server name (``sni.py``). Nothing here
imports the rest of the proxy (docs/design.md#layers)."""
