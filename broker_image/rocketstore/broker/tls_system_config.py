"""TLS on the remoting port with RocketMQ's settings (``TlsSystemConfig`` and ``TlsHelper``).

RocketMQ reads these as JVM system properties, then lets the file named by ``tls.config.file``
(default ``/etc/rocketmq/tls.properties``) override them (``tls.server.mode`` excepted, which only
the system property sets). RocketStore takes the same keys from broker.conf in place of the system
properties, then applies the file the same way:

``tls.server.mode``              ``disabled`` (RocketStore's default), ``permissive`` (TLS and plain
                                 clients on the same port: a connection whose first byte is 0x16, a
                                 TLS handshake record, gets TLS) or ``enforcing`` (plain clients are
                                 disconnected). Unknown values mean permissive, as in RocketMQ.
``tls.server.certPath``          PEM certificate (chain) of the server
``tls.server.keyPath``           PEM private key of the server (``tls.server.keyPassword``, file only)
``tls.server.trustCertPath``     PEM CA certificates client certificates are verified against
``tls.server.need.client.auth``  ``none`` / ``optional`` / ``require`` a client certificate
``tls.config.file``              the properties file read after broker.conf

The certificate, key and trust files are looked at again (at most once a second, when a client
connects) and a new SSLContext is built when one of them changed, so renewed certificates (a
Kubernetes Secret updated in place) are served without a restart; connections already open keep
theirs. Files that do not load then are logged and the previous context stays in use.

Differences from RocketMQ: its default mode is permissive with ``tls.test.mode.enable=true``, which
serves a self-signed certificate generated at start; RocketStore serves TLS only when a mode other
than disabled is configured, and always with the configured certificate (``tls.test.mode.enable``
is not read). RocketMQ accepts any client certificate unless ``tls.server.authClient`` is true;
Python's ssl module cannot, so ``optional``/``require`` verify client certificates against
``tls.server.trustCertPath``, which must then be set. The embedded name-server port uses the same
settings, as a RocketMQ name server on the same host would (clients with ``tls.enable`` speak TLS
to the name server too).
"""

from __future__ import annotations

import enum
import logging
import os
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.store.config import ConfigError

log = logging.getLogger(__name__)

#: How often, at most, the certificate files are looked at for changes.
RELOAD_CHECK_INTERVAL_S = 1.0


class TlsMode(enum.Enum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"

    @classmethod
    def parse(cls, text: str) -> TlsMode:
        """RocketMQ's TlsMode.parse: an unknown name is PERMISSIVE."""
        for mode in cls:
            if mode.value == text.strip():
                return mode
        return cls.PERMISSIVE


_CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The server side of TlsSystemConfig."""

    mode: TlsMode = TlsMode.DISABLED
    cert_path: str | None = None
    key_path: str | None = None
    key_password: str | None = None
    trust_cert_path: str | None = None
    need_client_auth: str = "none"

    @property
    def enabled(self) -> bool:
        return self.mode is not TlsMode.DISABLED


def apply_tls_properties(settings: TlsSettings, props: Mapping[str, str]) -> TlsSettings:
    """``settings`` overridden by a tls.properties file's keys (TlsHelper.extractTlsConfigFromFile)."""
    return replace(
        settings,
        cert_path=props.get("tls.server.certPath", settings.cert_path),
        key_path=props.get("tls.server.keyPath", settings.key_path),
        key_password=props.get("tls.server.keyPassword", settings.key_password),
        trust_cert_path=props.get("tls.server.trustCertPath", settings.trust_cert_path),
        need_client_auth=props.get("tls.server.need.client.auth", settings.need_client_auth),
    )


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file's ``key=value`` / ``key: value`` lines (comments and blanks skipped)."""
    props: dict[str, str] = {}
    for raw in path.read_text(encoding="latin-1").splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key, value = (line, "") if cut < 0 else (line[:cut], line[cut + 1:])
        props[key.strip()] = value.strip()
    return props


def load_tls_settings(base: TlsSettings, config_file: str | None) -> TlsSettings:
    """``base`` (from broker.conf) with the tls.properties file applied when it exists and is readable."""
    if config_file:
        path = Path(config_file)
        if path.is_file():
            try:
                return apply_tls_properties(base, read_properties(path))
            except OSError as exc:
                raise ConfigError("tls.config.file", config_file, f"cannot be read: {exc}") from exc
    return base


def server_ssl_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server's SSLContext; raises ConfigError naming the key that is missing or wrong."""
    if not settings.cert_path or not settings.key_path:
        raise ConfigError("tls.server.certPath", settings.cert_path or "",
                          f"tls.server.mode={settings.mode.value} needs tls.server.certPath and tls.server.keyPath")
    auth = settings.need_client_auth.strip().lower() or "none"
    verify = _CLIENT_AUTH.get(auth, ssl.CERT_NONE)  # RocketMQ reads an unknown value as none
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(settings.cert_path, settings.key_path, settings.key_password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("tls.server.certPath", settings.cert_path,
                          f"certificate / key {settings.key_path} cannot be loaded: {exc}") from exc
    if verify is not ssl.CERT_NONE:
        if not settings.trust_cert_path:
            raise ConfigError("tls.server.need.client.auth", auth, "needs tls.server.trustCertPath to verify clients")
        try:
            context.load_verify_locations(settings.trust_cert_path)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError("tls.server.trustCertPath", settings.trust_cert_path, f"cannot be loaded: {exc}") from exc
    context.verify_mode = verify
    return context


def broker_tls_settings(config: BrokerConfig) -> TlsSettings:
    """The broker's TLS settings: its broker.conf keys, then the tls.properties file over them."""
    base = TlsSettings(
        mode=TlsMode.parse(config.tls_server_mode),
        cert_path=config.tls_server_cert_path,
        key_path=config.tls_server_key_path,
        trust_cert_path=config.tls_server_trust_cert_path,
        need_client_auth=config.tls_server_need_client_auth,
    )
    return load_tls_settings(base, config.tls_config_file) if base.enabled else base


class ReloadingSslContext:
    """The server's SSLContext, rebuilt when its certificate, key or trust file changes."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self.reloads = 0
        #: changes whose files did not load (the previous certificate stayed): an operator's alert
        self.reload_failures = 0
        self._stamp = self._files_stamp()
        self._context = server_ssl_context(settings)  # a bad file at start raises ConfigError
        self._checked_at = time.monotonic()

    def _files_stamp(self) -> tuple[tuple[int, int] | None, ...]:
        stamp: list[tuple[int, int] | None] = []
        for path in (self.settings.cert_path, self.settings.key_path, self.settings.trust_cert_path):
            try:
                st = os.stat(path) if path else None
            except OSError:
                st = None
            stamp.append(None if st is None else (st.st_mtime_ns, st.st_size))
        return tuple(stamp)

    def current(self) -> ssl.SSLContext:
        """The context to hand the next connection (rebuilt first if the files changed)."""
        now = time.monotonic()
        if now - self._checked_at >= RELOAD_CHECK_INTERVAL_S:
            self._checked_at = now
            stamp = self._files_stamp()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._context = server_ssl_context(self.settings)
                except ConfigError as exc:
                    self.reload_failures += 1
                    log.error("TLS files changed but do not load; still serving the previous certificate: %s", exc)
                else:
                    self.reloads += 1
                    log.info("TLS certificate files changed: reloaded %s", self.settings.cert_path)
        return self._context
