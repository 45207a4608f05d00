"""The container image, built and run for real: ``docker build`` of the top-level Dockerfile,
then the broker in a container, reached from the host through published ports.

No registry is needed: the Dockerfile's base, ``python:3.11-slim`` (of both stages: the build
stage compiles the native hot path with Debian's rustc-web), is made locally by
``build_base_image.sh`` (debootstrap rootfs, cached) and the engine is started by ``dockerd.sh``
when none answers. Needs root, ``docker.io`` and ``debootstrap`` (Debian packages); without them
the tests fail under CI and are skipped elsewhere, naming what is missing (tool_support).

Routing through published ports: the broker publishes ``brokerIP1:listenPort`` in its routes,
and inside a container brokerIP1 defaults to the container's bridge address, which the host
cannot reach through ``-p``. So the container gets a broker.conf with ``brokerIP1=127.0.0.1``
and ``listenPort=P``, where P is a free host port published as ``127.0.0.1:P:P`` (the same number
on both sides). A client on the host then goes the way applications go: name server (published
on a random host port) -> route -> ``127.0.0.1:P`` -> the container. The name-server and HTTP
ports keep their defaults inside (the image's HEALTHCHECK probes 127.0.0.1:10925) and get random
host ports.

The tests share one container, which none of them stops; the `docker stop` test starts its own,
so they pass in any order.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from docker_engine import build_base_image, docker_engine
from ports import free_port
from tool_support import require_executable, require_tool

from rocketstore.client import MessageQueue, Producer, PullConsumer, PullStatus, SendResult
from rocketstore.store.config import StoreConfig
from rocketstore.store.offline import verify_store

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
IMAGE = "rocketstore:test"
#: the Dockerfile's build stage, tagged so that pruning dangling images keeps its layer cache
BUILD_STAGE_IMAGE = "rocketstore-build:test"
IMAGE_SIZE_LIMIT = 400 * 1000 * 1000
STORE_IN_CONTAINER = "/home/rocketmq/store"
RUN_AS_UID = 10001
MESSAGES = 300
TOPIC = "ImageTopic"
#: host settings forwarded to `docker build` when set: the Dockerfile's pip ARGs and Docker's
#: predefined proxy args
BUILD_ARGS_FROM_ENV = (
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
)


def _timings_file(tmp: Path) -> Path:
    return tmp / "image-timings.txt"


@dataclass
class Engine:
    env: dict[str, str]
    started: bool
    tmp: Path
    report: list[str]
    timings: dict[str, float] = field(default_factory=dict)

    def run(self, *args: str, timeout: float = 120, check: bool = True,
            log: Path | None = None) -> subprocess.CompletedProcess[str]:
        cmd = ["docker", *args]
        if log is not None:
            with log.open("w") as out:
                proc = subprocess.run(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, text=True,
                                      timeout=timeout, check=False)
            if check and proc.returncode != 0:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
                pytest.fail(f"{shlex.join(cmd)} exited {proc.returncode}; log {log}:\n{tail}")
            return proc
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            pytest.fail(f"{shlex.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def timed(self, name: str, seconds: float) -> None:
        self.timings[name] = seconds
        self.note(f"{name}: {seconds:.1f} s")

    def note(self, line: str) -> None:
        """Print, keep for the terminal summary, and append to image-timings.txt."""
        print(line)
        self.report.append(line)
        with _timings_file(self.tmp).open("a") as f:
            f.write(line + "\n")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, image_report: list[str]) -> Iterator[Engine]:
    for tool in ("docker", "dockerd", "debootstrap"):
        require_executable(tool, "the image tests build and run the image with Debian's docker.io and debootstrap "
                                 "(apt-get install docker.io debootstrap)")
    require_tool("root", os.geteuid() == 0, "the image tests run debootstrap and dockerd")
    tmp = tmp_path_factory.mktemp("image")
    t0 = time.monotonic()
    with docker_engine() as (env, started):
        eng = Engine(env=env, started=started, tmp=tmp, report=image_report)
        eng.timed("engine start" if started else "engine (already running)", time.monotonic() - t0)
        yield eng


@pytest.fixture(scope="module")
def image(engine: Engine) -> str:
    t0 = time.monotonic()
    report = build_base_image(engine.env)
    print(report)
    how = "cached rootfs" if "using cached" in report else "debootstrap"
    engine.timed(f"base image ({how})", time.monotonic() - t0)

    build_args: list[str] = []
    for name in BUILD_ARGS_FROM_ENV:
        if os.environ.get(name):
            build_args += ["--build-arg", f"{name}={os.environ[name]}"]
    t0 = time.monotonic()
    engine.run("build", "--target", "build", "-t", BUILD_STAGE_IMAGE, *build_args, str(REPO), timeout=1800,
               log=engine.tmp / "docker-build-stage.log")
    engine.run("build", "-t", IMAGE, *build_args, str(REPO), timeout=1200, log=engine.tmp / "docker-build.log")
    engine.timed("docker build", time.monotonic() - t0)
    if engine.started:
        # our own engine: drop the images earlier builds left untagged (keeps the data root bounded)
        engine.run("image", "prune", "-f", check=False)
    return IMAGE


@dataclass
class Container:
    name: str
    remoting_port: int
    namesrv_port: int
    http_port: int
    store_dir: Path

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"


def _http_get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _published_port(engine: Engine, name: str, container_port: int) -> int:
    out = engine.run("port", name, f"{container_port}/tcp").stdout.split()
    # "127.0.0.1:49153" (one line per binding)
    return int(out[0].rsplit(":", 1)[1])


@contextlib.contextmanager
def _running_container(engine: Engine, image: str) -> Iterator[Container]:
    """A broker container from ``image``, ready (/readyz 200), with its own store volume; removed after."""
    base = engine.tmp / f"run-{uuid.uuid4().hex[:8]}"
    base.mkdir()
    store_dir = base / "store"
    store_dir.mkdir()
    os.chown(store_dir, RUN_AS_UID, RUN_AS_UID)  # the image's user owns its volume
    remoting_port = free_port()
    conf = base / "broker.conf"
    conf.write_text(f"brokerName=broker-image\nbrokerIP1=127.0.0.1\nlistenPort={remoting_port}\n")
    conf.chmod(0o644)
    name = f"rocketstore-test-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    engine.run(
        "run", "-d", "--name", name,
        "-p", f"127.0.0.1:{remoting_port}:{remoting_port}",
        "-p", "127.0.0.1::9876", "-p", "127.0.0.1::10925",
        "-v", f"{store_dir}:{STORE_IN_CONTAINER}",
        "-v", f"{conf}:/etc/rocketstore/broker.conf:ro",
        image, "broker", "-c", "/etc/rocketstore/broker.conf",
    )
    try:
        http_port = _published_port(engine, name, 10925)
        ctr = Container(name=name, remoting_port=remoting_port, namesrv_port=_published_port(engine, name, 9876),
                        http_port=http_port, store_dir=store_dir)
        deadline = time.monotonic() + 90
        while True:
            try:
                status, _ = _http_get(http_port, "/readyz")
            except OSError:  # docker-proxy accepts, then drops, until the broker listens
                status = 0
            if status == 200:
                break
            state = engine.run("inspect", "-f", "{{.State.Status}}", name).stdout.strip()
            if state != "running" or time.monotonic() > deadline:
                logs = engine.run("logs", name, check=False)
                pytest.fail(f"container {state}, /readyz {status}; logs:\n{logs.stdout}\n{logs.stderr}")
            time.sleep(0.5)
        engine.timed("container start to /readyz 200", time.monotonic() - t0)
        yield ctr
    finally:
        logs = engine.run("logs", name, check=False)
        (base / "container.log").write_text(logs.stdout + logs.stderr)
        engine.run("rm", "-f", name, check=False)


@pytest.fixture(scope="module")
def container(engine: Engine, image: str) -> Iterator[Container]:
    """One container shared by the tests that only look at a running broker (none stops it)."""
    with _running_container(engine, image) as ctr:
        yield ctr


def _produce(container: Container, count: int) -> list[SendResult]:
    bodies = [f"image-message-{i}".encode() for i in range(count)]
    with Producer(container.namesrv_addr, "image-test-pg") as producer:
        results = [producer.send(TOPIC, body, tags="img", keys=[f"k{i}"]) for i, body in enumerate(bodies)]
    assert all(r.status == "SEND_OK" for r in results)
    return results


def test_image_size(engine: Engine, image: str) -> None:
    size = int(engine.run("image", "inspect", "-f", "{{.Size}}", image).stdout.strip())
    base = int(engine.run("image", "inspect", "-f", "{{.Size}}", "python:3.11-slim").stdout.strip())
    line = f"{image}: {size} bytes ({size / 1e6:.1f} MB; base python:3.11-slim {base / 1e6:.1f} MB)"
    engine.note(line)
    (engine.tmp / "image-size.txt").write_text(line + "\n")
    assert size < IMAGE_SIZE_LIMIT, line
    assert size > base  # the project's layer is really there


def test_image_installs_every_package(engine: Engine, image: str) -> None:
    """`pip install .` skips a package whose directory the Dockerfile forgot to COPY, silently."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = sorted(pyproject["tool"]["setuptools"]["packages"])
    assert "rocketstore.broker" in packages and "rocketstore.cli" in packages
    # found, not imported: pyspark_rocketstore needs PySpark, which the broker image leaves out
    probe = "import importlib.util, sys; print([p for p in sys.argv[1:] if importlib.util.find_spec(p) is None])"
    out = engine.run("run", "--rm", "--entrypoint", "python", image, "-c", probe, *packages)
    assert out.stdout.strip() == "[]"
    # the entrypoint's command line loads every command group
    help_out = engine.run("run", "--rm", image, "--help")
    for group in ("broker", "store", "operator"):
        assert group in help_out.stdout


def test_image_runs_the_operator_too(engine: Engine, image: str) -> None:
    """The image holds the `operator` extra: `rocketstore operator` gets past its libraries to the
    API server lookup, which fails here (no pod, no kubeconfig) with a message, not an install hint."""
    out = engine.run("run", "--rm", image, "operator", check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "no API server to use" in out.stderr, out.stderr
    assert "pip install" not in out.stderr


def test_image_runs_the_native_hot_path(engine: Engine, image: str) -> None:
    """The extension the build stage compiled is in the wheel the runtime installed, and loads there:
    not the pure-Python fallback (which a failed cargo build would silently leave)."""
    probe = ("from rocketstore.common import native; "
             "print(native.IMPLEMENTATION, getattr(native.NATIVE, '__file__', None), native.REASON)")
    out = engine.run("run", "--rm", "--entrypoint", "python", image, "-c", probe).stdout
    implementation, path, _ = out.split(" ", 2)
    assert implementation == "native", out
    assert re.search(r"-packages/rocketstore/common/_native\.[\w.-]+\.so$", path), out


def test_runtime_has_no_build_toolchain(engine: Engine, image: str) -> None:
    """The Rust toolchain, the C compiler, the crates and the source tree stay in the build stage."""
    probe = ("for tool in cargo rustc gcc cc; do command -v $tool; done; "
             "ls -d /cargo /root/.cargo /src /opt/rocketstore 2>/dev/null; true")
    out = engine.run("run", "--rm", "--entrypoint", "sh", image, "-c", probe).stdout
    assert out.strip() == ""
    # the build stage itself has them (so the probe above can see a toolchain where there is one)
    built = engine.run("run", "--rm", "--entrypoint", "sh", BUILD_STAGE_IMAGE, "-c", probe).stdout.split()
    assert "/usr/bin/cargo" in built and "/src" in built, built


def test_image_metadata(engine: Engine, image: str) -> None:
    config = json.loads(engine.run("image", "inspect", "-f", "{{json .Config}}", image).stdout)
    assert config["User"] == str(RUN_AS_UID)
    assert config["Entrypoint"] == ["rocketstore"] and config["Cmd"] == ["broker"]
    assert STORE_IN_CONTAINER in config["Volumes"]
    assert {"10911/tcp", "9876/tcp", "10925/tcp"} <= set(config["ExposedPorts"])
    assert any("/readyz" in part for part in config["Healthcheck"]["Test"])


def test_runs_as_non_root(engine: Engine, container: Container) -> None:
    uid = engine.run("exec", container.name, "id", "-u").stdout.strip()
    assert uid == str(RUN_AS_UID)
    # and the store it writes on the mounted volume belongs to that user
    owned = {p.stat().st_uid for p in container.store_dir.rglob("*")}
    assert owned == {RUN_AS_UID}, owned


def test_startup_lines_publish_loopback_route(engine: Engine, container: Container) -> None:
    logs = engine.run("logs", container.name).stdout
    assert f"(published as 127.0.0.1:{container.remoting_port})" in logs
    assert "ready" in logs.splitlines()
    assert _http_get(container.http_port, "/healthz")[0] == 200
    status, metrics = _http_get(container.http_port, "/metrics")
    assert status == 200 and b"# TYPE" in metrics
    # the broker in the container runs the native hot path on uvloop, and says so
    info = re.search(r"^rocketstore_hot_path_info\{([^}]*)\} 1\.0$", metrics.decode(), re.MULTILINE)
    assert info is not None, "rocketstore_hot_path_info missing from /metrics"
    assert dict(re.findall(r'(\w+)="([^"]*)"', info.group(1))) == {"implementation": "native", "event_loop": "uvloop"}


def test_produce_and_consume_through_published_ports(container: Container) -> None:
    bodies = [f"image-message-{i}".encode() for i in range(MESSAGES)]
    results = _produce(container, MESSAGES)
    assert len({r.msg_id for r in results}) == MESSAGES

    received: dict[MessageQueue, list[bytes]] = {}
    with PullConsumer(container.namesrv_addr, "image-test-cg") as consumer:
        queues = consumer.queues(TOPIC)
        assert queues
        # the route the name server hands out is the published loopback address, not the
        # container's bridge address
        assert {consumer.broker_addr(mq) for mq in queues} == {f"127.0.0.1:{container.remoting_port}"}
        expected_per_queue: dict[int, int] = {}
        for r in results:
            expected_per_queue[r.queue_id] = expected_per_queue.get(r.queue_id, 0) + 1
        deadline = time.monotonic() + 30
        for mq in queues:
            got = received.setdefault(mq, [])
            while len(got) < expected_per_queue.get(mq.queue_id, 0):
                assert time.monotonic() < deadline, f"{mq}: {len(got)} of {expected_per_queue[mq.queue_id]}"
                result = consumer.pull(mq, len(got), max_nums=32)
                if result.status is PullStatus.FOUND:
                    got.extend(m.body for m in result.messages)
                else:
                    time.sleep(0.1)  # dispatch not caught up yet
    consumed = [body for got in received.values() for body in got]
    assert sorted(consumed) == sorted(bodies)
    # per queue, in the order sent
    for mq, got in received.items():
        sent_here = [bodies[i] for i, r in enumerate(results) if r.queue_id == mq.queue_id]
        assert got == sent_here


def test_healthcheck_reports_healthy(engine: Engine, container: Container) -> None:
    deadline = time.monotonic() + 60  # interval 10 s: the first probe runs 10 s after the start
    while True:
        status = engine.run("inspect", "-f", "{{.State.Health.Status}}", container.name).stdout.strip()
        if status == "healthy" or time.monotonic() > deadline:
            break
        time.sleep(1)
    health = json.loads(engine.run("inspect", "-f", "{{json .State.Health}}", container.name).stdout)
    assert status == "healthy", health
    assert health["FailingStreak"] == 0
    assert health["Log"] and health["Log"][-1]["ExitCode"] == 0


def test_docker_stop_is_a_clean_shutdown(engine: Engine, image: str) -> None:
    """SIGTERM from `docker stop` -> exit 0, and the store on the volume is closed cleanly.

    A container of its own, so the shared one stays up whatever order the tests run in."""
    with _running_container(engine, image) as container:
        stored = len(_produce(container, MESSAGES))
        assert (container.store_dir / "abort").exists()  # a running broker has its abort marker
        t0 = time.monotonic()
        engine.run("stop", "-t", "30", container.name, timeout=60)
        stop_s = time.monotonic() - t0
        engine.timed("docker stop", stop_s)
        state = json.loads(engine.run("inspect", "-f", "{{json .State}}", container.name).stdout)
        assert state["Status"] == "exited"
        assert state["ExitCode"] == 0 and not state["OOMKilled"], state
        assert stop_s < 25  # well inside the 30 s before docker would SIGKILL
        assert not (container.store_dir / "abort").exists()
        assert (container.store_dir / "checkpoint").is_file()
        # the files the broker left verify end to end, read from the host
        report = verify_store(StoreConfig(store_path_root_dir=str(container.store_dir)))
        assert report.ok, report.problems
        assert report.records == stored


def test_timings_recorded(engine: Engine, container: Container) -> None:
    lines = _timings_file(engine.tmp).read_text().splitlines()
    assert any(line.startswith("docker build:") for line in lines)  # by the image fixture
    assert any(line.startswith("container start to /readyz 200:") for line in lines)  # by the container's

