"""``kafkaguard config-schema``: a JSON Schema (draft 2020-12) of the configuration file, for
editors (YAML language servers) and CI linters.

Generated from the loaders themselves, not from a list kept beside them: the configuration is
loaded (:func:`~kafkaguard.proxy.config.parse_config`) with a
:class:`~kafkaguard.config_tree.ReadRecorder` noting every key each section parser reads, with
its accessor (type), default, range and choices. Loading one document reaches only the
branches its values select, so the documents are explored: starting from the smallest valid
configuration, each load proposes variants (every choice of an ``enum`` key, an absent section
present, a boolean flipped, a required key that stopped the load given a value of its type),
and a variant that makes the loaders read something new is explored in turn. A key a loader
reads appears in the schema as soon as any document reaches it; a section that calls
``reject_unknown`` gets ``additionalProperties: false``.

The schema is the union of what any branch accepts (a listener's ``ssl`` is allowed whatever
its ``security_protocol``); ``check-config`` stays the authority on combinations and values.

:func:`helm_values_schema` wraps it for the Helm chart (``--helm-values``): the chart's
``values.schema.json``, ``config`` validated by this schema.
"""

from __future__ import annotations

import copy
import json
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from kafkaguard import version
from kafkaguard.config_tree import RECORDER, ConfigError, ConfigSection, KeyRead, ReadRecorder
from kafkaguard.proxy.config import parse_config

SEED: Final = {
    "upstream": {"bootstrap_servers": ["kafka:9092"]},
    "listeners": [{"name": "PLAINTEXT", "port": 9092}],
}
"""The smallest valid configuration, where the exploration starts."""
MAX_LOADS: Final = 5000
"""Bound on the documents loaded (the exploration ends well before it)."""
SAMPLES: Final[dict[str, Any]] = {
    "string": "x",
    "integer": 1,
    "number": 1.0,
    "boolean": True,
    "strings": ["x"],
    "object": {},
    "objects": [{}],
    "any": "x",
}
"""A value of each kind, for a required key that stopped a load."""
STRING_SAMPLES: Final = ("x", "localhost:9092", "User:x", "https://localhost/x", "/x")
"""Strings tried in turn for a key whose value the loader refused (it wants an address, a
principal, a URL or a path), so the keys read after it are reached too."""
JSON_TYPES: Final[dict[str, dict[str, Any]]] = {
    "string": {"type": "string"},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "boolean": {"type": "boolean"},
    "strings": {"type": "array", "items": {"type": "string"}},
    "any": {},
}

Path = tuple[str | int, ...]


def _where(at: str) -> Path:
    """``listeners[0].ssl`` → ``("listeners", 0, "ssl")``."""
    steps: list[str | int] = []
    for part in filter(None, at.split(".")):
        name, *indices = re.split(r"\[(\d+)\]", part)
        steps += [name, *(int(i) for i in indices if i)]
    return tuple(steps)


def _with(document: dict[str, Any], path: Path, key: str, value: Any) -> dict[str, Any]:
    """``document`` with ``key`` set in the section at ``path``, the mappings on the way
    created when absent (a loader reads an absent section as an empty one)."""
    variant = copy.deepcopy(document)
    section: Any = variant
    for step in path:
        if isinstance(step, str) and isinstance(section, dict):
            section = section.setdefault(step, {})
        else:
            section = section[step]
    section[key] = copy.deepcopy(value)
    return variant


def _load(document: dict[str, Any]) -> tuple[ReadRecorder, ConfigError | None]:
    """The reads of one load and the error that stopped it (what was read before it counts)."""
    recorder = ReadRecorder()
    token = RECORDER.set(recorder)
    try:
        parse_config(ConfigSection.from_value(document, "<schema>"))
    except ConfigError as exc:
        return recorder, exc
    except (ValueError, OSError):
        return recorder, None
    finally:
        RECORDER.reset(token)
    return recorder, None


def _section(document: dict[str, Any], at: str) -> dict[str, Any] | None:
    """The section at ``at``; an absent one is empty, ``None`` when it cannot be made."""
    section: Any = document
    for step in _where(at):
        if isinstance(step, str) and isinstance(section, dict):
            section = section.get(step, {})
        elif isinstance(step, int) and isinstance(section, list) and step < len(section):
            section = section[step]
        else:
            return None
    return section if isinstance(section, dict) else None


def _variants(document: dict[str, Any], read: KeyRead) -> Iterator[dict[str, Any]]:
    """Documents that may make the loaders read more than ``document`` did."""
    section = _section(document, read.at)
    if section is None:
        return
    path = _where(read.at)
    if read.missing_required:
        yield _with(document, path, read.key, SAMPLES[read.kind])
    elif read.choices:  # each choice of an enum, each one alone in a list of choices
        for choice in read.choices:
            value = [choice] if read.kind == "strings" else choice
            if section.get(read.key) != value:
                yield _with(document, path, read.key, value)
    elif read.key not in section:
        if read.kind in ("object", "objects", "probe"):
            yield _with(document, path, read.key, SAMPLES.get(read.kind, {}))
        elif read.kind == "boolean":
            yield _with(document, path, read.key, not read.default)


def _fill(
    document: dict[str, Any], error: ConfigError, reads: list[KeyRead]
) -> Iterator[dict[str, Any]]:
    """The load stopped on a key the loader requires in its own words ("is required for
    PLAIN"): give it a value of the kind it was read as."""
    section = _section(document, error.at)
    if section is None or not error.key:
        return
    if error.key in section:
        value = section[error.key]
        written = value[0] if isinstance(value, list) and len(value) == 1 else value
        if written in STRING_SAMPLES[:-1]:
            following = STRING_SAMPLES[STRING_SAMPLES.index(written) + 1]
            replaced = [following] if isinstance(value, list) else following
            yield _with(document, _where(error.at), error.key, replaced)
        return
    for read in reads:
        if read.at == error.at and read.key == error.key and read.kind in SAMPLES:
            yield _with(document, _where(error.at), error.key, SAMPLES[read.kind])
            return


@dataclass
class Explored:
    reads: dict[tuple[str, str], list[KeyRead]]
    closed: set[str]
    open: set[str]


def explore() -> Explored:
    """Load variants of :data:`SEED` until no variant makes the loaders read anything new."""
    reads: dict[tuple[str, str], list[KeyRead]] = {}
    closed: set[str] = set()
    opened: set[str] = set()
    seen: set[tuple[str, str, str, bool]] = set()
    queue: deque[dict[str, Any]] = deque([SEED])
    loads = 0
    while queue and loads < MAX_LOADS:
        document = queue.popleft()
        loads += 1
        recorder, error = _load(document)
        closed |= recorder.closed
        opened |= recorder.open
        fresh = False
        for read in recorder.reads:
            reads.setdefault((read.path, read.key), []).append(read)
            signature = (read.path, read.key, read.kind, read.missing_required)
            if signature not in seen:
                seen.add(signature)
                fresh = True
        if fresh:
            for read in recorder.reads:
                queue.extend(_variants(document, read))
            if error is not None:
                queue.extend(_fill(document, error, recorder.reads))
    return Explored(reads, closed, opened)


def _key_schema(reads: list[KeyRead]) -> dict[str, Any]:
    """One key's schema from every read of it: its type (none when the accessors disagree
    or it is read raw), choices, minimum, maximum and default."""
    schemas: list[dict[str, Any]] = []
    for kind in sorted({r.kind for r in reads}):
        choices = sorted({c for r in reads if r.kind == kind for c in r.choices})
        if kind == "enum":
            schemas.append({"enum": choices})
        elif kind == "strings" and choices:
            schemas.append({"type": "array", "items": {"enum": choices}})
        elif kind == "integer":
            schemas.append({**JSON_TYPES[kind], **_bounds([r for r in reads if r.kind == kind])})
        else:
            schemas.append(dict(JSON_TYPES[kind]))
    schema = schemas[0] if len(schemas) == 1 else {}
    defaults = {json.dumps(r.default) for r in reads if _plain_json(r.default)}
    if len(defaults) == 1:
        schema["default"] = json.loads(defaults.pop())
    return schema


def _bounds(reads: list[KeyRead]) -> dict[str, int]:
    """An integer's ``minimum`` and ``maximum`` (a port's 1 to 65535), each where every read
    of the key agrees on it."""
    bounds: dict[str, int] = {}
    for name, values in (
        ("minimum", {r.minimum for r in reads}),
        ("maximum", {r.maximum for r in reads}),
    ):
        if len(values) == 1 and None not in values:
            bounds[name] = values.pop()  # type: ignore[assignment]
    return bounds


def _plain_json(value: Any) -> bool:
    if value is None or isinstance(value, dict):
        return False
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True


def _object(path: str, explored: Explored) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for (where, key), all_reads in sorted(explored.reads.items()):
        reads = [r for r in all_reads if r.kind != "probe"]
        if where != path or not reads:
            continue
        child = f"{path}.{key}" if path else key
        kinds = {r.kind for r in reads}
        if kinds == {"object"}:
            properties[key] = _object(child, explored)
        elif kinds == {"objects"}:
            properties[key] = {"type": "array", "items": _object(f"{child}[]", explored)}
        else:
            properties[key] = _key_schema(reads)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if path in explored.open:
        schema["additionalProperties"] = _object(f"{path}.*" if path else "*", explored)
    elif path in explored.closed:
        schema["additionalProperties"] = False
    return schema


def config_schema() -> dict[str, Any]:
    """The JSON Schema of kafkaguard's configuration file."""
    schema = _object("", explore())
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"kafkaguard {version()} configuration",
        "description": "Generated by `kafkaguard config-schema` from the configuration "
        "loaders; config.example.yaml documents every key. check-config is the authority "
        "on combinations of keys and on values.",
        **schema,
    }


FREE_FORM_VALUES: Final = frozenset({"resources", "affinity", "env", "tolerations"})
"""Chart values that are Kubernetes objects (a container's ``resources``, a pod's
``affinity``...), passed to the manifests as they are: any keys."""
INT_OR_STRING_VALUES: Final = frozenset({"minAvailable"})
"""Kubernetes ``IntOrString`` fields: a count or a percentage (``"50%"``)."""


def helm_values_schema(values: dict[str, Any]) -> dict[str, Any]:
    """The Helm chart's ``values.schema.json`` (deploy/helm/kafkaguard): ``config`` is
    kafkaguard's configuration, validated by :func:`config_schema`'s schema, so ``helm lint``
    and ``helm install`` refuse a mistyped key with its path instead of rendering pods that
    crash-loop on ``check-config``; every other value has the type its default in
    ``values.yaml`` has, and the chart's own mappings take no other keys."""
    config = {k: v for k, v in config_schema().items() if k not in ("$schema", "title")}
    schema = _value_schema(values, "")
    schema["properties"]["config"] = config
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "kafkaguard Helm chart values",
        "description": "Generated by `kafkaguard config-schema --helm-values "
        "deploy/helm/kafkaguard/values.yaml`: config is kafkaguard's configuration "
        "(`kafkaguard config-schema`), the other values have the shape of values.yaml.",
        **schema,
    }


def _value_schema(value: Any, name: str) -> dict[str, Any]:
    """A value's schema from its default: its type; a mapping of the chart's own keys closed
    (an empty one, or a Kubernetes object of :data:`FREE_FORM_VALUES`, open)."""
    if name in INT_OR_STRING_VALUES:
        return {"type": ["integer", "string"]}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        items = {_json_type(item) for item in value}
        return {"type": "array", **({"items": {"type": items.pop()}} if len(items) == 1 else {})}
    if isinstance(value, dict) and value and name not in FREE_FORM_VALUES:
        return {
            "type": "object",
            "properties": {key: _value_schema(item, key) for key, item in value.items()},
            "additionalProperties": False,
        }
    return {"type": "object"}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return "string" if isinstance(value, str) else "object"
