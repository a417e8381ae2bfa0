"""Backends (in-memory apiserver, official Kubernetes client) and informer wiring."""
