"""What an object's actor knows of its object, and how far it trusts it (docs/behaviour.md,
"Trust"). Pure: the base of :class:`~.object_state.ObjectState`; no threads, no clocks.
"""

from __future__ import annotations

from typing import Any

from .calls import Call
from .objects import Obj, resource_version, rv_is_newer, uid_and_version

__all__ = ["Knowledge", "Legacy"]

Legacy = tuple[str | None, str | None]
"""What an actor leaving idle hands to the next actor of its object: the resourceVersion it
observed, and the one it distrusts (see :meth:`Knowledge.legacy`)."""


class Knowledge:
    """The observed object of one UID (the newest state the actor saw: informer, a caller's
    ``basis``, a reply or a re-read) and the two facts that qualify it: ``landed``, a call that
    landed without a reply object, applied on top until an object shows it (the resourceVersion
    is behind meanwhile: ``rv_stale``); ``untrusted_rv``, a request computed on that
    resourceVersion may or may not have landed (no elision, a re-read before a request that
    reads the object, until a strictly newer object or a fresh read)."""

    __slots__ = ("landed", "observed", "observed_rv", "rv_stale", "uid", "untrusted_rv")

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self.observed: Obj | None = None
        self.observed_rv: str | None = None  # read once per observed object
        self.landed: Call | None = None
        self.rv_stale = False  # landed applied on top: the resourceVersion is behind
        self.untrusted_rv: str | None = None

    @property
    def elides(self) -> bool:
        """Whether no-op elision may rely on the observed object."""
        return self.untrusted_rv is None

    @property
    def trusted(self) -> bool:
        """Whether a request may be computed on the observed object without a re-read."""
        return self.untrusted_rv is None and not self.rv_stale and self.observed is not None

    def observe(self, obj: Any) -> bool:
        """Adopt ``obj`` if it is a newer state of this object (same UID, strictly newer
        resourceVersion); whether it was adopted. Anything else is ignored: what is observed may
        hold mutations applied on top of that version."""
        if obj is None:
            return False
        uid, rv = uid_and_version(obj)
        if uid != self.uid:
            return False
        current = self.observed_rv
        if current is not None and not rv_is_newer(rv, current, strict=self.observed is not None):
            return False  # (an object at the version inherited, none observed, is adopted)
        landed = self.landed
        if landed is not None:
            if landed.is_noop(obj):
                self.landed = None
                self.rv_stale = False
            else:
                obj = landed.apply(obj)
                rv = resource_version(obj)
        self.observed, self.observed_rv = obj, rv
        untrusted = self.untrusted_rv
        if untrusted is not None and self._passed(untrusted):
            self.untrusted_rv = None
        return True

    def legacy(self) -> Legacy | None:
        """What the next actor of this object must know once this one left idle
        (:meth:`inherit`): the resourceVersion observed, and the one distrusted, which is the
        observed one when a call landed without a reply object that no object showed yet;
        None when nothing was observed and nothing is distrusted."""
        observed_rv, untrusted = self.observed_rv, self.untrusted_rv
        if untrusted is None and self.landed is not None:
            untrusted = observed_rv or ""
        if observed_rv is None and untrusted is None:
            return None
        return observed_rv, untrusted

    def inherit(self, legacy: Legacy) -> None:
        """Take over what the previous actor of this object knew (:meth:`legacy`), before
        anything is observed: no object older than the one it observed is adopted (a caller's
        ``basis`` that old is not relied on: no elision on it; a request that reads the object
        reads it first), and its distrust stays."""
        if self.observed is None:
            self.observed_rv, self.untrusted_rv = legacy

    def adopt_fresh(self, obj: Obj) -> None:
        """Adopt an object just read from the server (a re-read, or after a 409): it is
        authoritative, even at the resourceVersion already observed; trust is restored."""
        uid, rv = uid_and_version(obj)
        if uid != self.uid:
            return
        if self.observed is None or rv_is_newer(rv, self.observed_rv):
            landed = self.landed
            if landed is not None and landed.is_noop(obj):
                self.landed = landed = None
            if landed is not None:
                obj = landed.apply(obj)
                rv = resource_version(obj)
            self.observed, self.observed_rv = obj, rv
        self.untrusted_rv = None
        self.rv_stale = False

    def land(self, call: Call) -> None:
        """``call`` landed without a reply object: the server now holds it, at a
        resourceVersion not known yet; unless the observed object (a server's, nothing
        applied on top) shows it already, as when the informer's event came before the reply:
        then its resourceVersion is not behind."""
        observed = self.observed
        if observed is None:
            return
        applied = call.apply(observed)
        if applied is observed and self.landed is None:
            return  # it changes nothing (apply returns the object itself): shown already
        self.observed = observed = applied
        self.observed_rv = resource_version(observed)
        self.landed = call
        self.rv_stale = True

    def ambiguous(self, rv: str | None) -> None:
        """A request computed on resourceVersion ``rv`` may or may not have landed: distrust
        what was observed before it, unless a newer object is observed already. Once untrusted,
        the older bar stays."""
        if self.untrusted_rv is not None:
            return
        rv = rv if rv is not None else (self.observed_rv or "")
        if not self._passed(rv):
            self.untrusted_rv = rv

    def reread_failed(self) -> None:
        """A 409's re-read failed: distrust the observed object until a newer one arrives."""
        self.untrusted_rv = self.observed_rv or ""

    def _passed(self, rv: str) -> bool:
        """Whether the observed object is strictly newer than resourceVersion ``rv``."""
        observed_rv = self.observed_rv
        return observed_rv is not None and rv_is_newer(observed_rv, rv or None, strict=True)
