"""The adapters: backends over the official Kubernetes client, informers, leader election and
the dispatcher in its own process. Import as ``kdispatch.adapters`` (or use ``kdispatch``'s
re-exports); the in-memory stand-ins live in :mod:`kdispatch.testing`."""

if __name__ != "kdispatch.adapters":  # one identity: adapters/ is kdispatch.adapters
    raise ImportError(
        f"{__name__!r} is kdispatch's adapters/ folder imported under a second name: "
        "import kdispatch instead, which exports every public name"
    )
