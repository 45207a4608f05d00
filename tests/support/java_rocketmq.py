"""The real Apache RocketMQ 4.x Java client as a test peer, and Apache RocketMQ's own servers as an anchor.

A helper library, not a test module (pyproject's pytest ``pythonpath`` puts tests/support on
``sys.path``: import it as ``java_rocketmq``). Three parts:

* Building, with Maven, once: ``build_driver()`` makes ``drivers/java4/target/client-driver.jar`` plus its
  runtime classpath ``drivers/java4/target/lib`` (rocketmq-client 4.9.8); ``build_anchor(version)`` copies
  the name server's and broker's classpath of one release to ``drivers/apache_broker/VERSION/target/lib``
  (``ANCHOR_VERSIONS``: 4.9.7 and 5.3.3). A build is skipped while its
  last success (a stamp file) is newer than every input (``maven_build``), like
  tests/compat/apache_classes/conftest.py does with the jar's mtime.
* ``ClientDriver``: runs one mode of ClientDriver.java (produce, push-consume, pull-consume, query,
  bench-produce, bench-consume, bench-fill, bench-pull) as a subprocess against a name server
  address and returns the JSON lines it printed (``DriverResult``). ``ClientDriver.start`` runs a
  mode in the background, e.g. a consumer that must be up while a producer sends.
* ``RocketMQAnchor``: Apache RocketMQ's own NamesrvStartup and BrokerStartup, as two JVMs on
  127.0.0.1 with free ports, a scratch store, a scratch ROCKETMQ_HOME and user.home, and
  ``-Xms512m -Xmx512m`` heaps (``DEFAULT_HEAP``; RocketMQ's scripts use 4 GB and 8 GB). Version
  4.9.7 by default (``ANCHOR_VERSION``), since rocketmq-namesrv and rocketmq-broker 4.9.8 were never
  published to Maven Central (see drivers/apache_broker/4.9.7/pom.xml); ``version="5.3.3"`` runs the 5.x
  broker on its own, without the proxy, which serves 4.x remoting clients as 4.9.7 does. Started
  when both print "boot success", stopped with SIGTERM.
* ``ProxyAnchor``: Apache RocketMQ 5.3.3's name server and ``ProxyStartup -pm local`` (the broker in
  the proxy's JVM, a gRPC port for 5.x clients), classpath from ``build_proxy_anchor()``.

Tools: ``java`` (17) and ``mvn`` on PATH, else ``ToolMissing``. A cold ~/.m2 downloads ~45 MB.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ports import free_port
from tool_support import DRIVERS_DIR

DRIVER_DIR = DRIVERS_DIR / "java4"
DRIVER_POM = DRIVER_DIR / "pom.xml"
DRIVER_JAR = DRIVER_DIR / "target" / "client-driver.jar"
DRIVER_LIB = DRIVER_DIR / "target" / "lib"
DRIVER_MAIN = "io.rocketstore.clients.ClientDriver"
CLIENT_VERSION = "4.9.8"

ANCHOR_DIR = DRIVERS_DIR / "apache_broker"  # one directory per release: VERSION/pom.xml, VERSION/target/lib
ANCHOR_VERSION = "4.9.7"
ANCHOR_VERSIONS = ("4.9.7", "5.3.3")
NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
#: rocketmq-namesrv, -proxy and -tools 5.3.3: the name server, the proxy with its broker, mqadmin
PROXY_ANCHOR_POM = ANCHOR_DIR / "5.3.3-proxy" / "pom.xml"
PROXY_ANCHOR_LIB = PROXY_ANCHOR_POM.parent / "target" / "lib"
PROXY_MAIN = "org.apache.rocketmq.proxy.ProxyStartup"
PROXY_READY = "rocketmq-proxy startup successfully"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"

# What RocketMQ's MappedFile/UtilAll buffer cleaning needs on JDK 17 (see
# /work/shared/reference/java-rocketmq-anchor.md); tests/compat/apache_classes uses it too.
JDK17_FLAGS = [
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
]
# The G1 settings of RocketMQ's runbroker.sh, without its 8 GB heap, pre-touch and 15 GB direct memory.
G1_FLAGS = [
    "-XX:+UseG1GC",
    "-XX:G1HeapRegionSize=16m",
    "-XX:G1ReservePercent=25",
    "-XX:InitiatingHeapOccupancyPercent=30",
    "-XX:SoftRefLRUPolicyMSPerMB=0",
]
DEFAULT_HEAP = "512m"  # -Xms and -Xmx of the anchor's name server and broker
#: JVM options for short client runs (ClientDriver's default, and mqadmin): C1 only and
#: the serial collector take 20-35% less CPU per run than the defaults, which matters when two JVMs
#: and the broker share 2 cores (a client whose start-up eats its 3 s send timeout fails its first
#: send) and over the hundreds of runs of a test run. They change no client behaviour.
LIGHT_JVM = ("-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1", "-XX:+UseSerialGC")

MVN_TIMEOUT_S = 900  # a cold ~/.m2 downloads ~45 MB of artifacts and plugins
BOOT_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0


class ToolMissing(RuntimeError):
    """``java`` or ``mvn`` (named by ``tool``) is not on PATH."""

    def __init__(self, tool: str) -> None:
        super().__init__(f"{tool} is not on PATH")
        self.tool = tool


class BuildError(RuntimeError):
    """``mvn package`` failed; the message holds the tail of its output."""


class DriverError(RuntimeError):
    """A driver mode exited non-zero (or printed an error line) while the caller wanted success."""

    def __init__(self, message: str, result: DriverResult) -> None:
        super().__init__(message)
        self.result = result


class AnchorError(RuntimeError):
    """RocketMQ's name server or broker did not boot; the message holds the tail of its output."""


# -- tools and builds ----------------------------------------------------------------------------


def find_tools() -> tuple[str, str]:
    """The paths of ``java`` and ``mvn``; raises ToolMissing naming the first one absent."""
    java = shutil.which("java")
    mvn = shutil.which("mvn")
    if java is None:
        raise ToolMissing("java")
    if mvn is None:
        raise ToolMissing("mvn")
    return java, mvn


def _newest_input(inputs: Iterable[Path]) -> float:
    newest = 0.0
    for root in inputs:
        paths = root.rglob("*") if root.is_dir() else [root]
        for p in paths:
            if p.is_file():
                newest = max(newest, p.stat().st_mtime)
    return newest


def maven_build(pom: Path, outputs: Sequence[Path], inputs: Sequence[Path], *, mvn: str | None = None,
                timeout: float = MVN_TIMEOUT_S) -> float | None:
    """Run ``mvn -q -B -f POM package`` unless its last success is newer than every input.

    ``outputs`` are the files and directories the build makes (a directory must be non-empty);
    ``inputs`` are files or directories scanned recursively. Success is recorded in a stamp file
    ``target/.build-stamp`` next to the pom (copy-dependencies leaves unchanged jars with their old
    mtimes, so the outputs' own mtimes cannot tell). Output directories are emptied before a
    rebuild so that a version change leaves no stale jars on the classpath. Returns the seconds
    mvn took, or None when it was not run. Raises BuildError on failure.

    Two pytest processes may want the same build at once (``tests/run`` runs ``tests/compat`` beside
    the other tiers, and both use the 4.x client driver): a lock file beside the stamp lets one
    build while the other waits, then finds the stamp current.
    """
    (pom.parent / "target").mkdir(exist_ok=True)
    with (pom.parent / "target" / ".build-lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _maven_build_locked(pom, outputs, inputs, mvn=mvn, timeout=timeout)


def _maven_build_locked(pom: Path, outputs: Sequence[Path], inputs: Sequence[Path], *, mvn: str | None,
                        timeout: float) -> float | None:
    stamp = pom.parent / "target" / ".build-stamp"

    def outputs_exist() -> bool:
        return all(any(out.iterdir()) if out.is_dir() else out.is_file() for out in outputs)

    if stamp.is_file() and outputs_exist() and stamp.stat().st_mtime >= _newest_input(inputs):
        return None
    if mvn is None:
        mvn = find_tools()[1]
    stamp.unlink(missing_ok=True)
    for out in outputs:
        if out.is_dir():
            shutil.rmtree(out)
    begin = time.monotonic()
    proc = subprocess.run([mvn, "-q", "-B", "-f", str(pom), "package"], capture_output=True, text=True,
                          timeout=timeout, check=False)
    took = time.monotonic() - begin
    if proc.returncode != 0 or not outputs_exist():
        raise BuildError(f"mvn package -f {pom} failed (exit {proc.returncode}, {took:.1f} s):\n"
                         f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    stamp.touch()
    return took


_build_lock = threading.Lock()
_built: dict[Path, float | None] = {}


def _build_once(pom: Path, outputs: Sequence[Path], inputs: Sequence[Path]) -> float | None:
    with _build_lock:
        if pom not in _built:
            _built[pom] = maven_build(pom, outputs, inputs)
        return _built[pom]


def build_driver() -> float | None:
    """Build client-driver.jar and target/lib once per process; seconds mvn took or None (up to date)."""
    return _build_once(DRIVER_POM, [DRIVER_JAR, DRIVER_LIB], [DRIVER_POM, DRIVER_DIR / "src"])


def anchor_pom(version: str) -> Path:
    """The pom that fetches one anchor release's name server and broker (ValueError for others)."""
    if version not in ANCHOR_VERSIONS:
        raise ValueError(f"no anchor pom for Apache RocketMQ {version}; known: {', '.join(ANCHOR_VERSIONS)}")
    return ANCHOR_DIR / version / "pom.xml"


def anchor_lib(version: str) -> Path:
    """The classpath directory ``build_anchor(version)`` fills."""
    return anchor_pom(version).parent / "target" / "lib"


def build_proxy_anchor() -> float | None:
    """Copies the classpath of Apache RocketMQ 5.3.3's name server, proxy and mqadmin to ``PROXY_ANCHOR_LIB``."""
    return _build_once(PROXY_ANCHOR_POM, [PROXY_ANCHOR_LIB], [PROXY_ANCHOR_POM])


def build_anchor(version: str = ANCHOR_VERSION) -> float | None:
    """Copy one anchor release's classpath (namesrv + broker) to apache_broker/VERSION/target/lib once per process."""
    pom = anchor_pom(version)
    return _build_once(pom, [anchor_lib(version)], [pom])


# -- the client driver ---------------------------------------------------------------------------


@dataclass
class DriverResult:
    """What one driver run printed: its exit status, its JSON lines and its stderr."""

    args: list[str]
    returncode: int
    lines: list[dict[str, Any]]
    stderr: str
    seconds: float

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The lines of one kind: sent, received, pulled, committed, found, summary, error."""
        return [line for line in self.lines if line.get("kind") == kind]

    @property
    def summary(self) -> dict[str, Any]:
        """The last summary line (every mode prints one at the end unless the watchdog fired)."""
        found = self.of("summary")
        if not found:
            raise DriverError(f"driver {self.args} printed no summary", self)
        return found[-1]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return self.of("error")


def _parse_lines(stdout: str) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for raw in stdout.splitlines():
        raw = raw.strip()
        if raw.startswith("{"):
            lines.append(json.loads(raw))
    return lines


class BackgroundRun:
    """A driver mode running in the background; ``wait()`` gives its DriverResult.

    Threads read its stdout and stderr as they come, so a test can wait for a line (``"started"``)
    while it runs.
    """

    def __init__(self, driver: ClientDriver, args: list[str], proc: subprocess.Popen[str], check: bool) -> None:
        self._driver = driver
        self.args = args
        self.proc = proc
        self._check = check
        self._began = time.monotonic()
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._started = threading.Event()
        self._readers = [threading.Thread(target=self._read, args=(proc.stdout, self._stdout), daemon=True),
                         threading.Thread(target=self._read, args=(proc.stderr, self._stderr), daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[str] | None, into: list[str]) -> None:
        assert stream is not None
        for raw in stream:
            into.append(raw)
            if into is self._stdout and any(line.get("kind") == "started" for line in _parse_lines(raw)):
                self._started.set()

    def wait_started(self, timeout: float = 60.0) -> None:
        """Wait for the mode's "started" line (push-consume: its consumer is up); fails if it exits first."""
        deadline = time.monotonic() + timeout
        while not self._started.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise DriverError(f"driver {self.args} printed no started line", self.wait(0))

    def lines_so_far(self) -> list[dict[str, Any]]:
        """The JSON lines printed until now, while the mode still runs."""
        return _parse_lines("".join(list(self._stdout)))

    def stderr_so_far(self) -> str:
        """What the mode wrote to stderr until now (bench-produce: "starting N threads" when its
        timed window opens), while it still runs."""
        return "".join(list(self._stderr))

    def wait(self, timeout: float = 180.0) -> DriverResult:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for reader in self._readers:
            reader.join(10)
        result = DriverResult(self.args, self.proc.returncode, _parse_lines("".join(self._stdout)),
                              "".join(self._stderr), time.monotonic() - self._began)
        return self._driver._checked(result, self._check)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class ClientDriver:
    """Runs ClientDriver.java modes against one name server (``host:port``; ``;`` separates several).

    ``workdir`` gets the JVM's user.home and the client's log root (logs/rocketmq_client.log).
    ``serialize_type`` "ROCKETMQ" makes the client send binary headers instead of JSON.
    RocketMQ's client timers are long; shortening them makes tests quick without changing what is
    sent. ``poll_namesrv_ms``: route refresh (30 s; a push consumer's first retries wait for it,
    since %RETRY%group only gets a route after the consumer's first heartbeat). ``heartbeat_ms``:
    broker heartbeat (30 s; a consumer started before its topic existed is unknown to the broker
    until it heartbeats again). ``rebalance_interval_ms``: ``rocketmq.client.rebalance.waitInterval``
    (20 s). Each JVM run logs to its own file under ``workdir/logs``.
    """

    def __init__(self, namesrv: str, workdir: Path, *, java: str | None = None, heap: str = "256m",
                 serialize_type: str | None = None, poll_namesrv_ms: int | None = None,
                 heartbeat_ms: int | None = None, rebalance_interval_ms: int | None = None,
                 jvm_args: Sequence[str] = LIGHT_JVM) -> None:
        build_driver()
        self.namesrv = namesrv
        self.workdir = Path(workdir)
        self.java = java or find_tools()[0]
        self.heap = heap
        self.serialize_type = serialize_type
        self.poll_namesrv_ms = poll_namesrv_ms
        self.heartbeat_ms = heartbeat_ms
        self.rebalance_interval_ms = rebalance_interval_ms
        self._runs = itertools.count(1)
        self.jvm_args = list(jvm_args)
        (self.workdir / "home").mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)

    def command(self, mode: str, *args: str | int | os.PathLike[str], heap: str | None = None) -> list[str]:
        props = [
            f"-Duser.home={self.workdir / 'home'}",
            f"-Drocketmq.client.logRoot={self.workdir / 'logs'}",
            f"-Drocketmq.client.logFileName={next(self._runs):03d}-{mode}.log",
            "-Drocketmq.client.logUseSlf4j=false",
        ]
        if self.serialize_type:
            props.append(f"-Drocketmq.serialize.type={self.serialize_type}")
        if self.rebalance_interval_ms:
            props.append(f"-Drocketmq.client.rebalance.waitInterval={self.rebalance_interval_ms}")
        classpath = os.pathsep.join([str(DRIVER_JAR), str(DRIVER_LIB / "*")])
        common = ["-n", self.namesrv]
        if self.poll_namesrv_ms:
            common += ["--poll-namesrv", str(self.poll_namesrv_ms)]
        if self.heartbeat_ms:
            common += ["--heartbeat", str(self.heartbeat_ms)]
        return [self.java, f"-Xmx{heap or self.heap}", *props, *self.jvm_args, "-cp", classpath, DRIVER_MAIN,
                mode, *common, *map(str, args)]

    def _checked(self, result: DriverResult, check: bool) -> DriverResult:
        if check and (result.returncode != 0 or result.errors):
            raise DriverError(
                f"driver {result.args[result.args.index(DRIVER_MAIN) + 1:]} exited {result.returncode}, "
                f"errors {result.errors[:3]}:\n{result.stderr[-6000:]}", result)
        return result

    def run(self, mode: str, *args: str | int, timeout: float = 180.0, check: bool = True,
            heap: str | None = None) -> DriverResult:
        """Run one mode to completion. With ``check`` a non-zero exit or an error line raises DriverError.

        The driver stops by itself (``--timeout``, 60 s by default, plus a 30 s watchdog); ``timeout``
        here is the outer limit after which the JVM is killed.
        """
        cmd = self.command(mode, *args, heap=heap)
        begin = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            result = DriverResult(cmd, -9, _parse_lines(out), err, time.monotonic() - begin)
            raise DriverError(f"driver {mode} killed after {timeout} s", result) from e
        result = DriverResult(cmd, proc.returncode, _parse_lines(proc.stdout), proc.stderr,
                              time.monotonic() - begin)
        return self._checked(result, check)

    def start(self, mode: str, *args: str | int, check: bool = True, heap: str | None = None) -> BackgroundRun:
        """Start one mode in the background (e.g. a consumer before the producer runs)."""
        cmd = self.command(mode, *args, heap=heap)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return BackgroundRun(self, cmd, proc, check)

    # Thin wrappers with the modes' options as keyword arguments.

    def produce(self, topic: str, count: int, *, mode: str = "sync", keys: bool = False,
                tags: Sequence[str] = (), size: int = 0, group: str | None = None, start: int = 0,
                delay_level: int = 0, check: bool = True) -> DriverResult:
        """Send ``count`` messages with bodies ``body-<i>`` (padded with x to ``size``), keys ``key-<i>``
        and tags ``tags[i % len(tags)]``, i from ``start``, delayed by ``delay_level`` when above 0.
        Lines of kind "sent", then a summary.
        Bodies over 4 KiB are zipped by the client (sysFlag COMPRESSED), as any 4.x producer does."""
        args: list[str | int] = ["-t", topic, "-c", count, "--mode", mode, "--start", start]
        if keys:
            args.append("--keys")
        if tags:
            args += ["--tags", ",".join(tags)]
        if size:
            args += ["--size", size]
        if group:
            args += ["--group", group]
        if delay_level:
            args += ["--delay-level", delay_level]
        return self.run("produce", *args, check=check)

    @staticmethod
    def _consume_args(topic: str, group: str, expected: int, *, tags: str | None, fail_times: int,
                      max_reconsume: int | None, retry_delay_level: int | None, orderly: bool,
                      timeout_s: int, linger_ms: int) -> list[str | int]:
        args: list[str | int] = ["-t", topic, "-g", group, "-c", expected, "--timeout", timeout_s]
        if tags:
            args += ["--tags", tags]
        if fail_times:
            args += ["--fail-times", fail_times]
        if max_reconsume is not None:
            args += ["--max-reconsume", max_reconsume]
        if retry_delay_level is not None:
            args += ["--retry-delay-level", retry_delay_level]
        if orderly:
            args.append("--orderly")
        if linger_ms:
            args += ["--linger", linger_ms]
        return args

    def push_consume(self, topic: str, group: str, expected: int, *, tags: str | None = None, fail_times: int = 0,
                     max_reconsume: int | None = None, retry_delay_level: int | None = None, orderly: bool = False,
                     timeout_s: int = 60, linger_ms: int = 0, check: bool = True) -> DriverResult:
        """DefaultMQPushConsumer from the first offset until ``expected`` distinct messages succeeded.

        Every delivery is a "received" line with ``delivery`` (1, 2, ...) and ``status``; the first
        ``fail_times`` deliveries of each message return RECONSUME_LATER (concurrent) or
        SUSPEND_CURRENT_QUEUE_A_MOMENT (orderly). ``retry_delay_level`` is the delay level of the
        retry (0 = the broker's choice, 3 + reconsumeTimes, i.e. 10 s for the first; -1 = DLQ at once).
        """
        args = self._consume_args(topic, group, expected, tags=tags, fail_times=fail_times,
                                  max_reconsume=max_reconsume, retry_delay_level=retry_delay_level,
                                  orderly=orderly, timeout_s=timeout_s, linger_ms=linger_ms)
        return self.run("push-consume", *args, check=check, timeout=timeout_s + 60)

    def start_push_consume(self, topic: str, group: str, expected: int, *, tags: str | None = None,
                           fail_times: int = 0, max_reconsume: int | None = None,
                           retry_delay_level: int | None = None, orderly: bool = False, timeout_s: int = 60,
                           linger_ms: int = 0, check: bool = True) -> BackgroundRun:
        """``push_consume`` in the background, e.g. to be up while a producer sends; ``.wait()``."""
        args = self._consume_args(topic, group, expected, tags=tags, fail_times=fail_times,
                                  max_reconsume=max_reconsume, retry_delay_level=retry_delay_level,
                                  orderly=orderly, timeout_s=timeout_s, linger_ms=linger_ms)
        return self.start("push-consume", *args, check=check)

    def pull_consume(self, topic: str, group: str, expected: int, *, timeout_s: int = 60,
                     check: bool = True) -> DriverResult:
        """DefaultLitePullConsumer over every queue from its min offset; "pulled" lines, then one
        "committed" line per queue with the offset committed and the one the broker returns."""
        return self.run("pull-consume", "-t", topic, "-g", group, "-c", expected, "--timeout", timeout_s,
                        check=check, timeout=timeout_s + 60)

    def query(self, topic: str, *, key: str | None = None, uniq_key: str | None = None,
              offset_msg_id: str | None = None, expect: int = 1, timeout_s: int = 30,
              check: bool = True) -> DriverResult:
        """Find messages by key (queryMessage), client msgId (viewMessage(topic, id)) or offsetMsgId."""
        args: list[str | int] = ["-t", topic, "--expect", expect, "--timeout", timeout_s]
        if key is not None:
            args += ["--key", key]
        if uniq_key is not None:
            args += ["--uniq-key", uniq_key]
        if offset_msg_id is not None:
            args += ["--offset-msg-id", offset_msg_id]
        return self.run("query", *args, check=check, timeout=timeout_s + 60)

    def bench_produce(self, topic: str, *, threads: int = 16, size: int = 128, seconds: int = 10,
                      heap: str = "1g", warmup: int = 0) -> dict[str, Any]:
        """Closed-loop sync sends of random ``size``-byte bodies from ``threads`` threads on one
        producer, after ``warmup`` untimed seconds of the same in the same JVM (its JIT warm, not
        only the broker's); the summary {sent, failed, tps, p50_ms, p99_ms, max_ms, threads, size,
        seconds} covers the timed part."""
        return self.run("bench-produce", "-t", topic, "-w", threads, "-s", size, "-d", seconds,
                        "--warmup", warmup, heap=heap, timeout=seconds + warmup + 120).summary

    def bench_consume(self, topic: str, group: str, *, seconds: int = 10, stop_after: int = 0,
                      heap: str = "1g") -> dict[str, Any]:
        """Push-consume from the first offset for ``seconds`` (or until ``stop_after`` messages);
        the summary {consumed, tps (first to last delivery), tps_window, seconds}."""
        args: list[str | int] = ["-t", topic, "-g", group, "-d", seconds]
        if stop_after:
            args += ["-c", stop_after]
        return self.run("bench-consume", *args, heap=heap, timeout=seconds + 120).summary

    def bench_fill(self, topic: str, count: int, *, size: int = 1024, threads: int = 4, seconds: int = 600,
                   heap: str = "1g") -> dict[str, Any]:
        """``count`` random ``size``-byte bodies in batches of 32 from ``threads`` threads (at most
        ``seconds``; a failed batch is sent again up to five times): a backlog for the consumption
        benchmarks; the summary {sent, failed, tps, seconds}, ``sent`` being the backlog written."""
        return self.run("bench-fill", "-t", topic, "-c", count, "-s", size, "-w", threads, "-d", seconds,
                        heap=heap, timeout=seconds + 120).summary

    def bench_pull(self, topic: str, group: str, *, seconds: int = 10, stop_after: int = 0,
                   heap: str = "1g") -> dict[str, Any]:
        """``bench_consume`` with a DefaultLitePullConsumer (32 per pull) instead of a push consumer;
        the same summary."""
        args: list[str | int] = ["-t", topic, "-g", group, "-d", seconds]
        if stop_after:
            args += ["-c", stop_after]
        return self.run("bench-pull", *args, heap=heap, timeout=seconds + 120).summary


# -- Apache RocketMQ's own name server and broker ------------------------------------------------

_LOGBACK = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by tests/support/java_rocketmq.py: everything to one file under user.home. -->
<configuration>
  <appender name="File" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <append>true</append>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %p %t %c - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="File"/></root>
</configuration>
"""


@dataclass
class _Server:
    name: str
    proc: subprocess.Popen[bytes]
    stdout_path: Path
    stdout: IO[bytes]
    boot_seconds: float = 0.0


@dataclass
class RocketMQAnchor:
    """Apache RocketMQ's own name server and broker, on 127.0.0.1 with free ports, under ``workdir``.

    ``version`` picks the release (``ANCHOR_VERSIONS``). ``broker_config`` adds or overrides
    broker.conf keys (e.g. ``mappedFileSizeCommitLog``), ``namesrv_config`` adds namesrv.conf keys
    (e.g. 5.x's ``enableControllerInNamesrv``). Use as a context manager, or ``start()`` /
    ``stop()``. After start: ``namesrv_addr``, ``broker_addr``, ``boot_seconds`` (namesrv, broker).
    Mixed clusters: ``with_broker=False`` starts the name server alone (another broker registers
    with it); ``external_namesrv`` starts the broker alone, registered with that name server.
    """

    workdir: Path
    heap: str = DEFAULT_HEAP
    version: str = ANCHOR_VERSION
    broker_config: dict[str, str] = field(default_factory=dict)
    #: namesrv.conf keys beyond listenPort (e.g. 5.x's enableControllerInNamesrv and the controller's)
    namesrv_config: dict[str, str] = field(default_factory=dict)
    java: str | None = None
    cluster: str = "DefaultCluster"
    broker_name: str = "anchor-broker-a"
    namesrv_port: int = 0
    broker_port: int = 0
    with_broker: bool = True
    external_namesrv: str | None = None
    _servers: list[_Server] = field(default_factory=list)

    @property
    def rocketmq_home(self) -> Path:
        """The scratch ROCKETMQ_HOME (``conf/`` holds logback's files and, with ACL, plain_acl.yml)."""
        return self.workdir / "rocketmq-home"

    @property
    def namesrv_addr(self) -> str:
        return self.external_namesrv or f"127.0.0.1:{self.namesrv_port}"

    @property
    def namesrv_log(self) -> Path:
        """The name server's log file (logback, INFO)."""
        return self.workdir / "home" / "namesrv.log"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def store_dir(self) -> Path:
        return self.workdir / "store"

    @property
    def boot_seconds(self) -> dict[str, float]:
        return {s.name: s.boot_seconds for s in self._servers}

    def log_tail(self, chars: int = 4000) -> str:
        """The tail of both servers' stdout and log files, for failure messages."""
        parts = []
        for path in [*(s.stdout_path for s in self._servers), *sorted((self.workdir / "home").glob("*.log"))]:
            if path.is_file():
                parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    def start(self, timeout: float = BOOT_TIMEOUT_S) -> RocketMQAnchor:
        build_anchor(self.version)
        java = self.java or find_tools()[0]
        home = self.workdir / "home"
        rocketmq_home = self.rocketmq_home
        (rocketmq_home / "conf").mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        # 4.x's NamesrvStartup / BrokerStartup read ${rocketmq.home.dir}/conf/logback_{namesrv,broker}.xml
        # and exit when it is missing; 5.x reads the file named by -Drmq.logback.configurationFile
        # (else its jar's own rolling, asynchronous set of a dozen files). Both get the same one file.
        logback = {name: rocketmq_home / "conf" / f"logback_{name}.xml" for name in ("namesrv", "broker")}
        for name, path in logback.items():
            path.write_text(_LOGBACK.format(log=home / f"{name}.log"))

        if not self.namesrv_port and self.external_namesrv is None:
            self.namesrv_port = free_port()
        if not self.broker_port:
            # The broker also listens on listenPort - 2 (the "VIP" channel) and listenPort + 1 (HA).
            self.broker_port = free_port(also=(-2, 1))

        namesrv_conf = self.workdir / "namesrv.conf"
        namesrv_conf.write_text(f"listenPort={self.namesrv_port}\n"
                                + "".join(f"{k}={v}\n" for k, v in self.namesrv_config.items()))
        conf = {
            "brokerClusterName": self.cluster,
            "brokerName": self.broker_name,
            "brokerId": "0",
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH",
            "namesrvAddr": self.namesrv_addr,
            "brokerIP1": "127.0.0.1",
            "listenPort": str(self.broker_port),
            "storePathRootDir": str(self.store_dir),
            "storePathCommitLog": str(self.store_dir / "commitlog"),
            "autoCreateTopicEnable": "true",
            "autoCreateSubscriptionGroup": "true",
            **self.broker_config,
        }
        broker_conf = self.workdir / "broker.conf"
        broker_conf.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))

        # tls.server.mode=disabled: the default "permissive" mode builds a self-signed certificate per
        # listening port at start-up (3-4 s each on a 2-core VM) that a plaintext client never uses.
        jvm = [java, f"-Xms{self.heap}", f"-Xmx{self.heap}", *G1_FLAGS, *JDK17_FLAGS,
               f"-Duser.home={home}", f"-Drocketmq.home.dir={rocketmq_home}", "-Dtls.server.mode=disabled",
               "-cp", str(anchor_lib(self.version) / "*")]
        try:
            if self.external_namesrv is None:
                self._launch("namesrv", [*jvm, f"-Drmq.logback.configurationFile={logback['namesrv']}",
                                         NAMESRV_MAIN, "-c", str(namesrv_conf)], "boot success", timeout)
            if self.with_broker:
                self._launch("broker", [*jvm, f"-Drmq.logback.configurationFile={logback['broker']}", BROKER_MAIN,
                                        "-c", str(broker_conf), "-n", self.namesrv_addr], "boot success", timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self, name: str, cmd: list[str], ready: str, timeout: float) -> None:
        stdout_path = self.workdir / f"{name}.stdout"
        out = stdout_path.open("wb")
        begin = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        server = _Server(name, proc, stdout_path, out)
        self._servers.append(server)
        deadline = begin + timeout
        while True:
            text = stdout_path.read_text(errors="replace")
            if ready in text:
                server.boot_seconds = time.monotonic() - begin
                return
            if proc.poll() is not None:
                raise AnchorError(f"RocketMQ {name} exited {proc.returncode} before booting:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AnchorError(f"RocketMQ {name} did not print {ready!r} within {timeout} s:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> dict[str, int | None]:
        """SIGTERM the broker, then the name server (SIGKILL after ``timeout``); their exit codes."""
        codes: dict[str, int | None] = {}
        for server in reversed(self._servers):
            proc = server.proc
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            codes[server.name] = proc.returncode
            server.stdout.close()
        self._servers.clear()
        return codes

    def kill(self) -> None:
        """kill -9 every server of this anchor (a crash, as failover tests need); ``start()`` boots them
        again on the same ports and store."""
        for server in self._servers:
            if server.proc.poll() is None:
                server.proc.kill()
        self.stop()

    def __enter__(self) -> RocketMQAnchor:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def embedded_controller_config(workdir: Path, dledger_port: int, group: str) -> dict[str, str]:
    """namesrv.conf keys for a 5.x name server running its embedded controller, a one-node DLedger
    group listening on ``dledger_port`` (the address brokers' ``controllerAddr`` names), its store
    under ``workdir``."""
    return {"enableControllerInNamesrv": "true", "controllerDLegerGroup": group,
            "controllerDLegerPeers": f"n0-127.0.0.1:{dledger_port}", "controllerDLegerSelfId": "n0",
            "controllerStorePath": str(workdir / "controller"), "mappedFileSize": str(4 * 1024 * 1024)}


def plain_acl_anchor(workdir: Path, acl_file: str) -> RocketMQAnchor:
    """A RocketMQAnchor (not started) with ``aclEnable`` whose plain ACL is ``acl_file``: the text of
    ``conf/plain_acl.yml`` under its ROCKETMQ_HOME (broker_process.plain_acl_broker does the same for
    ours)."""
    anchor = RocketMQAnchor(workdir, broker_config={"aclEnable": "true"})
    (anchor.rocketmq_home / "conf").mkdir(parents=True, exist_ok=True)
    (anchor.rocketmq_home / "conf" / "plain_acl.yml").write_text(acl_file)
    return anchor


@dataclass
class ProxyAnchor(RocketMQAnchor):
    """Apache RocketMQ 5.3.3's name server and ``ProxyStartup -pm local`` (the broker in the proxy's JVM).

    The name server comes from RocketMQAnchor (``with_broker=False``); the proxy JVM gets the same
    JVM flags, its broker the same broker.conf keys as the anchor's broker would (plus
    ``broker_config``), and a gRPC port (``grpc_endpoint``). ``proxy_config`` adds keys to
    rmq-proxy.json (the proxy's own AuthConfig is read from there, not from broker.conf).
    """

    version: str = "5.3.3"  # the name server's
    proxy_config: dict[str, Any] = field(default_factory=dict)
    grpc_port: int = 0

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float = BOOT_TIMEOUT_S) -> ProxyAnchor:
        build_proxy_anchor()
        self.with_broker = False
        super().start(timeout)
        try:
            self._start_proxy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_proxy(self, timeout: float) -> None:
        java = self.java or find_tools()[0]
        home, rocketmq_home = self.workdir / "home", self.rocketmq_home
        self.broker_port = free_port(also=(-2, 1))  # plus listenPort - 2 (VIP channel) and + 1 (HA)
        self.grpc_port = free_port()
        conf = {
            "brokerClusterName": self.cluster, "brokerName": self.broker_name, "brokerId": "0",
            "brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH", "namesrvAddr": self.namesrv_addr,
            "brokerIP1": "127.0.0.1", "listenPort": str(self.broker_port), "storePathRootDir": str(self.store_dir),
            "storePathCommitLog": str(self.store_dir / "commitlog"), "autoCreateTopicEnable": "true",
            "autoCreateSubscriptionGroup": "true", **self.broker_config,
        }
        broker_conf = self.workdir / "broker.conf"
        broker_conf.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        proxy_conf = self.workdir / "rmq-proxy.json"
        proxy_conf.write_text(json.dumps({
            "rocketMQClusterName": self.cluster, "namesrvAddr": self.namesrv_addr, "proxyMode": "local",
            "grpcServerPort": self.grpc_port, "remotingListenPort": free_port(), **self.proxy_config}))
        logback = rocketmq_home / "conf" / "logback_proxy.xml"
        logback.write_text(_LOGBACK.format(log=home / "proxy.log"))
        cmd = [java, f"-Xms{self.heap}", f"-Xmx{self.heap}", *G1_FLAGS, *JDK17_FLAGS, f"-Duser.home={home}",
               f"-Drocketmq.home.dir={rocketmq_home}", "-Dtls.server.mode=disabled",
               f"-Drmq.logback.configurationFile={logback}", "-cp", str(PROXY_ANCHOR_LIB / "*"), PROXY_MAIN,
               "-pm", "local", "-bc", str(broker_conf), "-pc", str(proxy_conf), "-n", self.namesrv_addr]
        self._launch("proxy", cmd, PROXY_READY, timeout)
