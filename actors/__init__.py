"""The core of kdispatch: the call model, the per-object rules, the actor runtime, the executor
and the dispatcher facade. Imported only as ``kdispatch.actors``; its public names are
re-exported by :mod:`kdispatch`, which is the one place to import them from.

**The interpreter lock.** Some shared state is read and written without a lock, and that code
is correct only because CPython's global interpreter lock lets no other thread run in the
middle of each of these operations:

1. one ``dict`` lookup, store, ``setdefault``, ``pop`` or ``get`` whose key is a ``str`` or
   an ``int`` (their hashing and comparison run no Python code), and ``dict.copy()`` or
   ``list(d.values())`` of such a dict;
2. ``collections.deque`` ``append``, ``popleft`` and ``pop``;
3. one attribute load or store.

A read-modify-write (``x += 1``) is not atomic: it appears without a lock only where each
thread writes its own key (per-thread counters). Modules that rely on this say "atomic under
the interpreter lock". A build without the lock (free-threaded CPython) is refused here, at
import, rather than left to lose updates.
"""

import sys
import sysconfig

if __name__ != "kdispatch.actors":  # one identity: actors/ is kdispatch.actors
    raise ImportError(
        f"{__name__!r} is kdispatch's actors/ folder imported under a second name: "
        "import kdispatch instead, which exports every public name"
    )

_gil_enabled = getattr(sys, "_is_gil_enabled", None)
if sysconfig.get_config_var("Py_GIL_DISABLED") and (_gil_enabled is None or not _gil_enabled()):
    raise ImportError(
        "kdispatch needs CPython's global interpreter lock, and this interpreter runs without "
        "it (a free-threaded build): use a standard CPython build, or start this one with "
        "PYTHON_GIL=1"
    )
