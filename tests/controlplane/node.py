"""A real Kubernetes node on this machine, joined to the test control plane (controlplane.py).

The operator's kwok tests never run a container; this node does: kubelet and kube-proxy (built by
build.sh from the same Kubernetes module as the control plane), CoreDNS (built by build.sh from
its module) serving cluster DNS from the API server, and Debian's containerd, runc and
containernetworking-plugins. Images are not pulled (there is no registry): ``load_image`` copies an
image from the local Docker engine into containerd, and pods use ``imagePullPolicy: IfNotPresent``.

Facts this layout rests on (found on the CI machines, which run cgroup v1 inside a sandbox):

* containerd's CRI plugin needs ``restrict_oom_score_adj = true`` (a capability is withheld) and
  ``SystemdCgroup = false``; kubelet needs ``cgroupDriver: cgroupfs`` and ``failCgroupV1: false``.
* The sandbox ("pause") image can be any local image whose entrypoint blocks: ``rocketstore/pause``
  is the Dockerfile's base image running ``sleep infinity``.
* Pods live on the bridge ``rsnode0`` (10.88.0.0/16); the host is 10.88.0.1 there, which is also the
  node's InternalIP, the API server's advertised address (so the ``kubernetes`` Service reaches it
  through kube-proxy) and CoreDNS's address. Pods reach nothing outside the machine: the chain
  ``RSNODE-FORWARD`` accepts bridge-to-bridge traffic and drops pod traffic bound elsewhere, and
  the resolv.conf kubelet hands to pods names no outside resolver.
* Tear-down leaves the machine as it found it: pods deleted through the API, every containerd
  task killed, mounts under the node's directories unmounted (the network namespaces the CRI made
  among them: they live under the node's state directory, not /var/run/netns), the bridge
  deleted, kube-proxy's chains removed by ``kube-proxy --cleanup`` and ours deleted.
  ``Node.leftovers()`` lists what would betray a leak, for the tests to compare.

Needs root. Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from controlplane import ControlPlane, free_ports, log, terminate

BRIDGE = "rsnode0"
POD_CIDR = "10.88.0.0/16"
NODE_IP = "10.88.0.1"
CLUSTER_DOMAIN = "cluster.local"
FORWARD_CHAIN = "RSNODE-FORWARD"
PAUSE_IMAGE = "docker.io/rocketstore/pause:local"
CNI_BIN = Path("/usr/lib/cni")
HOST_TOOLS = {"containerd": "containerd", "runc": "runc", "ctr": "containerd",
              "iptables": "iptables", "conntrack": "conntrack", "ip": "iproute2",
              str(CNI_BIN / "bridge"): "containernetworking-plugins"}


def missing_host_tools() -> list[str]:
    """The Debian packages this node needs that are not installed (empty when all are)."""
    return sorted({pkg for tool, pkg in HOST_TOOLS.items()
                   if not (Path(tool).exists() if tool.startswith("/") else shutil.which(tool))})


def _run(*args: str, check: bool = True, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(list(args), capture_output=True, input=input)
    if check and done.returncode != 0:
        err = done.stderr.decode(errors="replace")
        raise RuntimeError(f"{' '.join(args[:4])} exited with {done.returncode}: {err}")
    return done


def containerd_config(root: Path, state: Path, cni_conf: Path) -> str:
    """containerd's TOML for a CRI-only instance of its own (Docker's containerd is left alone)."""
    return f"""version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{state}/containerd.sock"
[ttrpc]
  address = "{state}/containerd.ttrpc.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni_conf}"
"""


def cni_config(ipam_dir: Path) -> dict[str, Any]:
    """The bridge network every pod joins; no masquerade, since pods may not leave the machine."""
    return {
        "cniVersion": "1.0.0", "name": "rsnode",
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(ipam_dir)}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(*, sock: Path, resolv: Path, port: int, healthz: int) -> dict[str, Any]:
    """KubeletConfiguration for a cgroup-v1 sandbox with small disks.

    Anonymous, always-allow serving is bound to the bridge address only: it is what the API
    server's log and port-forward calls reach, and nothing outside the machine can.
    Eviction thresholds are near zero because CI disks are shared and often more than 85% full,
    which would otherwise evict the brokers under test.
    """
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": NODE_IP, "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{sock}",
        "clusterDNS": [NODE_IP], "clusterDomain": CLUSTER_DOMAIN, "resolvConf": str(resolv),
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False, "syncFrequency": "5s", "fileCheckFrequency": "5s",
        "nodeStatusUpdateFrequency": "5s",
    }


def corefile(kubeconfig: Path, port: int) -> str:
    """Cluster DNS answered from the API server; every other name fails at once (no upstream)."""
    return f""".:53 {{
    bind {NODE_IP}
    errors
    health 127.0.0.1:{port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} local
        pods insecure
    }}
    cache 5
}}
"""


def _kube_chains() -> set[tuple[str, str, str]]:
    """(tool, table, chain) of every KUBE-* chain, IPv4 and IPv6."""
    found = set()
    for tool in ("iptables", "ip6tables"):
        table = ""
        for line in _run(f"{tool}-save", check=False).stdout.decode().splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":KUBE-"):
                found.add((tool, table, line[1:].split()[0]))
    return found


class Node:
    """One real node ``name`` joined to ``cp``; ``start()`` then ``stop()`` (or a context manager)."""

    def __init__(self, cp: ControlPlane, name: str = "rsnode-0") -> None:
        self.cp = cp
        self.name = name
        self.work = cp.work / "node"
        # unix socket paths are limited to 107 bytes: the runtime state lives under /run
        self.state = Path(tempfile.mkdtemp(prefix="rsnode.", dir="/run"))
        self.sock = self.state / "containerd.sock"
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.volumes = self.work / "volumes"
        #: KUBE-* chains present before this node touched the network (None: it never did)
        self._chains_before: set[tuple[str, str, str]] | None = None

    # -- processes ---------------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> None:
        logf = open(self.cp.work / f"node-{name}.log", "wb")  # noqa: SIM115  (owned by the child)
        proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()
        self.procs.append((name, proc))
        self.cp.procs.append((f"node-{name}", proc))  # so ControlPlane.wait_for notices a crash

    def ctr(self, *args: str, input: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return _run("ctr", "-a", str(self.sock), "-n", "k8s.io", *args, input=input, check=check)

    def start(self) -> Node:
        missing = missing_host_tools()
        if missing:
            raise RuntimeError(f"a real node needs the Debian packages {' '.join(missing)}")
        w = self.work
        for d in ("cni", "containerd", "kubelet", "pki", "ipam"):
            (w / d).mkdir(parents=True, exist_ok=True)
        self.volumes.mkdir(exist_ok=True)
        bin_dir = self.cp.bin
        kc = str(self.cp.kubeconfig)
        try:
            self._network_up()
            (w / "cni/10-rsnode.conflist").write_text(json.dumps(cni_config(w / "ipam")))
            (w / "containerd.toml").write_text(containerd_config(w / "containerd", self.state, w / "cni"))
            self._spawn("containerd", ["containerd", "--config", str(w / "containerd.toml")])
            self.cp.wait_for("containerd", 30, lambda: self.ctr("version", check=False).returncode == 0)
            self.load_image("rocketstore/pause:local")
            kport, khealth, dns_health, kp_health, kp_metrics = free_ports(5, "0.0.0.0")
            (w / "resolv.conf").write_text("# no upstream: pods resolve cluster names only\noptions ndots:5\n")
            (w / "kubelet.json").write_text(json.dumps(kubelet_config(
                sock=self.sock, resolv=w / "resolv.conf", port=kport, healthz=khealth)))
            self._spawn("kubelet", [
                str(bin_dir / "kubelet"), f"--kubeconfig={kc}", f"--config={w / 'kubelet.json'}",
                f"--root-dir={w / 'kubelet'}", f"--cert-dir={w / 'pki'}", f"--hostname-override={self.name}",
                f"--node-ip={NODE_IP}", "--v=1"])
            self._spawn("kube-proxy", [
                str(bin_dir / "kube-proxy"), f"--kubeconfig={kc}", f"--hostname-override={self.name}",
                "--proxy-mode=iptables", f"--cluster-cidr={POD_CIDR}", "--conntrack-max-per-core=0",
                "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
                f"--healthz-bind-address=127.0.0.1:{kp_health}", f"--metrics-bind-address=127.0.0.1:{kp_metrics}"])
            (w / "Corefile").write_text(corefile(self.cp.kubeconfig, dns_health))
            self._spawn("coredns", [str(bin_dir / "coredns"), "-conf", str(w / "Corefile")])
            self.cp.wait_for("node Ready", 120, lambda: self.cp.node_ready(self.name))
            self.cp.wait_for("kube-proxy", 60, lambda: self.cp._ok(f"http://127.0.0.1:{kp_health}/healthz"))
            self.cp.wait_for("coredns", 60, lambda: self.cp._ok(f"http://127.0.0.1:{dns_health}/health"))
        except BaseException:
            self.stop()
            raise
        return self

    # -- images ------------------------------------------------------------------------------------
    def kill_container(self, container_id: str) -> None:
        """SIGKILL the main process of a container, named as a pod's status names it
        (``containerd://<id>``); kubelet sees it exit and restarts it as the pod's policy says."""
        self.ctr("tasks", "kill", "-s", "SIGKILL", container_id.removeprefix("containerd://"))

    def load_image(self, ref: str) -> None:
        """Copy ``ref`` from the local Docker engine into the node's containerd (no registry here)."""
        saved = _run("docker", "save", ref).stdout
        self.ctr("images", "import", "--no-unpack", "-", input=saved)

    # -- storage -------------------------------------------------------------------------------------
    def add_local_volumes(self, count: int, size: str, storage_class: str, prefix: str = "node-pv") -> list[Path]:
        """``local`` PersistentVolumes on this node, each a directory under the node's work dir."""
        paths = []
        for i in range(count):
            path = self.volumes / f"{prefix}-{i}"
            path.mkdir()
            path.chmod(0o777)  # the broker runs as a non-root user; fsGroup does not apply to local PVs
            self.cp.api("POST", "/api/v1/persistentvolumes", {
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": f"{prefix}-{i}", "labels": {"rocketstore.io/test": "true"}},
                "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                         "persistentVolumeReclaimPolicy": "Retain", "storageClassName": storage_class,
                         "local": {"path": str(path)},
                         "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                             {"key": "kubernetes.io/hostname", "operator": "In", "values": [self.name]}]}]}}},
            })
            paths.append(path)
        return paths

    # -- network -------------------------------------------------------------------------------------
    def _network_up(self) -> None:
        self._chains_before = _kube_chains()
        # The bridge is made here (CNI's bridge plugin adopts it) so CoreDNS can bind NODE_IP before
        # the first pod exists.
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{NODE_IP}/16", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        _run("iptables", "-N", FORWARD_CHAIN)
        _run("iptables", "-A", FORWARD_CHAIN, "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT")
        _run("iptables", "-A", FORWARD_CHAIN, "-o", BRIDGE, "-m", "conntrack", "--ctstate",
             "RELATED,ESTABLISHED", "-j", "ACCEPT")
        _run("iptables", "-A", FORWARD_CHAIN, "-i", BRIDGE, "-j", "DROP")
        _run("iptables", "-I", "FORWARD", "1", "-j", FORWARD_CHAIN)

    def _network_down(self) -> None:
        _run("iptables", "-D", "FORWARD", "-j", FORWARD_CHAIN, check=False)
        _run("iptables", "-F", FORWARD_CHAIN, check=False)
        _run("iptables", "-X", FORWARD_CHAIN, check=False)
        if (self.cp.bin / "kube-proxy").exists():
            _run(str(self.cp.bin / "kube-proxy"), "--cleanup", check=False)
        # kubelet's own chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT, IPv4 and
        # IPv6), which no cleanup flag removes: only those this node added
        before = self._chains_before if self._chains_before is not None else _kube_chains()
        for tool, table, chain in sorted(_kube_chains() - before):
            for rule in _run(tool, "-t", table, "-S", check=False).stdout.decode().splitlines():
                parts = rule.split()
                if parts[:1] == ["-A"] and parts[-2:] == ["-j", chain]:
                    _run(tool, "-t", table, "-D", *parts[1:], check=False)
            _run(tool, "-t", table, "-F", chain, check=False)
        for tool, table, chain in sorted(_kube_chains() - before):
            _run(tool, "-t", table, "-X", chain, check=False)
        _run("ip", "link", "del", BRIDGE, check=False)

    # -- tear-down -------------------------------------------------------------------------------------
    def _delete_pods(self, seconds: float) -> None:
        """Ask kubelet to stop every pod it runs, so volumes are unmounted the normal way."""
        try:
            pods = self.cp.api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{self.name}")["items"]
            for p in pods:
                ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
                self.cp.api("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 5})
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                if not self.cp.api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{self.name}")["items"]:
                    return
                time.sleep(0.5)
        except Exception as exc:  # the API server may already be gone; the hard clean-up follows
            log(f"node: pods not deleted through the API ({exc}); cleaning up directly")

    def stop(self) -> None:
        kubelet_up = any(n == "kubelet" and p.poll() is None for n, p in self.procs)
        if kubelet_up:
            self._delete_pods(60)
        for name, proc in reversed(self.procs):
            if name == "containerd":
                self._kill_tasks()
            terminate(proc, 15)
            self.cp.procs = [(n, p) for n, p in self.cp.procs if p is not proc]
        self.procs.clear()
        self._unmount_under(self.work)
        self._unmount_under(self.state)
        self._network_down()
        shutil.rmtree(self.state, ignore_errors=True)

    def _kill_tasks(self) -> None:
        if self.ctr("version", check=False).returncode != 0:
            return
        tasks = self.ctr("tasks", "ls", "-q", check=False).stdout.decode().split()
        for t in tasks:
            self.ctr("tasks", "kill", "-s", "SIGKILL", t, check=False)
        deadline = time.monotonic() + 10
        while tasks and time.monotonic() < deadline:
            time.sleep(0.2)
            tasks = [t for t in tasks if self.ctr("tasks", "delete", t, check=False).returncode != 0]
        for c in self.ctr("containers", "ls", "-q", check=False).stdout.decode().split():
            self.ctr("containers", "delete", c, check=False)

    @staticmethod
    def _unmount_under(root: Path) -> None:
        prefix = str(root.resolve()) + "/"
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for m in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
            _run("umount", "-l", m, check=False)

    @staticmethod
    def leftovers() -> dict[str, list[str]]:
        """What a leaked node leaves behind: interfaces, iptables chains, netns and mounts of ours."""
        links = [line.split(":")[1].strip().split("@")[0] for line in
                 _run("ip", "-o", "link").stdout.decode().splitlines()]
        chains = [f"{tool}/{table}/{chain}" for tool, table, chain in _kube_chains()]
        chains += [line[1:].split()[0] for line in _run("iptables-save").stdout.decode().splitlines()
                   if line.startswith(f":{FORWARD_CHAIN}")]
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        netns = sorted(p.name for p in Path("/var/run/netns").glob("*")) if Path("/var/run/netns").is_dir() else []
        return {
            "interfaces": sorted(i for i in links if i == BRIDGE or i.startswith("veth")),
            "chains": sorted(chains),
            "mounts": sorted(m for m in mounts if "rsnode" in m or "/node/kubelet" in m or "/node/containerd" in m),
            "netns": [n for n in netns if n.startswith("cni-")],
        }

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def smoke() -> int:
    """Start the control plane and a real node, run one pod of the pause image, stop."""
    from controlplane import build

    keep = os.environ.get("CONTROLPLANE_KEEP") == "1"
    with ControlPlane(build(), keep=keep, node_ip=NODE_IP) as cp, Node(cp) as node:
        cp.api("POST", "/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "smoke"},
            "spec": {"containers": [{"name": "app", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}]}})

        def running() -> bool:
            pod = cp.api("GET", "/api/v1/namespaces/default/pods/smoke")
            return bool(pod["spec"].get("nodeName") == node.name and pod["status"].get("phase") == "Running")

        cp.wait_for("pod Running on the real node", 120, running)
    log(f"node smoke test passed; leftovers: {Node.leftovers()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(smoke())
