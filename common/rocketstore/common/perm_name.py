"""PermName: the permission bits of a topic (and of a broker, in its route data)."""

from typing import Final

__all__ = ["PERM_INHERIT", "PERM_PRIORITY", "PERM_READ", "PERM_WRITE", "is_readable", "is_writeable"]

PERM_PRIORITY: Final = 0x8
PERM_READ: Final = 0x4
PERM_WRITE: Final = 0x2
PERM_INHERIT: Final = 0x1


def is_readable(perm: int) -> bool:
    return perm & PERM_READ == PERM_READ


def is_writeable(perm: int) -> bool:
    return perm & PERM_WRITE == PERM_WRITE
