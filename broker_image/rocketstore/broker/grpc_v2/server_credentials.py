"""TLS on the gRPC port, from the remoting port's settings (``tls.server.*``, tls_system_config.py).

``tls.server.mode`` ``enforcing`` or ``permissive`` makes the gRPC port serve TLS with the
configured certificate and key; ``disabled`` (the default) leaves it plaintext. grpc cannot accept
TLS and plaintext on one port, which is what ``permissive`` means on the remoting port and on
RocketMQ's proxy: here a permissive broker's gRPC port serves TLS only (5.x clients enable TLS by
default; the broker says so at start). ``tls.server.need.client.auth`` ``require`` makes a client
certificate signed by ``tls.server.trustCertPath`` mandatory; ``optional`` asks for one.

The files are checked as the remoting port checks them (a ConfigError naming the key at start) and
reloaded when they change: grpc asks :meth:`ReloadingCredentials.fetch` before each handshake.
An encrypted key (``tls.server.keyPassword``) cannot be handed to grpc, which reads PEM only.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import grpc

from rocketstore.broker.tls_system_config import ReloadingSslContext, TlsSettings
from rocketstore.store.config import ConfigError

log = logging.getLogger(__name__)


def _configuration(settings: TlsSettings) -> grpc.ServerCertificateConfiguration:
    assert settings.cert_path and settings.key_path  # checked by ReloadingSslContext first
    key_and_cert = (Path(settings.key_path).read_bytes(), Path(settings.cert_path).read_bytes())
    auth = settings.need_client_auth.strip().lower()
    trust = Path(settings.trust_cert_path).read_bytes() \
        if settings.trust_cert_path and auth in ("optional", "require") else None
    return grpc.ssl_server_certificate_configuration([key_and_cert], root_certificates=trust)


class ReloadingCredentials:
    """The gRPC port's server credentials, with the certificate reloaded when its files change."""

    def __init__(self, settings: TlsSettings) -> None:
        if settings.key_password:
            raise ConfigError("tls.server.keyPassword", "***", "the gRPC port cannot use an encrypted key; "
                              "give tls.server.keyPath an unencrypted PEM key, or set grpcListenPort=0")
        self.settings = settings
        self._files = ReloadingSslContext(settings)  # raises ConfigError naming a missing or bad file
        self._reloads = 0
        self._lock = threading.Lock()  # fetch runs on grpc's threads
        self.credentials = grpc.dynamic_ssl_server_credentials(
            _configuration(settings), self.fetch,
            require_client_authentication=settings.need_client_auth.strip().lower() == "require")

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """A new configuration when the files changed and load, else None (keep the current one)."""
        with self._lock:
            self._files.current()
            if self._files.reloads == self._reloads:
                return None
            self._reloads = self._files.reloads
        try:
            return _configuration(self.settings)
        except OSError as exc:
            log.error("gRPC TLS files changed but cannot be read; still serving the previous certificate: %s", exc)
            return None
