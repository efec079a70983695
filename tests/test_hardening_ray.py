"""Issue 38, ``--ray ADDRESS``: a handshake (Ray's own first gRPC call, with a deadline), not a
TCP connect, decides whether the address is a Ray cluster; a listener that accepts and never
answers, or answers garbage, is one line within the limit."""

from __future__ import annotations

import socket
import threading

import pytest
from typer.testing import CliRunner

from hulk_cli.app import app
from hulk_cli.output import EXIT_BAD_INPUT
from hulk_env.errors import HulkInputError
from hulk_env.evaluation.distributed import check_reachable

pytest.importorskip("grpc")  # comes with Ray


@pytest.fixture
def listener():
    """``start(kind)`` -> port of a local TCP server that accepts and then stays silent
    (``"silent"``) or answers an HTTP/1.1 page and hangs up (``"garbage"``)."""
    servers: list[socket.socket] = []

    def start(kind: str) -> int:
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        servers.append(server)
        held: list[socket.socket] = []

        def loop() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:  # closed at teardown
                    return
                held.append(conn)
                if kind == "garbage":
                    try:
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                        conn.close()
                    except OSError:
                        pass

        threading.Thread(target=loop, daemon=True).start()
        return server.getsockname()[1]

    yield start
    for server in servers:
        server.close()


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_silent_listener_is_not_a_ray_cluster(listener, scheme):
    port = listener("silent")
    with pytest.raises(HulkInputError) as info:
        check_reachable(f"{scheme}127.0.0.1:{port}", timeout_s=1.0)
    line = info.value.one_line()
    assert "no answer to Ray's handshake within 1 s" in line and "\n" not in line


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_listener_answering_garbage_is_not_a_ray_cluster(listener, scheme):
    port = listener("garbage")
    with pytest.raises(HulkInputError, match="not a Ray cluster"):
        check_reachable(f"{scheme}127.0.0.1:{port}", timeout_s=1.0)


def test_cli_evaluate_with_a_garbage_ray_address_is_one_line(listener, tmp_path):
    pytest.importorskip("ray")
    port = listener("garbage")
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, ["evaluate", "--limit", "1", "--methods", "naive", "--out", str(out),
                                      "--ray", f"127.0.0.1:{port}"])
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "not a Ray cluster" in lines[0], result.output
    assert not out.exists()  # connect first: nothing is written for a cluster that is not there
