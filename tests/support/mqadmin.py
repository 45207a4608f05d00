"""Apache RocketMQ's own ``mqadmin`` (rocketmq-tools 4.9.7, class MQAdminStartup) as a test peer.

A helper library, importable as ``mqadmin`` (pyproject's pytest ``pythonpath`` puts tests/support
on ``sys.path``). ``build_mqadmin()`` copies the tool's runtime classpath to
``drivers/mqadmin/target/lib`` with Maven, once (the same stamp-file cache as the client driver);
``run_mqadmin(namesrv, verb, *args)`` runs one verb as mqadmin.sh would and returns what it printed.

The verbs run one after another in one JVM per process (drivers/mqadmin/MQAdminSession.java, through
the tool's own entry point, a new admin client per command): a JVM per command spent about 3 s of
a loaded 2-core machine starting up, dozens of times per test module.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from java_rocketmq import LIGHT_JVM, _build_once, find_tools
from tool_support import DRIVERS_DIR

MQADMIN_DIR = DRIVERS_DIR / "mqadmin"
MQADMIN_POM = MQADMIN_DIR / "pom.xml"
MQADMIN_LIB = MQADMIN_DIR / "target" / "lib"
MQADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
#: runs the verbs, one JVM for many (started from source: java's single-file launch compiles it)
MQADMIN_SESSION = MQADMIN_DIR / "MQAdminSession.java"
RUN_TIMEOUT_S = 90.0
#: warnings and errors of the tool's own logging to stderr; stdout stays the command's output
LOGBACK_QUIET = """<configuration>
  <appender name="ERR" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>%d %-5level %logger{0} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="ERR"/></root>
</configuration>
"""


def build_mqadmin() -> float | None:
    """Copy rocketmq-tools' classpath to drivers/mqadmin/target/lib once per process; seconds mvn took
    or None when it was up to date."""
    return _build_once(MQADMIN_POM, [MQADMIN_LIB], [MQADMIN_POM])


@dataclass
class MQAdminResult:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def lines(self) -> list[str]:
        """The non-blank stdout lines."""
        return [line for line in self.stdout.splitlines() if line.strip()]


class MQAdminSession:
    """A JVM that runs mqadmin verbs one after another (MQAdminSession.java), started at the first
    verb and again after a verb ended it (System.exit, or a verb past its timeout, which is killed).

    It runs each verb as mqadmin.sh would (MQAdminStartup's entry point, which makes a new admin
    client for the command and shuts it down), with a scratch ROCKETMQ_HOME, user.home and working
    directory (the client writes there) for the JVM's life."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._home: tempfile.TemporaryDirectory[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        java = find_tools()[0]
        self._home = tempfile.TemporaryDirectory(prefix="mqadmin-home-")
        home = Path(self._home.name)
        # MQAdminStartup configures logback from ROCKETMQ_HOME/conf/logback_tools.xml, or stops
        (home / "conf").mkdir()
        (home / "conf" / "logback_tools.xml").write_text(LOGBACK_QUIET)
        # small heap, as short-lived commands need
        cmd = [java, "-Xms64m", "-Xmx256m", *LIGHT_JVM, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}",
               "-Drocketmq.client.logUseSlf4j=false", "-cp", f"{MQADMIN_LIB}/*", str(MQADMIN_SESSION)]
        env = {**os.environ, "ROCKETMQ_HOME": str(home)}
        # cwd: consumerStatus writes each client's running info to a directory in the working one;
        # the JVM's own messages (outside a command) go to a file there
        with (home / "jvm.log").open("w") as jvm_log:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=jvm_log, text=True,
                                    env=env, cwd=home)
        self._answers = queue.Queue()
        threading.Thread(target=self._read_answers, args=(proc.stdout, self._answers), daemon=True).start()
        return proc

    @staticmethod
    def _read_answers(stdout: IO[str] | None, answers: queue.Queue[str | None]) -> None:
        assert stdout is not None
        for line in stdout:
            answers.put(line)
        answers.put(None)

    def run(self, args: list[str], timeout: float, tools_home: Path | None = None) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of ``mqadmin ARGS``, with ``tools_home`` as its
        ROCKETMQ_HOME when given (conf/logback_tools.xml, and conf/tools.yml with the credentials
        to sign with); raises subprocess.TimeoutExpired as subprocess.run would."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self.close()
                self._proc = self._start()
            proc = self._proc
            assert proc.stdin is not None
            home = None if tools_home is None else str(tools_home)
            proc.stdin.write(json.dumps({"args": args, "home": home}) + "\n")
            proc.stdin.flush()
            try:
                line = self._answers.get(timeout=timeout)
            except queue.Empty:
                self.close()
                raise subprocess.TimeoutExpired(["mqadmin", *args], timeout) from None
            if line is None:
                raise AssertionError(f"the mqadmin JVM ended without answering {args}: exit status {proc.wait()}, "
                                     f"{self._jvm_log()}")
            answer = json.loads(line)
            # a verb that called System.exit: the JVM's exit status is the command's, as for mqadmin.sh
            code = proc.wait(timeout=30) if answer["exiting"] else 0
            return code, answer["stdout"], answer["stderr"]

    def _jvm_log(self) -> str:
        return (Path(self._home.name) / "jvm.log").read_text(errors="replace")[-4000:] if self._home else ""

    def close(self) -> None:
        """Ends the JVM (end of stdin; killed if it does not end) and removes its scratch home."""
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._home is not None:
            self._home.cleanup()
            self._home = None


#: the JVM the verbs of this process run in (it ends when the process does: its stdin closes)
_session = MQAdminSession()


def run_mqadmin(namesrv: str, verb: str, *args: str, timeout: float = RUN_TIMEOUT_S,
                tools_home: Path | None = None) -> MQAdminResult:
    """``mqadmin VERB -n NAMESRV ARGS``, in the process's mqadmin JVM; with ``tools_home`` as its
    ROCKETMQ_HOME when given (it signs with the account of tools_home/conf/tools.yml, if there)."""
    cmd = [verb, "-n", namesrv, *args]
    returncode, stdout, stderr = _session.run(cmd, timeout, tools_home)
    return MQAdminResult(cmd, returncode, stdout, stderr)
