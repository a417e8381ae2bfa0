"""A program that ends without ``stop()`` exits: no kdispatch thread holds the interpreter."""

from __future__ import annotations

import sys
import textwrap

from tests.subprocesses import run_command

PROGRAM = textwrap.dedent(
    """
    import threading
    from prometheus_client import CollectorRegistry
    from kdispatch import Dispatcher, PodStatusPatch
    from kdispatch.testing import InMemoryApiServer, make_pod

    server = InMemoryApiServer()
    pod = server.create(make_pod("p"))
    dispatcher = Dispatcher(server, metrics_registry=CollectorRegistry()).start()
    call = PodStatusPatch.for_pod(pod, nominated_node_name="n1")
    print(dispatcher.submit(call).result(10).value)
    print(sorted(t.name for t in threading.enumerate() if not t.daemon))
    """
)


def test_a_program_that_never_calls_stop_still_exits() -> None:
    done = run_command([sys.executable, "-c", PROGRAM], timeout=60.0)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["success", "['MainThread']"], done.stdout
