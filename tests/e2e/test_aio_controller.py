"""The asyncio example controller binds every pod exactly once (checked on the server)."""

from __future__ import annotations

import pytest

from examples import aio_controller

pytestmark = pytest.mark.timeout(120)


def test_demo_binds_every_pod_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert aio_controller.main(["--demo", "--pods", "30", "--nodes", "3"]) == 0
    assert capsys.readouterr().out.strip() == "bound=30 failed=0 nodes=3"


@pytest.mark.parametrize(
    "argv",
    [
        ["--demo", "--pods", "0"],
        ["--demo", "--nodes", "-1"],
        ["--url", "http://127.0.0.1:1", "--duration", "nan"],
        ["--url", "http://127.0.0.1:1", "--duration", "-1"],
    ],
)
def test_bad_values_are_an_error_line_and_status_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        aio_controller.main(argv)
    assert exit_.value.code == 2
    assert "error: " in capsys.readouterr().err


def test_a_malformed_url_is_an_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert aio_controller.main(["--url", "notaurl"]) == 2
    assert capsys.readouterr().err.startswith("error: url must be an http(s) URL")
