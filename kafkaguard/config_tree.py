"""A YAML tree that remembers where every value came from.

Why: an operator who mistypes a key must be told *which* key in *which* file at *which* line,
not receive a KeyError from deep inside the proxy. Every section parser in kafkaguard reads its
values through :class:`ConfigSection`, which validates types and rejects unknown keys, so
typos fail at start rather than being silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration value is missing, unknown or of the wrong shape."""


@dataclass(frozen=True, slots=True)
class Where:
    """A position in a configuration file, printed as ``file:line key.path``."""

    file: str
    line: int
    key: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} {self.key}" if self.key else f"{self.file}:{self.line}"


def _construct(node: yaml.Node, file: str) -> Any:
    """Build plain Python values, wrapping every mapping so its keys keep their lines."""
    if isinstance(node, yaml.MappingNode):
        values: dict[str, Any] = {}
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(_construct(key_node, file))
            if key in values:
                raise ConfigError(f"{file}:{key_node.start_mark.line + 1} duplicate key {key!r}")
            values[key] = _construct(value_node, file)
            lines[key] = value_node.start_mark.line + 1
        return _Mapping(values, lines, node.start_mark.line + 1)
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, file) for item in node.value]
    return yaml.SafeLoader(  # scalar: let SafeLoader apply YAML 1.1 typing rules
        ""
    ).construct_object(node, deep=True)


@dataclass(frozen=True, slots=True)
class _Mapping:
    values: dict[str, Any]
    lines: dict[str, int]
    line: int


def _plain(value: Any) -> Any:
    if isinstance(value, _Mapping):
        return {k: _plain(v) for k, v in value.values.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class ConfigSection:
    """A mapping in a config file; every accessor names the file, line and key on error."""

    def __init__(self, mapping: _Mapping, file: str, prefix: str) -> None:
        self._mapping = mapping
        self._file = file
        self._prefix = prefix
        self._read: set[str] = set()

    @classmethod
    def empty(cls, file: str = "<defaults>", prefix: str = "") -> ConfigSection:
        return cls(_Mapping({}, {}, 0), file, prefix)

    @classmethod
    def from_text(cls, text: str, file: str = "<string>") -> ConfigSection:
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{file}: not valid YAML: {exc}") from exc
        if node is None:
            return cls.empty(file)
        value = _construct(node, file)
        if not isinstance(value, _Mapping):
            raise ConfigError(f"{file}:1 the top level must be a mapping")
        return cls(value, file, "")

    @classmethod
    def from_file(cls, path: str | Path) -> ConfigSection:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
        return cls.from_text(text, str(path))

    # -- positions -------------------------------------------------------------------------
    def where(self, key: str = "") -> Where:
        full = f"{self._prefix}.{key}" if self._prefix and key else (key or self._prefix)
        return Where(self._file, self._mapping.lines.get(key, self._mapping.line), full)

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.where(key)}: {message}")

    @property
    def file(self) -> str:
        return self._file

    # -- access ----------------------------------------------------------------------------
    def __contains__(self, key: str) -> bool:
        return key in self._mapping.values

    def keys(self) -> Iterator[str]:
        return iter(self._mapping.values)

    def raw(self, key: str, default: Any = None) -> Any:
        """The plain Python value (mappings as dicts), for free-form sub-trees."""
        self._read.add(key)
        return _plain(self._mapping.values.get(key, default))

    def _typed(self, key: str, default: Any, types: tuple[type, ...], what: str) -> Any:
        self._read.add(key)
        if key not in self._mapping.values:
            if default is _REQUIRED:
                raise self.error(key, "is required")
            return default
        value = self._mapping.values[key]
        if isinstance(value, bool) and bool not in types:
            raise self.error(key, f"must be {what}, got {value!r}")
        if not isinstance(value, types):
            raise self.error(key, f"must be {what}, got {_plain(value)!r}")
        return value

    def get_str(self, key: str, default: Any = None) -> Any:
        return self._typed(key, default, (str,), "a string")

    def get_int(self, key: str, default: Any = None, *, minimum: int | None = None) -> Any:
        value = self._typed(key, default, (int,), "an integer")
        if value is not None and minimum is not None and value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {value}")
        return value

    def get_float(self, key: str, default: Any = None) -> Any:
        value = self._typed(key, default, (int, float), "a number")
        return None if value is None else float(value)

    def get_bool(self, key: str, default: Any = None) -> Any:
        return self._typed(key, default, (bool,), "true or false")

    def choice(self, key: str, choices: tuple[str, ...], default: Any = None) -> Any:
        value = self.get_str(key, default)
        if value is not None and value not in choices:
            raise self.error(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def section(self, key: str, *, required: bool = False) -> ConfigSection:
        """A nested mapping; absent → an empty section (so defaults apply)."""
        self._read.add(key)
        prefix = f"{self._prefix}.{key}" if self._prefix else key
        value = self._mapping.values.get(key)
        if value is None:
            if required:
                raise self.error(key, "is required")
            return ConfigSection(_Mapping({}, {}, self._mapping.line), self._file, prefix)
        if not isinstance(value, _Mapping):
            raise self.error(key, "must be a mapping")
        return ConfigSection(value, self._file, prefix)

    def sections(self, key: str) -> list[ConfigSection]:
        """A list of mappings (e.g. ``listeners``)."""
        self._read.add(key)
        value = self._mapping.values.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(key, "must be a list")
        out = []
        for index, item in enumerate(value):
            prefix = f"{self._prefix}.{key}[{index}]" if self._prefix else f"{key}[{index}]"
            if not isinstance(item, _Mapping):
                raise self.error(key, f"item {index} must be a mapping")
            out.append(ConfigSection(item, self._file, prefix))
        return out

    def str_list(self, key: str, default: Any = None) -> Any:
        value = self._typed(key, default, (list,), "a list of strings")
        if value is not None and not all(isinstance(v, str) for v in value):
            raise self.error(key, "must be a list of strings")
        return value

    def reject_unknown(self) -> None:
        """Fail on keys no parser read: a typo must not silently fall back to a default."""
        unknown = [k for k in self._mapping.values if k not in self._read]
        if unknown:
            raise self.error(unknown[0], f"unknown key {unknown[0]!r}")


_REQUIRED: Any = object()
REQUIRED: Any = _REQUIRED
"""Pass as ``default`` to make a key mandatory."""
