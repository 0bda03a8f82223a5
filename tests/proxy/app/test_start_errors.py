"""What ``kafkaguard run`` says when it cannot start (kafkaguard/proxy/app/server.py): a port
that is taken names the listener, its address and port, not only the kernel's "[Errno 98]
Address already in use"; an upstream that does not answer yet is reported once, then once per
interval with the count of identical warnings left out, not once a second."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kafkaguard.cli import main
from kafkaguard.proxy.app import server as server_module
from kafkaguard.proxy.app.server import ProxyServer
from kafkaguard.proxy.config import HostPort
from kafkaguard.proxy.net.accept import BindError
from tests.support.fake_broker import FakeBroker
from tests.support.ports import taken_port
from tests.support.proxy_fixture import proxy_config


@pytest.mark.timeout(30)
async def test_a_taken_listener_port_names_the_listener_and_its_address() -> None:
    async with FakeBroker((1,)) as fake:
        with taken_port() as port:
            server = ProxyServer(proxy_config(fake.bootstrap, port=port, name="EXTERNAL"))
            try:
                with pytest.raises(BindError) as raised:
                    await server.start(probe_attempts=1)
            finally:
                await server.close()
    assert str(raised.value) == (
        f"listener EXTERNAL cannot bind 127.0.0.1:{port} (bootstrap port): "
        "[Errno 98] Address already in use"
    )


@pytest.mark.timeout(30)
def test_a_taken_admin_port_is_named_by_kafkaguard_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admin listener binds first (its probes answer during start-up), so the upstream
    need not be reachable for this."""
    # Keep this process on the default event loop policy: run installs uvloop's, and every
    # later asyncio.run in the session would get it (tests/test_cli.py does the same).
    monkeypatch.setattr("kafkaguard.cli.serve.install_event_loop_policy", lambda: "asyncio")
    config = tmp_path / "config.yaml"
    with taken_port() as port:
        config.write_text(
            "upstream:\n  bootstrap_servers: ['127.0.0.1:1']\n"
            "listeners:\n  - name: P\n    port: 1\n"
            f"admin:\n  port: {port}\n",
            encoding="utf-8",
        )
        assert main(["run", "--config", str(config)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"kafkaguard: cannot start: the admin listener cannot bind 127.0.0.1:{port}: "
        "[Errno 98] Address already in use"
    )


@pytest.mark.timeout(30)
async def test_identical_upstream_warnings_are_collapsed_with_a_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five probes a second apart, warnings at most every 2.5 s: the first attempt's warning,
    then the fourth's saying it stands for two more (the fifth attempt fails the start)."""
    monkeypatch.setattr(server_module, "PROBE_WARNING_INTERVAL_S", 2.5)
    caplog.set_level(logging.WARNING, logger="kafkaguard.proxy")
    server = ProxyServer(proxy_config(HostPort("127.0.0.1", 1)))
    try:
        with pytest.raises(OSError):
            await server.start(probe_attempts=5)
    finally:
        await server.close()
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("upstream not reachable yet")
    ]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("upstream not reachable yet (attempt 1 of 5): ")
    assert warnings[1].startswith("upstream not reachable yet (attempt 4 of 5): ")
    assert warnings[1].endswith("(2 similar lines suppressed)")
