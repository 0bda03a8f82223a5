"""Delegation-token APIs are answered by the proxy with 64, never forwarded."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkaguard.protocol import codec
from kafkaguard.proxy.handlers.delegation_tokens import ERROR_TIMESTAMP
from kafkaguard.proxy.handlers.support.base import Respond
from tests.support.handler_harness import HandlerHarness

NOT_ALLOWED = ErrorCode.delegation_token_request_not_allowed
MINUS_ONE = (-1).to_bytes(8, "big", signed=True)


def create(version: int, owner: tuple[str, str] | None = None) -> Any:
    schema = codec.request_schema(38, version)
    renewer = codec.nested_type(schema, "renewers")(principal_type="User", principal_name="r")
    values: dict[str, Any] = {"renewers": (renewer,), "max_lifetime": timedelta(hours=1)}
    if version >= 3:
        values["owner_principal_type"] = owner[0] if owner else None
        values["owner_principal_name"] = owner[1] if owner else None
    return schema(**values)


def answer(h: HandlerHarness, body: Any) -> tuple[Any, bytes]:
    verdict = h.send(body)
    assert isinstance(verdict, Respond), verdict  # never forwarded
    assert h.checked() == []  # the channel check precedes every ACL check
    return verdict.response, codec.encode_response(verdict.response, 7)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_create_is_refused_with_prepare_response_shape(version: int) -> None:
    h = HandlerHarness(super_users="User:alice")  # even a super user: no token auth here
    response, wire = answer(h, create(version))
    assert response.error_code == NOT_ALLOWED
    assert (response.principal_type, response.principal_name) == ("User", "alice")
    if version >= 3:
        assert (
            response.token_requester_principal_type,
            response.token_requester_principal_name,
        ) == ("User", "alice")
    assert response.issue_timestamp == response.expiry_timestamp == ERROR_TIMESTAMP
    assert response.max_timestamp == ERROR_TIMESTAMP
    assert response.token_id == "" and response.hmac == b""
    assert wire.count(MINUS_ONE) == 3  # the three timestamps are -1 on the wire


def test_create_for_another_owner_names_that_owner() -> None:
    response, _ = answer(HandlerHarness(), create(3, owner=("User", "bob")))
    assert (response.principal_type, response.principal_name) == ("User", "bob")
    assert response.token_requester_principal_name == "alice"


@pytest.mark.parametrize(("api_key", "field"), [(39, "renew_period"), (40, "expiry_time_period")])
@pytest.mark.parametrize("version", [1, 2])
def test_renew_and_expire(api_key: int, field: str, version: int) -> None:
    body = codec.request_schema(api_key, version)(hmac=b"\x01\x02", **{field: timedelta(hours=1)})
    response, wire = answer(HandlerHarness(super_users="User:alice"), body)
    assert response.error_code == NOT_ALLOWED
    assert response.expiry_timestamp == ERROR_TIMESTAMP
    assert MINUS_ONE in wire


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("owners", [None, ()])
def test_describe(version: int, owners: tuple[()] | None) -> None:
    body = codec.request_schema(41, version)(owners=owners)
    response, _ = answer(HandlerHarness(super_users="User:alice"), body)
    assert response.error_code == NOT_ALLOWED
    assert response.tokens == ()
