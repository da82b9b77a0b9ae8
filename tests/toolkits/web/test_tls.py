"""Pinning the checked address keeps TLS on the name: SNI carries the URL's host and the certificate is
verified against it, not against the address the socket was pinned to. A real TLS server on
127.0.0.1 with a certificate for ``localhost`` (made by the openssl command for this test)."""

from __future__ import annotations

import ipaddress
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tether.errors import TaskFailed
from tether.toolkits.web.fetch import Fetcher, Limits
from tether.toolkits.web.guard import Policy

LIMITS = Limits(max_bytes=64 * 1024, timeout_s=5.0, max_redirects=2)


class TlsSite:
    def __init__(self, cert: Path, key: Path) -> None:
        self.names: list[str | None] = []

        def remember(sock: Any, name: str | None, context: Any) -> None:
            self.names.append(name)

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        context.sni_callback = remember

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = "加密的页面 secure page".encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> tuple[socket.socket, Any]:
                sock, address = super().get_request()
                return context.wrap_socket(sock, server_side=True), address

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that rejects our certificate hangs up mid-handshake

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    assert openssl is not None, "the openssl command is needed to make the test certificate"
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_site(certificate: tuple[Path, Path]) -> Iterator[TlsSite]:
    served = TlsSite(*certificate)
    yield served
    served.close()


def _fetcher(site: TlsSite, context: ssl.SSLContext | None = None) -> Fetcher:
    policy = Policy(networks=((ipaddress.ip_network("127.0.0.1/32"), site.port),))
    return Fetcher(policy, LIMITS, ssl_context=context)


def test_the_name_is_verified_and_sent_as_sni_while_the_socket_goes_to_the_checked_address(
    tls_site: TlsSite, certificate: tuple[Path, Path]
) -> None:
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    with _fetcher(tls_site, trusting) as fetcher:
        fetched = fetcher.fetch(f"https://localhost:{tls_site.port}/")
        assert fetcher.transport.backend.connected == [("localhost", "127.0.0.1")]
    assert fetched.body.decode() == "加密的页面 secure page"
    assert tls_site.names == ["localhost"]


def test_the_certificate_is_checked_against_the_url_host_not_the_pinned_address(
    tls_site: TlsSite, certificate: tuple[Path, Path]
) -> None:
    """Same server, same pinned address: by its IP the certificate (for localhost) does not match."""
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    with _fetcher(tls_site, trusting) as fetcher, pytest.raises(TaskFailed, match="TLS certificate"):
        fetcher.fetch(f"https://127.0.0.1:{tls_site.port}/")


def test_an_untrusted_certificate_is_refused_by_default(tls_site: TlsSite) -> None:
    with (
        _fetcher(tls_site) as fetcher,
        pytest.raises(TaskFailed, match="TLS certificate could not be verified"),
    ):
        fetcher.fetch(f"https://localhost:{tls_site.port}/")
