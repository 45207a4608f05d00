"""The timer's backstop for a spec generation that no change handler reconciled.

kopf's create and update handlers are edge-triggered: kopf runs one when a watch event shows a
spec other than the one in its last-handled-configuration annotation. A generation can then go
unreconciled for good, with the store's pods never made:

* an event the operator never receives. On a new store kopf only patches its finalizer on the
  first event and runs the create handler on the next one, so a lost event after that patch
  leaves the store untouched while its timer runs;
* a store that arrives carrying kopf's annotation for its current spec (a backup restored, a
  ``kubectl get -o yaml`` applied in another namespace or cluster): kopf sees nothing to do.

Kubernetes' own controllers resync periodically for the same reason. Here the timer does it: a
store whose ``status.observedGeneration`` is not its ``metadata.generation`` at two timer runs in
a row, with none of its handlers running at the second, is reconciled by the timer (cause
``catch-up``). One timer period of grace leaves a change handler that kopf is about to run, or is
retrying, the first go; a catch-up that races one anyway applies the same objects again, which
changes nothing. A catch-up that fails permanently (the API server refused an object) is not tried
again for that generation, as kopf does not retry such a handler: the next spec edit is.

:class:`CatchUp` holds which stores were seen behind, and at which generation, between runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CatchUp"]


@dataclass
class CatchUp:
    """Per store (by uid): the generation the last timer run found unreconciled."""

    _behind: dict[str, int] = field(default_factory=dict)
    #: per store: the generation whose catch-up failed permanently
    _failed: dict[str, int] = field(default_factory=dict)

    def due(self, uid: str, generation: int, observed: int | None, handler_running: bool) -> bool:
        """Whether this timer run reconciles the store: its ``generation`` is not the ``observed``
        one, it was not the last time either, and no handler of the store is running now."""
        if observed == generation or self._failed.get(uid) == generation:
            self._behind.pop(uid, None)
            return False
        if handler_running or self._behind.get(uid) != generation:
            self._behind[uid] = generation
            return False
        del self._behind[uid]
        return True

    def failed(self, uid: str, generation: int) -> None:
        """The catch-up of this generation failed permanently: no more tries until the next one."""
        self._failed[uid] = generation

    def forget(self, uid: str) -> None:
        """The store is gone."""
        self._behind.pop(uid, None)
        self._failed.pop(uid, None)
