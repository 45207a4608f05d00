"""A network namespace joined to the host by a veth pair, and a partition of it with iptables.

A test of a network partition (docs/failover.md: the isolated master stops acknowledging, the
majority elects another) runs one process in a :class:`Netns` of its own: ``ip netns`` plus a veth
pair on a private /24, the host end ``host_address`` and the namespace end ``address``. The
process reaches the host (and what listens there) through the pair only, so
:meth:`Netns.partition` cuts it off completely: iptables rules *inside* the namespace drop every
packet over its end of the pair, both directions, while the namespace's loopback still works (a
client inside the namespace still reaches the isolated process). Rules inside the namespace go
away with it, so deleting the namespace (the veth pair with it) is the whole cleanup.

Services of the host that listen on 127.0.0.1 only (the test control plane's kube-apiserver) are
not reachable from another namespace; :class:`TcpRelay` listens on ``host_address`` and forwards
to them, so the partition cuts those connections too.

Needs root, ``ip`` and ``iptables``: :func:`require_netns_tools` fails under CI and skips
otherwise, as tests/support/tool_support.py does for every tool.

Importable from any test directory: pyproject's pytest ``pythonpath`` puts tests/support on sys.path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tool_support import require_executable, require_tool

#: setns(2)'s nstype for a network namespace (Python 3.11 has no os.setns)
_CLONE_NEWNET = 0x40000000


def require_netns_tools() -> None:
    """Root, ``ip`` and ``iptables``, or fail (CI) / skip."""
    require_tool("root", os.geteuid() == 0, "network namespaces and iptables need root")
    require_executable("ip", "network namespaces and veth pairs (iproute2)")
    require_executable("iptables", "the partition's DROP rules")


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=30)


@dataclass(frozen=True)
class Netns:
    """A network namespace ``name`` with one veth pair to the host on 10.251.``subnet``.0/24."""

    name: str
    subnet: int

    @property
    def host_if(self) -> str:
        return f"rs{self.subnet}h"

    @property
    def ns_if(self) -> str:
        return f"rs{self.subnet}n"

    @property
    def host_address(self) -> str:
        """The host's end of the pair: what the namespace reaches the host at."""
        return f"10.251.{self.subnet}.1"

    @property
    def address(self) -> str:
        """The namespace's end of the pair: what the host reaches the namespace at."""
        return f"10.251.{self.subnet}.2"

    def command(self, args: Sequence[str]) -> list[str]:
        """``args`` as a command run inside the namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.name, *args]

    def _drop_rules(self) -> list[list[str]]:
        return [["INPUT", "-i", self.ns_if, "-j", "DROP"], ["OUTPUT", "-o", self.ns_if, "-j", "DROP"]]

    def partition(self) -> None:
        """Drop every packet between the namespace and the host, both directions."""
        for rule in self._drop_rules():
            _run(*self.command(["iptables", "-A", *rule]))

    def heal(self) -> None:
        """Remove :meth:`partition`'s rules, those there are (a fixture's cleanup heals whatever
        state a failed test left)."""
        for rule in self._drop_rules():
            present = subprocess.run(self.command(["iptables", "-C", *rule]), capture_output=True, timeout=30)
            if present.returncode == 0:
                _run(*self.command(["iptables", "-D", *rule]))

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """The calling thread inside the namespace for the block: sockets made in it belong to the
        namespace for good (a client of the isolated process over the namespace's loopback)."""
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            if libc.setns(target, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {self.name}")
            try:
                yield
            finally:
                if libc.setns(own, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back to the host's network namespace")
        finally:
            os.close(own)
            os.close(target)


@contextlib.contextmanager
def veth_namespace(name: str, subnet: int) -> Iterator[Netns]:
    """A new namespace ``name`` joined to the host by a veth pair (see :class:`Netns`); deleted
    after the block, whatever happened in it, with its pair and any iptables rules in it."""
    ns = Netns(name, subnet)
    with contextlib.suppress(subprocess.CalledProcessError):
        _run("ip", "netns", "del", name)  # a leftover of a run that was killed before its cleanup
    try:
        _run("ip", "netns", "add", name)
    except subprocess.CalledProcessError as e:  # root without CAP_SYS_ADMIN (a container)
        require_tool("ip netns", False, f"`ip netns add` failed: {e.stderr.strip()}")
    try:
        try:
            _run("ip", "link", "add", ns.host_if, "type", "veth", "peer", "name", ns.ns_if, "netns", name)
            _run("ip", "addr", "add", f"{ns.host_address}/24", "dev", ns.host_if)
            _run("ip", "link", "set", ns.host_if, "up")
            _run("ip", "-n", name, "addr", "add", f"{ns.address}/24", "dev", ns.ns_if)
            _run("ip", "-n", name, "link", "set", ns.ns_if, "up")
            _run("ip", "-n", name, "link", "set", "lo", "up")
            _run(*ns.command(["iptables", "-S"]))  # what partition() needs: iptables inside the namespace
        except subprocess.CalledProcessError as e:  # no CAP_NET_ADMIN, no veth or netfilter in the kernel
            require_tool("a veth pair and iptables in a network namespace", False,
                         f"`{' '.join(e.cmd)}` failed: {e.stderr.strip()}")
        yield ns
    finally:
        _run("ip", "netns", "del", name)  # its end of the pair goes with it, and the host's end with that
        with contextlib.suppress(subprocess.CalledProcessError):
            _run("ip", "link", "del", ns.host_if)


class TcpRelay:
    """Accepts on ``listen`` and copies bytes both ways to ``target``: a service bound to the host's
    loopback made reachable from a namespace, through the veth pair (so a partition cuts it)."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self._server = socket.create_server(listen)
        self.address = self._server.getsockname()[:2]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="tcp-relay", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                return  # closed
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), name="tcp-relay-pump", daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone does not)
        self._server.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
