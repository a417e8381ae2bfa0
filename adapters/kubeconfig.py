"""The official-client ``Configuration`` a :class:`~kdispatch.KubernetesBackend` constructor
starts from: an apiserver URL, a kubeconfig file, or the pod's service account.

The official client's ``config.load_kube_config`` names neither the file nor the context in
some of its errors and lets the YAML parser's errors, a ``TypeError`` or an
``IsADirectoryError`` through; here each is an :class:`~kdispatch.InvalidConfigError` that
starts with the file (and the context, when one was asked for), with the original error as its
``__cause__``. Runs on the caller's thread.
"""

from __future__ import annotations

import os
from typing import Any

import yaml  # type: ignore[import-untyped]  # a dependency of the official client
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from kdispatch.actors.model.errors import InvalidConfigError

__all__ = [
    "in_cluster_configuration",
    "kubeconfig_configuration",
    "url_configuration",
]

DEFAULT_KUBECONFIG = "~/.kube/config"
"""Where the official client looks when neither a path nor ``$KUBECONFIG`` is given."""


def url_configuration(url: object, token: str | None, ca_cert: str | None) -> k8s.Configuration:
    """For the apiserver at ``url`` (http or https), with a bearer ``token`` and a ``ca_cert``
    bundle file when given; TLS verification stays on."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InvalidConfigError(f"url must be an http(s) URL, got {url!r}")
    cfg = k8s.Configuration(host=url.rstrip("/"))
    if token is not None:
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    if ca_cert is not None:
        cfg.ssl_ca_cert = ca_cert
    return cfg


def in_cluster_configuration() -> k8s.Configuration:
    """From the pod's service account (token and CA mounted by the kubelet)."""
    cfg = k8s.Configuration()
    load: Any = k8s_config.load_incluster_config
    load(client_configuration=cfg)
    return cfg


def kubeconfig_configuration(path: object, context: object) -> k8s.Configuration:
    """From the kubeconfig at ``path`` (None: each file of ``$KUBECONFIG``, separated by
    ``os.pathsep``, else ``~/.kube/config``; ``~`` expanded) and ``context`` (None: its
    current context), never writing the file back. Raises :class:`InvalidConfigError` naming
    the file and the context."""
    if path is not None and not isinstance(path, str | os.PathLike):
        raise InvalidConfigError(f"path must be a file path or None, got {path!r}")
    if context is not None and (not isinstance(context, str) or not context):
        raise InvalidConfigError(f"context must be a non-empty str or None, got {context!r}")
    if path is not None:
        files = [os.path.expanduser(os.fspath(path))]
    else:
        listed = os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
        files = [os.path.expanduser(p) for p in listed.split(os.pathsep) if p]
    where = "kubeconfig " + os.pathsep.join(files)
    if context is not None:
        where += f" (context {context!r})"
    if not any(os.path.isfile(f) for f in files):
        missing = files[0] if len(files) == 1 else "none of these files"
        raise InvalidConfigError(f"{where}: no such file: {missing}")
    cfg = k8s.Configuration()
    load: Any = k8s_config.load_kube_config
    try:
        load(
            # always the files named here: given None, the official client reads the
            # $KUBECONFIG it saw when it was imported, not the one checked above
            config_file=os.pathsep.join(files),
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
    return cfg


def _reason(exc: Exception, context: str | None) -> str:
    """What the official client's ``ConfigException`` means, in a sentence."""
    text = str(exc)
    if context is not None and f"name {context} in" in text and "contexts" in text:
        return f"no context {context!r} in it"
    return text
