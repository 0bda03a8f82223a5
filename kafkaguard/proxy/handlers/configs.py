"""Configs: DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44).

ConfigResource type ids (``ConfigResource.Type``): TOPIC 2, BROKER 4, BROKER_LOGGER 8,
CLIENT_METRICS 16, GROUP 32. Per resource: BROKER, BROKER_LOGGER, CLIENT_METRICS → the
cluster (31); TOPIC → the topic (29); GROUP → the group (30). Answers keep the request's
order, as the broker's ``ConfigAdminManager.reassemble*Response`` does for the alters.

Intentional deviation from Kafka: DescribeConfigs results for BROKER resources hide every
address-bearing config (:func:`is_address_config`: ``listeners``, ``advertised.listeners``, any
``*.listeners``, ``controller.quorum.voters``, ``controller.quorum.bootstrap.servers``,
``bootstrap.servers`` and any ``*.bootstrap.servers``, ``zookeeper.connect``, and the legacy
``host.name`` / ``advertised.host.name``) as Kafka hides a sensitive one: ``value`` null,
``is_sensitive`` true, every synonym's value null. Kafka returns these to any principal with
DESCRIBE_CONFIGS on the cluster; the proxy's rule that clients never see a real broker address
wins. Only responses to requests naming a BROKER resource are decoded for this.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar, cast

from kafkaguard.policy.model import AclOperation, ResourcePattern
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, RequestPayload
from kafkaguard.proxy.handlers.support.authz import CLUSTER, duplicates, group, is_allowed, topic
from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    ApiHandler,
    AskFirst,
    Forward,
    HandlerContext,
    Request,
    Respond,
    ResponseRewrite,
    Verdict,
)
from kafkaguard.proxy.handlers.support.fields import ErrorCoded, Named
from kafkaguard.proxy.handlers.support.responses import (
    ERROR_MESSAGES,
    entity,
    entity_from,
    merge_rewrite,
    split,
)

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
_DELETE_OP = 1  # AlterConfigOp.OpType.DELETE: the only incremental op whose value may be null

Key = tuple[int, str]


# What the handlers read of kio's classes (any version of each schema).
class _Resource(Protocol):
    """A config resource as requests and results name it."""

    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...


class _Result(_Resource, Entity, Protocol):
    """A resource's entry of a response."""


class _Synonym(Entity, Protocol):
    @property
    def value(self) -> str | None: ...


class _DescribedConfig(Named, _Synonym, Protocol):
    """``DescribeConfigsResourceResult``; ``synonyms`` (v1+) is read by name."""

    @property
    def is_sensitive(self) -> bool: ...


class _DescribeResult(_Result, Protocol):
    @property
    def configs(self) -> Sequence[_DescribedConfig]: ...


class _DescribeConfigsResponse(Entity, Protocol):
    @property
    def results(self) -> Sequence[_DescribeResult]: ...


class _ConfigsBody(Entity, Protocol):
    """What DescribeConfigs, AlterConfigs and IncrementalAlterConfigs requests share."""

    @property
    def resources(self) -> Sequence[_Resource]: ...


class _AlteredConfig(Named, Protocol):
    """A config of an alter request; ``config_operation`` in IncrementalAlterConfigs only."""

    @property
    def value(self) -> str | None: ...
    @property
    def config_operation(self) -> int: ...


class _AlteredResource(_Resource, Protocol):
    @property
    def configs(self) -> Sequence[_AlteredConfig]: ...


class _AlterConfigsBody(_ConfigsBody, Protocol):
    @property
    def resources(self) -> Sequence[_AlteredResource]: ...
    @property
    def validate_only(self) -> bool: ...


class _AlterResult(ErrorCoded, _Result, Protocol):
    """A result of AlterConfigs or IncrementalAlterConfigs."""


class _AlterConfigsResponse(Entity, Protocol):
    @property
    def responses(self) -> Sequence[_AlterResult]: ...


_Described = TypeVar("_Described", bound=_DescribeConfigsResponse)
_Altered = TypeVar("_Altered", bound=_AlterConfigsResponse)
_C = TypeVar("_C", bound=_DescribedConfig)


class _AlterRewrite(Protocol):
    def __call__(self, response: _Altered, /) -> _Altered: ...


def config_resource(resource_type: int, name: str) -> tuple[ResourcePattern, ErrorCode] | None:
    """The ACL resource guarding a config resource and the code when denied; ``None`` for a
    type Kafka does not know."""
    if resource_type in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        return CLUSTER, ErrorCode.cluster_authorization_failed
    if resource_type == TOPIC:
        return topic(name), ErrorCode.topic_authorization_failed
    if resource_type == GROUP:
        return group(name), ErrorCode.group_authorization_failed
    return None


def _key(entry: _Resource) -> Key:
    return int(entry.resource_type), entry.resource_name


def _resource_error(
    result_type: type[_Result],
    resource: _Resource,
    code: ErrorCode,
    message: str | None = None,
    **values: object,
) -> _Result:
    """A result for ``resource`` with ``code`` and ``message`` (``Errors.message()`` unless
    given)."""
    values["error_message"] = ERROR_MESSAGES[code] if message is None else message
    values["resource_type"] = resource.resource_type
    values["resource_name"] = resource.resource_name
    return entity_from(result_type, code, values)


_ADDRESS_CONFIGS = frozenset(
    {
        "listeners",
        "advertised.listeners",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "bootstrap.servers",
        "zookeeper.connect",
        "host.name",  # removed in Kafka 3.0, still answered by older brokers
        "advertised.host.name",
    }
)
_ADDRESS_SUFFIXES = (".listeners", ".bootstrap.servers")


def is_address_config(name: str) -> bool:
    """Whether a broker config's value names broker (or ZooKeeper) addresses."""
    return name in _ADDRESS_CONFIGS or name.endswith(_ADDRESS_SUFFIXES)


def _hide_config(config: _C) -> _C:
    """``config`` with its value (and every synonym's) null and marked sensitive, as Kafka
    describes a sensitive config."""
    synonyms: Sequence[_Synonym] = getattr(config, "synonyms", ())
    hidden = tuple(codec.replace(s, value=None) if s.value is not None else s for s in synonyms)
    changes: dict[str, object] = {"value": None, "is_sensitive": True}
    if hidden != tuple(synonyms):
        changes["synonyms"] = hidden
    if config.value is None and config.is_sensitive and "synonyms" not in changes:
        return config
    return codec.replace(config, **changes)


def hide_broker_addresses(response: _Described) -> _Described:
    """The DescribeConfigs rewrite for BROKER results (see the module docstring); the
    response itself when there was nothing to hide."""
    results: list[_DescribeResult] = []
    changed = False
    for result in response.results:
        if result.resource_type == BROKER and any(
            is_address_config(c.name) for c in result.configs
        ):
            configs = tuple(
                _hide_config(c) if is_address_config(c.name) else c for c in result.configs
            )
            if any(a is not b for a, b in zip(configs, result.configs, strict=True)):
                result = codec.replace(result, configs=configs)
                changed = True
        results.append(result)
    return codec.replace(response, results=tuple(results)) if changed else response


def _forward_authorized(
    request: Request,
    body: _ConfigsBody,
    field: str,
    keys: list[Key],
    local: dict[Key, list[_Result]],
    rewrite: ResponseRewrite | None = None,
    changes: dict[str, object] | None = None,
) -> Verdict:
    """Forward the resources without a local answer (and the body ``changes``); merge the
    local ones into the broker's ``field`` in request order (the proxy answers alone when none
    is left); ``rewrite`` then applies to what the broker answered."""
    if not local:
        if changes:
            upstream = cast(RequestPayload, codec.replace(body, **changes))  # the client's schema
            return Forward(request=upstream, rewrite=rewrite)
        return FORWARD if rewrite is None else Forward(rewrite=rewrite)
    merge = merge_rewrite(keys, local, field, _key)
    kept = tuple(r for r in body.resources if _key(r) not in local)
    return split(request, "resources", kept, field, merge, rewrite=rewrite, changes=changes)


class DescribeConfigsHandler(ApiHandler[_ConfigsBody]):
    """``ConfigHelper.handleDescribeConfigsRequest``: DESCRIBE_CONFIGS per resource, in
    order; a resource of an unknown type aborts the whole request (InvalidRequestException →
    ``DescribeConfigsRequest.getErrorResponse``: 42 on every resource) — the checks made
    before it still count, as in Kafka. Denied resources get the code and
    ``Errors.message()`` with no configs; authorized missing topics get 3 from the broker.
    BROKER results lose their address-bearing values (module docstring)."""

    api_key = 32
    decode_request = True

    def on_request(self, request: Request[_ConfigsBody], ctx: HandlerContext) -> Verdict:
        body = request.body
        schema = codec.response_schema(32, request.header.api_version)
        result_type: type[_Result] = codec.nested_type(schema, "results")
        keys = [_key(r) for r in body.resources]
        local: dict[Key, list[_Result]] = {}
        for resource in body.resources:
            guard = config_resource(resource.resource_type, resource.resource_name)
            if guard is None:
                invalid = ErrorCode.invalid_request
                results = tuple(
                    _resource_error(result_type, r, invalid, configs=()) for r in body.resources
                )
                return Respond(entity(schema, results=results))
            pattern, code = guard
            if not is_allowed(ctx, request, AclOperation.DESCRIBE_CONFIGS, pattern):
                local.setdefault(_key(resource), []).append(
                    _resource_error(result_type, resource, code, configs=())
                )
        brokers = any(r.resource_type == BROKER and _key(r) not in local for r in body.resources)
        hide = hide_broker_addresses if brokers else None
        return _forward_authorized(request, body, "results", keys, local, hide)


class _AlterConfigsHandler(ApiHandler[_AlterConfigsBody]):
    """The broker's ``ConfigAdminManager.preprocess`` pre-checks (stateless ones) and then
    the controller's ``authorizeAlterResource``.

    Before authorization, in Kafka's order: a resource named twice → 42 "Each resource must
    appear at most once." on every occurrence; duplicate config keys → 42; a null value
    (except incremental DELETE) → 42; an unknown resource type → 42. BROKER_LOGGER
    (incremental only) is authorized there: ALTER_CONFIGS on the cluster, 31 (no message:
    ``ApiError.fromThrowable`` drops the default one) before its logger names are validated.
    Then ALTER_CONFIGS per remaining resource (31/29/30, message ``Errors.message()``, as
    ``new ApiError(error)`` sets it); the authorized ones are forwarded.

    A BROKER resource is also validated by the broker before authorization (its node id, and
    ``DynamicBrokerConfig.validate`` of the change): Kafka answers those failures (42) even to
    a principal without ALTER_CONFIGS on the cluster. The proxy has no broker config to
    validate against, so it lets the broker do it: such resources are forwarded with
    ``validate_only`` — nothing changes — and their result becomes 31 unless the broker
    rejected them with 42. When the request is validate-only anyway, or nothing else in it is
    forwarded, that is the request itself; when it also carries authorized changes to apply,
    the BROKER resources are validated in a question of their own first (``questions.py``) and the
    changes forwarded after. Address configs are never sent for validation (below).
    """

    incremental: bool

    def on_request(  # noqa: C901 - one branch per resource type, as KafkaApis.handleAlterConfigsRequest
        self, request: Request[_AlterConfigsBody], ctx: HandlerContext
    ) -> Verdict:
        body = request.body
        schema = codec.response_schema(self.api_key, request.header.api_version)
        result_type: type[_Result] = codec.nested_type(schema, "responses")
        keys = [_key(r) for r in body.resources]
        repeated = duplicates(keys)
        local: dict[Key, list[_Result]] = {}

        def reject(resource: _Resource, code: ErrorCode, message: str | None = None) -> None:
            local.setdefault(_key(resource), []).append(
                _resource_error(result_type, resource, code, message)
            )

        for resource in body.resources:
            if _key(resource) in repeated:
                reject(
                    resource, ErrorCode.invalid_request, "Each resource must appear at most once."
                )
                continue
            problem = self._precheck(resource)
            if problem is not None:
                reject(resource, ErrorCode.invalid_request, problem)
            elif resource.resource_type == BROKER_LOGGER and not is_allowed(
                ctx, request, AclOperation.ALTER_CONFIGS, CLUSTER
            ):
                local.setdefault(_key(resource), []).append(
                    entity(
                        result_type,
                        ErrorCode.cluster_authorization_failed,
                        error_message=None,
                        resource_type=resource.resource_type,
                        resource_name=resource.resource_name,
                    )
                )
        unvalidated: list[_AlteredResource] = []  # denied BROKER resources the broker validates
        for resource in body.resources:
            if _key(resource) in local or resource.resource_type == BROKER_LOGGER:
                continue
            guard = config_resource(resource.resource_type, resource.resource_name)
            assert guard is not None  # unknown types were rejected by the pre-check
            pattern, code = guard
            if is_allowed(ctx, request, AclOperation.ALTER_CONFIGS, pattern):
                continue
            if resource.resource_type == BROKER and not any(
                is_address_config(c.name) for c in resource.configs
            ):
                unvalidated.append(resource)
            else:
                # An address config is never sent for validation: a broker's message about an
                # invalid listener may quote its real listeners (Kafka 3.x's
                # DynamicListenerConfig did): docs/design.md#clients-never-see-a-broker-address.
                reject(resource, code)
        probes = {_key(r) for r in unvalidated}
        applied = any(_key(r) not in local and _key(r) not in probes for r in body.resources)
        if probes and (body.validate_only or not applied):
            return _forward_authorized(
                request,
                body,
                "responses",
                keys,
                local,
                _denied_after_validation(probes),
                {"validate_only": True},
            )
        if probes:
            # The changes applied cannot be validate-only: the broker validates the denied
            # BROKER resources in a question of their own first.
            question = codec.replace(body, resources=tuple(unvalidated), validate_only=True)
            asked = cast(RequestPayload, question)  # the client's schema

            def then(answer: _AlterConfigsResponse) -> Verdict:
                validated = _denied_after_validation(probes)(answer)
                refused = ErrorCode.cluster_authorization_failed
                denied = {  # what the broker left unanswered is denied, never forwarded
                    _key(r): [_resource_error(result_type, r, refused)] for r in unvalidated
                }
                results: dict[Key, list[_Result]] = {
                    _key(r): [r] for r in validated.responses if _key(r) in probes
                }
                return _forward_authorized(
                    request, body, "responses", keys, local | denied | results
                )

            return AskFirst(asked, then)
        return _forward_authorized(request, body, "responses", keys, local)

    def _precheck(self, resource: _AlteredResource) -> str | None:
        names = [c.name for c in resource.configs]
        if len(set(names)) != len(names):
            return "Error due to duplicate config keys"
        nulls = [
            c.name
            for c in resource.configs
            if c.value is None and not (self.incremental and c.config_operation == _DELETE_OP)
        ]
        if nulls:
            return "Null value not supported for : " + ", ".join(nulls)
        supported = {TOPIC, BROKER, CLIENT_METRICS, GROUP}
        if self.incremental:
            supported.add(BROKER_LOGGER)
        if resource.resource_type not in supported:
            return f"Unknown resource type {int(resource.resource_type)}"
        return None


def _denied_after_validation(probes: set[Key]) -> _AlterRewrite:
    """The results of BROKER resources forwarded only for the broker's validation: its 42
    stands (Kafka rejects them so before authorizing), anything else is the 31 the principal
    gets from the controller's ``authorizeAlterResource``."""
    denied = ErrorCode.cluster_authorization_failed

    def rewrite(response: _Altered) -> _Altered:
        results = tuple(
            codec.replace(r, error_code=denied, error_message=ERROR_MESSAGES[denied])
            if _key(r) in probes and r.error_code != ErrorCode.invalid_request
            else r
            for r in response.responses
        )
        return codec.replace(response, responses=results)

    return rewrite


class AlterConfigsHandler(_AlterConfigsHandler):
    """AlterConfigs (33): legacy; BROKER_LOGGER is rejected by the pre-check (42)."""

    api_key = 33
    decode_request = True
    incremental = False


class IncrementalAlterConfigsHandler(_AlterConfigsHandler):
    """IncrementalAlterConfigs (44)."""

    api_key = 44
    decode_request = True
    incremental = True


HANDLERS: list[ApiHandler] = [
    DescribeConfigsHandler(),
    AlterConfigsHandler(),
    IncrementalAlterConfigsHandler(),
]
