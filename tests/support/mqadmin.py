"""Apache RocketMQ's own ``mqadmin`` (rocketmq-tools 4.9.7, class MQAdminStartup) as a test peer.

A helper library, importable as ``mqadmin`` (pyproject's pytest ``pythonpath`` puts tests/support
on ``sys.path``). ``build_mqadmin()`` copies the tool's runtime classpath to
``drivers/mqadmin/target/lib`` with Maven, once (the same stamp-file cache as the client driver);
``run_mqadmin(namesrv, verb, *args)`` runs one verb as mqadmin.sh would and returns what it printed.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from java_rocketmq import _build_once, find_tools
from tool_support import DRIVERS_DIR

MQADMIN_DIR = DRIVERS_DIR / "mqadmin"
MQADMIN_POM = MQADMIN_DIR / "pom.xml"
MQADMIN_LIB = MQADMIN_DIR / "target" / "lib"
MQADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
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


def run_mqadmin(namesrv: str, verb: str, *args: str, timeout: float = RUN_TIMEOUT_S) -> MQAdminResult:
    """``mqadmin VERB -n NAMESRV ARGS`` with a scratch user.home (the client writes there); small
    heap, as one short-lived command needs."""
    java = find_tools()[0]
    with tempfile.TemporaryDirectory(prefix="mqadmin-home-") as home:
        # MQAdminStartup configures logback from ROCKETMQ_HOME/conf/logback_tools.xml, or stops
        conf = Path(home) / "conf"
        conf.mkdir()
        (conf / "logback_tools.xml").write_text(LOGBACK_QUIET)
        cmd = [java, "-Xms64m", "-Xmx256m", f"-Duser.home={home}", f"-Drocketmq.home.dir={home}",
               "-Drocketmq.client.logUseSlf4j=false", "-cp", f"{MQADMIN_LIB}/*", MQADMIN_MAIN,
               verb, "-n", namesrv, *args]
        env = {**os.environ, "ROCKETMQ_HOME": home}
        # cwd: consumerStatus writes each client's running info to a directory in the working one
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=home,
                              check=False)
    return MQAdminResult(cmd, proc.returncode, proc.stdout, proc.stderr)
