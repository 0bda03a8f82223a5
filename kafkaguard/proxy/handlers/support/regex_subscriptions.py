"""KIP-848 regular-expression subscriptions (ConsumerGroupHeartbeat v1 ``subscribedTopicRegex``),
resolved by the proxy.

In Kafka the group coordinator resolves a member's regex itself: it matches it against every
topic of its metadata image with RE2/J, full-match semantics (``TopicRegexResolver``,
``Pattern.matcher(topic).matches()``), keeps only the topics the member may DESCRIBE
(``TopicRegexResolver.filterTopicDescribeAuthorizedTopics``: one DESCRIBE action per topic,
logged when allowed, silent when denied) and assigns those. The broker behind the proxy has no
authorizer, so it must never see the regex: it would assign every matching topic. The proxy
does the coordinator's part instead:

* It asks the broker for every topic name (a Metadata "all topics" question, ``AskFirst``),
  matches the regex with RE2 (``google-re2``: the C++ library RE2/J was ported from, the same
  syntax; Python's ``re`` is another language), keeps the topics the member's principal may
  DESCRIBE, and forwards the heartbeat with ``subscribedTopicNames`` = the member's own names
  ∪ those topics and no regex. A member subscribed to names and a regex is subscribed to both
  in Kafka too (``ConsumerGroup.computeSubscribedTopicNames``).
* Clients send the subscription only when it changes (a null field means "unchanged"), so the
  resolution is kept per (group, member) in the connection's state and refreshed on Kafka's
  triggers (``GroupMetadataManager.maybeUpdateRegularExpressions``): the topic list is asked
  for again on a heartbeat at most every :data:`LIST_INTERVAL_S`, and the regex resolved again
  — matched and authorized — when the list changed (a topic created later that matches joins
  the subscription) or :data:`RESOLVE_INTERVAL_S` after the last resolution (a revoked
  DESCRIBE leaves it). Otherwise the heartbeat goes up as the client sent it (the broker keeps
  the names last sent).
* A regex RE2/J would refuse is answered with Kafka's INVALID_REGULAR_EXPRESSION (128) and its
  message (``Utils.throwIfRegularExpressionIsInvalid``). Kafka checks it late, inside the
  coordinator (``GroupMetadataManager.maybeUpdateRegularExpressions``, after the request and
  member-epoch checks, before anything is written), so the proxy lets the broker decide *when*:
  it forwards the heartbeat with :data:`INVALID_PLACEHOLDER`, a regex every RE2 refuses, and
  puts Kafka's message for the client's own regex into the broker's 128. Whatever error Kafka
  would have given first (unknown member, fenced epoch, …) comes back unchanged; nothing is
  ever resolved by the broker.

Kafka resolves one regex per *group*, with the principal of whichever member's heartbeat
triggered the refresh; the proxy resolves it per member, with that member's principal, so a
member never gets a topic its own principal may not DESCRIBE. docs/deviations.md lists what a
client can observe of the difference.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, cast

import re2

from kafkaguard.policy.model import AclOperation, ResourceType
from kafkaguard.protocol import codec
from kafkaguard.protocol.codec import Entity, ErrorCode, RequestPayload
from kafkaguard.proxy.handlers.support.authz import filter_authorized
from kafkaguard.proxy.handlers.support.base import (
    FORWARD,
    AskFirst,
    Forward,
    HandlerContext,
    Request,
    Respond,
    Verdict,
)
from kafkaguard.proxy.handlers.support.fields import ErrorCoded, TopicIded
from kafkaguard.proxy.handlers.support.responses import whole_error


class Matcher(Protocol):
    """A compiled RE2 pattern, as the proxy uses it (google-re2 ships no types)."""

    def fullmatch(self, text: str) -> object | None: ...


class HeartbeatBody(Entity, Protocol):
    """What the proxy reads of a ``ConsumerGroupHeartbeatRequest`` (kio's, any version): the
    regex field from v1 (checked by name)."""

    @property
    def group_id(self) -> str: ...
    @property
    def member_id(self) -> str: ...
    @property
    def member_epoch(self) -> int: ...
    @property
    def subscribed_topic_regex(self) -> str | None: ...
    @property
    def subscribed_topic_names(self) -> Sequence[str] | None: ...


class _Answer(ErrorCoded, Entity, Protocol):
    """A heartbeat's answer: its error code and message."""


class _ListedTopic(TopicIded, Protocol):
    """A topic of a Metadata answer: ``topic_id`` (v10+) read where it is."""

    @property
    def name(self) -> str | None: ...


class _Listing(Protocol):
    @property
    def topics(self) -> Sequence[_ListedTopic]: ...


_A = TypeVar("_A", bound=_Answer)

METADATA = 3
_ALL_TOPICS_SINCE = 1
"""Metadata v1+ reads a null topic list as "every topic"."""

LIST_INTERVAL_S = 10.0
"""How often, at most, a member's heartbeat makes the proxy list the broker's topics again:
``GroupMetadataManager.REGEX_BATCH_REFRESH_MIN_INTERVAL_MS``, the soonest Kafka resolves a
group's regexes again once its metadata image has new topics. Kafka sees new topics in its
image for free; the proxy has to ask, and asks no more often than Kafka could act on them."""

RESOLVE_INTERVAL_S = 600.0
"""``group.consumer.regex.refresh.interval.ms`` (Kafka's default, 10 min): a resolution is
redone this long after the last one even if no topic appeared, which is when ACL changes
reach it (as in Kafka; every Fetch is still authorized on its own, so a revoked READ stops
the data at once)."""

MAX_MEMBERS_PER_CONNECTION = 64
"""Resolutions one connection may keep. A consumer heartbeats for one member per group; a
client inventing member ids cannot grow the proxy's memory beyond this (the oldest entry is
dropped; that member's next heartbeat that names its regex resolves it again)."""

INVALID_PLACEHOLDER = "("
"""Forwarded in place of a regex the proxy found invalid: RE2/J refuses it ("missing closing
)"), so the broker answers 128 exactly where Kafka would check the client's regex."""

REGEX_MAX_MEM = 1 << 20
"""RE2's memory budget for one client regex (RE2's default is 8 MiB). Every topic regex seen
in practice — an alternation of thousands of names included — fits in far less; the default
let one client make the proxy hold about 2 MiB per distinct regex (the re2 module caches 128)
and spend tens of milliseconds compiling each. RE2/J has no budget: a regex over it is one of
the refusals docs/deviations.md lists (e.g. ``\\pN{1000}``)."""

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a client's typo is not the proxy's error: nothing on stderr
_OPTIONS.max_mem = REGEX_MAX_MEM

_RE2J_DESCRIPTIONS = {
    # RE2 (C++) error code text -> RE2/J's description of the same error (its Parser's ERR_*
    # strings, what PatternSyntaxException.getDescription() returns and Kafka's message quotes).
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "unexpected )": "regexp/syntax: internal error",  # RE2/J 1.8: "stack underflow"
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "invalid UTF-8": "invalid escape sequence",  # only from a truncated \x{ in a str pattern
}


@dataclass(frozen=True, slots=True)
class InvalidRegex:
    """A regex RE2/J refuses, with Kafka's message for it."""

    message: str


def invalid_message(regex: str, description: str) -> str:
    """``Utils.throwIfRegularExpressionIsInvalid``'s message."""
    return f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {description}."


def compile_regex(regex: str) -> Matcher | InvalidRegex:
    """``regex`` compiled with RE2 (``fullmatch`` is RE2/J's ``matches()``), or
    :class:`InvalidRegex` when RE2/J refuses it, with the description of the first error RE2/J
    meets (it parses left to right and stops there).

    RE2 and RE2/J accept the same language but for a few corners, measured against RE2/J 1.8:
    a backslash before a non-ASCII character is that character in RE2/J and an error in RE2
    (:func:`_re2j_escapes` rewrites it); RE2/J refuses three things RE2 accepts
    (:func:`_re2j_only_error`); RE2 refuses two things RE2/J accepts — nested counted
    repetitions whose product exceeds 1000 (``(a{100}){100}``) and programs larger than
    :data:`REGEX_MAX_MEM` — and those are refused (docs/deviations.md): a regex the proxy cannot
    evaluate must not be passed on."""
    pattern = _re2j_escapes(regex)
    found = _re2j_only_error(pattern)
    if found is not None:
        position, description = found
        before = _re2_error(pattern[:position])  # an error RE2/J would have met first?
        if before is not None and before[0] != "missing )":  # not just groups left open
            description = _re2j_description(*before)
        return InvalidRegex(invalid_message(regex, description))
    try:
        compiled: Matcher = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        return InvalidRegex(invalid_message(regex, _re2j_description(*_code(exc))))
    return compiled


def _re2_error(pattern: str) -> tuple[str, str] | None:
    """RE2's error for ``pattern`` (code text, fragment), ``None`` if it compiles."""
    try:
        re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        return _code(exc)
    return None


def _code(exc: Exception) -> tuple[str, str]:
    """The code text and fragment of an error RE2 reports as ``"<code text>: <fragment>"``."""
    raw = exc.args[0] if exc.args else ""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    code, _, fragment = text.partition(": ")
    return code, fragment


def _re2j_description(code: str, fragment: str) -> str:
    """RE2/J's description of the error RE2 reports. RE2/J checks a repetition's count before
    whether it repeats a repetition, RE2 the other way round."""
    if code == "bad repetition operator" and _invalid_count(fragment[fragment.rfind("{") :]):
        return "invalid repeat count"
    return _RE2J_DESCRIPTIONS.get(code, code)


_REPEAT = re2.compile(r"\{([0-9]+)(?:,([0-9]*))?\}", _OPTIONS)
"""A counted repetition as RE2/J parses one (``Parser.parseRepeat``); any other ``{`` is a
literal."""


def _invalid_count(text: str) -> bool:
    """Whether ``text`` starts with a counted repetition RE2/J refuses for its counts (above
    1000, or a maximum below the minimum)."""
    repeat = _REPEAT.match(text)
    if repeat is None:
        return False
    low, high = repeat.groups()
    return int(low) > 1000 or (bool(high) and (int(high) > 1000 or int(high) < int(low)))


def _re2j_escapes(regex: str) -> str:
    """``regex`` with a backslash before a non-ASCII character dropped: RE2/J reads ``\\é`` as
    ``é`` (only ASCII letters and digits are escape letters), RE2 refuses it."""
    if "\\" not in regex or regex.isascii():
        return regex
    out: list[str] = []
    i, n = 0, len(regex)
    while i < n:
        if regex.startswith("\\Q", i):
            end = regex.find("\\E", i + 2)
            end = n if end < 0 else end + 2
            out.append(regex[i:end])
            i = end
        elif regex[i] == "\\":
            pair = regex[i : i + 2]
            out.append(pair[1:] if pair[1:] and not pair[1:].isascii() else pair)
            i += 2
        else:
            out.append(regex[i])
            i += 1
    return "".join(out)


def _re2j_only_error(pattern: str) -> tuple[int, str] | None:
    """Where RE2/J (1.8, Kafka 4.3.1's) refuses what RE2 accepts, and its description: ``\\C``
    (any byte); a capture group name used twice; a literal ``{`` followed by a repetition
    operator (``{*``, ``a{?``, ``{{2}``: RE2/J still takes the ``{`` for a repetition).
    Character classes (where RE2 refuses ``\\C`` itself) and ``\\Q…\\E`` are skipped."""
    names: set[str] = set()
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt == "C":
                return i, "invalid escape sequence"
            if nxt == "Q":
                end = pattern.find("\\E", i + 2)
                i = n if end < 0 else end + 2
                continue
            i += 2
        elif c == "[":
            i = _class_end(pattern, i)
        elif c == "{":
            repeated = _literal_brace_repeated(pattern, i)
            if repeated is not None:
                return i, repeated
            i += 1
        elif pattern.startswith(("(?P<", "(?<"), i) and ">" in pattern[i:]:
            start = pattern.index("<", i) + 1
            end = pattern.index(">", start)
            if pattern[start:end] in names:
                return i, "duplicate capture group name"
            names.add(pattern[start:end])
            i = end + 1
        else:
            i += 1
    return None


def _literal_brace_repeated(pattern: str, i: int) -> str | None:
    """RE2/J's error when the ``{`` at ``i`` is a literal that a repetition operator follows."""
    if _REPEAT.match(pattern, i) is not None:
        return None
    nxt = pattern[i + 1 : i + 2]
    if nxt in ("*", "+", "?"):
        return "invalid nested repetition operator"
    if nxt == "{" and _REPEAT.match(pattern, i + 1) is not None:
        if _invalid_count(pattern[i + 1 :]):
            return "invalid repeat count"
        return "invalid nested repetition operator"
    return None


def _class_end(regex: str, start: int) -> int:
    """The index after the character class opening at ``start`` (a leading ``]`` or ``^]`` is a
    literal, ``[:name:]`` a POSIX class, ``\\x`` an escape)."""
    i = start + 1
    if regex.startswith("^", i):
        i += 1
    if regex.startswith("]", i):
        i += 1
    while i < len(regex) and regex[i] != "]":
        if regex[i] == "\\":
            i += 2
        elif regex.startswith("[:", i) and ":]" in regex[i + 2 :]:
            i = regex.index(":]", i + 2) + 2
        else:
            i += 1
    return i + 1


@dataclass(slots=True)
class MemberRegex:
    """What the proxy knows of one member subscribed with a regex."""

    regex: str
    matcher: Matcher
    client_names: tuple[str, ...]
    """The names the client subscribed to itself (checked by the heartbeat's DESCRIBE gate)."""
    resolved: frozenset[str] = frozenset()
    """The matching topics its principal could DESCRIBE at the last resolution."""
    resolved_at: float = float("-inf")
    listed: int | None = None
    """A hash of the topic names the last resolution saw (Kafka's "image has new topics")."""
    asked_at: float = float("-inf")
    """When the broker last listed its topics for this member."""
    sent: tuple[str, ...] = ()
    """What the broker holds as the member's subscribed names."""


class RegexSubscriptions:
    """The regex members of one connection (its :class:`~base.ConnectionState`), oldest first."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.members: dict[tuple[str, str], MemberRegex] = {}

    def put(self, key: tuple[str, str], member: MemberRegex) -> None:
        self.members.pop(key, None)
        self.members[key] = member
        while len(self.members) > MAX_MEMBERS_PER_CONNECTION:
            del self.members[next(iter(self.members))]


def _subscriptions(ctx: HandlerContext) -> RegexSubscriptions:
    return ctx.connection_state.get(RegexSubscriptions)


def heartbeat_verdict(request: Request, body: HeartbeatBody, ctx: HandlerContext) -> Verdict:
    """The verdict for a ConsumerGroupHeartbeat that passed the group and topic-name checks."""
    if not hasattr(body, "subscribed_topic_regex"):  # v0: no regex field
        return FORWARD
    state = _subscriptions(ctx)
    key = (str(body.group_id), str(body.member_id))
    regex: str | None = body.subscribed_topic_regex
    # Leaving (-1, static -2), clearing the regex (""), or (re)joining without one: the
    # member has no regex from here on (a join's null field means "none", not "unchanged").
    if body.member_epoch < 0 or regex == "" or (regex is None and body.member_epoch == 0):
        state.members.pop(key, None)
        return FORWARD
    if regex is None:
        member = state.members.get(key)
        return FORWARD if member is None else _known_member(request, body, ctx, member)
    compiled = compile_regex(regex)
    if isinstance(compiled, InvalidRegex):
        return _broker_decides_when(body, compiled.message)
    previous = state.members.get(key)
    names = _client_names(body, None if body.member_epoch == 0 else previous)
    if previous is not None and previous.regex == regex and not _due(state, previous):
        previous.client_names = names
        return _forward(body, previous, state, key)
    return _resolve(request, body, ctx, MemberRegex(regex, compiled, names))


def _known_member(
    request: Request, body: HeartbeatBody, ctx: HandlerContext, member: MemberRegex
) -> Verdict:
    """A heartbeat of a regex member that did not resend its regex (unchanged)."""
    state = _subscriptions(ctx)
    member.client_names = _client_names(body, member)
    if _due(state, member):
        return _resolve(request, body, ctx, member)
    return _forward(body, member, state, (str(body.group_id), str(body.member_id)))


def _client_names(body: HeartbeatBody, member: MemberRegex | None) -> tuple[str, ...]:
    names = body.subscribed_topic_names
    if names is not None:
        return tuple(names)
    return member.client_names if member is not None else ()


def _due(state: RegexSubscriptions, member: MemberRegex) -> bool:
    return state.clock() - member.asked_at >= LIST_INTERVAL_S


def _resolve(
    request: Request, body: HeartbeatBody, ctx: HandlerContext, member: MemberRegex
) -> Verdict:
    """Ask the broker for every topic; resolve ``member``'s regex against them if they changed
    since its last resolution, or that was :data:`RESOLVE_INTERVAL_S` ago (or never)."""
    question = _all_topics_question(ctx)
    if question is None:  # a broker without Metadata v1: nothing to resolve against
        return Respond(
            whole_error(
                request,
                ErrorCode.unsupported_version,
                error_message="The broker cannot list its topics to resolve the regex.",
            )
        )
    state = _subscriptions(ctx)
    key = (str(body.group_id), str(body.member_id))

    def answered(answer: _Listing) -> Verdict:
        topics = _topic_names(answer, ctx)
        listed = hash(frozenset(topics))
        now = member.asked_at = state.clock()
        if listed != member.listed or now - member.resolved_at >= RESOLVE_INTERVAL_S:
            member.resolved = _describable(
                request, ctx, (t for t in topics if member.matcher.fullmatch(t) is not None)
            )
            member.resolved_at, member.listed = now, listed
        return _forward(body, member, state, key)

    return AskFirst(question, answered)


def _describable(request: Request, ctx: HandlerContext, matched: Iterable[str]) -> frozenset[str]:
    """``filterTopicDescribeAuthorizedTopics``: DESCRIBE per matched topic (reference count 1:
    one regex), logged when allowed, not when denied."""
    allowed = filter_authorized(
        ctx, request, AclOperation.DESCRIBE, ResourceType.TOPIC, matched, log_if_denied=False
    )
    return frozenset(allowed)


def _forward(
    body: HeartbeatBody, member: MemberRegex, state: RegexSubscriptions, key: tuple[str, str]
) -> Verdict:
    """Forward with the member's names ∪ its resolution when the broker needs to hear it: the
    client sent a subscription (names or regex), or the union changed since the broker last
    accepted it; otherwise the client's own bytes. What the broker holds is updated only once
    it answers without error (a retried heartbeat then carries the names again)."""
    names = tuple(sorted(set(member.client_names) | member.resolved))
    state.put(key, member)
    client_sent = body.subscribed_topic_names is not None or body.subscribed_topic_regex
    if not client_sent and names == member.sent:
        return FORWARD

    def accepted(response: _A) -> _A:
        if response.error_code == ErrorCode.none:
            member.sent = names
        return response

    replaced = codec.replace(body, subscribed_topic_names=names, subscribed_topic_regex=None)
    return Forward(request=cast(RequestPayload, replaced), rewrite=accepted)  # client's schema


def _broker_decides_when(body: HeartbeatBody, message: str) -> Verdict:
    """An invalid regex: forwarded as :data:`INVALID_PLACEHOLDER` so the broker answers 128 (or
    the error Kafka checks first); the answer carries Kafka's message for the client's regex."""

    def kafka_message(response: _A) -> _A:
        if response.error_code != ErrorCode.invalid_regular_expression:
            return response
        return codec.replace(response, error_message=message)

    replaced = codec.replace(body, subscribed_topic_regex=INVALID_PLACEHOLDER)
    return Forward(request=cast(RequestPayload, replaced), rewrite=kafka_message)


def _all_topics_question(ctx: HandlerContext) -> RequestPayload | None:
    """Metadata for every topic, at the newest version both sides speak, creating nothing."""
    supported = ctx.supported_versions(METADATA)
    if not supported or supported[-1] < _ALL_TOPICS_SINCE:
        return None
    schema = codec.request_schema(METADATA, supported[-1])
    return codec.make_entity(schema, topics=None, allow_auto_topic_creation=False)


def _topic_names(answer: _Listing, ctx: HandlerContext) -> list[str]:
    """The names of the topics the broker listed (the ids are learned on the way)."""
    listed = [(t, t.name) for t in answer.topics if t.name]
    ctx.learn_topic_names(
        (t.topic_id, name) for t, name in listed if getattr(t, "topic_id", None) and t.topic_id.int
    )
    return [name for _, name in listed]
