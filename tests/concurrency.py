"""Driving a backend from several threads at once, for the tests of a shared client."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from kdispatch.actors.model.backend import ApiBackend


def patch_from_threads(
    backend: ApiBackend, namespace: str, uids: Sequence[str], rounds: int
) -> list[BaseException]:
    """One thread per pod ``p<i>`` (UID ``uids[i]``), each patching its pod's
    ``nominatedNodeName`` to ``n0`` … ``n<rounds-1>`` in turn; returns what the threads raised
    (joined before it returns)."""
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(rounds):
                backend.patch_status(
                    "Pod",
                    namespace,
                    f"p{i}",
                    {"status": {"nominatedNodeName": f"n{j}"}},
                    uid=uids[i],
                    resource_version=None,
                )
        except BaseException as exc:  # collected and returned
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(uids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
