"""A small async Kubernetes client for the few calls the operator makes besides kopf's own.

It logs in the way kopf does (in-cluster service account, else kubeconfig) and speaks plain
HTTP/JSON through aiohttp, which kopf already depends on. Objects are applied with server-side
apply under the field manager ``rocketstore-operator``, so fields set by others (a GitOps tool, an
HPA, a human's ``kubectl annotate``) are left alone and no drift is fought over.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import aiohttp
import kopf

from rocketstore.operator import FIELD_MANAGER

__all__ = ["ApiError", "Kube", "resource_path"]

# kind -> (api prefix, plural, namespaced)
_RESOURCES: Final[dict[tuple[str, str], tuple[str, bool]]] = {
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "Service"): ("services", True),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("v1", "PersistentVolume"): ("persistentvolumes", False),
    ("v1", "Pod"): ("pods", True),
    ("apps/v1", "StatefulSet"): ("statefulsets", True),
    ("policy/v1", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("storage.k8s.io/v1", "StorageClass"): ("storageclasses", False),
    ("rocketstore.io/v1alpha1", "RocketStore"): ("rocketstores", True),
}


class ApiError(Exception):
    """A non-2xx answer; ``status`` is the HTTP status, ``reason`` Kubernetes' Status reason."""

    def __init__(self, status: int, body: Mapping[str, Any] | str) -> None:
        self.status = status
        self.body = body
        self.reason = body.get("reason", "") if isinstance(body, Mapping) else ""
        message = body.get("message", body) if isinstance(body, Mapping) else body
        super().__init__(f"HTTP {status}: {message}")

    @property
    def retriable(self) -> bool:
        return self.status in (409, 429) or self.status >= 500


def resource_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    try:
        plural, namespaced = _RESOURCES[(api_version, kind)]
    except KeyError:
        raise ValueError(f"unknown resource {api_version} {kind}") from None
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespaced:
        if namespace is None:
            raise ValueError(f"{kind} is namespaced")
        base += f"/namespaces/{namespace}"
    path = f"{base}/{plural}"
    return path if name is None else f"{path}/{name}"


def _material(path: Any, data: Any, tmp: Path, fname: str) -> str | None:
    """A file path for a PEM given as a path or as (base64 or raw) data."""
    if path:
        return str(path)
    if not data:
        return None
    raw = data if isinstance(data, bytes) else data.encode()
    if not raw.lstrip().startswith(b"-----"):
        raw = base64.b64decode(raw)
    out = tmp / fname
    out.write_bytes(raw)
    return str(out)


class Kube:
    """One aiohttp session against one API server; use as ``async with Kube.login() as kube``."""

    def __init__(self, info: kopf.ConnectionInfo) -> None:
        self._info = info
        self._session: aiohttp.ClientSession | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="rocketstore-operator-")

    @classmethod
    def login(cls, settings: kopf.OperatorSettings | None = None) -> Kube:
        settings = settings or kopf.OperatorSettings()
        info = kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(settings=settings)
        if info is None:
            raise kopf.LoginError("no in-cluster service account and no kubeconfig")
        return cls(info)

    def _ssl(self) -> ssl.SSLContext | bool:
        info, tmp = self._info, Path(self._tmp.name)
        if info.insecure:
            return False
        ca = _material(info.ca_path, info.ca_data, tmp, "ca.pem")
        ctx = ssl.create_default_context(cafile=ca)
        cert = _material(info.certificate_path, info.certificate_data, tmp, "cert.pem")
        key = _material(info.private_key_path, info.private_key_data, tmp, "key.pem")
        if cert:
            ctx.load_cert_chain(cert, key)
        return ctx

    async def __aenter__(self) -> Kube:
        headers = {"Accept": "application/json"}
        info = self._info
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        auth = aiohttp.BasicAuth(info.username, info.password or "") if info.username else None
        self._session = aiohttp.ClientSession(
            base_url=info.server.rstrip("/") + "/",
            headers=headers,
            auth=auth,
            connector=aiohttp.TCPConnector(ssl=self._ssl()),
            timeout=aiohttp.ClientTimeout(total=30),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._tmp.cleanup()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> Any:
        if self._session is None:
            await self.__aenter__()
        assert self._session is not None
        data = None if body is None else json.dumps(body)
        headers = {} if body is None else {"Content-Type": content_type}
        async with self._session.request(method, path.lstrip("/"), data=data, headers=headers, params=params) as r:
            text = await r.text()
            try:
                payload: Any = json.loads(text) if text else {}
            except ValueError:
                payload = text
            if r.status >= 400:
                raise ApiError(r.status, payload)
            return payload

    # -- conveniences ------------------------------------------------------------------------------

    async def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = await self.request("GET", resource_path(api_version, kind, namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        return obj

    async def list(
        self, api_version: str, kind: str, namespace: str | None, label_selector: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        sel = ",".join(f"{k}={v}" for k, v in label_selector.items())
        out = await self.request(
            "GET", resource_path(api_version, kind, namespace), params={"labelSelector": sel} if sel else None
        )
        items: list[dict[str, Any]] = out.get("items", [])
        return items

    async def apply(self, obj: Mapping[str, Any], *, force: bool = True) -> dict[str, Any]:
        """Server-side apply ``obj`` (a full desired object) as the operator's field manager."""
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        params = {"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"}
        result: dict[str, Any] = await self.request(
            "PATCH", path, body=obj, content_type="application/apply-patch+yaml", params=params
        )
        return result

    async def merge_patch(
        self, api_version: str, kind: str, namespace: str | None, name: str, patch: Mapping[str, Any],
        *, subresource: str | None = None,
    ) -> dict[str, Any]:
        path = resource_path(api_version, kind, namespace, name)
        if subresource:
            path += f"/{subresource}"
        result: dict[str, Any] = await self.request(
            "PATCH", path, body=patch, content_type="application/merge-patch+json"
        )
        return result

    async def delete(
        self, api_version: str, kind: str, namespace: str | None, name: str, *, propagation: str = "Background"
    ) -> bool:
        """Delete; ``propagation="Orphan"`` keeps dependents (a StatefulSet's pods). False if absent."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            await self.request("DELETE", resource_path(api_version, kind, namespace, name), body=body)
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return True
