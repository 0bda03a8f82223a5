"""The connection's session hands the authorizer the client host as Kafka prints it."""

from __future__ import annotations

import copy
import ipaddress
import pickle
from pathlib import Path

import pytest

from kafkaguard.policy.authorizer import RequestContext, SecurityProtocol
from kafkaguard.policy.config import GroupsConfig
from kafkaguard.policy.groups import GroupResolver
from kafkaguard.policy.model import KafkaPrincipal
from kafkaguard.protocol.header import RequestHeaderInfo, peek_request_header
from kafkaguard.proxy.session import Session, peer_address


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        (("::1", 5000, 0, 0), "0:0:0:0:0:0:0:1"),
        (("::ffff:10.0.0.7", 5000, 0, 0), "10.0.0.7"),
        (("192.168.1.1", 5000), "192.168.1.1"),
    ],
)
def test_request_context_carries_java_host_text(peer: tuple[object, ...], host: str) -> None:
    session = Session("L", SecurityProtocol.PLAINTEXT, peer_address(peer))
    header = RequestHeaderInfo(3, 12, 7, "client", 0)
    context = session.request_context(header)
    assert context.host == host == session.client_host
    assert context.client_address == ipaddress.ip_address(peer[0])  # type: ignore[arg-type]
    assert (context.api_key, context.correlation_id, context.client_id) == (3, 7, "client")


def test_the_context_is_the_keyword_constructors_field_for_field() -> None:
    """``request_context`` builds the named tuple positionally (one ``tuple.__new__``): every
    field must land where ``RequestContext``'s keyword constructor puts it."""
    alice, team = KafkaPrincipal("User", "alice"), KafkaPrincipal("Group", "team")
    session = Session(
        "SECURE",
        SecurityProtocol.SASL_SSL,
        peer_address(("10.0.0.7", 5000)),
        principal=alice,
        groups=(team,),
    )
    context = session.request_context(RequestHeaderInfo(1, 16, 42, "app", 0))
    assert type(context) is RequestContext
    assert context == RequestContext(
        listener_name="SECURE",
        security_protocol=SecurityProtocol.SASL_SSL,
        principal=alice,
        client_address=ipaddress.ip_address("10.0.0.7"),
        api_key=1,
        api_version=16,
        client_id="app",
        correlation_id=42,
        host="10.0.0.7",
        groups=(team,),
    )


def test_a_null_client_id_reaches_the_authorizer_and_the_audit_empty() -> None:
    """``RequestHeader.parse`` reads a null client id as "": so does the KIP-504 context (the
    audit's decisions carry the context's client id)."""
    frame = bytes.fromhex("0000000a 0012 0003 00000007 ffff".replace(" ", ""))
    session = Session("L", SecurityProtocol.PLAINTEXT, peer_address(("10.0.0.7", 5000)))
    context = session.request_context(peek_request_header(frame))
    assert context.client_id == ""


def test_a_kept_context_never_changes_under_its_authorizer() -> None:
    """KIP-504's context is Kafka's immutable ``RequestContext``: an authorizer may keep the
    one it was given; nothing may change it, and the next request gets its own."""
    session = Session("L", SecurityProtocol.PLAINTEXT, peer_address(("10.0.0.7", 5000)))
    kept = session.request_context(RequestHeaderInfo(0, 11, 7, "first", 0))
    with pytest.raises(AttributeError):
        kept.correlation_id = 8  # type: ignore[misc]
    later = session.request_context(RequestHeaderInfo(1, 16, 8, "second", 0))
    assert (kept.api_key, kept.api_version, kept.correlation_id, kept.client_id) == (
        0,
        11,
        7,
        "first",
    )
    assert (later.api_key, later.api_version, later.correlation_id, later.client_id) == (
        1,
        16,
        8,
        "second",
    )
    built = RequestContext(
        listener_name="L",
        security_protocol=SecurityProtocol.PLAINTEXT,
        principal=session.principal,
        client_address=ipaddress.ip_address("10.0.0.7"),
        api_key=0,
        api_version=11,
        client_id="first",
        correlation_id=7,
    )
    assert built == kept and built.host == "10.0.0.7"


def test_a_context_copies_and_pickles_whole() -> None:
    """Audit replay and tools pickle and copy contexts: every field comes back."""
    session = Session("L", SecurityProtocol.SSL, peer_address(("::1", 5000, 0, 0)))
    context = session.request_context(RequestHeaderInfo(3, 12, 7, "client", 0))
    for again in (copy.copy(context), pickle.loads(pickle.dumps(context))):
        assert again == context and type(again) is RequestContext
        assert again.host == "0:0:0:0:0:0:0:1"


def test_the_context_carries_the_groups_and_a_new_groups_file_reaches_the_next_request(
    tmp_path: Path,
) -> None:
    """The file's groups are looked up at the first request (User:ANONYMOUS may have some),
    kept, and looked up again at the first request after a new file is in force."""
    path = tmp_path / "groups.yaml"
    path.write_text('version: 1\ngroups:\n  "User:ANONYMOUS": [guests]\n')
    resolver = GroupResolver.from_config(GroupsConfig(file=path))
    assert resolver is not None
    session = Session(
        "L", SecurityProtocol.PLAINTEXT, peer_address(("10.0.0.7", 1)), group_resolver=resolver
    )
    header = RequestHeaderInfo(3, 12, 7, "client", 0)
    assert session.request_context(header).groups == (KafkaPrincipal("Group", "guests"),)
    path.write_text('version: 1\ngroups:\n  "User:ANONYMOUS": [guests, readers]\n')
    assert resolver.refresh() is None
    assert session.request_context(header).groups == (
        KafkaPrincipal("Group", "guests"),
        KafkaPrincipal("Group", "readers"),
    )
    path.write_text("version: 1\ngroups: [\n")  # refused: the mapping in force stays
    assert resolver.refresh() is not None
    assert len(session.request_context(header).groups) == 2


def test_without_group_sources_the_context_has_no_groups() -> None:
    session = Session("L", SecurityProtocol.PLAINTEXT, peer_address(("10.0.0.7", 1)))
    session.authenticated(KafkaPrincipal("User", "alice"), (KafkaPrincipal("Group", "x"),))
    assert session.request_context(RequestHeaderInfo(3, 12, 7, "c", 0)).groups == ()
