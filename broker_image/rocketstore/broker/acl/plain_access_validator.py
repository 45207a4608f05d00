"""The ACL hook of the remoting server: every request is checked before its handler runs (``aclEnable``).

RocketMQ registers ``PlainAccessValidator`` as a server RPC hook whose ``doBeforeRequest`` throws
an AclException; the remoting layer answers the exception as SYSTEM_ERROR with the exception's
``toString()`` (and its first stack frame) as the remark. This hook answers the same code and
``org.apache.rocketmq.acl.common.AclException: <reason>`` (without the Java stack frame), so a
client sees RocketMQ's "CODE: 1 DESC: org.apache.rocketmq.acl.common.AclException: No default
permission for topic:T". Counters of allowed and denied requests go to /metrics.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Final

from rocketstore.broker.acl.plain_access_resource import AclParseError, parse_request
from rocketstore.broker.acl.plain_permission_manager import (
    WATCH_INTERVAL_S,
    PlainPermissionManager,
    default_acl_file,
    validate,
)
from rocketstore.remoting.codes import ResponseCode
from rocketstore.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

ACL_EXCEPTION: Final = "org.apache.rocketmq.acl.common.AclException"
#: The code RocketMQ 4.9.8 answers a refused request with (NettyRemotingAbstract's catch-all).
DENIED_CODE: Final = ResponseCode.SYSTEM_ERROR


class PlainAccessValidator:
    """Parses each request's needs and checks them against the current ACL table."""

    def __init__(self, home: Path, configured_file: str | None) -> None:
        self.manager = PlainPermissionManager(home, default_acl_file(home, configured_file))
        self.allowed = 0
        self.denied = 0

    def check(self, request: RemotingCommand, remote_addr: str) -> RemotingCommand | None:
        """None to let the request through, else the response refusing it."""
        try:
            reason = validate(self.manager.table, parse_request(request, remote_addr))
        except AclParseError as exc:
            reason = str(exc)
        if reason is None:
            self.allowed += 1
            return None
        self.denied += 1
        log.debug("ACL refused request code %d from %s: %s", request.code, remote_addr, reason)
        return request.response(DENIED_CODE, f"{ACL_EXCEPTION}: {reason}")

    async def watch(self) -> None:
        """Reload the files whenever they change, until cancelled (AclFileWatchService)."""
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            try:
                if await asyncio.to_thread(self.manager.reload_if_changed):
                    log.info("ACL files changed: reloaded (%d accounts)", len(self.manager.table.accounts))
            except Exception:  # the watch must outlive a surprise; the previous table stays
                log.exception("looking at the ACL files failed")
