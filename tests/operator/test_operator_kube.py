"""The operator's API layer (rocketstore.operator.kube, the official ``kubernetes`` client) against
the REAL API server: what each call answers, and where the credentials come from: a kubeconfig's
chosen context, an exec credential plugin (renewed when its credential expires), an in-cluster
style token file, and a token revoked under a running client. The last test runs the operator
process itself on a chosen context whose only credential is an exec plugin.

Credentials are ServiceAccount tokens from the TokenRequest API: the test API server accepts them
(``--service-account-key-file``) besides its static admin token. A token bound to a Secret stops
working the moment that Secret is deleted, which is how a revoked token is made here.
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_support import controlplane, free_port, write_kubeconfig
from polling import wait_until

from rocketstore.operator import FIELD_MANAGER
from rocketstore.operator.kube import ApiError, Kube, in_cluster, kubeconfig

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NS = "kubelib"
G, V, P = "rocketstore.io", "v1alpha1", "rocketstores"

#: an exec credential plugin: prints the token held in a file, logs each run, optionally with an
#: expiry ``ttl`` seconds ahead (0: none)
PLUGIN = """\
import datetime, json, pathlib, sys
token_file, log_file, ttl = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(log_file, "a") as log:
    log.write("run\\n")
status = {"token": pathlib.Path(token_file).read_text().strip()}
if ttl:
    expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=ttl)
    status["expirationTimestamp"] = expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status}))
"""


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def namespace(kube: Any) -> str:
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": NS}})
    wait_until(f"default SA in {NS}", lambda: _exists(lambda: core.read_namespaced_service_account("default", NS)), 60)
    return NS


def _exists(read: Any) -> bool:
    try:
        read()
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def service_account(kube: Any, name: str, *, admin: bool) -> str:
    """A ServiceAccount in NS; ``admin`` binds it to cluster-admin."""
    client.CoreV1Api(kube).create_namespaced_service_account(NS, {"metadata": {"name": name}})
    if admin:
        client.RbacAuthorizationV1Api(kube).create_cluster_role_binding({
            "metadata": {"name": f"{NS}-{name}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}]})
    return name


def token(kube: Any, sa: str, bound_secret: str | None = None) -> str:
    """A TokenRequest token of ``sa``; bound to a Secret it dies with that Secret."""
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if bound_secret is not None:
        secret = client.CoreV1Api(kube).create_namespaced_secret(NS, {"metadata": {"name": bound_secret}})
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Secret", "name": bound_secret,
                                  "uid": secret.metadata.uid}
    answer = client.CoreV1Api(kube).create_namespaced_service_account_token(sa, NS, {"spec": spec})
    return str(answer.status.token)


def rejected(control_plane: Any, bearer: str) -> bool:
    """Whether the API server answers 401 to ``bearer`` (a raw request, no client library)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(f"{control_plane.server}/api/v1/namespaces/{NS}/configmaps",
                                 headers={"Authorization": f"Bearer {bearer}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5):
            return False
    except urllib.error.HTTPError as e:
        return e.code == 401


def exec_user(tmp_path: Path, token_file: Path, log: Path, ttl: int) -> dict[str, Any]:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": [str(plugin), str(token_file), str(log), str(ttl)], "interactiveMode": "Never"}}


def runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture
def admin_config(control_plane: Any, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "admin.kubeconfig", control_plane.server,
                            {"admin": {"token": control_plane.token}}, "admin")


# -- the calls -------------------------------------------------------------------------------------

def test_calls_answer_as_the_operator_expects(control_plane: Any, kube: Any, namespace: str,
                                              admin_config: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "layer", "namespace": NS, "labels": {"app": "layer"}}, "data": {"k": "v"}}

    async def scenario() -> None:
        k = Kube(kubeconfig(config_file=str(admin_config)))
        try:
            assert await k.get("v1", "ConfigMap", NS, "layer") is None
            assert await k.delete("v1", "ConfigMap", NS, "layer") is False
            with pytest.raises(ApiError) as missing:
                await k.merge_patch("v1", "ConfigMap", NS, "layer", {"data": {"k": "w"}})
            assert missing.value.status == 404 and missing.value.reason == "NotFound"
            assert not missing.value.retriable

            applied = await k.apply(cm)
            assert applied["data"] == {"k": "v"}
            managers = {f["manager"]: f["operation"] for f in applied["metadata"]["managedFields"]}
            assert managers == {FIELD_MANAGER: "Apply"}
            many = await asyncio.gather(*(k.get("v1", "ConfigMap", NS, "layer") for _ in range(8)))
            assert all(m is not None and m["data"] == {"k": "v"} for m in many)
            assert [o["metadata"]["name"] for o in await k.list("v1", "ConfigMap", NS, {"app": "layer"})] == ["layer"]
            assert await k.list("v1", "ConfigMap", NS, {"app": "other"}) == []

            # someone else takes the field: a plain apply conflicts (409), a forced one takes it back
            client.CoreV1Api(kube).patch_namespaced_config_map("layer", NS, {"data": {"k": "theirs"}})
            with pytest.raises(ApiError) as conflict:
                await k.apply(cm, force=False)
            assert conflict.value.status == 409 and conflict.value.retriable
            assert (await k.apply(cm))["data"] == {"k": "v"}
            merged = await k.merge_patch("v1", "ConfigMap", NS, "layer", {"metadata": {"labels": {"extra": "1"}}})
            assert merged["metadata"]["labels"] == {"app": "layer", "extra": "1"}
            assert {(f["manager"], f["operation"]) for f in merged["metadata"]["managedFields"]} >= {
                (FIELD_MANAGER, "Apply"), (FIELD_MANAGER, "Update")}

            assert await k.delete("v1", "ConfigMap", NS, "layer") is True
            assert await k.get("v1", "ConfigMap", NS, "layer") is None

            # propagation reaches the garbage collector: an orphaned dependent outlives its owner
            owner = await k.apply({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "owner", "namespace": NS}})
            ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
            await k.apply({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "dependent", "namespace": NS, "ownerReferences": [ref]}})
            assert await k.delete("v1", "ConfigMap", NS, "owner", propagation="Orphan") is True
            for _ in range(150):
                dependent = await k.get("v1", "ConfigMap", NS, "dependent")
                assert dependent is not None
                if await k.get("v1", "ConfigMap", NS, "owner") is None and not dependent["metadata"].get(
                        "ownerReferences"):
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError("the owner was not deleted with its dependent orphaned")
            with pytest.raises(ValueError, match=r"serves no example\.com/v1 Nothing"):
                await k.get("example.com/v1", "Nothing", NS, "x")
        finally:
            await k.close()

    run(scenario())


def test_a_forbidden_call_is_an_api_error_that_is_not_retried(control_plane: Any, kube: Any, namespace: str,
                                                              tmp_path: Path) -> None:
    sa = service_account(kube, "nobody", admin=False)
    config = write_kubeconfig(tmp_path / "kubeconfig", control_plane.server, {"nobody": {"token": token(kube, sa)}},
                              "nobody")

    async def scenario() -> None:
        k = Kube(kubeconfig(config_file=str(config)))
        try:
            with pytest.raises(ApiError) as e:
                await k.get("v1", "Secret", NS, "anything")
            assert e.value.status == 403 and e.value.reason == "Forbidden" and not e.value.retriable
        finally:
            await k.close()

    run(scenario())


# -- where the credentials come from ----------------------------------------------------------------

def test_the_chosen_context_is_used_not_the_current_one(control_plane: Any, kube: Any, namespace: str,
                                                        tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "kubeconfig", control_plane.server, {
        "stale": {"token": "not-a-token-the-server-knows"},
        "admin": {"token": control_plane.token},
    }, current="stale")

    async def call(context: str | None) -> Any:
        k = Kube(kubeconfig(context, config_file=str(config)))
        try:
            return await k.get("v1", "ServiceAccount", NS, "default")
        finally:
            await k.close()

    assert run(call("admin"))["metadata"]["name"] == "default"
    with pytest.raises(ApiError) as e:
        run(call(None))  # the current context's credentials are refused
    assert e.value.status == 401


def test_an_exec_plugin_credential_is_renewed_when_it_expires(control_plane: Any, kube: Any, namespace: str,
                                                              tmp_path: Path) -> None:
    sa = service_account(kube, "exec-renewed", admin=True)
    token_file, log = tmp_path / "token", tmp_path / "plugin.log"
    token_file.write_text(token(kube, sa))
    # an expiry inside the library's five-minute margin: every request asks the plugin again
    config = write_kubeconfig(tmp_path / "kubeconfig", control_plane.server,
                              {"exec": exec_user(tmp_path, token_file, log, ttl=60)}, "exec")

    async def scenario() -> None:
        k = Kube(kubeconfig(config_file=str(config)))
        try:
            first = runs(log)
            assert first >= 1
            for _ in range(3):
                assert await k.get("v1", "ServiceAccount", NS, sa) is not None
            assert runs(log) >= first + 3
        finally:
            await k.close()

    run(scenario())


@pytest.mark.parametrize("source", ["in-cluster token file", "exec plugin"])
def test_a_revoked_token_is_read_again_from_its_source(control_plane: Any, kube: Any, namespace: str,
                                                       tmp_path: Path, source: str) -> None:
    """The token on disk is replaced and the old one revoked (its bound Secret deleted) under a
    running client. The library alone would keep sending the old token (a minute, for the token
    file; for ever, for a plugin credential without expiry); the layer reloads on the 401."""
    tag = "file" if source.startswith("in-cluster") else "plugin"
    sa = service_account(kube, f"rotated-{tag}", admin=True)
    token_file, log = tmp_path / "token", tmp_path / "plugin.log"
    old = token(kube, sa, bound_secret=f"bound-{tag}")
    token_file.write_text(old)
    if tag == "file":
        ca = control_plane.work / "apiserver" / "apiserver.crt"
        credentials = in_cluster(str(token_file), str(ca), environ={
            "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(control_plane.p_api)})
    else:
        config = write_kubeconfig(tmp_path / "kubeconfig", control_plane.server,
                                  {"exec": exec_user(tmp_path, token_file, log, ttl=0)}, "exec")
        credentials = kubeconfig(config_file=str(config))

    async def scenario() -> None:
        k = Kube(credentials)
        try:
            assert await k.get("v1", "ServiceAccount", NS, sa) is not None
            token_file.write_text(token(kube, sa))
            client.CoreV1Api(kube).delete_namespaced_secret(f"bound-{tag}", NS)
            await asyncio.to_thread(wait_until, "the old token refused", lambda: rejected(control_plane, old))
            assert await k.get("v1", "ServiceAccount", NS, sa) is not None
        finally:
            await k.close()

    run(scenario())
    if tag == "plugin":
        assert runs(log) == 2  # at the start, and once after the 401


# -- the operator process ----------------------------------------------------------------------------

@pytest.fixture
def exec_operator(control_plane: Any, kube: Any, crd: Any, namespace: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """``rocketstore operator --context ci`` watching NS, where ``ci``'s only credential is an exec
    plugin and the current context's token is refused."""
    sa = service_account(kube, "operator-exec", admin=True)
    token_file, log = tmp_path / "token", tmp_path / "plugin.log"
    token_file.write_text(token(kube, sa, bound_secret="operator-exec-bound"))
    config = write_kubeconfig(tmp_path / "kubeconfig", control_plane.server, {
        "stale": {"token": "not-a-token-the-server-knows"},
        "ci": exec_user(tmp_path, token_file, log, ttl=0),
    }, current="stale")
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "ctx"},
            "spec": {"brokers": 1, "commitLog": {"segmentSize": "64Mi"},
                     # no such class: the PVC stays Pending and takes none of the shared volumes
                     "storage": {"segments": 2, "storageClassName": "kubelib-none"}}}
    client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, NS, P, body)
    broker = f"{NS}/ctx-0=127.0.0.1:{free_port()}"  # nothing listens there: unreachable, at once
    output = tmp_path / "operator.log"
    env = {**os.environ, "KUBECONFIG": str(config)}
    env.pop("ROCKETSTORE_OPERATOR_CONTEXT", None)
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rocketstore.cli", "operator", "--namespace", NS, "--context", "ci",
             "--liveness-port", "0", "--metrics-port", "0", "--interval", "1", "--broker-address", broker],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=str(ROOT))
    try:
        yield {"proc": proc, "log": output, "plugin_log": log, "sa": sa, "token_file": token_file}
    finally:
        controlplane.terminate(proc, 15)
        client.CustomObjectsApi(kube).delete_namespaced_custom_object(G, V, NS, P, "ctx")


def test_the_operator_runs_on_the_chosen_context_with_an_exec_plugin(
        control_plane: Any, kube: Any, exec_operator: dict[str, Any]) -> None:
    """Then its token is revoked: kopf (whose status patches now answer 401) logs in again and our
    calls reload, both through the plugin, which now prints a new token; the operator carries on."""
    proc, output = exec_operator["proc"], exec_operator["log"]

    def reconciled() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"operator exited {proc.returncode}:\n{output.read_text()[-3000:]}")
        # create, or resume when the tier's cluster-wide operator handled the creation first
        return re.search(r"Handler 'reconcile-(create|resume)' succeeded", output.read_text()) is not None

    # kopf's watch found the RocketStore (kopf's login) and the handler applied its objects (our calls)
    try:
        wait_until("the reconcile handler to succeed", reconciled, 60)
    except AssertionError as e:
        raise AssertionError(f"{e}; the operator's log:\n{output.read_text()[-4000:]}") from None
    text = output.read_text()
    assert "context ci" in text, text[-3000:]
    assert runs(exec_operator["plugin_log"]) >= 2  # the layer's start, kopf's login
    assert "InsecureRequestWarning" not in text  # said once by the layer, not per request

    old = exec_operator["token_file"].read_text()
    exec_operator["token_file"].write_text(token(kube, exec_operator["sa"]))
    # what the operator logs from the revocation on: kopf may meet the 401 and log in again while
    # the API server is still being asked whether it refuses the old token
    revoked_at = len(output.read_text())
    client.CoreV1Api(kube).delete_namespaced_secret("operator-exec-bound", NS)
    wait_until("the old token refused", lambda: rejected(control_plane, old))
    try:
        wait_until("kopf to log in again", lambda: "Re-authentication has finished" in output.read_text()[revoked_at:])
        renewed_at = len(output.read_text())
        wait_until("observations after the new login",
                 lambda: output.read_text()[renewed_at:].count("Timer 'observe' succeeded") >= 3)
    except AssertionError as e:
        raise AssertionError(f"{e}; the operator's log:\n{output.read_text()[-4000:]}") from None
    # with the old token still in use each status patch would answer 401 and log in again
    assert "Re-authentication" not in output.read_text()[renewed_at:], output.read_text()[-4000:]


@pytest.mark.parametrize(("args", "expected"), [
    ([], "no API server to use: not in a pod with a service account, and the kubeconfig"),
    (["--context", "elsewhere"], "context elsewhere: Invalid kube-config file"),
])
def test_no_usable_credentials_is_a_message_not_a_traceback(tmp_path: Path, args: list[str], expected: str) -> None:
    config = write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1", {"only": {"token": "t"}}, "only")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_SERVICE_", "ROCKETSTORE_OPERATOR_"))}
    env["KUBECONFIG"] = str(config) if args else str(tmp_path / "absent")
    out = subprocess.run([sys.executable, "-m", "rocketstore.cli", "operator", "--liveness-port", "0",
                          "--metrics-port", "0", *args], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert expected in out.stderr and "Traceback" not in out.stderr, out.stderr
