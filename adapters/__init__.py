"""Backends (in-memory apiserver, official Kubernetes client) and informer wiring."""

from loguru import logger

logger.disable("adapters")
