"""Start and stop the test control plane built by build.sh: the one place that knows how.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok run on 127.0.0.1 with free
ports in a temporary directory; one fake kwok node is registered (tainted, with allocatable
capacity); the ``default`` ServiceAccount is awaited (pods are rejected before it exists). Stop
order is the reverse of start: the apiserver must stop before etcd, or both hang for a minute.

Used by the operator's pytest fixtures (tests/operator/conftest.py) and by smoke.sh::

    python3 tests/controlplane/controlplane.py smoke   # start, run one pod on kwok, stop

Standard library only (plus the ``openssl`` CLI for the service-account key). Flags are the ones
verified in README.md next to this file.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


def log(msg: str, t0: float = time.monotonic()) -> None:
    print(f"[controlplane {time.monotonic() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def build(env: dict[str, str] | None = None, control_plane_only: bool = False) -> Path:
    """Run build.sh (about 10 ms when cached, about 26 min cold) and return the bin directory.

    ``control_plane_only`` asks for the control plane without the node's binaries (kubelet,
    kube-proxy, CoreDNS): all that a kwok cluster runs, and present before those in a cold build.
    """
    if os.environ.get("CONTROLPLANE_BIN"):
        return Path(os.environ["CONTROLPLANE_BIN"])
    part = ["control-plane"] if control_plane_only else []
    out = subprocess.run([str(HERE / "build.sh"), *part], check=True, stdout=subprocess.PIPE, text=True, env=env)
    return Path(out.stdout.strip().splitlines()[-1])


def build_helm() -> Path:
    """Run helm.sh (helm from the Go module proxy, cached by version) and return the helm binary."""
    out = subprocess.run([str(HERE / "helm.sh")], check=True, stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def terminate(proc: subprocess.Popen[bytes], seconds: float = 10) -> None:
    """SIGTERM, then SIGKILL after ``seconds``: every process here gets a chance to stop cleanly."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


#: ports handed out by free_ports in this process: never handed out twice, even once closed again
_HANDED_OUT: set[int] = set()

#: where each process claims the ports it hands out, one file per port holding the claimer's pid:
#: CI runs test phases side by side, and a port two processes both found free goes to the first to
#: bind it (a JVM broker binds seconds after its port is picked; a CI run lost a test that way).
#: One directory per user: another user's claims could be neither read nor taken over.
_CLAIMS = Path(tempfile.gettempdir()) / f"rocketstore-port-claims-{os.getuid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _claim(port: int) -> bool:
    """Claim ``port`` for this process across processes; False when a live process holds it.
    A claim left by a process that has exited is taken over."""
    _CLAIMS.mkdir(parents=True, exist_ok=True)
    path = _CLAIMS / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                holder = int(path.read_text())
            except (OSError, ValueError):
                return False  # still being written by its claimer
            if holder == os.getpid() or _pid_alive(holder):
                return False
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def _release_claims(pid: int) -> None:
    """At exit, drop this process's claims (a forked child inherits the hook, not the claims)."""
    if os.getpid() != pid:
        return
    for port in _HANDED_OUT:
        path = _CLAIMS / str(port)
        try:
            if path.read_text() == str(pid):
                path.unlink()
        except OSError:
            pass


atexit.register(_release_claims, os.getpid())


def _outside_ephemeral_range() -> range:
    """Ports the kernel never picks for an outgoing connection or a bind to port 0.

    A port found free by binding port 0 lies in the ephemeral range, so between the check and the
    child process binding it, any outgoing connection (a Go module download, a client) can take it:
    a CI run lost three tests that way. Ports below the range can only be taken by a deliberate bind.
    """
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    below, above = range(10000, low), range(high + 1, 65536)
    return below if len(below) >= len(above) else above


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``port`` on ``host`` can be bound right now."""
    if not 1024 < port < 65536:
        return False
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(n: int, host: str = "127.0.0.1", also: Sequence[int] = ()) -> list[int]:
    """``n`` distinct TCP ports free on ``host``, outside the ephemeral range, never handed out before
    by this or a live process of the same user. ``also``: offsets (e.g. -2, +1, ports a RocketMQ broker
    derives from its listen port) that must be free as well; they are claimed with the port."""
    candidates = _outside_ephemeral_range()
    found: list[int] = []
    for _ in range(50 * n + 1000):
        base = random.choice(candidates)
        block = [base + d for d in (0, *also)]
        if any(p in _HANDED_OUT or not port_is_free(p, host) for p in block):
            continue
        claimed = []
        for p in block:
            if not _claim(p):
                break
            claimed.append(p)
            _HANDED_OUT.add(p)
        if len(claimed) == len(block):
            found.append(base)
            if len(found) == n:
                return found
    raise RuntimeError(f"no {n} free ports on {host} in {candidates.start}-{candidates.stop - 1}")


class ControlPlane:
    """A running control plane; ``start()`` then ``stop()`` (or use it as a context manager)."""

    def __init__(self, bin_dir: Path, work: Path | None = None, keep: bool = False,
                 node_ip: str | None = None) -> None:
        """``node_ip``: serve pods of a real node (node.py) too: the API server then listens on every
        address and advertises ``node_ip``, so the ``kubernetes`` Service leads there."""
        self.bin = bin_dir
        self.node_ip = node_ip
        self.stages = bin_dir.parent / "kwok-stages.yaml"
        self.work = work or Path(tempfile.mkdtemp(prefix="rs-controlplane."))
        self.keep = keep
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.token = os.urandom(24).hex()
        p = free_ports(6)
        self.p_etcd, self.p_peer, self.p_metrics, self.p_api, self.p_kcm, self.p_sched = p
        self.server = f"https://127.0.0.1:{self.p_api}"
        self.kubeconfig = self.work / "kubeconfig"
        self.timings: dict[str, float] = {}
        self._ctx = ssl.create_default_context()
        self._ctx.check_hostname = False
        self._ctx.verify_mode = ssl.CERT_NONE

    # -- HTTP -------------------------------------------------------------------------------------
    def api(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, context=self._ctx, timeout=10) as r:
            text = r.read().decode()
        return json.loads(text) if text.startswith(("{", "[")) else text

    def _ok(self, url: str, auth: bool = False) -> bool:
        req = urllib.request.Request(url)
        if auth:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_for(self, what: str, seconds: float, check: Callable[[], bool]) -> None:
        t0 = time.monotonic()
        deadline = t0 + seconds
        while time.monotonic() < deadline:
            if check():
                self.timings[what] = time.monotonic() - t0
                log(f"{what} ok ({self.timings[what]:.1f}s)")
                return
            for name, proc in self.procs:
                if proc.poll() is not None:
                    self.fail(f"{name} exited with {proc.returncode} while waiting for {what}")
            time.sleep(0.1)
        self.fail(f"{what} not ready after {seconds}s")

    def fail(self, message: str) -> None:
        tails = []
        for f in sorted(self.work.glob("*.log")):
            lines = f.read_text(errors="replace").splitlines()[-15:]
            tails.append(f"--- tail {f}\n" + "\n".join(lines))
        raise RuntimeError(message + "\n" + "\n".join(tails))

    # -- processes -------------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        logf = open(self.work / f"{name}.log", "wb")  # noqa: SIM115  (owned by the child)
        proc = subprocess.Popen([str(self.bin / args[0]), *args[1:]], stdout=logf, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        logf.close()
        self.procs.append((name, proc))

    def start(self) -> ControlPlane:
        t_start = time.monotonic()
        w = self.work
        (w / "pki").mkdir(parents=True, exist_ok=True)
        (w / "etcd").mkdir(mode=0o700, exist_ok=True)
        subprocess.run(["openssl", "genrsa", "-out", str(w / "pki/sa.key"), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(w / "pki/sa.key"), "-pubout", "-out", str(w / "pki/sa.pub")],
                       check=True, capture_output=True)
        (w / "pki/tokens.csv").write_text(f"{self.token},admin,admin,system:masters\n")
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": {"server": self.server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        }))
        kc = str(self.kubeconfig)
        etcd_url = f"http://127.0.0.1:{self.p_etcd}"
        peer_url = f"http://127.0.0.1:{self.p_peer}"
        try:
            self._spawn("etcd", [
                "etcd", "--name=cp", f"--data-dir={w / 'etcd'}",
                f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=cp={peer_url}", f"--listen-metrics-urls=http://127.0.0.1:{self.p_metrics}",
                "--unsafe-no-fsync", "--log-level=warn"])
            self.wait_for("etcd", 30, lambda: self._ok(f"{etcd_url}/health"))
            if self.node_ip:
                # a real node's kubelet is reached (logs, exec, port-forward) at its InternalIP: its
                # host name resolves nowhere, and the default order tries the name first
                listen = ["--bind-address=0.0.0.0", f"--advertise-address={self.node_ip}",
                          "--kubelet-preferred-address-types=InternalIP,Hostname"]
            else:
                listen = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                          "--endpoint-reconciler-type=none"]
            self._spawn("apiserver", [
                "kube-apiserver", f"--etcd-servers={etcd_url}", *listen, f"--secure-port={self.p_api}",
                f"--cert-dir={w / 'apiserver'}", f"--token-auth-file={w / 'pki/tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={w / 'pki/sa.pub'}",
                f"--service-account-signing-key-file={w / 'pki/sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16"])
            self.wait_for("kube-apiserver", 90, lambda: self._ok(f"{self.server}/readyz", auth=True))
            auth = [f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                    "--authentication-skip-lookup=true", "--bind-address=127.0.0.1", "--leader-elect=false"]
            self._spawn("kcm", [
                "kube-controller-manager", *auth, f"--secure-port={self.p_kcm}", f"--cert-dir={w / 'kcm'}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={w / 'pki/sa.key'}",
                f"--root-ca-file={w / 'apiserver/apiserver.crt'}"])
            self._spawn("scheduler", ["kube-scheduler", *auth, f"--secure-port={self.p_sched}"])
            self.wait_for("kube-controller-manager", 60, lambda: self._ok(f"https://127.0.0.1:{self.p_kcm}/healthz"))
            self.wait_for("kube-scheduler", 60, lambda: self._ok(f"https://127.0.0.1:{self.p_sched}/healthz"))
            self.wait_for("default serviceaccount", 60,
                          lambda: self._ok(f"{self.server}/api/v1/namespaces/default/serviceaccounts/default", True))
            self._spawn("kwok", [
                "kwok", f"--kubeconfig={kc}", f"--config={self.stages}",
                "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--cidr=10.244.0.0/24", "--node-ip=10.245.0.1", "--node-lease-duration-seconds=40"],
                env={**os.environ, "HOME": str(w)})
            self.add_node("kwok-node-0")
            self.wait_for("kwok node Ready", 60, lambda: self.node_ready("kwok-node-0"))
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t_start
        log(f"control plane ready in {self.timings['total']:.1f}s at {self.server} (work {w})")
        return self

    def stop(self) -> None:
        # reverse start order: kwok, scheduler, controller-manager, apiserver, etcd
        while self.procs:
            _name, proc = self.procs.pop()
            terminate(proc)
        if self.keep:
            log(f"kept {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- cluster fixtures --------------------------------------------------------------------------
    def add_node(self, name: str) -> None:
        self.api("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"type": "kwok", "kubernetes.io/hostname": name}},
            "spec": {"taints": [KWOK_TAINT]},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                       "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
        })

    def node_ready(self, name: str) -> bool:
        try:
            node = self.api("GET", f"/api/v1/nodes/{name}")
        except urllib.error.URLError:
            return False
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))

    def add_volumes(self, count: int, size: str, storage_class: str, prefix: str = "pv") -> list[str]:
        """Pre-create hostPath PersistentVolumes so PVCs of ``storage_class`` bind (no provisioner here)."""
        names = []
        for i in range(count):
            name = f"{prefix}-{i}"
            self.api("POST", "/api/v1/persistentvolumes", {
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": {"rocketstore.io/test": "true"}},
                "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                         "persistentVolumeReclaimPolicy": "Retain", "storageClassName": storage_class,
                         "hostPath": {"path": f"/tmp/{name}"}},
            })
            names.append(name)
        return names

    def add_storage_class(self, name: str, expandable: bool = True) -> None:
        self.api("POST", "/apis/storage.k8s.io/v1/storageclasses", {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate",
            "allowVolumeExpansion": expandable,
        })


def smoke() -> int:
    """What smoke.sh checks: the stack starts, a pod lands on a kwok node and is Running."""
    with ControlPlane(build(control_plane_only=True), keep=os.environ.get("CONTROLPLANE_KEEP") == "1") as cp:
        cp.api("POST", "/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "smoke"},
            "spec": {"nodeSelector": {"type": "kwok"}, "tolerations": [KWOK_TOLERATION],
                     "containers": [{"name": "app", "image": "example.invalid/app:1"}]}})

        def running() -> bool:
            pod = cp.api("GET", "/api/v1/namespaces/default/pods/smoke")
            return bool(pod["spec"].get("nodeName") == "kwok-node-0" and pod["status"].get("phase") == "Running")

        cp.wait_for("pod scheduled and Running", 60, running)
        log(f"control plane smoke test passed (bin: {cp.bin})")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["smoke"]:
        print("usage: controlplane.py smoke", file=sys.stderr)
        sys.exit(2)
    sys.exit(smoke())
