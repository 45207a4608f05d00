"""RocketMQ 5.3's ``User``: the subject that authenticates (access key = username, secret = password).

Super users pass every authorization check; Normal users are checked against their ACL. A disabled
user is refused at authentication. The JSON form is Apache's ``UserInfo`` (mqadmin's request and
response bodies, ``initAuthenticationUser``): ``username``, ``password``, ``userType`` ("Super" /
"Normal") and ``userStatus`` ("enable" / "disable"), names compared case-insensitively on input.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

SUBJECT_USER = "User"

E = TypeVar("E", bound=enum.Enum)


class UserType(enum.Enum):
    SUPER = "Super"
    NORMAL = "Normal"


class UserStatus(enum.Enum):
    ENABLE = "enable"
    DISABLE = "disable"


def member_by_name(kind: type[E], name: Any) -> E | None:
    """The member of one of auth's enums whose JSON name is ``name`` (case and surrounding blanks
    ignored, as Apache's ``getByName`` lookups do), or None for anything else."""
    if not isinstance(name, str):
        return None
    return next((member for member in kind if str(member.value).lower() == name.strip().lower()), None)


@dataclass(frozen=True, slots=True)
class User:
    """One user; ``user_type`` / ``user_status`` None where a request left them out (an update)."""

    username: str
    password: str | None = None
    user_type: UserType | None = None
    user_status: UserStatus | None = None

    @property
    def subject_key(self) -> str:
        return f"{SUBJECT_USER}:{self.username}"

    @property
    def is_super(self) -> bool:
        return self.user_type is UserType.SUPER

    @property
    def is_disabled(self) -> bool:
        return self.user_status is UserStatus.DISABLE

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> User:
        """From a UserInfo document; unknown type or status names read as absent, as Apache's do."""
        username = info.get("username")
        password = info.get("password")
        return cls(
            username=str(username) if username is not None else "",
            password=str(password) if password is not None else None,
            user_type=member_by_name(UserType, info.get("userType")),
            user_status=member_by_name(UserStatus, info.get("userStatus")),
        )

    def to_info(self) -> dict[str, Any]:
        """The UserInfo document (absent fields left out, as fastjson leaves out nulls)."""
        info: dict[str, Any] = {"username": self.username}
        if self.password is not None:
            info["password"] = self.password
        if self.user_type is not None:
            info["userType"] = self.user_type.value
        if self.user_status is not None:
            info["userStatus"] = self.user_status.value
        return info


def subject_username(subject_key: str | None) -> str | None:
    """``User:alice`` -> ``alice`` (Subject.of); None for a blank key or another subject type."""
    if not subject_key or not subject_key.strip():
        return None
    kind, sep, name = subject_key.partition(":")
    if not sep or kind.strip().lower() != SUBJECT_USER.lower():
        return None
    return name
