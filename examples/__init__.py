"""Runnable examples built on kdispatch: a threaded scheduler (the main job) and a stress run."""
