"""``python -m examples.scheduler``: the main job (see :mod:`examples.scheduler.cli`)."""

from examples.scheduler.cli import main

raise SystemExit(main())
