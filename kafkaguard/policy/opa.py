"""OPA as the authorizer: ``authorizer.class: kafkaguard.policy.opa:OpaAuthorizer``.

Each decision is asked of an Open Policy Agent server over its REST data API, with the input
document of the OPA Kafka plugin (github.com/StyraOSS/opa-kafka-plugin, ``OpaAuthorizer.scala``:
``input.requestContext`` and ``input.action``), so the plugin's published Rego policies run
unchanged. The options are the plugin's properties without their ``opa.authorizer.`` prefix
(``url``, ``allow_on_error``, ``cache_maximum_size``, ``cache_expire_after_seconds``) and
Kafka's ``super.users``, plus ``timeout_ms``, ``max_in_flight`` and ``health_interval_ms``.

Theory of operation
-------------------
* KIP-504's ``authorize`` is synchronous and the proxy never blocks its event loop on it. A
  decision is answered from a bounded, expiring cache (the plugin's Caffeine cache: at most
  ``cache_maximum_size`` entries, each ``cache_expire_after_seconds`` after it was written),
  shared by every connection. On a miss, ``authorize`` starts the lookups of the whole batch
  and raises :class:`~kafkaguard.policy.authorizer.DecisionPendingError`: the connection holds
  the request (and those after it, so nothing overtakes it), awaits the lookups and asks again,
  when every answer is in the cache. Decisions already recorded for that request are not
  recorded twice when it is asked again.
* The HTTP calls run on a thread pool of ``max_in_flight`` threads (each with its own
  keep-alive connection): at most that many are in flight; a lookup waiting longer than
  ``timeout_ms`` in all (queue and call) is a timeout.
* Fail closed: OPA unreachable, slower than ``timeout_ms``, answering an HTTP error or anything
  but ``{"result": true|false}`` denies, unless ``allow_on_error`` (the plugin's
  ``opa.authorizer.allow.on.error``). Such an outcome is cached for one second only, so that
  the request asked again sees it and OPA is asked again soon after. Errors are counted by
  reason (``kafkaguard_opa_errors_total``) and logged at most once a second per reason.
* ``/readyz`` reports OPA's health (``GET /health`` of the server in ``url``, every
  ``health_interval_ms``); listeners open without waiting for it (denying meanwhile).
* ACLs are not managed here: CreateAcls and DeleteAcls answer SECURITY_DISABLED (54), as a
  Kafka broker answers when no ACL-managing authorizer is configured; ``acls()`` raises
  :class:`AclsNotManagedError`.
* Decisions are audited like ACL decisions: Kafka's audit line and the audit trail's event,
  with the reason ``OpaAllow``, ``OpaDeny`` or ``OpaError``.
* ``super_users`` (the option and ``authorizer.super_users``) may name ``Group:`` principals,
  as the standard authorizer's; a configuration reload applies them (:meth:`reconfigure`,
  the options of :data:`RELOADABLE_OPTIONS`); every other option takes a restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import json
import logging
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from kafkaguard.policy.audit_log import DecisionEvent, DecisionReason, log_decision
from kafkaguard.policy.authorizer import (
    AclCreateResult,
    AclDeleteResult,
    AclsNotManagedError,
    Action,
    ApiError,
    ApiErrorCode,
    AuthorizationResult,
    DecisionPendingError,
    RequestContext,
    allowed_operations,
    check_literal,
)
from kafkaguard.policy.config import AuthorizerConfig, parse_super_users
from kafkaguard.policy.model import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkaguard.policy.opa_wasm import WasmBundle, WasmEvalError, WasmPolicy, WasmPolicyError
from kafkaguard.policy.stores.base import AclStore

logger = logging.getLogger("kafkaguard.opa")

ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED
ERROR_TTL_S: Final = 1.0
"""How long a failed lookup's outcome is cached: long enough for the request asked again."""
LOG_INTERVAL_S: Final = 1.0
"""At most one error line per reason per this many seconds."""
ERROR_REASONS: Final = (
    "unreachable",
    "timeout",
    "http_status",
    "not_boolean",
    "bad_response",
    "wasm_trap",
)
"""Why a lookup failed (``kafkaguard_opa_errors_total{reason}``): no connection to OPA, no
answer within ``timeout_ms``, an HTTP status other than 200, a ``result`` that is missing or
not a boolean (an undefined rule, a wrong path in ``url``), a body that is not JSON, the
WebAssembly module trapping (``mode: wasm``)."""
NOT_MANAGED: Final = (
    "ACLs are not managed by kafkaguard.policy.opa:OpaAuthorizer: OPA's policy decides"
)
OPTIONS: Final = (
    "url",
    "allow_on_error",
    "cache_maximum_size",
    "cache_expire_after_seconds",
    "super_users",
    "timeout_ms",
    "max_in_flight",
    "health_interval_ms",
    "mode",
    "bundle",
    "entrypoint",
)
MODES: Final = ("rest", "wasm")
"""``rest``: each decision asked of an OPA server (the reference, the default); ``wasm``: the
policy's WebAssembly build evaluated in process (kafkaguard/policy/opa_wasm.py)."""

RELOADABLE_OPTIONS: Final = frozenset({"super_users"})
"""The options a configuration reload applies (kafkaguard/proxy/app/reload.py): the others
make the HTTP client, the pool and the cache, which a restart makes anew."""


class OpaError(Exception):
    """A lookup failed; ``reason`` is one of :data:`ERROR_REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class OpaOptions:
    """``authorizer.options`` of :class:`OpaAuthorizer`, checked."""

    url: str
    """The decision URL (``mode: rest``; empty with ``mode: wasm``)."""
    allow_on_error: bool = False
    cache_maximum_size: int = 50_000
    cache_expire_after_seconds: float = 3600.0
    super_users: frozenset[str] = frozenset()
    timeout_ms: int = 1000
    max_in_flight: int = 8
    health_interval_ms: int = 5000
    mode: str = "rest"
    bundle: str | None = None
    """``mode: wasm``: the bundle ``opa build -t wasm`` wrote (the configuration makes a
    relative path relative to its file's directory)."""
    entrypoint: str | None = None
    """``mode: wasm``: the rule to evaluate (``kafka/authz/allow``); the bundle's only one
    by default."""

    @classmethod
    def parse(cls, options: Mapping[str, Any], super_users: frozenset[str]) -> OpaOptions:
        """Check ``options``; Kafka's ``super.users`` (``authorizer.super_users``) and the
        plugin's own ``super_users`` option both count. Errors name the option."""
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(
                f"unknown option(s) {', '.join(unknown)} (OpaAuthorizer knows {', '.join(OPTIONS)})"
            )
        mode, bundle, entrypoint = _mode(options)
        if mode == "wasm" and "url" in options:
            raise ValueError("url: not with mode: wasm (the policy is evaluated in process)")
        url = options.get("url", "")
        parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
        if mode == "rest" and (
            not isinstance(url, str)
            or parts is None
            or parts.scheme not in ("http", "https")
            or not parts.hostname
        ):
            raise ValueError(
                "url: the OPA decision URL is required, e.g. "
                f"http://127.0.0.1:8181/v1/data/kafka/authz/allow (got {url!r})"
            )
        assert isinstance(url, str)
        allow_on_error = options.get("allow_on_error", False)
        if not isinstance(allow_on_error, bool):
            raise ValueError(f"allow_on_error: a boolean, got {allow_on_error!r}")
        raw_super = options.get("super_users", "")
        if isinstance(raw_super, list):
            raw_super = ";".join(str(s) for s in raw_super)
        if not isinstance(raw_super, str):
            raise ValueError(f"super_users: 'User:a;User:b', got {raw_super!r}")
        return cls(
            url=url,
            allow_on_error=allow_on_error,
            # At least one entry for at least a second: a held request asked again finds the
            # answers its lookups wrote.
            cache_maximum_size=_number(options, "cache_maximum_size", 50_000, 1),
            cache_expire_after_seconds=_number(options, "cache_expire_after_seconds", 3600, 1),
            super_users=super_users | _super_users(raw_super),
            timeout_ms=_number(options, "timeout_ms", 1000, 1),
            max_in_flight=_number(options, "max_in_flight", 8, 1),
            health_interval_ms=_number(options, "health_interval_ms", 5000, 1),
            mode=mode,
            bundle=bundle,
            entrypoint=entrypoint,
        )


def _mode(options: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    """``mode``, ``bundle`` and ``entrypoint``, checked together."""
    mode = options.get("mode", "rest")
    if mode not in MODES:
        raise ValueError(f"mode: one of {', '.join(MODES)}, got {mode!r}")
    bundle, entrypoint = options.get("bundle"), options.get("entrypoint")
    if mode == "rest" and (bundle is not None or entrypoint is not None):
        raise ValueError("bundle and entrypoint: only with mode: wasm")
    if mode == "wasm" and (not isinstance(bundle, str) or not bundle):
        raise ValueError(f"bundle: mode wasm needs the opa build -t wasm bundle, got {bundle!r}")
    if entrypoint is not None and (not isinstance(entrypoint, str) or not entrypoint):
        raise ValueError(f"entrypoint: a rule path like kafka/authz/allow, got {entrypoint!r}")
    return mode, bundle, entrypoint


def _super_users(text: str) -> frozenset[str]:
    try:
        return parse_super_users(text)
    except ValueError as exc:
        raise ValueError(f"super_users: {exc}") from exc


def _number(options: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{key}: an integer >= {minimum}, got {value!r}")
    return value


def input_document(context: RequestContext, action: Action) -> dict[str, Any]:
    """The plugin's ``Request(Input(requestContext, action))`` as its Jackson serializers write
    it, plus ``requestContext.groups``: the connection's group principals (``Group:<name>``,
    issue 37), an empty list until a group source is configured.

    ``clientAddress`` is Java's ``InetAddress.toString()`` (``/127.0.0.1``); KIP-511's
    ``clientInformation`` is ``unknown`` (Kafka's ``ClientInformation.EMPTY``) where the
    context does not carry it; the plugin's ``connectionId`` is not sent."""
    pattern = action.resource_pattern
    principal = context.principal
    information = getattr(context, "client_information", None) or ("unknown", "unknown")
    return {
        "input": {
            "requestContext": {
                "clientAddress": f"/{context.host}",
                "clientInformation": {
                    "softwareName": information[0],
                    "softwareVersion": information[1],
                },
                "header": {
                    "name": {
                        "clientId": context.client_id,
                        "correlationId": context.correlation_id,
                        "requestApiKey": context.api_key,
                        "requestApiVersion": context.api_version,
                    },
                    "headerVersion": _header_version(context),
                },
                "listenerName": context.listener_name,
                "principal": {"principalType": principal.principal_type, "name": principal.name},
                "groups": [
                    {"principalType": g.principal_type, "name": g.name}
                    for g in getattr(context, "groups", ())
                ],
                "securityProtocol": context.security_protocol.value,
            },
            "action": {
                "resourcePattern": {
                    "resourceType": pattern.resource_type.name,
                    "name": pattern.name,
                    "patternType": pattern.pattern_type.name,
                    "unknown": pattern.resource_type is ResourceType.UNKNOWN,
                },
                "operation": action.operation.name,
                "resourceReferenceCount": action.resource_reference_count,
                "logIfAllowed": action.log_if_allowed,
                "logIfDenied": action.log_if_denied,
            },
        }
    }


def _header_version(context: RequestContext) -> int:
    """``RequestHeader.headerVersion``: 2 for flexible versions, else 1 (0 for the
    ControlledShutdown v0 header, which no client sends through a proxy)."""
    return 1 if context.api_key == 18 and context.api_version == 0 else 2


class _Http:
    """One keep-alive HTTP connection per pool thread to the OPA server of ``url``."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.parts = urllib.parse.urlsplit(url)
        self.timeout_s = timeout_s
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            kind = (
                http.client.HTTPSConnection
                if self.parts.scheme == "https"
                else http.client.HTTPConnection
            )
            conn = kind(self.parts.hostname or "", self.parts.port, timeout=self.timeout_s)
            self._local.conn = conn
        return conn

    def request(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        """One exchange; a kept-alive connection the server closed is retried once."""
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                return response.status, response.read()
            except TimeoutError as exc:
                self._drop(conn)
                raise OpaError("timeout", f"no answer within {self.timeout_s:g} s") from exc
            except (http.client.HTTPException, OSError) as exc:
                self._drop(conn)
                if attempt == 2 or not isinstance(
                    exc, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError
                ):
                    raise OpaError("unreachable", f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self._local.conn = None

    def close(self) -> None:
        """Close the calling thread's connection, if it has one."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            self._drop(conn)

    def decide(self, body: bytes) -> bool:
        """POST the input document to the decision URL; ``result`` must be a boolean."""
        path = self.parts.path or "/"
        if self.parts.query:
            path += "?" + self.parts.query
        status, data = self.request("POST", path, body)
        if status != 200:
            raise OpaError("http_status", f"HTTP {status}: {data[:200]!r}")
        try:
            answer = json.loads(data)
        except ValueError as exc:
            raise OpaError("bad_response", f"not JSON: {data[:200]!r}") from exc
        result = answer.get("result") if isinstance(answer, dict) else None
        if not isinstance(result, bool):
            raise OpaError("not_boolean", f"result is {result!r}, not a boolean")
        return result

    def health(self) -> str | None:
        """``GET /health``: None when OPA answers 200, else why not."""
        try:
            status, data = self.request("GET", "/health", None)
        except OpaError as exc:
            return str(exc)
        return None if status == 200 else f"GET /health answered HTTP {status}"


@dataclass(frozen=True, slots=True)
class ServerCheck:
    """What :func:`check_server` found: OPA's health and one decision, or why not."""

    health_url: str | None
    """None with ``mode: wasm`` (no server)."""
    health_error: str | None
    """None: ``GET /health`` answered 200 (or there is no server)."""
    decision: bool | None
    """The decision URL's boolean for the probe; None when it gave none."""
    decision_error: str | None
    """Why no boolean came (an :class:`OpaError`'s text: its reason first)."""


def check_server(options: OpaOptions, context: RequestContext, action: Action) -> ServerCheck:
    """Ask the OPA server of ``options`` what the authorizer asks it (blocking; each call
    bounded by ``timeout_ms``): ``GET /health`` as ``/readyz`` does, then the decision URL
    for ``context`` and ``action`` as a lookup does (``kafkaguard doctor``). With
    ``mode: wasm``: the bundle instantiated and the decision evaluated in process."""
    if options.mode == "wasm":
        try:
            allowed = _wasm_policy(options).decide(input_document(context, action)["input"])
        except (ValueError, WasmEvalError) as exc:
            return ServerCheck(None, None, None, str(exc))
        return ServerCheck(None, None, allowed, None)
    http = _Http(options.url, options.timeout_ms / 1000)
    parts = http.parts
    health_url = f"{parts.scheme}://{parts.netloc}/health"
    health_error = http.health()
    try:
        decision: bool | None = http.decide(json.dumps(input_document(context, action)).encode())
        decision_error = None
    except OpaError as exc:
        decision, decision_error = None, str(exc)
    finally:
        http.close()
    return ServerCheck(health_url, health_error, decision, decision_error)


CacheKey = tuple[Any, ...]
Outcome = tuple[bool, DecisionReason]
"""A decision: allowed, and why."""
_HELD_KEPT: Final = 4096
"""Held requests remembered (the oldest forgotten)."""
HELD_TTL_S: Final = 5.0
"""How long a held request is remembered: it is asked again as soon as its lookups are in,
and again after each later call that misses the cache."""


class DecisionCache:
    """The plugin's decision cache: at most ``maximum_size`` entries (least recently used
    evicted first), each expiring ``ttl`` seconds after it was written. Used on the event
    loop's thread only."""

    __slots__ = ("_entries", "hits", "maximum_size", "misses")

    def __init__(self, maximum_size: int) -> None:
        self.maximum_size = maximum_size
        self._entries: OrderedDict[CacheKey, tuple[float, bool, DecisionReason]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: CacheKey, now: float) -> tuple[bool, DecisionReason] | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] <= now:
            if entry is not None:
                del self._entries[key]
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry[1], entry[2]

    def put(self, key: CacheKey, allowed: bool, reason: DecisionReason, expires: float) -> None:
        if self.maximum_size == 0:
            return
        self._entries[key] = (expires, allowed, reason)
        self._entries.move_to_end(key)
        while len(self._entries) > self.maximum_size:
            self._entries.popitem(last=False)


class OpaCounters:
    """What ``/metrics`` shows of the OPA authorizer: plain integers, read when scraped."""

    __slots__ = ("errors", "healthy", "lookups", "lookup_seconds")

    def __init__(self) -> None:
        self.lookups = {"allowed": 0, "denied": 0, "error": 0}
        self.errors = dict.fromkeys(ERROR_REASONS, 0)
        self.lookup_seconds = 0.0
        self.healthy: bool | None = None


class _Held:
    """A request held for lookups (``DecisionPendingError``) and asked again: what was
    recorded for it before (each decision is audited once), and what its lookups answered
    (the cache may evict them before it is asked again: a small ``cache_maximum_size``).
    Known by its ``RequestContext`` object, which the connection keeps for the request while
    it is held: an equal context of another connection is another request."""

    __slots__ = ("answers", "context", "expires", "recorded")

    def __init__(self, context: RequestContext, recorded: set[Action]) -> None:
        self.context = context
        self.recorded = recorded
        self.answers: dict[CacheKey, Outcome] = {}
        self.expires = time.monotonic() + HELD_TTL_S


class _HeldRequests:
    """The requests held recently (bounded: the oldest are forgotten, as are those older than
    :data:`HELD_TTL_S`), and what the request being decided now has recorded."""

    __slots__ = ("_by_id", "current", "current_recorded")

    def __init__(self) -> None:
        self._by_id: OrderedDict[int, _Held] = OrderedDict()
        self.current: RequestContext | None = None
        self.current_recorded: set[Action] = set()

    def get(self, context: RequestContext, now: float) -> _Held | None:
        held = self._by_id.get(id(context))
        if held is None or held.context is not context:
            return None
        if held.expires <= now:
            del self._by_id[id(context)]
            return None
        return held

    def hold(self, context: RequestContext) -> _Held:
        """``context``'s request is held: what it recorded so far is not recorded again."""
        held = self.get(context, time.monotonic())
        if held is None:
            recorded = self.current_recorded if self.current is context else set()
            held = self._by_id[id(context)] = _Held(context, set(recorded))
            while len(self._by_id) > _HELD_KEPT:
                self._by_id.popitem(last=False)
        elif self.current is context:
            held.recorded |= self.current_recorded
        held.expires = time.monotonic() + HELD_TTL_S
        return held

    def first_time(self, context: RequestContext, action: Action) -> bool:
        """Record ``action`` for ``context``; False if it was, before the request was held."""
        if self.current is not context:
            self.current, self.current_recorded = context, set()
        self.current_recorded.add(action)
        if not self._by_id:
            return True
        held = self.get(context, time.monotonic())
        if held is None:
            return True
        if action in held.recorded:
            return False
        held.recorded.add(action)
        return True


def _wasm_policy(options: OpaOptions) -> WasmPolicy:
    """``mode: wasm``'s module, instantiated (errors name the option)."""
    assert options.bundle is not None
    try:
        return WasmPolicy(
            WasmBundle.read(Path(options.bundle)),
            options.entrypoint,
            timeout_s=options.timeout_ms / 1000,
        )
    except WasmPolicyError as exc:
        raise ValueError(f"bundle: {exc}") from exc


class OpaAuthorizer:
    """The KIP-504 :class:`~kafkaguard.policy.authorizer.Authorizer` asking OPA (module doc)."""

    def __init__(
        self,
        config: AuthorizerConfig | None = None,
        store: AclStore | None = None,
        *,
        decision_listener: Callable[[DecisionEvent], None] | None = None,
    ) -> None:
        self.config = config or AuthorizerConfig()
        try:
            self.options = OpaOptions.parse(self.config.options, self.config.super_users)
        except ValueError as exc:
            raise ValueError(f"authorizer.options: {exc}") from exc
        self.decision_listener = decision_listener
        self.store = None
        """No ACL store: OPA's policy and data decide (``/readyz`` reads ``store``)."""
        self._unused_store = store
        self.counters = OpaCounters()
        self.cache = DecisionCache(self.options.cache_maximum_size)
        self._http = _Http(self.options.url, self.options.timeout_ms / 1000)
        self._pool = ThreadPoolExecutor(self.options.max_in_flight, thread_name_prefix="opa")
        self._lookups: dict[CacheKey, asyncio.Future[Outcome]] = {}
        self._tasks: set[asyncio.Task[Outcome]] = set()
        self._held = _HeldRequests()
        self._health: asyncio.Task[None] | None = None
        self._health_error: str | None = "not checked yet"
        self._logged: dict[str, tuple[float, int]] = {}
        self.ready = True
        self._wasm: WasmPolicy | None = None
        """``mode: wasm``: the policy in process; decisions not cached are evaluated at once,
        on the caller's thread (no server, no health to check)."""
        if self.options.mode == "wasm":
            try:
                self._wasm = _wasm_policy(self.options)
            except ValueError as exc:
                raise ValueError(f"authorizer.options: {exc}") from exc
            self._health_error = None
            self.counters.healthy = True

    reloadable_options: Final = RELOADABLE_OPTIONS
    """For the reload plan: which ``authorizer.options`` :meth:`reconfigure` applies."""

    def reconfigure(self, config: AuthorizerConfig) -> None:
        """Apply a reloaded ``authorizer:`` section: the super users (``authorizer.super_users``
        and the ``super_users`` option), from the next decision on every connection, as
        ``StandardAuthorizer.reconfigure`` applies Kafka's ``super.users``. The other options
        are kept (the reload plan names them as needing a restart); cached decisions stay
        valid, since a super user is recognised before the cache is asked."""
        kept = {k: v for k, v in self.config.options.items() if k not in RELOADABLE_OPTIONS}
        kept.update((k, v) for k, v in config.options.items() if k in RELOADABLE_OPTIONS)
        try:
            parsed = OpaOptions.parse(kept, config.super_users)
        except ValueError as exc:  # load_config checked the file: a caller's mistake
            raise ValueError(f"authorizer.options: {exc}") from exc
        self.options = dataclasses.replace(self.options, super_users=parsed.super_users)
        self.config = dataclasses.replace(
            config, class_path=self.config.class_path, options=MappingProxyType(kept)
        )

    def _super_user(self, context: RequestContext) -> bool:
        """The principal or one of its groups is a super user (``StandardAuthorizer``'s
        ``super.users`` check, with kafkaguard's groups, docs/groups.md)."""
        super_users = self.options.super_users
        if not super_users:
            return False
        return context.principal.text in super_users or any(
            g.text in super_users for g in getattr(context, "groups", ())
        )

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, listeners: Sequence[str]) -> Mapping[str, Awaitable[None]]:
        """Listeners open at once (as the plugin's ``start``): while OPA cannot be asked,
        requests are denied and ``/readyz`` says why."""
        loop = asyncio.get_running_loop()
        if self._health is None and self._wasm is None:
            self._health = loop.create_task(self._check_health(), name="opa-health")
        futures: dict[str, Awaitable[None]] = {}
        for name in listeners:
            done: asyncio.Future[None] = loop.create_future()
            done.set_result(None)
            futures[name] = done
        return futures

    async def _check_health(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            error = await loop.run_in_executor(self._pool, self._http.health)
            if error != self._health_error:
                if error is None:
                    logger.info("OPA at %s is healthy", self.options.url)
                else:
                    logger.warning("OPA at %s is not healthy: %s", self.options.url, error)
            self._health_error = error
            self.counters.healthy = error is None
            await asyncio.sleep(self.options.health_interval_ms / 1000)

    def not_ready(self) -> Iterator[str]:
        """``/readyz``: OPA's health as last checked."""
        if self._health_error is not None:
            yield f"opa: {self.options.url.split('/v1/', 1)[0]}: {self._health_error}"

    async def close(self) -> None:
        if self._health is not None:
            self._health.cancel()
        for task in list(self._tasks):
            task.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._unused_store is not None:
            await self._unused_store.close()

    # -- decisions ---------------------------------------------------------------------------
    @staticmethod
    def cache_key(context: RequestContext, action: Action) -> CacheKey:
        """The plugin's ``CacheableRequest(principal, action, host)``, and the listener, its
        security protocol and the groups, which the input document carries too."""
        return (
            context.principal,
            context.host,
            context.listener_name,
            context.security_protocol,
            tuple(getattr(context, "groups", ())),
            action,
        )

    def authorize(
        self, context: RequestContext, actions: Sequence[Action]
    ) -> list[AuthorizationResult]:
        """One result per action, from the cache; a miss raises ``DecisionPendingError``
        (on the event loop) or asks OPA in the calling thread (tools, no loop running)."""
        for action in actions:
            check_literal(action)
        if self._super_user(context):
            return [
                self._record(context, action, True, DecisionReason.SUPER_USER) for action in actions
            ]
        return self._decide(context, actions)

    def _decide(
        self, context: RequestContext, actions: Sequence[Action]
    ) -> list[AuthorizationResult]:
        now = time.monotonic()
        cache = self.cache
        keys = [self.cache_key(context, action) for action in actions]
        held = self._held.get(context, now)
        answers = held.answers if held is not None else None
        found = [(answers.get(key) if answers else None) or cache.get(key, now) for key in keys]
        missing = [i for i, entry in enumerate(found) if entry is None]
        if missing:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None and self._wasm is None:
                self._held.hold(context)
                raise DecisionPendingError(self._look_up(loop, context, actions, keys, missing))
            for i in missing:
                answer = self._blocking_lookup(context, actions[i])
                found[i] = outcome = self._outcome(answer)
                if self._wasm is not None:  # in process: cached as a lookup's answer is
                    self._cache(keys[i], answer, outcome)
        return [
            self._record(context, action, entry[0], entry[1])
            for action, entry in zip(actions, found, strict=True)
            if entry is not None
        ]

    def _look_up(
        self,
        loop: asyncio.AbstractEventLoop,
        context: RequestContext,
        actions: Sequence[Action],
        keys: list[CacheKey],
        missing: list[int],
    ) -> asyncio.Future[Any]:
        """Start (or join) the lookups of ``missing``; the future is done when all are, and
        their answers are kept for ``context``'s request (:class:`_Held`)."""
        waits: list[asyncio.Future[Outcome]] = []
        for i in missing:
            key = keys[i]
            lookup = self._lookups.get(key)
            if lookup is None:
                task = loop.create_task(self._lookup(key, context, actions[i]))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                lookup = self._lookups[key] = task
            waits.append(lookup)
        wanted = [keys[i] for i in missing]

        def keep(done: asyncio.Future[list[Outcome | BaseException]]) -> None:
            if done.cancelled():
                return
            answers = self._held.hold(context).answers
            for key, outcome in zip(wanted, done.result(), strict=True):
                if isinstance(outcome, BaseException):  # the pool shut down: closing
                    outcome = self._outcome(OpaError("unreachable", repr(outcome)))
                answers[key] = outcome

        gathered = asyncio.gather(*waits, return_exceptions=True)
        gathered.add_done_callback(keep)
        return gathered

    async def _lookup(self, key: CacheKey, context: RequestContext, action: Action) -> Outcome:
        loop = asyncio.get_running_loop()
        body = json.dumps(input_document(context, action)).encode()
        started = time.monotonic()
        try:
            allowed: bool | OpaError = await asyncio.wait_for(
                loop.run_in_executor(self._pool, self._http.decide, body),
                self.options.timeout_ms / 1000,
            )
        except OpaError as exc:
            allowed = exc
        except TimeoutError:
            allowed = OpaError("timeout", f"no decision within {self.options.timeout_ms} ms")
        finally:
            self._lookups.pop(key, None)
        self.counters.lookup_seconds += time.monotonic() - started
        outcome = self._outcome(allowed)
        self._cache(key, allowed, outcome)
        return outcome

    def _cache(self, key: CacheKey, answer: bool | OpaError, outcome: Outcome) -> None:
        """Keep ``outcome`` for ``cache_expire_after_seconds`` (an error's for at most
        :data:`ERROR_TTL_S`)."""
        ttl = self.options.cache_expire_after_seconds
        if isinstance(answer, OpaError):
            ttl = min(ttl, ERROR_TTL_S)
        self.cache.put(key, outcome[0], outcome[1], time.monotonic() + ttl)

    def _blocking_lookup(self, context: RequestContext, action: Action) -> bool | OpaError:
        """The decision asked in the calling thread: evaluated in process (``mode: wasm``),
        else POSTed to OPA."""
        document = input_document(context, action)
        wasm = self._wasm
        try:
            if wasm is not None:
                started = time.monotonic()
                try:
                    return wasm.decide(document["input"])
                finally:
                    self.counters.lookup_seconds += time.monotonic() - started
            return self._http.decide(json.dumps(document).encode())
        except OpaError as exc:
            return exc
        except WasmEvalError as exc:
            return OpaError(exc.reason, str(exc))

    def _outcome(self, answer: bool | OpaError) -> Outcome:
        """Count the lookup; an error is logged (rate-limited) and decided by
        ``allow_on_error``."""
        lookups = self.counters.lookups
        if not isinstance(answer, OpaError):
            lookups["allowed" if answer else "denied"] += 1
            return answer, DecisionReason.OPA_ALLOW if answer else DecisionReason.OPA_DENY
        lookups["error"] += 1
        self.counters.errors[answer.reason] += 1
        self._log_error(answer)
        return self.options.allow_on_error, DecisionReason.OPA_ERROR

    def _log_error(self, error: OpaError) -> None:
        now = time.monotonic()
        last, suppressed = self._logged.get(error.reason, (float("-inf"), 0))
        if now - last < LOG_INTERVAL_S:
            self._logged[error.reason] = (last, suppressed + 1)
            return
        self._logged[error.reason] = (now, 0)
        logger.warning(
            "OPA decision failed (%s; %s)%s",
            error,
            "allowed: allow_on_error" if self.options.allow_on_error else "denied",
            f" ({suppressed} similar lines suppressed)" if suppressed else "",
        )

    def _record(
        self, context: RequestContext, action: Action, allowed: bool, reason: DecisionReason
    ) -> AuthorizationResult:
        result = ALLOWED if allowed else DENIED
        if self._held.first_time(context, action):
            log_decision(context, action, result, reason, None)
            listener = self.decision_listener
            if listener is not None:
                listener(DecisionEvent(context, action, result, reason))
        return result

    def authorize_by_resource_type(
        self, context: RequestContext, operation: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult:
        """The plugin's ``authorizeByResourceType``: OPA is asked about an empty PREFIXED
        name of the type ("any resource of it"), audited like any decision."""
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError(f"Must specify a non-filter operation type, got {operation.name}")
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(f"Must specify a non-filter resource type, got {resource_type.name}")
        action = Action(operation, ResourcePattern(resource_type, "", PatternType.PREFIXED), 0)
        if self._super_user(context):
            return self._record(context, action, True, DecisionReason.SUPER_USER)
        return self._decide(context, [action])[0]

    def authorized_operations(
        self, context: RequestContext, resource: ResourcePattern
    ) -> set[AclOperation]:
        """KIP-430: the supported operations OPA allows on ``resource`` (unlogged)."""
        return allowed_operations(self, context, resource)

    # -- ACL management: not here ------------------------------------------------------------
    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        raise AclsNotManagedError(NOT_MANAGED)

    async def create_acls(
        self, context: RequestContext, bindings: Sequence[AclBinding]
    ) -> list[AclCreateResult]:
        error = ApiError(ApiErrorCode.SECURITY_DISABLED, NOT_MANAGED)
        return [AclCreateResult(error) for _ in bindings]

    async def delete_acls(
        self, context: RequestContext, filters: Sequence[AclBindingFilter]
    ) -> list[AclDeleteResult]:
        error = ApiError(ApiErrorCode.SECURITY_DISABLED, NOT_MANAGED)
        return [AclDeleteResult(error=error) for _ in filters]
