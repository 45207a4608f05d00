"""The operator's Kubernetes API calls, through the official ``kubernetes`` client.

kopf watches RocketStores and patches their status with its own client; every other call the
operator makes (server-side apply of the desired objects, reading pods and Secrets, expanding PVCs,
the orphaning delete of a StatefulSet) goes through :class:`Kube`. Objects are applied with
server-side apply under the field manager ``rocketstore-operator`` (forced), so fields set by
others (a GitOps tool, an HPA, a human's ``kubectl annotate``) are left alone and no drift is
fought over.

The library reads the credentials: the pod's service account, or a kubeconfig with its current or
a chosen context, exec credential plugins, auth providers. It is synchronous, so each call runs in
a worker thread (``asyncio.to_thread``); this module is the one place that knows.

Credential refresh, as kubernetes 37 does it (``kubernetes.config``), and what is added here:

* in cluster: ``InClusterConfigLoader`` hooks every request and re-reads the projected token file
  when its copy is a minute old. Kubelet rewrites that file at 80% of the token's lifetime, so a
  minute-old copy is still valid; no code of ours is needed for rotation.
* exec plugins: re-run before a request once the ExecCredential's ``expirationTimestamp`` is within
  five minutes; a credential without an expiry is kept for the life of the process.
* a kubeconfig ``tokenFile`` is read once.
* the library never retries a 401. client-go reloads credentials on a 401, and so does
  :class:`Kube`: it runs the loader again (the token file is re-read, the exec plugin re-run) and
  retries the call once. That covers a token revoked or replaced before the library looks again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import kopf
from kubernetes.client import ApiClient, Configuration
from kubernetes.config import ConfigException, load_kube_config
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)
from kubernetes.dynamic import DynamicClient, Resource
from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError, UnauthorizedError
from urllib3.exceptions import InsecureRequestWarning

from rocketstore.operator import FIELD_MANAGER

__all__ = ["ApiError", "ConfigException", "Credentials", "Kube", "discover", "in_cluster", "kubeconfig"]

#: seconds one API call may take (connect and answer)
TIMEOUT: Final = 30.0

_T = TypeVar("_T")

log = logging.getLogger(__name__)


class ApiError(Exception):
    """A non-2xx answer; ``status`` is the HTTP status, ``reason`` Kubernetes' Status reason."""

    def __init__(self, status: int, body: Mapping[str, Any] | str) -> None:
        self.status = status
        self.body = body
        self.reason = body.get("reason", "") if isinstance(body, Mapping) else ""
        message = body.get("message", body) if isinstance(body, Mapping) else body
        super().__init__(f"HTTP {status}: {message}")

    @classmethod
    def of(cls, e: DynamicApiError) -> ApiError:
        text = e.body.decode(errors="replace") if isinstance(e.body, bytes) else str(e.body or e.reason or "")
        try:
            body: Mapping[str, Any] | str = json.loads(text)
        except ValueError:
            body = text
        return cls(int(e.status or 0), body if isinstance(body, Mapping) else text)

    @property
    def retriable(self) -> bool:
        return self.status in (409, 429) or self.status >= 500


@dataclass(frozen=True)
class Credentials:
    """Where the API server and its credentials come from.

    ``load`` fills a client ``Configuration``; :class:`Kube` runs it once at the start and again
    after a 401. ``source`` names it in logs and errors.
    """

    source: str
    load: Callable[[Configuration], None]


def in_cluster(token_file: str = SERVICE_TOKEN_FILENAME, ca_file: str = SERVICE_CERT_FILENAME,
               environ: Mapping[str, str] = os.environ) -> Credentials:
    """The pod's service account: ``KUBERNETES_SERVICE_HOST``/``_PORT``, the token and CA files."""

    def load(configuration: Configuration) -> None:
        InClusterConfigLoader(token_filename=token_file, cert_filename=ca_file,
                              environ=environ).load_and_set(configuration)

    return Credentials(f"in-cluster service account ({token_file})", load)


def kubeconfig(context: str | None = None, config_file: str | None = None) -> Credentials:
    """A kubeconfig (``config_file``, else ``$KUBECONFIG``, else ``~/.kube/config``) and one of its
    contexts (default: its current context). The file is never written back (``persist_config``):
    a refreshed auth-provider token stays in memory, where the next refresh finds it."""

    def load(configuration: Configuration) -> None:
        load_kube_config(config_file=config_file, context=context, client_configuration=configuration,
                         persist_config=False)

    where = config_file or os.environ.get("KUBECONFIG") or "~/.kube/config"
    return Credentials(f"kubeconfig {where}, context {context or '(current)'}", load)


def discover(context: str | None = None) -> Credentials:
    """In a pod the service account, else the kubeconfig's current context, as kubectl and kopf
    choose; a chosen ``context`` always means the kubeconfig (only a kubeconfig has contexts)."""
    if context is None:
        service_account = in_cluster()
        try:
            service_account.load(Configuration())
        except ConfigException:
            pass  # not in a pod
        else:
            return service_account
    return kubeconfig(context)


class Kube:
    """The API calls of the operator, async, each in a worker thread; ``await close()`` at the end.

    Raises ``ConfigException`` when the credentials cannot be loaded.
    """

    def __init__(self, credentials: Credentials, *, timeout: float = TIMEOUT) -> None:
        self.credentials = credentials
        self._timeout = timeout
        self._configuration = Configuration()
        credentials.load(self._configuration)
        if not self._configuration.verify_ssl:
            # the kubeconfig asks for it (insecure-skip-tls-verify): said once here, where urllib3
            # would warn on every request
            log.warning("the API server's certificate is not verified (%s)", credentials.source)
            warnings.filterwarnings("ignore", category=InsecureRequestWarning)
        self._api = ApiClient(self._configuration)
        self._api.user_agent = FIELD_MANAGER
        # discovery answers are cached in a file; a private one, so no other process or cluster
        # that happened to use the same address shares it
        self._cache = tempfile.TemporaryDirectory(prefix="rocketstore-operator-")
        self._lock = threading.Lock()
        self._dynamic: DynamicClient | None = None
        self._resources: dict[tuple[str, str], Resource] = {}

    # -- the thread side ---------------------------------------------------------------------------

    def _resource(self, api_version: str, kind: str) -> Resource:
        """The discovered API resource of a kind (discovery is lazy, cached, and not thread-safe)."""
        with self._lock:
            if self._dynamic is None:
                self._dynamic = DynamicClient(self._api, cache_file=os.path.join(self._cache.name, "discovery.json"))
            key = (api_version, kind)
            if key not in self._resources:
                try:
                    self._resources[key] = self._dynamic.resources.get(api_version=api_version, kind=kind)
                except ResourceNotFoundError:
                    raise ValueError(f"the API server serves no {api_version} {kind}") from None
            return self._resources[key]

    def _call(self, fn: Callable[[], _T]) -> _T:
        try:
            try:
                return fn()
            except UnauthorizedError:
                # a rotated or revoked token: read the credentials again and retry once
                with self._lock:
                    self.credentials.load(self._configuration)
                return fn()
        except DynamicApiError as e:
            raise ApiError.of(e) from e

    async def _run(self, fn: Callable[[], _T]) -> _T:
        return await asyncio.to_thread(self._call, fn)

    def _client(self) -> DynamicClient:
        assert self._dynamic is not None  # set by _resource, called first
        return self._dynamic

    @staticmethod
    def _dict(obj: Any) -> dict[str, Any]:
        out: dict[str, Any] = obj.to_dict()
        return out

    # -- the calls ---------------------------------------------------------------------------------

    async def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when there is none."""

        def call() -> dict[str, Any]:
            res = self._resource(api_version, kind)
            return self._dict(self._client().get(res, name=name, namespace=namespace,
                                                 _request_timeout=self._timeout))

        try:
            return await self._run(call)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def list(
        self, api_version: str, kind: str, namespace: str | None, label_selector: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        sel = ",".join(f"{k}={v}" for k, v in label_selector.items()) or None

        def call() -> list[dict[str, Any]]:
            res = self._resource(api_version, kind)
            items: list[dict[str, Any]] = self._dict(self._client().get(
                res, namespace=namespace, label_selector=sel, _request_timeout=self._timeout)).get("items") or []
            return items

        return await self._run(call)

    async def apply(self, obj: Mapping[str, Any], *, force: bool = True) -> dict[str, Any]:
        """Server-side apply ``obj`` (a full desired object) as the operator's field manager."""
        meta = obj["metadata"]

        def call() -> dict[str, Any]:
            res = self._resource(obj["apiVersion"], obj["kind"])
            return self._dict(self._client().server_side_apply(
                res, body=dict(obj), name=meta["name"], namespace=meta.get("namespace"),
                field_manager=FIELD_MANAGER, force_conflicts=force, _request_timeout=self._timeout))

        return await self._run(call)

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``obj``; 409 (an ``ApiError``) when it exists: unlike ``apply``, two creators
        cannot both succeed (the leader election's first Lease)."""
        meta = obj["metadata"]

        def call() -> dict[str, Any]:
            res = self._resource(obj["apiVersion"], obj["kind"])
            return self._dict(self._client().create(res, body=dict(obj), namespace=meta.get("namespace"),
                                                    field_manager=FIELD_MANAGER, _request_timeout=self._timeout))

        return await self._run(call)

    async def merge_patch(
        self, api_version: str, kind: str, namespace: str | None, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            res = self._resource(api_version, kind)
            return self._dict(self._client().patch(
                res, body=dict(patch), name=name, namespace=namespace, content_type="application/merge-patch+json",
                field_manager=FIELD_MANAGER, _request_timeout=self._timeout))

        return await self._run(call)

    async def delete(
        self, api_version: str, kind: str, namespace: str | None, name: str, *, propagation: str = "Background"
    ) -> bool:
        """Delete; ``propagation="Orphan"`` keeps dependents (a StatefulSet's pods). False if absent."""

        def call() -> None:
            res = self._resource(api_version, kind)
            self._client().delete(res, name=name, namespace=namespace, propagation_policy=propagation,
                                  _request_timeout=self._timeout)

        try:
            await self._run(call)
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    # -- kopf --------------------------------------------------------------------------------------

    def kopf_credentials(self) -> kopf.ConnectionInfo:
        """kopf's login from this client's configuration, so kopf and the calls above use one
        source: the same server, context and credentials. kopf logs in again after a 401, so the
        credentials are loaded afresh each time (the token file read, the exec plugin run), not
        taken from what the library holds. Blocking (an exec plugin may run): call it in a thread."""
        with self._lock:
            self.credentials.load(self._configuration)
        cfg = self._configuration
        header = cfg.auth_settings().get("BearerToken", {}).get("value") or ""
        scheme, _, token = header.partition(" ") if " " in header else ("", "", header)
        return kopf.ConnectionInfo(
            server=cfg.host,
            ca_path=cfg.ssl_ca_cert,
            insecure=not cfg.verify_ssl,
            username=cfg.username or None,
            password=cfg.password or None,
            scheme=scheme or None,
            token=token or None,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
        )

    async def close(self) -> None:
        await asyncio.to_thread(self._api.close)
        self._cache.cleanup()
