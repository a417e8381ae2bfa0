"""Loading a kubeconfig into an official-client ``Configuration``, with errors that name the
file and the context.

The official client's ``config.load_kube_config`` says ``Invalid kube-config file. No
configuration found.`` for a file that is not there, lets the YAML parser's errors, a
``TypeError`` or an ``IsADirectoryError`` through for files it cannot read, and names neither
the file nor the context in some of them. Here every one of those is an
:class:`~kdispatch.InvalidConfigError` that starts with the file (and the
context, when one was asked for), with the original error as its ``__cause__``. Runs on the
caller's thread.
"""

from __future__ import annotations

import os
from typing import Any

import yaml  # type: ignore[import-untyped]  # a dependency of the official client
from kubernetes import config as k8s_config

from kdispatch.actors.model.errors import InvalidConfigError

__all__ = ["kubeconfig_files", "load_kubeconfig"]

DEFAULT_KUBECONFIG = "~/.kube/config"
"""Where the official client looks when neither a path nor ``$KUBECONFIG`` is given."""


def kubeconfig_files(path: str | os.PathLike[str] | None) -> list[str]:
    """The files a kubeconfig ``path`` stands for: the path itself; None: each file of
    ``$KUBECONFIG`` (separated by ``os.pathsep``), else ``~/.kube/config``; ``~`` expanded."""
    if path is not None:
        return [os.path.expanduser(os.fspath(path))]
    listed = os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    return [os.path.expanduser(p) for p in listed.split(os.pathsep) if p]


def load_kubeconfig(cfg: Any, path: str | os.PathLike[str] | None, context: str | None) -> None:
    """Fill ``cfg`` (a ``kubernetes.client.Configuration``) from the kubeconfig at ``path``
    (see :func:`kubeconfig_files`) and ``context`` (None: its current context), never writing
    the file back. Raises :class:`InvalidConfigError` naming the file and the context."""
    files = kubeconfig_files(path)
    where = "kubeconfig " + os.pathsep.join(files)
    if context is not None:
        where += f" (context {context!r})"
    if not any(os.path.isfile(f) for f in files):
        missing = files[0] if len(files) == 1 else "none of these files"
        raise InvalidConfigError(f"{where}: no such file: {missing}")
    load: Any = k8s_config.load_kube_config
    config_file = None if path is None else files[0]
    try:
        load(
            config_file=config_file,
            context=context,
            client_configuration=cfg,
            persist_config=False,
        )
    except k8s_config.ConfigException as exc:
        raise InvalidConfigError(f"{where}: {_reason(exc, context)}") from exc
    except yaml.YAMLError as exc:
        raise InvalidConfigError(f"{where}: not valid YAML: {exc}") from exc
    except (OSError, TypeError, AttributeError, KeyError, ValueError) as exc:
        raise InvalidConfigError(f"{where}: cannot be read as a kubeconfig: {exc!r}") from exc


def _reason(exc: Exception, context: str | None) -> str:
    """What the official client's ``ConfigException`` means, in a sentence."""
    text = str(exc)
    if context is not None and f"name {context} in" in text and "contexts" in text:
        return f"no context {context!r} in it"
    return text
