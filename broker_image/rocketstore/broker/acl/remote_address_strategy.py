"""``whiteRemoteAddress`` / ``globalWhiteRemoteAddresses`` patterns (RocketMQ's RemoteAddressStrategyFactory).

Forms, as RocketMQ 4.9.8 reads them:

* blank: matches nothing; ``*``, ``*.*.*.*`` or ``*:*:*:*:*:*:*:*``: matches every address;
* ``192.168.1.{1,2,3}``: the prefix with each listed last part; ``a,b,c``: any of the addresses;
* ``192.168.1.*`` or ``192.168.1.1-5`` (also ``192.168.*.*``, ``192.168.3-5.*``): the first of the
  second, third or fourth parts that is ``*`` or ``low-high`` is the range; the parts before it must
  be equal, the parts after it are not looked at (RocketMQ's RangeRemoteAddressStrategy);
* one IPv4 or IPv6 address: that address (IPv6 compared in full form, so ``::1`` equals
  ``0:0:0:0:0:0:0:1``).

IPv6 ranges (``2001:db8::1-ff``) are not supported: a file using one is refused with an error
naming the pattern, instead of matching differently from RocketMQ.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final

_MATCH_ALL: Final = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


class AclConfigError(ValueError):
    """plain_acl.yml holds something RocketMQ would refuse (an AclException at load)."""


def canonical_address(address: str) -> str | None:
    """The address in the form patterns are compared in; None when it is not an IP address."""
    try:
        parsed = ipaddress.ip_address(address.strip())
    except ValueError:
        return None
    return parsed.exploded.upper() if parsed.version == 6 else str(parsed)


@dataclass(frozen=True, slots=True)
class RemoteAddressStrategy:
    """A parsed pattern. ``addresses``: exact set; ``head``/``start``/``end``/``index``: an IPv4 range."""

    pattern: str
    match_all: bool = False
    addresses: frozenset[str] = frozenset()
    head: tuple[str, ...] = ()
    start: int = 0
    end: int = -1
    index: int = 0

    def match(self, remote_address: str) -> bool:
        """Whether the client's address (without port) is covered by this pattern."""
        if self.match_all:
            return True
        address = canonical_address(remote_address)
        if address is None:
            return False
        if self.addresses:
            return address in self.addresses
        if not self.head or ":" in address:
            return False
        parts = address.split(".")
        if tuple(parts[: self.index]) != self.head:
            return False
        return self.start <= int(parts[self.index]) <= self.end


def parse_strategy(pattern: str | None) -> RemoteAddressStrategy:
    """Parse one pattern; raises AclConfigError naming it when RocketMQ would refuse it."""
    text = (pattern or "").strip()
    if not text:
        return RemoteAddressStrategy(pattern="")
    if text in _MATCH_ALL:
        return RemoteAddressStrategy(pattern=text, match_all=True)
    if text.endswith("}"):
        return _multiple(text, _braces(text))
    if "," in text:
        return _multiple(text, [item for item in text.split(",") if item])
    if "*" in text or "-" in text:
        return _range(text)
    return _multiple(text, [text])


def _braces(text: str) -> list[str]:
    """``a.b.c.{1,2}`` -> ``a.b.c.1``, ``a.b.c.2`` (RocketMQ's AclUtils.getAddresses)."""
    separator = ":" if ":" in text else "."
    last = text.split(separator)[-1]
    if not last.startswith("{") or (separator == "." and len(text.split(".")) < 4):
        raise AclConfigError(f"remote address pattern {text!r}: the last part must be {{a,b,...}}")
    prefix = text[: text.index("{")]
    return [prefix + item for item in last[1:-1].split(",") if item]


def _multiple(text: str, items: list[str]) -> RemoteAddressStrategy:
    addresses = set()
    for item in items:
        address = canonical_address(item)
        if address is None:
            raise AclConfigError(f"remote address pattern {text!r}: {item!r} is not an IP address")
        addresses.add(address)
    return RemoteAddressStrategy(pattern=text, addresses=frozenset(addresses))


def _range(text: str) -> RemoteAddressStrategy:
    if ":" in text:
        raise AclConfigError(f"remote address pattern {text!r}: IPv6 ranges are not supported")
    parts = [part.strip() for part in text.split(".")]
    if len(parts) != 4:
        raise AclConfigError(f"remote address pattern {text!r}: an IPv4 range has four parts")
    for index in (1, 2, 3):
        value = parts[index]
        if value == "*":
            start, end = 0, 255
        elif "-" in value:
            low, _, high = value.partition("-")
            if not low.isdigit() or not high.isdigit():
                raise AclConfigError(f"remote address pattern {text!r}: {value!r} is not low-high")
            start, end = int(low), int(high)
            if not 0 <= start <= end <= 255:
                raise AclConfigError(f"remote address pattern {text!r}: range {value!r} is not within 0-255")
        else:
            continue
        if end <= 0:  # RocketMQ's analysis() takes a range ending at 0 for no range
            continue
        head = tuple(parts[:index])
        if not all(part.isdigit() and int(part) <= 255 for part in head):
            raise AclConfigError(f"remote address pattern {text!r}: {'.'.join(head)!r} is not an address prefix")
        return RemoteAddressStrategy(pattern=text, head=tuple(str(int(p)) for p in head), start=start, end=end,
                                     index=index)
    raise AclConfigError(f"remote address pattern {text!r}: no '*' or low-high part after the first")
