"""The asyncio example controller binds every pod exactly once (checked on the server)."""

from __future__ import annotations

import pytest

from examples import aio_controller
from kdispatch.actors.model.errors import InvalidInputError

pytestmark = pytest.mark.timeout(120)


def test_demo_binds_every_pod_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert aio_controller.main(["--demo", "--pods", "30", "--nodes", "3"]) == 0
    assert capsys.readouterr().out.strip() == "bound=30 failed=0 nodes=3"


@pytest.mark.parametrize("argv", [["--demo", "--pods", "0"], ["--demo", "--nodes", "-1"]])
def test_bad_counts_are_typed(argv: list[str]) -> None:
    with pytest.raises(InvalidInputError):
        aio_controller.main(argv)
