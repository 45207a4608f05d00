"""TLS for the remoting client, as RocketMQ's client does it with ``tls.enable=true``.

RocketMQ's client (TlsSystemConfig, ``tls.client.*``) by default encrypts without checking the
server's certificate (``tls.client.authServer=false``); with ``authServer`` it verifies the chain
against ``tls.client.trustCertPath``, and with ``tls.client.certPath``/``keyPath`` it presents a
certificate of its own for brokers that require one. :func:`client_ssl_context` builds the same
three variants. The host name is never checked (Netty's client does not either): brokers are
addressed by IP or by pod DNS names their certificates rarely list.

Why :class:`TlsSocket` is not ``ssl.SSLSocket``: a connection is written by the caller's thread
while its reader thread blocks in ``recv``, and one OpenSSL connection must not be used from two
threads at once. ``TlsSocket`` keeps the OpenSSL state in an ``ssl.SSLObject`` over memory
buffers, touched only under a lock, and does the socket I/O itself, so a blocked ``recv`` holds no
lock a sender needs.
"""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

__all__ = ["TlsSocket", "client_ssl_context"]

_RECV_SIZE = 256 * 1024


def client_ssl_context(*, trust_cert: str | Path | None = None, trust_cert_pem: str | None = None,
                       cert: str | Path | None = None, key: str | Path | None = None) -> ssl.SSLContext:
    """A client context: verify the broker against ``trust_cert`` (a PEM file) or ``trust_cert_pem``
    (PEM text) when one is given, otherwise encrypt without verifying (RocketMQ's default); present
    ``cert``/``key`` (PEM files) when given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    if trust_cert is not None or trust_cert_pem is not None:
        context.load_verify_locations(cafile=None if trust_cert is None else str(trust_cert), cadata=trust_cert_pem)
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context.verify_mode = ssl.CERT_NONE
    if (cert is None) != (key is None):
        raise ValueError("a client certificate needs its key, and a key its certificate")
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


class TlsSocket:
    """The socket methods :class:`~rocketstore.client.remoting_client.RemotingClient` uses
    (``sendall``, ``recv``, ``shutdown``, ``close``), speaking TLS over a connected socket.

    The handshake runs in the constructor, bounded by ``timeout`` (seconds); ``ssl.SSLError``
    (e.g. a certificate that does not verify) or ``OSError`` propagate to the caller.
    """

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str | None,
                 timeout: float | None) -> None:
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_hostname=server_hostname)
        self._state_lock = threading.Lock()  # the SSLObject and its buffers
        self._send_lock = threading.Lock()  # the order of encrypted bytes on the wire
        previous = sock.gettimeout()
        sock.settimeout(timeout)
        try:
            self._handshake()
        finally:
            sock.settimeout(previous)

    def _handshake(self) -> None:
        while True:
            try:
                self._ssl.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                if not self._feed():
                    raise ConnectionResetError("the server closed the connection during the TLS handshake") from None
        self._flush()

    def _flush(self) -> None:
        """Send what OpenSSL has queued (handshake records, alerts, key updates)."""
        with self._send_lock:
            with self._state_lock:
                data = self._outgoing.read()
            if data:
                self._sock.sendall(data)

    def _feed(self) -> bool:
        """Read encrypted bytes from the socket into OpenSSL; False at the end of the stream."""
        data = self._sock.recv(_RECV_SIZE)
        with self._state_lock:
            if data:
                self._incoming.write(data)
            else:
                self._incoming.write_eof()
        return bool(data)

    def sendall(self, data: bytes) -> None:
        with self._send_lock:
            with self._state_lock:
                view = memoryview(data)
                while view:
                    view = view[self._ssl.write(view):]
                encrypted = self._outgoing.read()
            self._sock.sendall(encrypted)

    def recv(self, size: int) -> bytes:
        """Up to ``size`` decrypted bytes; ``b""`` when the peer closed the connection."""
        while True:
            with self._state_lock:
                try:
                    data = self._ssl.read(size)
                except ssl.SSLWantReadError:
                    data = None
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    return b""
                pending = self._outgoing.pending
            if pending:
                self._flush()
            if data:
                return data
            if data is not None:  # b"": a clean end of the TLS stream
                return b""
            self._feed()

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()
