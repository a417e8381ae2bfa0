"""A small asyncio controller: binds the pods naming it, round robin over the ready nodes.

Everything runs on one event loop: a :class:`~kdispatch.adapters.aio_informer.AioInformer`
(``kubernetes.aio``) watches pods and feeds the dispatcher; a second one keeps the node list;
each pending pod with ``spec.schedulerName: kdispatch-aio`` gets an
``await dispatcher.asubmit(PodBinding...)``. The dispatcher's own worker threads make the API
calls through the official (threaded) client; the loop only awaits their results.

    python -m examples.aio_controller --url http://127.0.0.1:8001       # e.g. kubectl proxy
    python -m examples.aio_controller --demo --pods 50 --nodes 3         # embedded apiserver

``--demo`` serves the in-memory apiserver over HTTP on 127.0.0.1, creates the nodes and pods,
and exits once every pod is bound (exit status 0), printing one summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
from collections.abc import Sequence
from typing import Any

from kubernetes.aio import client as aclient

from examples.common import check_amounts, check_counts, enable_verbose_logs
from kdispatch import (
    AioInformer,
    CallOutcomeError,
    Dispatcher,
    DispatcherConfig,
    InformerSyncTimeout,
    InvalidInputError,
    KubernetesBackend,
    PodBinding,
)

SCHEDULER_NAME = "kdispatch-aio"


class Binder:
    """Loop thread only. Decides a node for every pending pod naming us, once."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.nodes: dict[str, str] = {}  # uid -> node name
        self._next = itertools.count()
        self._started: set[str] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.bound = 0
        self.failed = 0

    def on_node(self, node: dict[str, Any]) -> None:
        self.nodes[node["metadata"]["uid"]] = node["metadata"]["name"]

    def on_node_gone(self, node: dict[str, Any]) -> None:
        self.nodes.pop(node["metadata"]["uid"], None)

    def on_pod(self, pod: dict[str, Any]) -> None:
        spec, uid = pod.get("spec", {}), pod["metadata"]["uid"]
        if spec.get("schedulerName") != SCHEDULER_NAME or spec.get("nodeName"):
            return
        if uid in self._started or not self.nodes:
            return
        self._started.add(uid)
        names = sorted(self.nodes.values())
        node = names[next(self._next) % len(names)]
        task = asyncio.get_running_loop().create_task(self._bind(pod, node))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _bind(self, pod: dict[str, Any], node: str) -> None:
        try:
            await self.dispatcher.asubmit(PodBinding.for_pod(pod, node))
        except CallOutcomeError as exc:
            self.failed += 1
            print(f"binding {pod['metadata']['name']} failed: {exc}", file=sys.stderr)
        else:
            self.bound += 1


async def run(url: str, *, token: str | None, expect: int | None, duration: float | None) -> int:
    """Run the controller until ``expect`` pods are bound or ``duration`` seconds passed."""
    backend = KubernetesBackend.for_url(url, token=token)
    config = aclient.Configuration(host=url)
    if token is not None:
        config.api_key = {"authorization": token}
        config.api_key_prefix = {"authorization": "Bearer"}
    dispatcher = Dispatcher(backend, DispatcherConfig()).start()
    binder = Binder(dispatcher)
    try:
        async with aclient.ApiClient(config) as api:
            core = aclient.CoreV1Api(api)
            nodes = AioInformer(core.list_node, kind="Node", api_version="v1")
            nodes.add_handler(binder.on_node, binder.on_node, binder.on_node_gone).start()
            pods = AioInformer(core.list_pod_for_all_namespaces, kind="Pod", api_version="v1")
            pods.attach(dispatcher)  # informer events keep the dispatcher's view current
            pods.add_handler(binder.on_pod, binder.on_pod, None)
            try:
                await nodes.wait_for_sync(30)
                pods.start()
                await pods.wait_for_sync(30)
                loop = asyncio.get_running_loop()
                deadline = None if duration is None else loop.time() + duration
                while expect is None or binder.bound + binder.failed < expect:
                    if deadline is not None and loop.time() >= deadline:
                        break
                    await asyncio.sleep(0.05)
                if binder.tasks:
                    await asyncio.gather(*binder.tasks, return_exceptions=True)
            finally:
                await pods.stop()
                await nodes.stop()
    finally:
        await asyncio.to_thread(dispatcher.stop, drain=True, timeout=10)  # stop() blocks
        backend.close()
    print(f"bound={binder.bound} failed={binder.failed} nodes={len(binder.nodes)}")
    return 0 if binder.failed == 0 and (expect is None or binder.bound == expect) else 1


def demo(pods: int, nodes: int) -> int:
    """Serve the embedded apiserver over HTTP, create ``nodes`` and ``pods``, bind them all,
    and check on the server that each pod was bound exactly once."""
    from kdispatch.testing import ApiServerHTTP, InMemoryApiServer, make_node, make_pod

    mem = InMemoryApiServer()
    for i in range(nodes):
        mem.create(make_node(f"node-{i}", 4000, 8192))
    for i in range(pods):
        pod = make_pod(f"pod-{i}")
        pod["spec"]["schedulerName"] = SCHEDULER_NAME
        mem.create(pod)
    http = ApiServerHTTP(mem, watch_poll=0.02).start()
    try:
        status = asyncio.run(run(http.url, token=None, expect=pods, duration=60))
    finally:
        http.stop()
    items = mem.list("Pod").items
    unbound = [p["metadata"]["name"] for p in items if not p["spec"].get("nodeName")]
    bindings = [r for r in mem.request_log if r.op == "bind" and r.outcome == "ok"]
    if unbound or len(bindings) != pods:
        print(f"unbound={unbound} bindings={len(bindings)}", file=sys.stderr)
        return 1
    return status


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="apiserver URL (e.g. kubectl proxy's)")
    where.add_argument("--demo", action="store_true", help="run on the embedded apiserver")
    p.add_argument("--token", help="bearer token for --url")
    p.add_argument("--pods", type=int, default=20, help="--demo: pods to create and bind")
    p.add_argument("--nodes", type=int, default=3, help="--demo: nodes to create")
    p.add_argument("--duration", type=float, default=None, help="--url: stop after seconds")
    p.add_argument("-v", "--verbose", action="store_true", help="library debug logs")
    args = p.parse_args(argv)
    try:
        check_counts(args, "pods", "nodes")
        if args.duration is not None:
            check_amounts(args, "duration")
    except InvalidInputError as err:
        p.error(str(err))  # exit status 2
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.verbose:
        enable_verbose_logs()
    if args.demo:
        return demo(args.pods, args.nodes)
    try:
        return asyncio.run(run(args.url, token=args.token, expect=None, duration=args.duration))
    except KeyboardInterrupt:
        return 0
    except InvalidInputError as err:  # a malformed --url
        print(f"error: {err}", file=sys.stderr)
        return 2
    except InformerSyncTimeout as err:  # says why: cannot connect, refused...
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
