"""RocketMQ's ``org.apache.rocketmq.acl.common.Permission``: permission bits and how they are compared.

The bits are RocketMQ's (DENY 1, ANY 2, PUB 4, SUB 8). A requested ANY is met by PUB or SUB; an
owned DENY meets nothing. Five request codes need an ``admin: true`` account whatever the
resources (``Permission.ADMIN_CODE``).
"""

from __future__ import annotations

from typing import Final

from rocketstore.remoting.codes import RequestCode

DENY: Final = 1
ANY: Final = 1 << 1
PUB: Final = 1 << 2
SUB: Final = 1 << 3

#: Request codes only an admin account may send (Permission.ADMIN_CODE in 4.9.8).
ADMIN_CODES: Final = frozenset({
    int(RequestCode.UPDATE_AND_CREATE_TOPIC),
    int(RequestCode.UPDATE_BROKER_CONFIG),
    int(RequestCode.DELETE_TOPIC_IN_BROKER),
    int(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP),
    int(RequestCode.DELETE_SUBSCRIPTIONGROUP),
})

_BY_NAME: Final = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}


def check_permission(needed: int, owned: int) -> bool:
    """Whether ``owned`` grants ``needed`` (Permission.checkPermission)."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def parse_perm(text: str | None) -> int:
    """A permission as written in plain_acl.yml; anything unknown (or absent) is DENY, as in RocketMQ."""
    if text is None:
        return DENY
    return _BY_NAME.get(text.strip(), DENY)


def need_admin_perm(code: int) -> bool:
    return code in ADMIN_CODES
