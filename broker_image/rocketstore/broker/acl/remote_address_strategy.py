"""``whiteRemoteAddress`` / ``globalWhiteRemoteAddresses`` patterns (RocketMQ's RemoteAddressStrategyFactory).

Forms, as RocketMQ 4.9.8 reads them:

* blank: matches nothing; ``*``, ``*.*.*.*`` or ``*:*:*:*:*:*:*:*``: matches every address;
* ``192.168.1.{1,2,3}``: the prefix with each listed last part; ``a,b,c``: any of the addresses;
* ``192.168.1.*`` or ``192.168.1.1-5`` (also ``192.168.*.*``, ``192.168.3-5.*``): the first of the
  second, third or fourth parts that is ``*`` or ``low-high`` is the range; the parts before it must
  be equal, the parts after it are not looked at (RocketMQ's RangeRemoteAddressStrategy);
* IPv6 ranges, in the last group only: ``2001:db8::*`` (any last group), ``2001:db8::1-ff`` (the
  last group in hex range), ``2001:db8::1-ff:*`` (the second-to-last group in range, any last);
  the groups before the range must be equal;
* one IPv4 or IPv6 address: that address (IPv6 compared in full form, so ``::1`` equals
  ``0:0:0:0:0:0:0:1``).
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
    #: the range is over IPv6 groups (hex, 4 digits, upper case in ``head``), not IPv4 parts
    ipv6: bool = False

    def match(self, remote_address: str) -> bool:
        """Whether the client's address (without port) is covered by this pattern."""
        if self.match_all:
            return True
        address = canonical_address(remote_address)
        if address is None:
            return False
        if self.addresses:
            return address in self.addresses
        if not self.head or (":" in address) != self.ipv6:
            return False
        parts = address.split(":" if self.ipv6 else ".")
        if tuple(parts[: self.index]) != self.head:
            return False
        return self.start <= int(parts[self.index], 16 if self.ipv6 else 10) <= self.end


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
        return _ipv6_range(text)
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


def _ipv6_range(text: str) -> RemoteAddressStrategy:
    """RocketMQ's IPv6 RangeRemoteAddressStrategy (AclUtils.IPv6AddressCheck, v6ipProcess, expandIP).

    The head is the text before the last ``:`` (before the second-to-last one when the pattern ends
    in ``*`` after a range), expanded to 7 (6) groups as RocketMQ's expandIP does; the group right
    after the head is the one compared with the range. Like RocketMQ, a ``::`` just before the range
    expands to nothing (``2001:db8::10-ff`` ranges over the fourth group): write the groups out
    (``2001:db8:0:0:0:0:0:10-ff``) to range over the last one.
    """
    if "*" in text and text.index("*") != len(text) - 1:
        raise AclConfigError(f"remote address pattern {text!r}: '*' may only end an IPv6 pattern")
    last = text.rindex(":")
    if text.endswith("*") and "-" in text:
        cut = text.rindex(":", 0, last)
        head_text, value, part = text[:cut], text[cut + 1:last], 6
    elif "-" in text:
        head_text, value, part = text[:last], text[last + 1:], 7
    else:
        head_text, value, part = text[:last], "*", 7
    if "-" in head_text:
        raise AclConfigError(f"remote address pattern {text!r}: the range must be the last IPv6 group")
    if value == "*":
        start, end = 0, 0xFFFF
    else:
        low, _, high = value.partition("-")
        try:
            start, end = int(low, 16), int(high, 16)
        except ValueError:
            raise AclConfigError(f"remote address pattern {text!r}: {value!r} is not hex low-high") from None
        if not 0 <= start <= end <= 0xFFFF or end == 0:
            raise AclConfigError(f"remote address pattern {text!r}: range {value!r} is not within 0-ffff")
    head = _expand_ip(head_text, part)
    if len(head) >= 8 or not all(len(g) == 4 and all(c in "0123456789ABCDEF" for c in g) for g in head):
        raise AclConfigError(f"remote address pattern {text!r}: {head_text!r} is not an IPv6 prefix")
    return RemoteAddressStrategy(pattern=text, head=head, start=start, end=end, index=len(head), ipv6=True)


def _expand_ip(address: str, part: int) -> tuple[str, ...]:
    """RocketMQ's AclUtils.expandIP: ``::`` widened so the text has ``part`` separators' worth of
    groups, then every group left-padded to four upper-case hex digits."""
    address = address.upper()
    pad = part - address.count(":")
    if pad > 0:
        address = address.replace("::", ":" * (pad + 1))
    return tuple(group.zfill(4) for group in address.split(":"))
