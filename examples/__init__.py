"""Runnable examples built on kdispatch: a threaded scheduler (the main job) and a stress run.

Their logs are disabled by default, like the library's; the CLIs enable them with ``--verbose``.
"""

from loguru import logger

logger.disable("examples")
