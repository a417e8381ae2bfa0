"""The asyncio example controller binds every pod exactly once (checked on the server)."""

from __future__ import annotations

import pytest

from examples import aio_controller

pytestmark = pytest.mark.timeout(120)


def test_demo_binds_every_pod_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert aio_controller.main(["--demo", "--pods", "30", "--nodes", "3"]) == 0
    assert capsys.readouterr().out.strip() == "bound=30 failed=0 nodes=3"
