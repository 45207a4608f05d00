"""Drift: where a child object on the API server no longer says what the operator applied.

The timer re-applies only drifted objects (:func:`rocketstore.operator.reconcile.apply_objects`
with ``repair=True``), so an unchanged store costs one read per child and no write. The comparison
covers exactly what the operator writes, the desired object's own fields, so what others
legitimately add is never drift:

* fields the API server defaults or fills in (a Service's ``clusterIP`` and ``nodePort``, a
  container's ``terminationMessagePath``, ``status``), annotations and labels other tools add,
  a ``kubectl rollout restart`` annotation on the pod template: keys the desired object lacks;
* list items another manager added to a list keyed by ``name`` (an injected sidecar container,
  an extra env var): desired items are looked up by name, extra ones ignored;
* ``ignored`` paths: fields the operator's observer sets between applies (the masters' rolling
  update partition, the load balancer addresses it publishes), which it keeps right itself.

A field of ours that someone changed or removed, or a missing object, is drift. Server-side apply
then restores our fields and leaves everyone else's alone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

__all__ = ["drifted_fields"]


def drifted_fields(desired: Mapping[str, Any], current: Mapping[str, Any] | None,
                   ignored: Collection[tuple[str, ...]] = ()) -> list[str]:
    """The dotted paths of ``desired``'s fields that ``current`` does not hold as desired
    (``["(missing)"]`` when there is no current object), not looking at the ``ignored`` paths;
    empty when nothing drifted."""
    if current is None:
        return ["(missing)"]
    out: list[str] = []
    _compare(desired, current, (), ignored, out)
    return out


def _compare(want: Any, have: Any, path: tuple[str, ...], skip: Collection[tuple[str, ...]],
             out: list[str]) -> None:
    if path in skip:
        return
    if isinstance(want, Mapping):
        if not isinstance(have, Mapping):
            out.append(_dotted(path))
            return
        for key, value in want.items():
            _compare(value, have.get(key), (*path, str(key)), skip, out)
    elif isinstance(want, Sequence) and not isinstance(want, str):
        if not isinstance(have, Sequence) or isinstance(have, str):
            out.append(_dotted(path))
        elif _keyed_by_name(want):
            by_name = {item.get("name"): item for item in have if isinstance(item, Mapping)}
            for item in want:
                _compare(item, by_name.get(item["name"]), (*path, f"[{item['name']}]"), skip, out)
        elif len(want) != len(have):
            out.append(_dotted(path))
        else:
            for i, (w, h) in enumerate(zip(want, have, strict=True)):
                _compare(w, h, (*path, f"[{i}]"), skip, out)
    elif want != have:
        out.append(_dotted(path))


def _keyed_by_name(items: Sequence[Any]) -> bool:
    """A list whose items are objects with a name (containers, env, ports, volumes): server-side
    apply merges it by name, so other managers' items may sit among ours."""
    return bool(items) and all(isinstance(i, Mapping) and isinstance(i.get("name"), str) for i in items)


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path).replace(".[", "[") or "(object)"
