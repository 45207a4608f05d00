"""TLS and ACL for the ``rocketstore`` data source's reads and writes through secured brokers.

A broker with ``tls.server.mode=enforcing`` refuses plain connections, and one with
``aclEnable=true`` refuses unsigned requests; its embedded name server does the same. The source
speaks to such brokers with these options (the TLS names are the RocketMQ client's own system
properties, so a RocketMQ user recognises them)::

    tls.enable                  true: TLS to every name server and broker (default false)
    tls.client.trustCertPath    PEM CA file: verify the broker's certificate against it; without
                                it the connection is encrypted but not verified, RocketMQ's
                                client default (tls.client.authServer=false)
    tls.client.certPath         PEM certificate (and tls.client.keyPath its key) presented to
    tls.client.keyPath          brokers that require client certificates
    accessKey                   the plain-ACL account whose secret signs every request

Giving any ``tls.client.*`` path turns TLS on; ``tls.enable=false`` with one is refused as a
contradiction. The paths are opened where the connection is made (the driver while planning, each
executor in its tasks): ship the files with ``--files`` or mount them on every node.

Secrets never travel as option values that Spark might show: the secret key comes from the
environment variable ``ROCKETSTORE_SECRET_KEY`` (and the access key from ``ROCKETSTORE_ACCESS_KEY``
when the option ``accessKey`` is absent) of the process that connects. With Spark, set it on the
driver before the session starts and on the executors through Spark conf
(``spark.executorEnv.ROCKETSTORE_SECRET_KEY``, or a Kubernetes Secret mapped to that variable).
An option named ``secretKey`` is refused with that advice, so a secret pasted into a notebook is
not silently kept in a query plan. No message or ``repr`` here ever contains a secret.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocketstore.client.acl_hook import ACCESS_KEY_ENV, SECRET_KEY_ENV, AclClientRPCHook, SessionCredentials
from rocketstore.client.tls import client_ssl_context
from rocketstore.pipeline.options import OptionError

__all__ = ["BrokerSecurity"]

_PATH_OPTIONS = ("tls.client.trustCertPath", "tls.client.certPath", "tls.client.keyPath")


@dataclass(frozen=True, slots=True)
class BrokerSecurity:
    """Validated TLS and ACL settings; picklable, and holding no secret (it is read from the
    environment when a connection is made, see :meth:`rpc_hook`)."""

    tls: bool = False
    trust_cert_path: str = ""
    cert_path: str = ""
    key_path: str = ""
    #: the access key given as an option; empty: ``ROCKETSTORE_ACCESS_KEY`` if set
    access_key: str = ""

    @classmethod
    def parse(cls, given: Mapping[str, str]) -> BrokerSecurity:
        """From ``given`` (option names in lower case, as Spark passes them)."""
        if "secretkey" in given:
            raise OptionError(f"option secretKey is not taken: an option's value can end up in query plans and "
                              f"logs. Set the environment variable {SECRET_KEY_ENV} of the driver and the "
                              f"executors instead (spark.executorEnv.{SECRET_KEY_ENV})")
        paths = {name: given.get(name.lower(), "").strip() for name in _PATH_OPTIONS}
        named = [name for name, value in paths.items() if value]
        raw_enable = given.get("tls.enable")
        if raw_enable is not None and raw_enable.strip().lower() not in ("true", "false"):
            raise OptionError(f"option tls.enable: {raw_enable!r}, expected true or false")
        enabled = raw_enable is not None and raw_enable.strip().lower() == "true"
        if named and raw_enable is not None and not enabled:
            raise OptionError(f"option tls.enable=false contradicts {', '.join(named)}: drop one or the other")
        if bool(paths["tls.client.certPath"]) != bool(paths["tls.client.keyPath"]):
            raise OptionError("options tls.client.certPath and tls.client.keyPath go together: a client "
                              "certificate needs its key")
        return cls(tls=enabled or bool(named), trust_cert_path=paths["tls.client.trustCertPath"],
                   cert_path=paths["tls.client.certPath"], key_path=paths["tls.client.keyPath"],
                   access_key=given.get("accesskey", "").strip())

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context, or None for plain TCP; a missing or unreadable file is an
        OptionError naming the option and the path."""
        if not self.tls:
            return None
        for name, path in zip(_PATH_OPTIONS, (self.trust_cert_path, self.cert_path, self.key_path), strict=True):
            if path and not Path(path).is_file():
                raise OptionError(f"option {name}: {path} is not a file on this host ({os.uname().nodename})")
        try:
            return client_ssl_context(trust_cert=self.trust_cert_path or None, cert=self.cert_path or None,
                                      key=self.key_path or None)
        except (OSError, ssl.SSLError) as exc:
            raise OptionError(f"the TLS files of options {', '.join(_PATH_OPTIONS)} could not be loaded: "
                              f"{exc}") from None

    def rpc_hook(self) -> AclClientRPCHook | None:
        """The signer of every request, from the option ``accessKey`` or ``ROCKETSTORE_ACCESS_KEY`` and
        the secret in ``ROCKETSTORE_SECRET_KEY``; None when no access key is given anywhere."""
        access = self.access_key or os.environ.get(ACCESS_KEY_ENV, "")
        secret = os.environ.get(SECRET_KEY_ENV, "")
        if not access and not secret:
            return None
        if not access:
            raise OptionError(f"{SECRET_KEY_ENV} is set but no access key: give the option accessKey or "
                              f"{ACCESS_KEY_ENV}")
        if not secret:
            raise OptionError(f"access key {access!r} has no secret here ({os.uname().nodename}): set "
                              f"{SECRET_KEY_ENV} in the environment of the driver and the executors "
                              f"(spark.executorEnv.{SECRET_KEY_ENV})")
        return AclClientRPCHook(SessionCredentials(access, secret))
