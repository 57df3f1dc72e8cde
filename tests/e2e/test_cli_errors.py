"""Operator mistakes with the real `raftlog` command: each exits 1 with one line that names
the problem, never a Python traceback, and nothing waits for a timeout it cannot meet."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from support.cluster import raftlog_argv

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CONFIG = """node_id = {node_id}
data_dir = "{data_dir}"
kafka_listen = "127.0.0.1:{kafka}"
raft_listen = "127.0.0.1:{raft}"
admin_listen = "127.0.0.1:{admin}"
cluster_secret = "s"

[[peers]]
id = 1
raft = "127.0.0.1:{raft}"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(tmp_path: Path, **values: object) -> Path:
    fields = {
        "node_id": 1,
        "data_dir": tmp_path / "data",
        "kafka": free_port(),
        "raft": free_port(),
        "admin": free_port(),
    }
    fields.update(values)
    path = tmp_path / "node.toml"
    path.write_text(CONFIG.format(**fields))
    return path


def run(*args: str, timeout: float = 30) -> tuple[int, str]:
    proc = subprocess.run([*raftlog_argv(), *args], capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stderr


def assert_one_line(code: int, stderr: str, words: str) -> None:
    assert code == 1, stderr
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("raftlog: ")]
    assert len(lines) == 1 and words in lines[0], stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("cluster", "up", "--nodes", "0"), "--nodes must be at least 1"),
        (("cluster", "up", "--kafka-port", "70000"), "--kafka-port 70000"),
        (
            ("topic", "create", "t", "--partitions", "3000000000", "--bootstrap", "127.0.0.1:1"),
            "--partitions must be from 1 to 2147483647",
        ),
    ],
)
def test_bad_arguments(tmp_path: Path, args: tuple[str, ...], words: str) -> None:
    assert_one_line(
        *run(*args, "--data", str(tmp_path)) if args[0] == "cluster" else run(*args), words
    )


def test_unreachable_bootstrap() -> None:
    assert_one_line(*run("topic", "list", "--bootstrap", "127.0.0.1:1"), "Unable to bootstrap")


def test_serve_with_a_directory_as_config(tmp_path: Path) -> None:
    assert_one_line(*run("serve", "--config", str(tmp_path)), "cannot read the config file")


def test_serve_as_a_node_missing_from_its_peers(tmp_path: Path) -> None:
    path = config(tmp_path, node_id=4)
    assert_one_line(*run("serve", "--config", str(path)), "node_id 4 is not among [[peers]]")


def test_serve_on_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        path = config(tmp_path, kafka=busy.getsockname()[1])
        assert_one_line(*run("serve", "--config", str(path)), "node 1 cannot start")


def test_serve_with_a_data_dir_it_cannot_make(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    path = config(tmp_path, data_dir=blocker / "data")
    assert_one_line(*run("serve", "--config", str(path)), f"data_dir {blocker / 'data'}")
