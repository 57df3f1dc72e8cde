"""docker-compose.yml: it parses (`docker-compose config`), defines the three nodes, and
each service runs exactly `raftlog serve --config <file>` with a config from the repo
that the node's loader can read; the `audit` profile's service audits those nodes into a
volume. Needs no running node (and no Docker daemon): `make compose-test` runs the
containers (tests/compose/)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support.cluster import raftlog_argv

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
SERVICES = {"node1": 1, "node2": 2, "node3": 3}
CONFIG_IN_CONTAINER = "/etc/raftlog/node.toml"
CONFIG_KEYS = {
    "node_id",
    "data_dir",
    "kafka_listen",
    "advertised_kafka",
    "raft_listen",
    "admin_listen",
    "cluster_secret",
    "peers",
}


def _compose_exe() -> str:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail(
            "docker-compose is not installed (make test installs it: apt-get install docker-compose)"
        )
    return exe


def _yaml_to_json(text: str, exe: str) -> dict:
    """Parse YAML with the interpreter that runs docker-compose (Debian's is Python with
    PyYAML); the test venv itself carries no YAML parser."""
    first = Path(exe).read_bytes()[:200].split(b"\n", 1)[0]
    if first.startswith(b"#!") and b"python" in first:
        interp = first[2:].decode().strip().split()
        proc = subprocess.run(
            [
                *interp,
                "-c",
                "import sys, json, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)",
            ],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)
    # docker-compose v2 (Go) prints JSON itself
    proc = subprocess.run(
        [exe, "-f", str(COMPOSE), "config", "--format", "json"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def compose_config() -> dict:
    exe = _compose_exe()
    proc = subprocess.run(
        [exe, "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"docker-compose config failed:\n{proc.stderr}"
    return _yaml_to_json(proc.stdout, exe)


def _bind_mounts(service: dict) -> dict[str, str]:
    """{container path: host path} of a service's bind mounts, either output syntax."""
    out = {}
    for v in service.get("volumes", []):
        if isinstance(v, str):
            parts = v.split(":")
            if len(parts) >= 2 and parts[0].startswith(("/", ".")):
                out[parts[1]] = parts[0]
        elif v.get("type") == "bind":
            out[v["target"]] = v["source"]
    return out


def _published(service: dict) -> dict[int, tuple[str, int]]:
    """{container port: (host ip, host port)}."""
    out = {}
    for p in service.get("ports", []):
        if isinstance(p, str):
            spec = p.split("/")[0]
            parts = spec.split(":")
            host_ip, host_port, target = parts if len(parts) == 3 else ["0.0.0.0", *parts]
            out[int(target)] = (host_ip, int(host_port))
        else:
            out[int(p["target"])] = (p.get("host_ip", "0.0.0.0"), int(p["published"]))
    return out


def _port(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1])


def _host(addr: str) -> str:
    return addr.rsplit(":", 1)[0]


def test_compose_defines_three_nodes(compose_config):
    started = {n for n, s in compose_config["services"].items() if not s.get("profiles")}
    assert started == set(SERVICES)
    for name, svc in compose_config["services"].items():
        build = svc["build"]
        context = Path(build["context"] if isinstance(build, dict) else build)
        assert context.resolve() == REPO, name
        assert (
            context
            / (build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile")
        ).exists()


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_service_runs_raftlog_serve_with_a_repo_config(compose_config, service):
    svc = compose_config["services"][service]
    command = svc["command"]
    if isinstance(command, str):
        command = command.split()
    assert command[:3] == ["raftlog", "serve", "--config"] and len(command) == 4, command
    target = command[3]
    mounts = _bind_mounts(svc)
    assert target in mounts, f"{service}: {target} is not bind-mounted ({mounts})"
    host = Path(mounts[target])
    expected = REPO / "deploy" / "compose" / f"node-{SERVICES[service]}.toml"
    assert host.resolve() == expected.resolve(), host
    assert expected.is_file()


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_node_config_matches_compose(compose_config, service):
    node_id = SERVICES[service]
    svc = compose_config["services"][service]
    cfg = tomllib.loads((REPO / "deploy" / "compose" / f"node-{node_id}.toml").read_text())
    assert set(cfg) >= CONFIG_KEYS, f"missing keys: {CONFIG_KEYS - set(cfg)}"
    assert cfg["node_id"] == node_id
    assert isinstance(cfg["cluster_secret"], str) and len(cfg["cluster_secret"]) >= 16
    # the data dir is a volume, so a restarted container keeps its log
    volume_targets = [
        (v.split(":")[1] if isinstance(v, str) else v["target"]) for v in svc.get("volumes", [])
    ]
    assert cfg["data_dir"] in volume_targets, (cfg["data_dir"], volume_targets)
    # Kafka: listens inside the container on the published port; advertised to host clients
    published = _published(svc)
    kafka_port = _port(cfg["kafka_listen"])
    assert kafka_port in published, (kafka_port, published)
    host_ip, host_port = published[kafka_port]
    assert host_ip == "127.0.0.1", "publish on the host's loopback only"
    assert cfg["advertised_kafka"] == f"127.0.0.1:{host_port}"
    # admin: published on loopback too, so `raftlog audit --admin` reaches each node
    admin_port = _port(cfg["admin_listen"])
    assert published.get(admin_port, ("", 0))[0] == "127.0.0.1", (admin_port, published)
    # peers: every member, by service name, at its raft_listen port
    others = {
        SERVICES[name]: tomllib.loads((REPO / "deploy" / "compose" / f"node-{i}.toml").read_text())
        for name, i in SERVICES.items()
    }
    peers = {p["id"]: p["raft"] for p in cfg["peers"]}
    assert set(peers) == set(SERVICES.values()), peers
    for name, i in SERVICES.items():
        assert _host(peers[i]) == name, peers[i]
        assert _port(peers[i]) == _port(others[i]["raft_listen"])
        assert others[i]["cluster_secret"] == cfg["cluster_secret"]
    ports = [_port(cfg[k]) for k in ("kafka_listen", "raft_listen", "admin_listen")]
    assert len(set(ports)) == 3


def test_raftlog_serve_accepts_config_flag():
    """The compose command matches the CLI: `raftlog serve` has a --config option."""
    proc = subprocess.run(
        [*raftlog_argv(), "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"`raftlog serve --help` failed ({sys.executable}):\n{proc.stderr}"
    assert "--config" in proc.stdout, proc.stdout


def test_audit_profile_audits_every_node_into_a_volume(compose_config):
    """The audit service runs only with --profile audit, asks every node's admin listener
    (by service name, at the port its config listens on) and writes under a named volume."""
    svc = compose_config["services"]["audit"]
    assert svc["profiles"] == ["audit"]
    command = svc["command"]
    assert command[:3] == ["raftlog", "audit", "--admin"] and len(command) == 4, command
    admins = command[3].split(",")
    configs = {
        name: tomllib.loads((REPO / "deploy" / "compose" / f"node-{i}.toml").read_text())
        for name, i in SERVICES.items()
    }
    expected = [f"{name}:{_port(configs[name]['admin_listen'])}" for name in sorted(SERVICES)]
    assert admins == expected
    assert set(svc["networks"]) == set(compose_config["services"]["node1"]["networks"])
    build = svc["build"]
    assert (Path(build["context"]) / build["dockerfile"]).is_file()
    named = {
        (v.split(":")[1] if isinstance(v, str) else v["target"]): (
            v.split(":")[0] if isinstance(v, str) else v["source"]
        )
        for v in svc["volumes"]
    }
    # `raftlog audit` writes audit/<time>/ under the image's working directory, /reports
    assert named.get("/reports/audit") in compose_config["volumes"], named
