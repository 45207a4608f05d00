"""The ``MQv2-HMAC-SHA1`` signature of gRPC calls (RocketMQ 5.x clients), checked against the plain ACL.

A 5.x client signs each call's metadata: ``x-mq-date-time`` holds the time as
``yyyyMMdd'T'HHmmss'Z'`` and ``authorization`` reads
``MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature=HEX`` where HEX is the
hex of HMAC-SHA1 keyed by the secret key over the date-time text. The Python client writes the hex
in lower case, Java and Node in upper case. RocketMQ's proxy (acl ``AuthorizationHeader``) splits
the value at the first space, the rest at commas into ``key=value`` items, takes the access key
before the first ``/`` of ``Credential`` and turns the hex signature into Base64, then checks it
like a remoting signature with the date-time as the signed content. :func:`needed_access` does the
same, so :func:`~rocketstore.broker.acl.plain_permission_manager.validate`'s account lookup,
signature comparison and permission checks serve both ports unchanged.

Date check (RocketMQ does none: a captured header would be good forever). Both official clients
format their LOCAL wall-clock time and append a literal ``Z`` (Java's ``SimpleDateFormat`` without
a time zone, Python's ``datetime.now()``), so the value is UTC only on hosts running in UTC. A
date is accepted when it lies within :data:`MAX_CLOCK_SKEW` of the broker's UTC time shifted by
some real time zone offset (UTC-12:00 .. UTC+14:00): a client anywhere on Earth with a sane clock
gets in, while a header recorded more than about a day ago (or made up for the future) does not.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from rocketstore.broker.acl.plain_access_resource import NeededAccess

ALGORITHM: Final = "MQv2-HMAC-SHA1"
AUTHORIZATION_HEADER: Final = "authorization"
DATE_TIME_HEADER: Final = "x-mq-date-time"
#: strptime form of the clients' ``yyyyMMdd'T'HHmmss'Z'``
DATE_TIME_FORMAT: Final = "%Y%m%dT%H%M%SZ"
#: how far a client's clock may be off (the 15 minutes AWS allows its SigV4 dates)
MAX_CLOCK_SKEW: Final = timedelta(minutes=15)
#: the range of the world's UTC offsets (Baker Island .. Kiribati's Line Islands)
EARLIEST_OFFSET: Final = timedelta(hours=-12)
LATEST_OFFSET: Final = timedelta(hours=14)

_DATE_TIME = re.compile(r"\d{8}T\d{6}Z")
_HEX_SHA1 = re.compile(r"[0-9A-Fa-f]{40}")


class SignatureError(ValueError):
    """The call's signature metadata is missing, malformed or out of date (UNAUTHENTICATED)."""


@dataclass(frozen=True, slots=True)
class Authorization:
    """The parts of an ``authorization`` value a broker uses."""

    #: None when ``Credential`` is empty (the Python client signs even without keys)
    access_key: str | None
    signed_headers: tuple[str, ...]
    #: the HMAC-SHA1 digest in Base64, the form the plain ACL compares (whatever the hex case)
    signature: str


def parse_authorization(value: str) -> Authorization:
    """``MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature=HEX``; raises
    SignatureError naming what is wrong."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise SignatureError(f"authorization: the algorithm is {algorithm!r}, not {ALGORITHM}")
    items: dict[str, str] = {}
    for item in rest.split(","):
        key, sep, item_value = item.strip().partition("=")
        if not sep:
            raise SignatureError(f"authorization: {item.strip()!r} is not key=value")
        items[key] = item_value
    for key in ("Credential", "SignedHeaders", "Signature"):
        if key not in items:
            raise SignatureError(f"authorization: no {key}")
    signed_headers = tuple(items["SignedHeaders"].split(";"))
    if DATE_TIME_HEADER not in signed_headers:
        raise SignatureError(f"authorization: SignedHeaders {items['SignedHeaders']!r} does not name "
                             f"{DATE_TIME_HEADER}")
    hex_signature = items["Signature"]
    if not _HEX_SHA1.fullmatch(hex_signature):
        raise SignatureError(f"authorization: Signature {hex_signature!r} is not 40 hex digits (HMAC-SHA1)")
    access_key = items["Credential"].split("/", 1)[0]
    return Authorization(access_key=access_key or None, signed_headers=signed_headers,
                         signature=base64.b64encode(binascii.unhexlify(hex_signature)).decode("ascii"))


def parse_date_time(value: str) -> datetime:
    """The clients' ``yyyyMMdd'T'HHmmss'Z'``, as an aware datetime in UTC (see the module docstring
    for why that is only nominally UTC); raises SignatureError."""
    try:
        if not _DATE_TIME.fullmatch(value):
            raise ValueError(value)
        return datetime.strptime(value, DATE_TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise SignatureError(f"{DATE_TIME_HEADER} {value!r} is not a date-time yyyyMMdd'T'HHmmss'Z'") from None


def check_date_time(value: str, now: datetime) -> None:
    """Raise SignatureError unless ``value`` is a date-time a client could have signed at ``now``
    (an aware datetime): within MAX_CLOCK_SKEW of now's wall-clock time in some time zone."""
    signed = parse_date_time(value)
    earliest = now + EARLIEST_OFFSET - MAX_CLOCK_SKEW
    latest = now + LATEST_OFFSET + MAX_CLOCK_SKEW
    if signed < earliest:
        raise SignatureError(f"{DATE_TIME_HEADER} {value} is too old: the broker accepts dates from "
                             f"{earliest:%Y%m%dT%H%M%SZ} (now minus 12 h of time zone and 15 min of clock skew)")
    if signed > latest:
        raise SignatureError(f"{DATE_TIME_HEADER} {value} is in the future: the broker accepts dates up to "
                             f"{latest:%Y%m%dT%H%M%SZ} (now plus 14 h of time zone and 15 min of clock skew)")


def needed_access(metadata: Mapping[str, str], remote_address: str, request_code: int,
                  resources: Mapping[str, int], now: datetime) -> NeededAccess:
    """What a call with ``metadata`` (its headers, lower-case keys) from ``remote_address`` (a host)
    asks for, with its signature ready for the plain ACL's decision. Without an ``authorization``
    header there is no access key (the decision then allows only white-listed addresses); with one,
    the header and the date-time it signs must be well formed and current, else SignatureError."""
    value = metadata.get(AUTHORIZATION_HEADER)
    if value is None:
        return NeededAccess(request_code=request_code, remote_address=remote_address, resources=resources)
    authorization = parse_authorization(value)
    date_time = metadata.get(DATE_TIME_HEADER)
    if date_time is None:
        raise SignatureError(f"no {DATE_TIME_HEADER} header, which the authorization header signs")
    check_date_time(date_time, now)
    return NeededAccess(request_code=request_code, remote_address=remote_address,
                        access_key=authorization.access_key, signature=authorization.signature,
                        content=date_time.encode("utf-8"), resources=resources)
