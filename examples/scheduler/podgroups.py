"""PodGroups (``scheduling.k8s.io/v1beta1``, Kubernetes 1.37) as the scheduler sees them: the
groups the informer delivered and the pods that name them (``spec.schedulingGroup.podGroupName``).

A ``gang`` group (``spec.schedulingPolicy.gang.minCount``) is placed as a whole: its pending
members are scheduled together once enough of them exist, all or none (see
:mod:`examples.scheduler.cycle`). A ``basic`` group's pods are scheduled one by one, as pods
without a group. When the apiserver does not serve PodGroups (:attr:`PodGroups.served` False),
every pod is scheduled on its own, group or not.

Thread-safe: the informer thread writes (groups, members), scheduling threads read.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kdispatch import Obj, get_path, meta

INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One PodGroup: ``key`` (``namespace/name``), ``min_count`` (None for a ``basic`` group)
    and the newest object (the basis of its status calls)."""

    key: str
    uid: str
    min_count: int | None
    obj: Obj

    @classmethod
    def of(cls, obj: Obj) -> GroupInfo:
        """Parse a PodGroup; a gang's ``minCount`` must be an int >= 1 (the apiserver refuses
        anything else), otherwise it is taken as a basic group."""
        m = meta(obj)
        count = get_path(obj, "spec", "schedulingPolicy", "gang", "minCount")
        gang = isinstance(count, int) and not isinstance(count, bool) and count >= 1
        return cls(
            key=f"{m.get('namespace', 'default')}/{m.get('name')}",
            uid=str(m.get("uid")),
            min_count=count if gang else None,
            obj=obj,
        )

    @property
    def is_gang(self) -> bool:
        """Whether the group is a gang (placed all or nothing)."""
        return self.min_count is not None

    def condition(self) -> Mapping[str, Any] | None:
        """The group's ``PodGroupInitiallyScheduled`` condition as observed, or None."""
        conditions = get_path(self.obj, "status", "conditions")
        if not isinstance(conditions, list):
            return None
        for cond in conditions:
            if isinstance(cond, Mapping) and cond.get("type") == INITIALLY_SCHEDULED:
                return cond
        return None

    def shows(self, status: str, reason: str | None = None, message: str | None = None) -> bool:
        """Whether the observed condition has this status (and reason and message, if
        given)."""
        cond = self.condition()
        if cond is None or cond.get("status") != status:
            return False
        if reason is not None and cond.get("reason") != reason:
            return False
        return message is None or cond.get("message") == message


class PodGroups:
    """The PodGroups the informer delivered and the member pods of each (by uid)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, GroupInfo] = {}
        self._members: dict[str, set[str]] = {}
        self.served = False
        """Whether the apiserver serves PodGroups (the runner found the API and watches it).
        While False, pods are scheduled one by one whatever group they name."""

    def serve(self) -> None:
        """Any thread (before the pods arrive). PodGroups are served and watched."""
        self.served = True

    def put(self, obj: Obj) -> GroupInfo:
        """Informer thread (add and update). Keep the newest object; returns it parsed."""
        info = GroupInfo.of(obj)
        with self._lock:
            self._groups[info.key] = info
        return info

    def delete(self, obj: Obj) -> None:
        """Informer thread. The group is gone (its pods wait for it to come back, as
        kube-scheduler's do)."""
        key = GroupInfo.of(obj).key
        with self._lock:
            self._groups.pop(key, None)

    def get(self, key: str) -> GroupInfo | None:
        """Any thread. The group ``namespace/name``, or None when unknown."""
        return self._groups.get(key)

    def join(self, key: str, uid: str) -> None:
        """Informer thread. A pod naming the group appeared."""
        with self._lock:
            self._members.setdefault(key, set()).add(uid)

    def leave(self, key: str, uid: str) -> None:
        """Informer thread. A member pod was deleted."""
        with self._lock:
            members = self._members.get(key)
            if members is not None:
                members.discard(uid)
                if not members:
                    del self._members[key]

    def members(self, key: str) -> list[str]:
        """Any thread. The uids of the pods naming the group, sorted."""
        with self._lock:
            return sorted(self._members.get(key, ()))

    def __len__(self) -> int:
        return len(self._groups)


def gang_message(key: str, unfit: int, members: int, reason: str) -> str:
    """The ``PodScheduled=False`` / ``PodGroupInitiallyScheduled=False`` message of a gang
    that cannot be placed as a whole: how many members fit nowhere, then the first one's
    FitError text."""
    return f'pod group "{key}": {unfit} of {members} pods cannot be placed; {reason}'
