"""Request and response entities from keyword values, for handler tests (any API, any version).

``codec.make_entity`` fills what a test leaves out with the schema's defaults.
"""

from __future__ import annotations

from typing import Any

from kafkaguard.protocol import codec

MIN_OPS = -2147483648
"""``authorized_operations`` when the client did not ask for them (Kafka's ``Int32.MinValue``)."""


def req(api: int, version: int, /, **values: Any) -> Any:
    return codec.make_entity(codec.request_schema(api, version), **values)


def resp(api: int, version: int, /, **values: Any) -> Any:
    return codec.make_entity(codec.response_schema(api, version), **values)


def item(api: int, version: int, field: str, /, *path: str, **values: Any) -> Any:
    """A nested response entity (``path`` descends further)."""
    schema = codec.response_schema(api, version)
    entity_type = codec.nested_type(schema, field)
    for name in path:
        entity_type = codec.nested_type(entity_type, name)
    return codec.make_entity(entity_type, **values)
