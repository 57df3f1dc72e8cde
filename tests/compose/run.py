"""`python -m tests.compose.run`: docker-compose.yml for real (make compose-test).

Builds the images with docker-compose (the node's Dockerfile and the audit profile's, on
the base and offline wheels of tests/compose/engine.py), starts the three node containers,
creates a topic, produces with confluent-kafka (acks=all, idempotent) and reads back with
kafka-python, both from the host through the published ports; kills the container leading
partition 0 (SIGKILL), keeps producing to the other two, starts it again and waits until
it holds every partition's high watermark; reads everything back (every acknowledged record
once); runs the epoch audit in the `audit` profile's container and reads its report from the
audit-reports volume; checks no node logged a traceback. Then it removes the containers and
volumes and stops the daemon if it started one.

Prints one line per step and `compose-test: N passed, M failed`. Exit 0: every check held;
1: a check failed; 2: the test could not run (no engine, no image: the reason is printed).
The run's files (dockerd.log, the nodes' logs, the audit report) are under build/compose/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from support.cluster import http_get_json, wait_for

from .engine import BUILD, REPO, WHEELS_IN_IMAGE, Engine, EngineError, log, run

PROJECT = "raftlog-compose-test"
NODES = {1: "node1", 2: "node2", 3: "node3"}
BOOTSTRAP = "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
ADMIN = {1: "127.0.0.1:11092", 2: "127.0.0.1:11093", 3: "127.0.0.1:11094"}
HOST_PORTS = (9092, 9093, 9094, 11092, 11093, 11094)
TOPIC, PARTITIONS = "compose", 3
BATCH = 300  # records per produce phase


class CheckFailed(AssertionError):
    pass


class Checks:
    """Named checks, one line each; the summary line counts them."""

    def __init__(self) -> None:
        self.passed: list[str] = []
        self.failed: list[str] = []

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        (self.passed if ok else self.failed).append(name)
        log(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""))
        if not ok:
            raise CheckFailed(name)


class Compose:
    """docker-compose on the repo's file plus the build-argument override, as project
    PROJECT (its own containers, network and volumes beside a user's)."""

    def __init__(self, docker: str, base: str) -> None:
        self.exe = shutil.which("docker-compose") or "docker-compose"
        self.override = BUILD / "build-args.yml"
        args = {"BASE_IMAGE": base, "WHEELS": WHEELS_IN_IMAGE}
        # images of their own, so that a user's raftlog:local is left as it was; the node
        # image is built as a user's is, compiled (COMPILED=1, the Dockerfile's default)
        services: dict[str, Any] = {
            name: {"build": {"args": args}, "image": f"{PROJECT}/node:local"}
            for name in NODES.values()
        }
        services["audit"] = {"build": {"args": args}, "image": f"{PROJECT}/audit:local"}
        self.override.write_text(json.dumps({"version": "3.8", "services": services}, indent=1))
        self.env = {**os.environ, "DOCKER_BUILDKIT": "0", "COMPOSE_DOCKER_CLI_BUILD": "0"}
        self.env["PATH"] = f"{Path(docker).parent}:{self.env.get('PATH', '')}"

    def argv(self, *args: str) -> list[str]:
        return [self.exe, "-p", PROJECT, "-f", str(REPO / "docker-compose.yml"),
                "-f", str(self.override), *args]  # fmt: skip

    def __call__(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return run(self.argv(*args), timeout, check=check, cwd=REPO, env=self.env)


def _ports_in_use() -> list[int]:
    busy = []
    for port in HOST_PORTS:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    return busy


def _statuses() -> dict[int, dict[str, Any]]:
    out = {}
    for i, admin in ADMIN.items():
        with contextlib.suppress(OSError, ValueError):
            out[i] = http_get_json(f"http://{admin}/v1/status", timeout=2.0)
    return out


def _leaders(statuses: dict[int, dict[str, Any]]) -> dict[int, int]:
    """{partition: leader} for TOPIC where the leader itself and a majority agree."""
    from faults.nodes import agreed_leaders

    return {p: lt[0] for p, lt in agreed_leaders(statuses, TOPIC, PARTITIONS).items()}


def _ready(ids: list[int]) -> bool:
    st = _statuses()
    return all(
        i in st
        and st[i].get("controller_leader") is not None
        and set(ids) <= set(st[i].get("registered_nodes") or [])
        for i in ids
    )


def _produce(first: int, count: int) -> tuple[set[int], list[str]]:
    """Sends records `first`..`first+count-1` (value = the number) acks=all, idempotent;
    returns the numbers acknowledged and the delivery errors."""
    from confluent_kafka import Producer

    acked: set[int] = set()
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(int(msg.value()))
        else:
            errors.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 90_000,
            "linger.ms": 5,
        }
    )
    for n in range(first, first + count):
        producer.produce(TOPIC, key=str(n % 17).encode(), value=str(n).encode(), on_delivery=report)
        producer.poll(0)
        time.sleep(0.01)  # ~100 records/s, so the kill lands among them
    left = producer.flush(120)
    if left:
        errors.append(f"{left} records neither acknowledged nor failed after 120 s")
    return acked, errors


def _read_all() -> list[int]:
    """Every record of TOPIC from offset 0 to each partition's end, with kafka-python."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=BOOTSTRAP.split(","),
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
        request_timeout_ms=30_000,
    )
    try:
        parts = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        values: list[int] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read stopped short of {ends}")
            for records in consumer.poll(timeout_ms=1000).values():
                values.extend(int(r.value) for r in records)
        return values
    finally:
        consumer.close()


# Run in a node's container: which modules of compiled_modules.txt import from a .py rather
# than an extension, and whether the running node (PID 1) has mapped mypyc's shared library
# (the compiled code itself: a compiled module imported by another one of the build is set
# up from that library without loading its own small extension).
_COMPILED_PROBE = """
import importlib, importlib.machinery, json, pathlib
sources = pathlib.Path("compiled_modules.txt").read_text().split()
pure = [
    source
    for source in sources
    if not importlib.import_module(source[:-3].replace("/", ".")).__file__.endswith(
        tuple(importlib.machinery.EXTENSION_SUFFIXES)
    )
]
maps = pathlib.Path("/proc/1/maps").read_text()
shared = [str(lib) for lib in pathlib.Path.cwd().glob("*__mypyc.*.so")]
print(json.dumps({
    "modules": len(sources),
    "pure": pure,
    "shared": len(shared),
    "node_maps_shared": bool(shared) and all(lib in maps for lib in shared),
}))
"""


def _compiled_build(compose: Compose, service: str) -> dict[str, Any]:
    """The probe's answer in `service`'s container (in its working directory, /opt/raftlog)."""
    out = compose("exec", "-T", service, "python", "-c", _COMPILED_PROBE, timeout=60).stdout
    return json.loads(out.strip().splitlines()[-1])


def _container_state(compose: Compose, docker: str, service: str) -> str:
    cid = compose("ps", "-q", service).stdout.strip()
    if not cid:
        return "absent"
    return run([docker, "inspect", "--format", "{{.State.Status}}", cid], 30).stdout.strip()


def _create_topic() -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP.split(","), request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    finally:
        admin.close()


def scenario(engine: Engine, compose: Compose, checks: Checks) -> None:
    docker = engine.docker
    started = time.monotonic()
    compose("--profile", "audit", "build", timeout=1800)
    checks.check("images build", True, f"{time.monotonic() - started:.0f} s")

    compose("up", "-d", *NODES.values(), timeout=300)
    wait_for(lambda: _ready(list(NODES)), 120, 0.5, "three nodes registered with a controller")
    checks.check("three containers start and elect a controller", True)

    # the Dockerfile falls back to pure Python when mypyc fails: that must not pass unseen
    probes = {service: _compiled_build(compose, service) for service in NODES.values()}
    checks.check(
        "each node runs the compiled modules (compiled_modules.txt)",
        all(p["modules"] > 0 and not p["pure"] and p["node_maps_shared"] for p in probes.values()),
        "; ".join(
            f"{service}: {p['modules'] - len(p['pure'])}/{p['modules']} from extensions "
            f"(pure: {p['pure'][:3] or 'none'}), the node has mapped mypyc's shared library: "
            f"{p['node_maps_shared']} ({p['shared']} found)"
            for service, p in probes.items()
        ),
    )

    _create_topic()
    leaders = wait_for(
        lambda: (ls := _leaders(_statuses())) and len(ls) == PARTITIONS and ls,
        60, 0.5, f"a leader for each partition of {TOPIC}",
    )  # fmt: skip
    checks.check("topic created, a leader per partition", True, f"leaders {leaders}")

    acked, errors = _produce(0, BATCH)
    checks.check(
        "confluent-kafka produces acks=all", len(acked) == BATCH and not errors,
        f"{len(acked)}/{BATCH} acknowledged, errors {errors[:3]}",
    )  # fmt: skip
    read = _read_all()
    checks.check(
        "kafka-python reads them back", sorted(read) == sorted(acked),
        f"{len(read)} read",
    )  # fmt: skip

    victim = _leaders(_statuses())[0]
    service = NODES[victim]
    compose("kill", "-s", "SIGKILL", service, timeout=60)
    state = _container_state(compose, docker, service)
    checks.check(f"{service} (leader of partition 0) killed", state == "exited", f"state {state}")

    more, errors = _produce(BATCH, BATCH)
    after = _leaders(_statuses())
    state = _container_state(compose, docker, service)
    checks.check(
        f"producing goes on without {service}",
        len(more) == BATCH and not errors and victim not in after.values() and state == "exited",
        f"{len(more)}/{BATCH} acknowledged, errors {errors[:3]}, leaders now {after}, "
        f"{service} {state}",
    )  # fmt: skip
    acked |= more

    compose("start", service, timeout=120)
    from faults.nodes import caught_up

    wait_for(
        lambda: caught_up(_statuses(), TOPIC, PARTITIONS, len(NODES)),
        120, 0.5, f"{service} back and holding every partition's high watermark",
    )  # fmt: skip
    checks.check(f"{service} comes back and catches up", True)

    read = _read_all()
    missing = acked - set(read)
    dupes = len(read) - len(set(read))
    checks.check(
        "every acknowledged record read back once",
        not missing and not dupes and len(read) == 2 * BATCH,
        f"{len(read)} read, {len(missing)} missing, {dupes} duplicated",
    )  # fmt: skip

    started = time.monotonic()
    audit = compose("--profile", "audit", "run", "--rm", "-T", "audit", timeout=900, check=False)
    (BUILD / "audit.log").write_text(audit.stdout + audit.stderr)
    report = _copy_report(engine.docker)
    summary = json.loads((report / "summary.json").read_text()) if report else {}
    invariants = summary.get("invariants") or {}
    held = [name for name, v in invariants.items() if v.get("held")]
    checks.check(
        "the audit profile's container audits the cluster into its volume",
        audit.returncode == 0
        and report is not None
        and (report / "report.html").is_file()
        and summary.get("all_invariants_held") is True
        and summary.get("nodes") == sorted(NODES)
        and len(held) == len(invariants) > 0,
        f"exit {audit.returncode} in {time.monotonic() - started:.0f} s, nodes "
        f"{summary.get('nodes')}, {summary.get('events')} events, {len(held)}/{len(invariants)} "
        f"invariants held, report copied to {report} (output: {BUILD / 'audit.log'})",
    )

    logs = compose("logs", "--no-color", *NODES.values(), timeout=120).stdout
    (BUILD / "nodes.log").write_text(logs)
    tracebacks = [line for line in logs.splitlines() if "Traceback" in line]
    errors_logged = [line for line in logs.splitlines() if " ERROR " in line]
    checks.check(
        "no node logged a traceback", not tracebacks,
        f"{len(errors_logged)} ERROR lines; {tracebacks[:2]} (all in {BUILD / 'nodes.log'})",
    )  # fmt: skip


def _copy_report(docker: str) -> Path | None:
    """The newest audit/<time>/ in the project's audit-reports volume, copied to
    build/compose/report/ (read from the volume's directory: the test runs as root)."""
    volumes = run(
        [docker, "volume", "ls", "-q",
         "--filter", f"label=com.docker.compose.project={PROJECT}",
         "--filter", "label=com.docker.compose.volume=audit-reports"],
        30,
    ).stdout.split()  # fmt: skip
    if len(volumes) != 1:
        return None
    mountpoint = run(
        [docker, "volume", "inspect", "--format", "{{.Mountpoint}}", volumes[0]], 30
    ).stdout.strip()
    runs = sorted(p for p in Path(mountpoint).iterdir() if p.is_dir())
    if not runs:
        return None
    dest = BUILD / "report"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(runs[-1], dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.compose.run", description=__doc__)
    parser.add_argument(
        "--keep", action="store_true", help="leave the containers, volumes and daemon running"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    checks = Checks()
    engine = Engine()
    compose: Compose | None = None
    status = 0
    try:
        busy = _ports_in_use()
        if busy:
            raise EngineError(f"the compose file's host ports are in use: {busy}")
        engine.start()
        while True:
            base = engine.base_image()
            image = engine.wheels_image(base)
            error = engine.runs_a_container(image)
            if error is None or not engine.retry_with_next_driver(error):
                break
        if error is not None:
            raise EngineError(f"no container runs on storage driver {engine.driver}:\n{error}")
        log(f"base image {base}, wheels image {image}")
        compose = Compose(engine.docker, image)
        compose("down", "-v", "--remove-orphans", timeout=300, check=False)
        scenario(engine, compose, checks)
    except CheckFailed:
        status = 1
    except (TimeoutError, EngineError, subprocess.TimeoutExpired) as e:
        if compose is None:
            log(f"cannot run: {e}")
            status = 2
        else:
            checks.failed.append("scenario")
            log(f"FAIL: {e}")
            status = 1
    finally:
        if compose is not None and status:
            with contextlib.suppress(Exception):
                logs = compose("logs", "--no-color", "--tail", "30", timeout=120, check=False)
                print(logs.stdout[-6000:], flush=True)
        if not args.keep:
            if compose is not None:
                with contextlib.suppress(Exception):
                    compose("--profile", "audit", "down", "-v", "--remove-orphans", timeout=300)
            for change in engine.stop():
                log(f"host network state: {change}")
    log(f"took {time.monotonic() - started:.0f} s")
    print(f"compose-test: {len(checks.passed)} passed, {len(checks.failed)} failed", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
