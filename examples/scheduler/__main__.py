"""``python -m examples.scheduler``: the main job (see :mod:`examples.scheduler.cli`)."""

from examples.scheduler import STARTED
from examples.scheduler.cli import main
from examples.scheduler.ha import install_sigterm

install_sigterm()  # SIGTERM: drain, release the lease, exit (examples/scheduler/ha.py)
raise SystemExit(main(started=STARTED))
