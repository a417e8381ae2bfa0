"""kdispatch: non-blocking, merged, rate-limited Kubernetes API calls, one actor per object."""

from loguru import logger

logger.disable("actors")
