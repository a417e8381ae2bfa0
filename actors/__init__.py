"""The core of kdispatch: the call model, the per-object state machine, the actor runtime,
the executor and the dispatcher facade. Imported only as ``kdispatch.actors``; its public names
are re-exported by :mod:`kdispatch`, which is the one place to import them from.
"""

if __name__ != "kdispatch.actors":  # one identity: actors/ is kdispatch.actors
    raise ImportError(
        f"{__name__!r} is kdispatch's actors/ folder imported under a second name: "
        "import kdispatch instead, which exports every public name"
    )
