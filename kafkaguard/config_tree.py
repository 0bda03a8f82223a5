"""A YAML tree that remembers where every value came from.

Why: an operator who mistypes a key must be told *which* key in *which* file at *which* line,
not receive a KeyError from deep inside the proxy. Every section parser in kafkaguard reads its
values through :class:`ConfigSection`, which validates types and rejects unknown keys, so
typos fail at start rather than being silently ignored.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value is missing, unknown or of the wrong shape."""

    at: str = ""
    """The section it names, as written (``listeners[0].ssl``; empty: the top level)."""
    key: str = ""
    """The key it names within that section (empty: the file as a whole)."""
    line: int = 0
    """The line it names (0: none)."""


class ConfigErrors(ConfigError):
    """Several configuration errors found in one load (:func:`collecting`): ``check-config``
    and ``run`` report every mistake of a file at once, each with its ``file:line``, rather
    than one per attempt."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = tuple(sorted(errors, key=lambda error: error.line))  # the file's order
        lines = "\n".join(f"  {error}" for error in self.errors)
        super().__init__(f"{len(self.errors)} errors:\n{lines}")
        self.at, self.key = self.errors[0].at, self.errors[0].key


_ERRORS: ContextVar[list[ConfigError] | None] = ContextVar("kafkaguard_config_errors", default=None)
"""The errors of the load in progress, while :func:`collecting`; None: the first one raises."""


@contextmanager
def collecting() -> Iterator[None]:
    """Run a load that goes on after an error: an accessor refusing a value that has a default
    records the error and returns the default, a section refused as a whole is recorded at
    its boundary (:func:`attempt`), and the block raises one :class:`ConfigErrors` listing
    every error (a :class:`ConfigError` when there is one). Later errors about a key already
    refused are dropped: they follow from the first (a default taken in its place)."""
    errors: list[ConfigError] = []
    token = _ERRORS.set(errors)
    try:
        yield
    except ConfigError as exc:
        _record(errors, exc)
    except Exception:
        if not errors:
            raise
        # Else a default taken in place of a refused value led on to this: the errors say why.
    finally:
        _ERRORS.reset(token)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(errors)


def _record(errors: list[ConfigError], error: ConfigError) -> None:
    """Add ``error`` unless its key was refused already (an error naming no key: unless the
    same was said already)."""
    for one in error.errors if isinstance(error, ConfigErrors) else (error,):
        same = [e for e in errors if (e.at, e.key) == (one.at, one.key)]
        if not same or (not one.key and all(str(e) != str(one) for e in same)):
            errors.append(one)


def report(error: ConfigError) -> None:
    """Record ``error`` when :func:`collecting`, else raise it."""
    errors = _ERRORS.get()
    if errors is None:
        raise error
    _record(errors, error)


def attempt(parse: Callable[[], T], fallback: T) -> T:
    """``parse()``; when :func:`collecting`, an error it raises is recorded and ``fallback``
    returned, so the sections after it are checked too."""
    errors = _ERRORS.get()
    if errors is None:
        return parse()
    try:
        return parse()
    except ConfigError as exc:
        _record(errors, exc)
        return fallback


@dataclass(frozen=True, slots=True)
class Where:
    """A position in a configuration file, printed as ``file:line key.path``."""

    file: str
    line: int
    key: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} {self.key}" if self.key else f"{self.file}:{self.line}"


VARIABLE: Final = re.compile(r"\$\{([^}]*?):(([^}]*?):)?([^}]*?)\}")
"""A config provider reference, Kafka's ``ConfigTransformer.DEFAULT_PATTERN``:
``${provider:[path:]key}``."""
KAFKA_CLIENT_MODULE: Final = "confluent_kafka"
KAFKA_EXTRA: Final = "kafka"
"""confluent-kafka (librdkafka) is the optional extra ``kafkaguard[kafka]``: only the features
that talk to Kafka as a client need it (the audit topic), and they name it when it is missing
(:meth:`ConfigSection.require_extra`); nothing the proxy always imports imports it."""
PROVIDERS: Final = ("env", "file", "directory")
"""Kafka's ``EnvVarConfigProvider`` (KIP-887), ``FileConfigProvider`` and
``DirectoryConfigProvider`` (KIP-297, KIP-632), always enabled here."""


def java_properties(text: str) -> dict[str, str]:
    """A ``java.util.Properties`` file as ``Properties.load`` reads it: ``#``/``!`` comments,
    ``=``, ``:`` or white space between key and value, a trailing backslash continuing the
    line, backslash escapes (``\\t``, ``\\n``, ``\\uXXXX``, any other character itself)."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f") if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    result: dict[str, str] = {}
    for line in logical:
        match = re.match(r"((?:\\.|[^\\=:\s])*)\s*[=:]?\s*(.*)", line, re.DOTALL)
        assert match is not None  # the pattern matches every string
        result[_unescape(match.group(1))] = _unescape(match.group(2))
    return result


def _unescape(text: str) -> str:
    named = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}

    def one(match: re.Match[str]) -> str:
        escaped = match.group(1)
        if escaped.startswith("u") and len(escaped) == 5:
            return chr(int(escaped[1:], 16))
        return named.get(escaped, escaped)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, text, flags=re.DOTALL)


def _provide(provider: str, path: str | None, key: str, base_dir: Path) -> str:
    """One reference's value; ``ValueError`` naming what is missing (never a value)."""
    if provider == "env":
        if path:
            raise ValueError("${env:NAME} takes no path")
        if key not in os.environ:
            raise ValueError(f"environment variable {key} is not set")
        return os.environ[key]
    if provider not in ("file", "directory"):
        raise ValueError(f"unknown config provider {provider!r} (one of {', '.join(PROVIDERS)})")
    if not path:
        raise ValueError(f"${{{provider}:path:key}} needs a path")
    where = base_dir / path
    try:
        if provider == "directory":
            # DirectoryConfigProvider: the key names a regular file of the directory (a mounted
            # Kubernetes Secret), its whole content the value.
            file = where / key
            if Path(key).name != key or not file.is_file():
                raise ValueError(f"{where} has no file {key!r}")
            return file.read_text(encoding="utf-8")
        values = java_properties(where.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {where}: {exc.strerror}") from None
    if key not in values:
        raise ValueError(f"{where} has no key {key!r}")
    return values[key]


class ResolvedValue(str):
    """A string value with config provider references, resolved: its ``repr`` (what error
    messages quote, "got ...") is the value as written, so a secret never reaches a message
    or a log line."""

    written: str

    def __new__(cls, value: str, written: str) -> ResolvedValue:
        resolved = super().__new__(cls, value)
        resolved.written = written
        return resolved

    def __repr__(self) -> str:
        return repr(self.written)


def resolve_variables(text: str, base_dir: Path) -> str:
    """Replace every ``${provider:[path:]key}`` in a string value, as Kafka's
    ``ConfigTransformer`` does; a relative path is relative to ``base_dir`` (the config file's
    directory). Unlike Kafka, a reference that cannot be resolved is an error, not left as
    written: a secret missing from the environment must stop the start (fail closed)."""

    def one(match: re.Match[str]) -> str:
        return _provide(match.group(1), match.group(3), match.group(4), base_dir)

    return VARIABLE.sub(one, text)


def _construct(node: yaml.Node, file: str, base_dir: Path) -> Any:
    """Build plain Python values, wrapping every mapping so its keys keep their lines; string
    values have their config provider references resolved (:func:`resolve_variables`)."""
    if isinstance(node, yaml.MappingNode):
        values: dict[str, Any] = {}
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(_construct(key_node, file, base_dir))
            if key in values:
                raise ConfigError(f"{file}:{key_node.start_mark.line + 1} duplicate key {key!r}")
            values[key] = _construct(value_node, file, base_dir)
            lines[key] = value_node.start_mark.line + 1
        return _Mapping(values, lines, node.start_mark.line + 1)
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, file, base_dir) for item in node.value]
    value = yaml.SafeLoader(  # scalar: let SafeLoader apply YAML 1.1 typing rules
        ""
    ).construct_object(node, deep=True)
    if isinstance(value, str) and "${" in value:
        try:
            return ResolvedValue(resolve_variables(value, base_dir), value)
        except ValueError as exc:
            raise ConfigError(f"{file}:{node.start_mark.line + 1} {exc}") from None
    return value


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


@dataclass(slots=True)
class KeyRead:
    """What one read of a key told about it (the accessor, its default and bounds)."""

    path: str
    """The section's path with list indices as ``[]`` and the keys of open mappings as ``*``
    (``listeners[].ssl``, ``authorizer.extensions.listeners.*``)."""
    at: str
    """The section's path as written (``listeners[0].ssl``): where a document has it."""
    key: str
    kind: str
    """``string`` | ``integer`` | ``number`` | ``boolean`` | ``enum`` | ``strings`` (a list
    of strings) | ``object`` | ``objects`` (a list of mappings) | ``any`` (read raw) |
    ``probe`` (only asked whether it is there)."""
    default: Any = None
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    missing_required: bool = False
    """Read as required and absent: the load failed here."""


@dataclass(slots=True)
class ReadRecorder:
    """Every key the loaders read, while :data:`RECORDER` is set: what ``kafkaguard
    config-schema`` derives the JSON Schema from (kafkaguard/cli/config_schema.py), so the
    schema lists exactly the keys the loaders accept, with no second list to keep in step."""

    reads: list[KeyRead] = field(default_factory=list)
    closed: set[str] = field(default_factory=set)
    """Paths whose sections reject unknown keys."""
    open: set[str] = field(default_factory=set)
    """Paths whose keys are names (read with :meth:`ConfigSection.keys`)."""


RECORDER: ContextVar[ReadRecorder | None] = ContextVar("kafkaguard_config_reads", default=None)


class ConfigSection:
    """A mapping in a config file; every accessor names the file, line and key on error."""

    def __init__(self, mapping: _Mapping, file: str, prefix: str, path: str = "") -> None:
        self._mapping = mapping
        self._file = file
        self._prefix = prefix
        self._path = path
        """:attr:`KeyRead.path` of this section."""
        self._read: set[str] = set()
        self._probed: set[str] = set()
        """Keys only asked about (``in``): known to the parser, for did-you-mean."""

    def _note(self, key: str, kind: str, default: Any = None, **facts: Any) -> None:
        recorder = RECORDER.get()
        if recorder is not None:
            missing = default is _REQUIRED and key not in self._mapping.values
            recorder.reads.append(
                KeyRead(
                    self._path,
                    self._prefix,
                    key,
                    kind,
                    None if default is _REQUIRED else default,
                    missing_required=missing,
                    **facts,
                )
            )

    def _child_path(self, key: str) -> str:
        recorder = RECORDER.get()
        name = "*" if recorder is not None and self._path in recorder.open else key
        return f"{self._path}.{name}" if self._path else name

    @classmethod
    def empty(cls, file: str = "<defaults>", prefix: str = "") -> ConfigSection:
        return cls(_Mapping({}, {}, 0), file, prefix)

    @classmethod
    def from_text(
        cls, text: str, file: str = "<string>", base_dir: Path | None = None
    ) -> ConfigSection:
        """``base_dir``: where relative paths of ``${file:…}``/``${directory:…}`` references
        start (default: the working directory)."""
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{file}: not valid YAML: {exc}") from exc
        if node is None:
            return cls.empty(file)
        value = _construct(node, file, base_dir or Path.cwd())
        if not isinstance(value, _Mapping):
            raise ConfigError(f"{file}:1 the top level must be a mapping")
        return cls(value, file, "")

    @classmethod
    def from_value(cls, value: dict[str, Any], file: str) -> ConfigSection:
        """A tree already in Python values (no YAML, no line numbers, no config providers):
        the documents ``kafkaguard config-schema`` explores (kafkaguard/cli/config_schema.py)."""

        def tree(item: Any) -> Any:
            if isinstance(item, dict):
                return _Mapping({str(k): tree(v) for k, v in item.items()}, {}, 0)
            if isinstance(item, list):
                return [tree(v) for v in item]
            return item

        return cls(tree(value), file, "")

    @classmethod
    def from_file(cls, path: str | Path) -> ConfigSection:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
        return cls.from_text(text, str(path), path.resolve().parent)

    # -- positions -------------------------------------------------------------------------
    def where(self, key: str = "") -> Where:
        full = f"{self._prefix}.{key}" if self._prefix and key else (key or self._prefix)
        return Where(self._file, self._mapping.lines.get(key, self._mapping.line), full)

    def error(self, key: str, message: str) -> ConfigError:
        where = self.where(key)
        error = ConfigError(f"{where}: {message}")
        error.at, error.key, error.line = self._prefix, key, where.line
        return error

    @property
    def file(self) -> str:
        return self._file

    # -- access ----------------------------------------------------------------------------
    def __contains__(self, key: str) -> bool:
        self._note(key, "probe")
        self._probed.add(key)
        return key in self._mapping.values

    def keys(self) -> Iterator[str]:
        """The keys as written: names chosen by the user (an open mapping)."""
        recorder = RECORDER.get()
        if recorder is not None:
            recorder.open.add(self._path)
        return iter(self._mapping.values)

    def raw(self, key: str, default: Any = None) -> Any:
        """The plain Python value (mappings as dicts), for free-form sub-trees."""
        self._note(key, "any", default)
        self._read.add(key)
        return _plain(self._mapping.values.get(key, default))

    def _soft(self, key: str, default: Any, message: str, fallback: Any = None) -> Any:
        """Refuse the value of ``key``: raise, or when :func:`collecting` and the key has a
        default (``fallback``: the value to go on with for a required key), record the error
        and return that."""
        error = self.error(key, message)
        if default is _REQUIRED and fallback is None:
            raise error
        report(error)
        return fallback if default is _REQUIRED else default

    def _typed(self, key: str, default: Any, types: tuple[type, ...], what: str) -> Any:
        self._read.add(key)
        if key not in self._mapping.values:
            if default is _REQUIRED:
                raise self.error(key, "is required")
            return default
        value = self._mapping.values[key]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            return self._soft(key, default, f"must be {what}, got {_plain(value)!r}")
        return value

    def get_str(self, key: str, default: Any = None) -> Any:
        self._note(key, "string", default)
        return self._typed(key, default, (str,), "a string")

    def get_int(
        self,
        key: str,
        default: Any = None,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
        what: str = "",
        note: str = "",
    ) -> Any:
        """``what``: the value's name in the message (``a TCP port``) before its range;
        ``note``: after it (what a special value means)."""
        self._note(key, "integer", default, minimum=minimum, maximum=maximum)
        value = self._typed(key, default, (int,), what or "an integer")
        if key not in self._mapping.values or value is default:  # absent, or refused
            return value
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            allowed = _range(minimum, maximum)
            message = f"must be {what} {allowed}" if what else f"must be {allowed}"
            return self._soft(key, default, f"{message}{note}, got {value}", value)
        return value

    def get_port(self, key: str, default: Any = None, *, any_port: bool = False) -> Any:
        """A TCP port, 1 to 65535; ``any_port``: 0 too, meaning any free port."""
        return self.get_int(
            key,
            default,
            minimum=0 if any_port else 1,
            maximum=MAX_PORT,
            what="a TCP port",
            note=" (0: any free port)" if any_port else "",
        )

    def get_float(self, key: str, default: Any = None) -> Any:
        self._note(key, "number", default)
        value = self._typed(key, default, (int, float), "a number")
        return None if value is None else float(value)

    def get_bool(self, key: str, default: Any = None) -> Any:
        self._note(key, "boolean", default)
        return self._typed(key, default, (bool,), "true or false")

    def choice(self, key: str, choices: tuple[str, ...], default: Any = None) -> Any:
        self._note(key, "enum", default, choices=choices)
        value = self._typed(key, default, (str,), f"one of {', '.join(choices)}")
        if value is not None and value not in choices:
            return self._soft(key, default, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def section(self, key: str, *, required: bool = False) -> ConfigSection:
        """A nested mapping; absent → an empty section (so defaults apply)."""
        self._note(key, "object", _REQUIRED if required else None)
        self._read.add(key)
        prefix = f"{self._prefix}.{key}" if self._prefix else key
        path = self._child_path(key)
        value = self._mapping.values.get(key)
        if value is None:
            if required:
                raise self.error(key, "is required")
            return ConfigSection(_Mapping({}, {}, self._mapping.line), self._file, prefix, path)
        if not isinstance(value, _Mapping):
            raise self.error(key, f"must be a mapping, got {value!r}")
        return ConfigSection(value, self._file, prefix, path)

    def sections(self, key: str) -> list[ConfigSection]:
        """A list of mappings (e.g. ``listeners``)."""
        self._note(key, "objects")
        self._read.add(key)
        value = self._mapping.values.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(key, f"must be a list of mappings, got {_plain(value)!r}")
        out = []
        for index, item in enumerate(value):
            prefix = f"{self._prefix}.{key}[{index}]" if self._prefix else f"{key}[{index}]"
            if not isinstance(item, _Mapping):
                raise self.error(key, f"item {index} must be a mapping, got {item!r}")
            out.append(ConfigSection(item, self._file, prefix, f"{self._child_path(key)}[]"))
        return out

    def str_list(self, key: str, default: Any = None, *, choices: tuple[str, ...] = ()) -> Any:
        """``choices``: when given, every item must be one of them. When :func:`collecting`,
        a list with unknown items goes on as the items that are known, not as ``default``:
        the checks after it then speak of what the file says (a default of ``SCRAM-SHA-512``
        in place of ``[PLAIN, PLAN]`` would report a credentials file "required for
        SCRAM-SHA-512", a mechanism the file never named)."""
        self._note(key, "strings", default, choices=choices)
        value = self._typed(key, default, (list,), "a list of strings")
        if value is not None and not all(isinstance(v, str) for v in value):
            return self._soft(key, default, f"must be a list of strings, got {_plain(value)!r}")
        unknown = [item for item in value or () if choices and item not in choices]
        if unknown:
            named = ", ".join(map(repr, unknown))
            report(self.error(key, f"unknown {named} (one of {', '.join(choices)})"))
            return [item for item in value if item in choices]
        return value

    def require_extra(self, key: str, module: str, extra: str) -> None:
        """Fail at load when ``key``'s value needs an optional dependency that is not
        installed, naming the ``pip install`` that adds it: a configured feature must not
        start half-working, nor fail later on its first use."""
        try:
            importlib.import_module(module)
        except ImportError:
            value = _plain(self._mapping.values.get(key))
            raise self.error(
                key, f"{value!r} needs the {module} package: pip install 'kafkaguard[{extra}]'"
            ) from None

    def reject_unknown(self) -> None:
        """Fail on keys no parser read: a typo must not silently fall back to a default."""
        recorder = RECORDER.get()
        if recorder is not None:
            recorder.closed.add(self._path)
        known = sorted(self._read | self._probed)
        for key in (k for k in self._mapping.values if k not in self._read):
            report(self.error(key, f"unknown key {key!r} ({_suggest(key, known)})"))


def _suggest(key: str, known: list[str]) -> str:
    """What to write instead of an unknown key: the closest known key, else all of them."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"did you mean `{close[0]}`?"
    return f"known keys: {', '.join(known)}" if known else "this section takes no keys"


def _range(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"from {minimum} to {maximum}"
    return f"at least {minimum}" if minimum is not None else f"at most {maximum}"


MAX_PORT: Final = 65535


_REQUIRED: Any = object()
REQUIRED: Any = _REQUIRED
"""Pass as ``default`` to make a key mandatory."""
