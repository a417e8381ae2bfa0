"""The core of kdispatch: the call model, the per-object rules, the actor runtime, the executor
and the dispatcher facade. Imported only as ``kdispatch.actors``; its public names are
re-exported by :mod:`kdispatch`, which is the one place to import them from.

Some shared state is read and written without a lock, correct only under CPython's global
interpreter lock (docs/performance-notes.md, "The interpreter lock", lists the operations
relied on): a build without it (free-threaded CPython) is refused here, at import.
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
