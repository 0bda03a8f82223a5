"""The per-address failure window decided before any hashing, the bounded authentication
executor and the listener's counters — without sockets; time is passed in."""

from __future__ import annotations

import asyncio
import ipaddress
import threading
import time
from collections.abc import Callable

import pytest

from kafkaguard.policy.authorizer import SecurityProtocol
from kafkaguard.protocol.codec import ErrorCode
from kafkaguard.proxy.handlers.sasl import _step
from kafkaguard.proxy.sasl import plain, scram
from kafkaguard.proxy.sasl.authenticator import (
    AuthenticateOutcome,
    SaslAuthenticator,
    SaslServer,
    State,
)
from kafkaguard.proxy.sasl.config import SaslListenerConfig
from kafkaguard.proxy.sasl.credentials import MappingCredentialStore
from kafkaguard.proxy.sasl.executor import AuthExecutor, AuthExecutorBusy
from kafkaguard.proxy.sasl.mechanism import Challenge, SaslMechanismServer
from kafkaguard.proxy.session import Session
from tests.support.fake_broker import wait_until
from tests.support.scram_client import ScramClient

USERS = {
    "alice": {
        "PLAIN": plain.make_credential("pw", iterations=4096).to_string(),
        "SCRAM-SHA-256": scram.make_credential("SCRAM-SHA-256", "pw").to_kafka_string(),
    }
}


class CountingStore(MappingCredentialStore):
    """Counts credential look-ups: a PLAIN look-up is followed by its hash. ``gate``, when
    set, holds every PLAIN look-up (in the executor's thread) until it is set."""

    def __init__(self) -> None:
        super().__init__(USERS)
        self.plain_lookups = 0
        self.scram_lookups = 0
        self.gate: threading.Event | None = None

    def plain_credential(self, user: str) -> plain.PlainCredential | None:
        self.plain_lookups += 1
        if self.gate is not None:
            assert self.gate.wait(5)
        return super().plain_credential(user)

    def scram_credential(self, user: str, mechanism: str) -> scram.ScramCredential | None:
        self.scram_lookups += 1
        return super().scram_credential(user, mechanism)


def make_server(executor: AuthExecutor | None = None) -> tuple[SaslServer, CountingStore]:
    store = CountingStore()
    config = SaslListenerConfig(
        ("PLAIN", "SCRAM-SHA-256"),
        failed_authentication_delay_ms=100,
        max_failed_authentication_delay_ms=400,
    )
    return SaslServer(config, store=store, executor=executor or AuthExecutor(1, 4)), store


def connect(
    server: SaslServer, host: str = "10.0.0.1", mechanism: str = "PLAIN"
) -> SaslAuthenticator:
    session = Session("SASL", SecurityProtocol.SASL_PLAINTEXT, ipaddress.ip_address(host))
    auth = SaslAuthenticator(server, session)
    assert auth.handshake(mechanism).error_code == ErrorCode.none
    return auth


def plain_attempt(auth: SaslAuthenticator, password: str, now: float) -> AuthenticateOutcome:
    """One PLAIN SaslAuthenticate, stepped inline (the executor is tested on its own)."""
    begun = auth.begin_step(2, now)
    if isinstance(begun, AuthenticateOutcome):
        return begun
    return auth.finish_step(begun.step(f"\0alice\0{password}".encode()), now, 0)


def counters(server: SaslServer) -> tuple[int, int, int, int, int]:
    return (
        server.attempts,
        server.successes,
        server.failures,
        server.throttled,
        server.refused_queue_full,
    )


def test_inside_the_window_nothing_is_looked_up_or_hashed() -> None:
    server, store = make_server()
    failed = plain_attempt(connect(server), "wrong", now=10.0)
    assert failed.error_code == ErrorCode.sasl_authentication_failed
    assert failed.delay_s == pytest.approx(0.1)  # answered when the window ends
    assert store.plain_lookups == 1

    # The same address reconnects at once, with the right password this time.
    auth = connect(server)
    refused = plain_attempt(auth, "pw", now=10.04)
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    assert refused.close_reason and "failure window" in refused.close_reason
    assert refused.delay_s == pytest.approx(0.06)  # the rest of the window
    assert auth.state is State.FAILED
    assert store.plain_lookups == 1  # no look-up, so no hash
    assert counters(server) == (2, 0, 1, 1, 0)

    # Another address is not concerned.
    assert plain_attempt(connect(server, "10.0.0.2"), "pw", now=10.05).authenticated
    assert store.plain_lookups == 2
    assert counters(server) == (3, 1, 1, 1, 0)


def test_the_window_expires_and_a_success_clears_it() -> None:
    server, store = make_server()
    plain_attempt(connect(server), "wrong", now=0.0)
    assert server.throttle.remaining("10.0.0.1", 0.1) == 0  # expired
    second = plain_attempt(connect(server), "wrong", now=0.15)
    assert second.delay_s == pytest.approx(0.2)  # doubled
    assert server.throttle.remaining("10.0.0.1", 0.25) == pytest.approx(0.1)
    third = plain_attempt(connect(server), "wrong", now=0.4)
    assert third.delay_s == pytest.approx(0.4)
    fourth = plain_attempt(connect(server), "wrong", now=0.85)
    assert fourth.delay_s == pytest.approx(0.4)  # max_failed_authentication_delay_ms
    assert plain_attempt(connect(server), "pw", now=1.3).authenticated
    assert server.throttle.remaining("10.0.0.1", 1.3) == 0
    assert plain_attempt(connect(server), "wrong", now=1.4).delay_s == pytest.approx(0.1)
    assert store.plain_lookups == 6
    assert counters(server) == (6, 1, 5, 0, 0)


def test_scram_first_message_is_answered_inside_the_window_and_the_proof_is_not() -> None:
    server, store = make_server()
    plain_attempt(connect(server), "wrong", now=0.0)
    auth = connect(server, mechanism="SCRAM-SHA-256")
    client = ScramClient("sha256", "alice", "pw", "n0")
    mechanism = auth.begin_step(2, 0.01)
    assert not isinstance(mechanism, AuthenticateOutcome)
    first = mechanism.step(client.first())  # no hashing: a look-up and a salt
    assert isinstance(first, Challenge)
    assert auth.finish_step(first, 0.01, 0).error_code == ErrorCode.none
    refused = auth.begin_step(2, 0.02)
    assert isinstance(refused, AuthenticateOutcome)
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    assert store.scram_lookups == 1
    assert counters(server) == (2, 0, 1, 1, 0)


def test_which_steps_check_a_credential_and_which_block() -> None:
    server, _ = make_server()
    plain_server = server.new_mechanism("PLAIN")
    assert plain_server.checks_credential and plain_server.blocking
    plain_server.step(b"\0alice\0pw")
    assert not plain_server.checks_credential
    scram_server = server.new_mechanism("SCRAM-SHA-256")
    assert not scram_server.checks_credential and not scram_server.blocking
    scram_server.step(ScramClient("sha256", "alice", "pw", "n0").first())
    assert scram_server.checks_credential


# -- the executor ------------------------------------------------------------------------------


async def test_executor_refuses_at_once_when_its_queue_is_full() -> None:
    executor = AuthExecutor(threads=1, queue_size=1)
    release = threading.Event()
    ran: list[int] = []

    def job(n: int) -> Callable[[], int]:
        def run() -> int:
            assert release.wait(5)
            ran.append(n)
            return n

        return run

    first = asyncio.create_task(executor.run(job(1)))
    second = asyncio.create_task(executor.run(job(2)))
    await asyncio.sleep(0)  # both admitted: one running, one waiting
    assert executor.pending == 2
    with pytest.raises(AuthExecutorBusy):
        await executor.run(job(3))
    assert executor.refused == 1
    release.set()
    assert await first == 1 and await second == 2
    assert sorted(ran) == [1, 2]  # job 3 never ran
    assert (executor.submitted, executor.started, executor.pending) == (2, 2, 0)
    executor.close()
    assert await executor.run(lambda: 4) == 4  # fresh threads after close


async def test_a_cancelled_waiting_job_never_runs() -> None:
    executor = AuthExecutor(threads=1, queue_size=2)
    release = threading.Event()
    running = asyncio.create_task(executor.run(lambda: release.wait(5)))
    waiting = asyncio.create_task(executor.run(lambda: pytest.fail("must not run")))
    await wait_until(lambda: executor.started == 1 and executor.pending == 2)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting  # by then its job is cancelled in the pool's queue
    release.set()
    assert await running
    assert executor.started == 1 and executor.pending == 0
    executor.close()


async def test_a_running_job_cancelled_still_returns_its_result() -> None:
    """A hash already being computed cannot be stopped: its outcome (a failure opening the
    address's window) still counts when its client has left."""
    executor = AuthExecutor(threads=1, queue_size=0)
    release = threading.Event()
    running = asyncio.create_task(executor.run(lambda: release.wait(5)))
    await wait_until(lambda: executor.started == 1)
    running.cancel()
    await asyncio.sleep(0.05)
    assert not running.done()  # waits for the thread
    release.set()
    assert await running is True
    assert executor.pending == 0
    executor.close()


def test_a_server_without_an_executor_gets_the_default_limits() -> None:
    server = SaslServer(SaslListenerConfig(("PLAIN",)), store=CountingStore())
    assert (server.executor.threads, server.executor.queue_size) == (1, 32)


# -- the asyncio shell: one check per address, the queue ---------------------------------------


def pending_plain(server: SaslServer, host: str) -> tuple[SaslAuthenticator, SaslMechanismServer]:
    auth = connect(server, host)
    mechanism = auth.begin_step(2, time.monotonic())
    assert not isinstance(mechanism, AuthenticateOutcome)
    return auth, mechanism


async def test_a_full_executor_refuses_without_hashing() -> None:
    server, store = make_server(AuthExecutor(threads=1, queue_size=0))
    store.gate = threading.Event()
    busy = asyncio.create_task(_step(*pending_plain(server, "10.0.0.1"), b"\0alice\0pw"))
    await wait_until(lambda: store.plain_lookups == 1)  # the one thread is hashing
    refused = await _step(*pending_plain(server, "10.0.0.2"), b"\0alice\0pw")
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    assert refused.delay_s == 0  # at once
    assert refused.close_reason and "authentication_queue_size" in refused.close_reason
    store.gate.set()
    assert (await busy).authenticated
    assert store.plain_lookups == 1
    assert counters(server) == (2, 1, 0, 0, 1)
    assert server.throttle.remaining("10.0.0.2", 0) == 0  # a refusal opens no window


async def test_one_check_per_address_and_its_failure_refuses_the_next() -> None:
    server, store = make_server()
    store.gate = threading.Event()
    first = asyncio.create_task(_step(*pending_plain(server, "10.0.0.1"), b"\0alice\0wrong"))
    second = asyncio.create_task(_step(*pending_plain(server, "10.0.0.1"), b"\0alice\0pw"))
    await wait_until(lambda: store.plain_lookups == 1)
    await asyncio.sleep(0.05)  # the second had the time to ask, and did not
    assert store.plain_lookups == 1  # the second waits for the first, not for a thread
    store.gate.set()
    assert (await first).error_code == ErrorCode.sasl_authentication_failed
    refused = await second
    assert refused.close_reason and "failure window" in refused.close_reason
    assert store.plain_lookups == 1
    assert not server.checks_in_flight
    assert counters(server) == (2, 0, 1, 1, 0)
