"""ConsumerGroupHeartbeat v1 regex subscriptions (KIP-848) resolved by the proxy, without
sockets: the Metadata question, RE2 full-match resolution, the DESCRIBE filter of
``TopicRegexResolver.filterTopicDescribeAuthorizedTopics``, the refresh interval, and Kafka's
INVALID_REGULAR_EXPRESSION (128) for regexes RE2/J refuses."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.handlers.support.base import FORWARD, AskFirst, Forward, Respond, Verdict
from kafkaguard.proxy.handlers.support.regex_subscriptions import (
    INVALID_PLACEHOLDER,
    LIST_INTERVAL_S,
    MAX_MEMBERS_PER_CONNECTION,
    RESOLVE_INTERVAL_S,
    InvalidRegex,
    RegexSubscriptions,
    compile_regex,
)
from tests.support.entities import req, resp
from tests.support.handler_harness import HandlerHarness, acl

ALICE = "User:alice"
READ_G = acl(ALICE, "READ", "GROUP", "g")
ORDERS = acl(ALICE, "DESCRIBE", "TOPIC", "orders-", pattern="PREFIXED")
SECRET_DENIED = acl(ALICE, "DESCRIBE", "TOPIC", "orders-secret", permission="DENY")
CLUSTER = ["orders-a", "orders-b", "orders-secret", "payments", "xorders-a", "__consumer_offsets"]
IDS = {name: uuid.uuid5(uuid.NAMESPACE_DNS, name) for name in CLUSTER + ["orders-c", "orders-d"]}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def harness(*acls: Any) -> tuple[HandlerHarness, Clock]:
    h = HandlerHarness(list(acls) or [READ_G, ORDERS, SECRET_DENIED])
    clock = Clock()
    h.connection_state.get(RegexSubscriptions).clock = clock
    return h, clock


def heartbeat(
    epoch: int = 0,
    regex: str | None = "orders-.*",
    names: tuple[str, ...] | None = None,
    member: str = "m1",
) -> Any:
    return req(
        68,
        1,
        group_id="g",
        member_id=member,
        member_epoch=epoch,
        subscribed_topic_names=names,
        subscribed_topic_regex=regex,
        topic_partitions=() if epoch == 0 else None,
    )


def all_topics(verdict: Verdict, cluster: list[str]) -> Verdict:
    """Answer the proxy's Metadata "every topic" question as a broker holding ``cluster``."""
    assert isinstance(verdict, AskFirst), verdict
    assert verdict.question.topics is None  # type: ignore[attr-defined]
    return HandlerHarness.answer_metadata(verdict, {IDS[n]: n for n in cluster})


def sent_names(verdict: Verdict) -> tuple[str, ...] | None:
    """The subscribed names the broker receives (``None``: the client's bytes unchanged)."""
    assert isinstance(verdict, Forward), verdict
    if verdict.request is None:
        return None
    body: Any = verdict.request
    assert body.subscribed_topic_regex is None
    return tuple(body.subscribed_topic_names)


def ok(h: HandlerHarness, verdict: Verdict, code: ErrorCode = ErrorCode.none) -> Any:
    """The broker's answer to the forwarded heartbeat, as the client receives it."""
    return h.complete(verdict, resp(68, 1, error_code=code, member_id="m1", member_epoch=1))


def join(h: HandlerHarness, cluster: list[str] = CLUSTER, **kw: Any) -> tuple[str, ...] | None:
    verdict = all_topics(h.send(heartbeat(**kw)), cluster)
    ok(h, verdict)
    return sent_names(verdict)


def test_regex_is_resolved_full_match_to_describable_topics_and_sent_as_names() -> None:
    h, _ = harness()
    asked = h.send(heartbeat())
    assert isinstance(asked, AskFirst)
    assert h.checked() == [("READ", "GROUP", "g", "ALLOWED")]  # before the question
    # Newest Metadata version both sides speak, every topic, nothing created.
    assert asked.question.__version__ == h.supported_versions(3)[-1]
    verdict = all_topics(asked, CLUSTER)
    # "orders-.*" matches whole names only (RE2/J matches()): not "xorders-a".
    assert sent_names(verdict) == ("orders-a", "orders-b")
    assert h.checked()[1:] == [
        ("DESCRIBE", "TOPIC", "orders-a", "ALLOWED"),
        ("DESCRIBE", "TOPIC", "orders-b", "ALLOWED"),
        ("DESCRIBE", "TOPIC", "orders-secret", "DENIED"),
    ]
    # filterTopicDescribeAuthorizedTopics: one reference, logged if allowed, silent if denied.
    described = [a for a, _ in h.checks[1:]]
    assert all(a.resource_reference_count == 1 for a in described)
    assert all(a.log_if_allowed and not a.log_if_denied for a in described)
    # The topic ids of the answer are learned (later id-keyed requests need no lookup).
    assert h.topic_name(IDS["orders-b"]) == "orders-b"
    # The broker's answer goes back as it is.
    reply = resp(68, 1, member_id="m1", member_epoch=1)
    assert h.complete(verdict, reply) is reply


def test_anchors_case_flags_and_internal_topics_follow_re2() -> None:
    h, _ = harness(READ_G, acl(ALICE, "DESCRIBE", "TOPIC", "*"))
    assert join(h, regex="orders") == ()  # no partial match
    assert join(h, regex="(?i)ORDERS-[ab]", member="m2") == ("orders-a", "orders-b")
    assert join(h, regex="^__.*$", member="m3") == ("__consumer_offsets",)
    assert join(h, regex=".*", member="m4") == tuple(sorted(CLUSTER))


def test_names_and_regex_subscribe_to_both() -> None:
    h, _ = harness(READ_G, ORDERS, acl(ALICE, "DESCRIBE", "TOPIC", "payments"))
    assert join(h, names=("payments",)) == ("orders-a", "orders-b", "orders-secret", "payments")
    # The names are still checked whole first (29, nothing resolved) as Kafka does.
    denied = h.send(heartbeat(names=("payments", "xorders-a")))
    assert isinstance(denied, Respond)
    assert int(denied.response.error_code) == ErrorCode.topic_authorization_failed


def test_group_denied_comes_first_and_nothing_is_asked() -> None:
    h, _ = harness(ORDERS)
    verdict = h.send(heartbeat())
    assert isinstance(verdict, Respond)
    assert int(verdict.response.error_code) == ErrorCode.group_authorization_failed
    assert h.checked() == [("READ", "GROUP", "g", "DENIED")]


def test_later_heartbeats_forward_the_clients_bytes_until_the_refresh_is_due() -> None:
    """GroupMetadataManager.maybeUpdateRegularExpressions' triggers: at most every 10 s
    (REGEX_BATCH_REFRESH_MIN_INTERVAL_MS) the topics are listed again; the regex is resolved
    again only when they changed."""
    h, clock = harness()
    assert join(h) == ("orders-a", "orders-b")
    clock.now += LIST_INTERVAL_S - 0.5
    assert h.send(heartbeat(epoch=1, regex=None)) is FORWARD
    assert h.checked() == [("READ", "GROUP", "g", "ALLOWED")]
    # Due, nothing created: listed, not resolved (no DESCRIBE), the client's own bytes go up.
    clock.now += 0.5
    assert all_topics(h.send(heartbeat(epoch=1, regex=None)), CLUSTER) is FORWARD
    assert h.checked() == [("READ", "GROUP", "g", "ALLOWED")]
    # Due again, topics created: resolved; one that matches joins, one denied never does.
    clock.now += LIST_INTERVAL_S
    grown = CLUSTER + ["orders-c"]
    verdict = all_topics(h.send(heartbeat(epoch=1, regex=None)), grown)
    assert sent_names(verdict) == ("orders-a", "orders-b", "orders-c")
    assert ("DESCRIBE", "TOPIC", "orders-secret", "DENIED") in h.checked()
    ok(h, verdict)
    clock.now += LIST_INTERVAL_S
    assert all_topics(h.send(heartbeat(epoch=1, regex=None)), grown) is FORWARD


def test_a_revoked_describe_leaves_the_subscription_at_the_periodic_resolution() -> None:
    """group.consumer.regex.refresh.interval.ms (10 min): resolved again without new topics,
    which is when an ACL change reaches the subscription, as in Kafka."""
    h, clock = harness()
    assert join(h) == ("orders-a", "orders-b")
    h.authorizer.load_snapshot([READ_G, acl(ALICE, "DESCRIBE", "TOPIC", "orders-a")])
    clock.now += LIST_INTERVAL_S
    assert all_topics(h.send(heartbeat(epoch=1, regex=None)), CLUSTER) is FORWARD
    clock.now += RESOLVE_INTERVAL_S - LIST_INTERVAL_S
    verdict = all_topics(h.send(heartbeat(epoch=1, regex=None)), CLUSTER)
    assert sent_names(verdict) == ("orders-a",)


def test_names_are_sent_again_until_the_broker_accepts_them() -> None:
    h, clock = harness()
    assert join(h) == ("orders-a", "orders-b")
    clock.now += LIST_INTERVAL_S
    verdict = all_topics(h.send(heartbeat(epoch=1, regex=None)), CLUSTER + ["orders-c"])
    assert ok(h, verdict, ErrorCode.not_coordinator).error_code == ErrorCode.not_coordinator
    clock.now += LIST_INTERVAL_S
    again = all_topics(h.send(heartbeat(epoch=1, regex=None)), CLUSTER + ["orders-c"])
    assert sent_names(again) == ("orders-a", "orders-b", "orders-c")


def test_a_resent_regex_within_the_interval_reuses_the_resolution() -> None:
    h, clock = harness()
    assert join(h) == ("orders-a", "orders-b")
    clock.now += 1
    # A full heartbeat (the client resends every field after an error): no question.
    verdict = h.send(heartbeat(epoch=1, names=()))
    assert sent_names(verdict) == ("orders-a", "orders-b")
    # A names-only change keeps the regex part.
    h.authorizer.load_snapshot([READ_G, ORDERS, acl(ALICE, "DESCRIBE", "TOPIC", "payments")])
    verdict = h.send(heartbeat(epoch=1, regex=None, names=("payments",)))
    assert sent_names(verdict) == ("orders-a", "orders-b", "payments")


def test_a_changed_regex_is_resolved_at_once() -> None:
    h, clock = harness(READ_G, acl(ALICE, "DESCRIBE", "TOPIC", "*"))
    assert join(h) == ("orders-a", "orders-b", "orders-secret")
    clock.now += 1
    verdict = all_topics(h.send(heartbeat(epoch=1, regex="pay.*")), CLUSTER)
    assert sent_names(verdict) == ("payments",)


def test_leaving_clearing_or_rejoining_without_a_regex_forgets_the_member() -> None:
    for last in (
        heartbeat(epoch=-1, regex=None),
        heartbeat(epoch=1, regex=""),
        heartbeat(epoch=0, regex=None, names=("orders-a",)),
    ):
        h, clock = harness()
        assert join(h) == ("orders-a", "orders-b")
        assert h.send(last) is FORWARD
        clock.now += LIST_INTERVAL_S
        assert h.send(heartbeat(epoch=1, regex=None)) is FORWARD


def test_members_are_kept_per_group_and_member_and_bounded() -> None:
    """deviation: a member the connection does not know (forgotten here; or come on a new
    connection) and that does not resend its regex keeps the names last sent to the broker
    until it does."""
    h, clock = harness()
    for i in range(MAX_MEMBERS_PER_CONNECTION + 1):
        join(h, member=f"m{i}")
    members = h.connection_state.get(RegexSubscriptions).members
    assert len(members) == MAX_MEMBERS_PER_CONNECTION
    assert ("g", "m0") not in members and ("g", "m1") in members
    clock.now += LIST_INTERVAL_S
    assert h.send(heartbeat(epoch=1, regex=None, member="m0")) is FORWARD  # forgotten
    assert isinstance(h.send(heartbeat(epoch=1, regex=None, member="m1")), AskFirst)


def test_v0_and_name_subscriptions_are_forwarded_untouched() -> None:
    h, _ = harness(READ_G, ORDERS)
    v0 = req(
        68, 0, group_id="g", member_id="", member_epoch=0, subscribed_topic_names=("orders-a",)
    )
    assert h.send(v0) is FORWARD
    assert h.send(heartbeat(regex=None, names=("orders-a",))) is FORWARD


def test_an_invalid_regex_gets_kafkas_128_where_the_broker_checks_it() -> None:
    h, _ = harness()
    verdict = h.send(heartbeat(regex="a**", names=("orders-a",)))
    assert isinstance(verdict, Forward)
    body: Any = verdict.request
    assert body.subscribed_topic_regex == INVALID_PLACEHOLDER
    assert body.subscribed_topic_names == ("orders-a",)
    broker = resp(
        68,
        1,
        error_code=ErrorCode.invalid_regular_expression,
        error_message="SubscribedTopicRegex `(` is not a valid regular expression: "
        "missing closing ).",
    )
    out = h.complete(verdict, broker)
    assert out.error_code == ErrorCode.invalid_regular_expression
    assert out.error_message == (
        "SubscribedTopicRegex `a**` is not a valid regular expression: "
        "invalid nested repetition operator."
    )
    # An error Kafka checks before the regex (here an unknown member) comes back as it is.
    unknown = resp(68, 1, error_code=ErrorCode.unknown_member_id, error_message="x")
    assert h.complete(verdict, unknown) is unknown
    assert h.connection_state.get(RegexSubscriptions).members == {}


# RE2/J 1.8 (Kafka 4.3.1's) descriptions, measured with com.google.re2j.Pattern.compile
# (getDescription()); 50,000 generated patterns agreed with it, accepted or refused, and the
# description.
RE2J_REFUSES = [
    ("(", "missing closing )"),
    ("(?P<n>", "missing closing )"),
    ("a)", "regexp/syntax: internal error"),
    ("[a", "missing closing ]"),
    ("[^]", "missing closing ]"),
    ("a**", "invalid nested repetition operator"),
    ("x{2}{3}", "invalid nested repetition operator"),
    ("a{1001}", "invalid repeat count"),
    ("a{2,1}", "invalid repeat count"),
    ("\\", "trailing backslash at end of expression"),
    ("*", "missing argument to repetition operator"),
    ("(?=a)", "invalid or unsupported Perl syntax"),
    ("(?#c)", "invalid or unsupported Perl syntax"),
    ("(?P<>a)", "invalid named capture"),
    ("\\8", "invalid escape sequence"),
    ("\\x{", "invalid escape sequence"),
    ("\\pN\\p{Foo}", "invalid character class range"),
    ("[z-a]", "invalid character class range"),
    ("[[:foo:]]", "invalid character class range"),
    ("x{2,1}*", "invalid repeat count"),
    ("a*{1001}", "invalid repeat count"),  # RE2/J checks the count first, RE2 the nesting
    ("a**{1001}", "invalid nested repetition operator"),
    ("[\\é", "missing closing ]"),  # \é is é in RE2/J
    # RE2 accepts these, RE2/J does not.
    ("a\\Cb", "invalid escape sequence"),
    ("(?P<n>a)|(?<n>b)", "duplicate capture group name"),
    ("{*", "invalid nested repetition operator"),
    ("a{?", "invalid nested repetition operator"),
    ("{{2}", "invalid nested repetition operator"),
    ("{{1001}", "invalid repeat count"),
    # The first error RE2/J meets, left to right.
    ("(\\C", "invalid escape sequence"),
    (")\\C", "regexp/syntax: internal error"),
    ("(?P<n>a)(?P<n>", "duplicate capture group name"),
    ("a)(?P<n>a)(?P<n>b)", "regexp/syntax: internal error"),
]


@pytest.mark.parametrize(("regex", "description"), RE2J_REFUSES)
def test_invalid_regexes_get_re2js_description(regex: str, description: str) -> None:
    refused = compile_regex(regex)
    assert isinstance(refused, InvalidRegex)
    assert refused.message == (
        f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {description}."
    )


@pytest.mark.parametrize(
    "regex",
    [
        "",
        "\\Q\\C(\\E",
        "[]a]",
        "(?P<n>a)[(?P<n>b)]",
        "\\Q(?P<n>\\E(?P<n>a)",
        "[[:alpha:]]+\\pN*\\p{Greek}?",
        "a{,3}",
        "a{1000}",
        "(?U)(?s).*?",
        "\\x{10FFFF}",
        "a\\éb[\\€-\\中]",  # a backslash before a non-ASCII character: that character
        "{,2}*{2*",  # a literal { not followed by a repetition operator
    ],
)
def test_what_re2j_accepts_compiles(regex: str) -> None:
    assert not isinstance(compile_regex(regex), InvalidRegex)


def test_what_re2_refuses_and_re2j_accepts_is_refused() -> None:
    """deviation: RE2/J accepts nested counted repetitions beyond 1000 (``(a{100}){100}``) and
    has no memory budget (``\\pN{1000}``); RE2 refuses them, and the proxy cannot evaluate
    what RE2 refuses, so it answers 128 with RE2's reason."""
    nested = compile_regex("(a{100}){100}")
    assert isinstance(nested, InvalidRegex)
    assert nested.message.endswith("invalid repeat count.")
    large = compile_regex("\\pN{1000}")
    assert isinstance(large, InvalidRegex)
    assert large.message.endswith("pattern too large - compile failed.")
    # What topic regexes look like, however long, fits the budget.
    many = "|".join(f"orders-{i}" for i in range(3000))
    assert not isinstance(compile_regex(f"({many})"), InvalidRegex)
