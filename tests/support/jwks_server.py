"""An identity provider's JWKS endpoint on 127.0.0.1 over HTTPS, for OAUTHBEARER tests.

The certificate comes from the project's own CA tooling (``kafkaguard certs``): the test
points ``jwks_endpoint_ca_file`` at :attr:`JwksServer.ca_file`. The served document can be
replaced (key rotation) and the next requests made to fail; requests are counted.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kafkaguard.certs.tooling import init_ca, issue_server


class JwksServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, document: dict[str, Any], ca_file: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.document = document
        self.ca_file = ca_file
        self.requests = 0
        self.failures_to_serve = 0
        """The next this many requests are answered 500."""
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}/.well-known/jwks.json"


class _Handler(BaseHTTPRequestHandler):
    server: JwksServer

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.requests += 1
            fail = self.server.failures_to_serve > 0
            if fail:
                self.server.failures_to_serve -= 1
            body = json.dumps(self.server.document).encode()
        if fail:
            self.send_error(500)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@contextmanager
def jwks_server(document: dict[str, Any], directory: Path) -> Iterator[JwksServer]:
    """A running :class:`JwksServer` serving ``document``; stopped on exit."""
    ca = init_ca(directory)
    leaf = issue_server(directory, hosts=("localhost",), ips=("127.0.0.1",))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(leaf.cert_path, leaf.key_path)
    server = JwksServer(document, ca.cert_path)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="jwks-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
