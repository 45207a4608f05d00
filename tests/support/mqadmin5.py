"""Apache RocketMQ 5.3.3's own ``mqadmin`` (rocketmq-tools 5.3.3, class MQAdminStartup) as a test peer,
for the user and ACL verbs of RocketMQ 5.3's authentication and authorization.

Beside mqadmin.py (rocketmq-tools 4.9.7, one shared JVM): 5.3.3's MQAdminStartup fixes its
ROCKETMQ_HOME, where it reads the credentials it signs with (``conf/tools.yml``), when its class
loads, so the session trick of mqadmin.py cannot change it per verb; here each verb runs in its
own JVM, as mqadmin.sh runs it. The auth tests need a handful of verbs.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from java_rocketmq import LIGHT_JVM, _build_once, find_tools
from mqadmin import LOGBACK_QUIET, MQADMIN_MAIN, RUN_TIMEOUT_S, MQAdminResult
from tool_support import DRIVERS_DIR

MQADMIN5_POM = DRIVERS_DIR / "mqadmin5" / "pom.xml"
MQADMIN5_LIB = MQADMIN5_POM.parent / "target" / "lib"


def build_mqadmin5() -> float | None:
    """Copy rocketmq-tools 5.3.3's classpath to drivers/mqadmin5/target/lib once per process."""
    return _build_once(MQADMIN5_POM, [MQADMIN5_LIB], [MQADMIN5_POM])


def tools_home(directory: Path, access_key: str | None = None, secret_key: str | None = None) -> Path:
    """A ROCKETMQ_HOME for mqadmin: quiet logging, and with a key pair, ``conf/tools.yml`` to sign with."""
    (directory / "conf").mkdir(parents=True, exist_ok=True)
    (directory / "conf" / "logback_tools.xml").write_text(LOGBACK_QUIET)
    if access_key is not None:
        (directory / "conf" / "tools.yml").write_text(f"accessKey: {access_key}\nsecretKey: {secret_key}\n")
    return directory


def run_mqadmin5(home: Path, verb: str, *args: str, timeout: float = RUN_TIMEOUT_S) -> MQAdminResult:
    """``mqadmin VERB ARGS`` of rocketmq-tools 5.3.3 with ``home`` (see :func:`tools_home`) as ROCKETMQ_HOME."""
    java = find_tools()[0]
    cmd = [java, "-Xms64m", "-Xmx256m", *LIGHT_JVM, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}",
           "-Drocketmq.client.logUseSlf4j=false", "-cp", f"{MQADMIN5_LIB}/*", MQADMIN_MAIN, verb, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=home,
                          env={**os.environ, "ROCKETMQ_HOME": str(home)})
    return MQAdminResult([verb, *args], proc.returncode, proc.stdout, proc.stderr)
