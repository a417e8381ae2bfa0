"""``python -m kdispatch.testing.envtest``: see :mod:`kdispatch.testing.envtest.cli`."""

from .cli import main

raise SystemExit(main())
