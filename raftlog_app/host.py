"""Several brokers on one host (issue 45): `raftlog serve --config host.toml` with
`brokers = N` starts N broker processes and keeps them running.

CPython runs a node's event loop on one core, so a host serves with all its cores only by
running a broker per core. Each broker is a full node (`raftlog serve` of its own node
config): its own node id, ports and data directory, one broker of many in every Metadata
answer, so Kafka clients need nothing new.

A host config is a node config (raftlog/config/node_config.py) whose node_id and addresses are the first
broker's, with three more settings:

    brokers = 4                      # or "auto": one per core this process may run on
    host_name = "rack-a-7"           # default: the machine's name; every broker's
                                     # broker.rack unless [broker] sets one
    host_listen = "127.0.0.1:11091"  # the supervisor's GET /metrics and /v1/host; default:
                                     # the port below the first broker's admin port

Broker k (from 0) has node_id + k, each port of the config + k, and the data directory
data_dir/broker-<its id>, where the supervisor writes its node config at each start. Its
peers are the host's brokers and the config's [[peers]] (other hosts' brokers).

The supervisor restarts a broker that exits, after a delay that doubles with each exit in a
row (Backoff), and shows one that keeps failing in /v1/host, `raftlog cluster status` and
raftlog_host_broker_failing. SIGTERM or SIGINT stops the brokers one after the other (each
hands its leaderships to brokers that stay up, as `cluster down` does) and then exits."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from raftlog.common.errors import ConfigError
from raftlog.common.http_listener import HttpLimits, HttpListener
from raftlog.config.node_config import NodeConfig, parse_address, toml_value

log = logging.getLogger("raftlog.host")

HOST_KEYS = ("brokers", "host_name", "host_listen")
# Settings whose port broker k takes + k. advertised_* and the admin and proxy defaults
# follow kafka_listen and raft_listen when not given.
PORT_KEYS = (
    "kafka_listen",
    "advertised_kafka",
    "raft_listen",
    "advertised_raft",
    "admin_listen",
    "proxy_listen",
)
# What a broker binds (NodeConfig's names), for the overlap and port-in-use checks.
BOUND = ("kafka_listen", "raft_listen", "admin_listen", "proxy_listen")
MAX_BROKERS = 256
STOP_TIMEOUT = 30.0  # seconds a broker has to stop after SIGTERM before it is killed
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class BrokerSpec:
    node: NodeConfig
    config_text: str  # its node config, written to config_path at each start

    @property
    def config_path(self) -> Path:
        return self.node.data_dir / "raftlog.toml"

    def bound(self) -> dict[str, tuple[str, int]]:
        """Setting name -> the address this broker listens on."""
        node = self.node
        found = {
            "kafka_listen": node.kafka_listen,
            "raft_listen": node.raft_listen,
            "admin_listen": node.admin_listen,
        }
        if node.proxy_listen is not None:
            found["proxy_listen"] = node.proxy_listen
        return found


@dataclass(frozen=True)
class HostConfig:
    name: str
    listen: tuple[str, int]  # the supervisor's HTTP
    brokers: list[BrokerSpec]


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container's cpuset sets it),
    fewer when a cgroup v2 CPU quota allows less (docker --cpus)."""
    cores = len(os.sched_getaffinity(0))
    with contextlib.suppress(OSError, ValueError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cores = min(cores, max(1, -(-int(quota) // int(period))))
    return cores


def is_host_config(path: Path) -> bool:
    """Whether `path` is a host config (it sets `brokers`); an unreadable file is left to
    NodeConfig.load to refuse."""
    try:
        return "brokers" in tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False


def load(path: Path, cores: int | None = None) -> HostConfig:
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: {e}") from None
    try:
        return from_dict(raw, path.parent, available_cores() if cores is None else cores)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def from_dict(raw: dict[str, Any], base: Path, cores: int) -> HostConfig:
    """The host's brokers, each config checked as `raftlog serve` would check it; a host
    that cannot place its brokers is refused here, before any starts."""
    count = _broker_count(raw.get("brokers"), cores)
    name = raw.get("host_name", socket.gethostname())
    if not isinstance(name, str) or not name or len(name) > 255 or not name.isprintable():
        raise ConfigError(f"host_name: expected up to 255 printable characters, got {name!r}")
    broker = raw.get("broker", {})
    if not isinstance(broker, dict):
        raise ConfigError("[broker] must be a table of settings")
    for key in ("listeners", "advertised.listeners"):
        if broker.get(key):
            raise ConfigError(
                f"[broker] {key}: a host config gives each broker kafka_listen's port + k; "
                "remove it and set kafka_listen (and advertised_kafka)"
            )
    for key in ("node_id", "data_dir", "kafka_listen", "raft_listen"):
        if key not in raw:
            raise ConfigError(f"missing required setting: {key}")
    if isinstance(raw["data_dir"], str) and raw["data_dir"]:
        data_dir = (base / raw["data_dir"]).resolve()
    else:
        raise ConfigError(f"data_dir: expected a path, got {raw['data_dir']!r}")
    first = raw["node_id"]
    if isinstance(first, bool) or not isinstance(first, int):
        raise ConfigError(f"node_id: expected a whole number, got {first!r}")
    _fits(raw, count)
    own = [_shifted(raw, k) for k in range(count)]
    own_raft = {
        first + k: cfg.get("advertised_raft", cfg["raft_listen"]) for k, cfg in enumerate(own)
    }
    peers = _other_peers(raw.get("peers", []), own_raft)
    specs = []
    for k, cfg in enumerate(own):
        node_id = first + k
        cfg["node_id"] = node_id
        cfg["data_dir"] = str(data_dir / f"broker-{node_id}")
        cfg["peers"] = [{"id": i, "raft": a} for i, a in sorted({**own_raft, **peers}.items())]
        if "rack" not in raw and "broker.rack" not in broker:
            cfg["broker"] = {**broker, "broker.rack": name}
        try:
            node = NodeConfig.from_dict(cfg, base)
        except ConfigError as e:
            raise ConfigError(f"broker {node_id}: {e}") from None
        specs.append(BrokerSpec(node, _toml(cfg)))
    first_admin = specs[0].node.admin_listen
    listen = parse_address(
        raw.get("host_listen", f"{first_admin[0]}:{first_admin[1] - 1}"), "host_listen"
    )
    taken = {port: (s.node.node_id, what) for s in specs for what, (_, port) in s.bound().items()}
    if listen[1] in taken:
        node_id, what = taken[listen[1]]
        raise ConfigError(
            f"host_listen port {listen[1]} is broker {node_id}'s {what}; set host_listen"
        )
    return HostConfig(name, listen, specs)


def _broker_count(value: object, cores: int) -> int:
    if value == "auto":
        return max(1, min(cores, MAX_BROKERS))
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BROKERS:
        raise ConfigError(
            f'brokers: expected "auto" (one per core) or a number from 1 to {MAX_BROKERS}, '
            f"got {value!r}"
        )
    return value


def _fits(raw: dict[str, Any], count: int) -> None:
    """Each port setting's range of `count` ports lies below 65536 and apart from the
    others: the line refusing a host that cannot place its brokers says what to change."""
    ranges = []
    for key in PORT_KEYS:
        if raw.get(key):
            host, port = parse_address(raw[key], key)
            if port + count - 1 > 65535:
                raise ConfigError(
                    f"brokers = {count} do not fit: {key} {host}:{port} + {count - 1} passes "
                    f"65535; set {key} to a port at most {65536 - count}, or fewer brokers"
                )
            if not key.startswith("advertised"):
                ranges.append((port, key))
    kafka = parse_address(raw["kafka_listen"], "kafka_listen")[1]
    for key, offset in (("admin_listen", 2000), ("proxy_listen", 3000)):
        if key not in raw:
            ranges.append((kafka + offset, f"{key} (kafka_listen + {offset})"))
    ranges.sort()
    for (low, a), (high, b) in zip(ranges, ranges[1:], strict=False):
        if high - low < count:
            raise ConfigError(
                f"brokers = {count} do not fit: {a} at {low} and {b} at {high} are "
                f"{high - low} apart; set them at least {count} apart, or fewer brokers"
            )


def _shifted(raw: dict[str, Any], k: int) -> dict[str, Any]:
    """Broker k's node config: the host config without the host's own keys, every address
    given one port up per k."""
    cfg = {key: value for key, value in raw.items() if key not in HOST_KEYS}
    for key in PORT_KEYS:
        if raw.get(key):
            host, port = parse_address(raw[key], key)
            cfg[key] = f"{host}:{port + k}"
    if "advertised_raft" not in cfg:
        cfg["advertised_raft"] = cfg["raft_listen"]
    return cfg


def _other_peers(listed: object, own: dict[int, str]) -> dict[int, str]:
    """The [[peers]] of the host config: other hosts' brokers. Listing the host's own brokers
    too (the same list on every host) is allowed at their own addresses."""
    if not isinstance(listed, list) or not all(isinstance(p, dict) for p in listed):
        raise ConfigError("[[peers]] must be a list of tables with id and raft")
    peers: dict[int, str] = {}
    for peer in listed:
        peer_id, address = peer.get("id"), peer.get("raft")
        if isinstance(peer_id, bool) or not isinstance(peer_id, int) or address is None:
            raise ConfigError("each [[peers]] entry needs a whole-number id and raft")
        if peer_id in own and address != own[peer_id]:
            raise ConfigError(
                f"[[peers]] lists node {peer_id} at {address!r}, but it is this host's broker "
                f"at {own[peer_id]!r}; fix node_id or that entry"
            )
        peers[peer_id] = address
    return peers


def _toml(cfg: dict[str, Any]) -> str:
    """A broker's node config as TOML, read back by NodeConfig.load."""
    top = "".join(
        f"{key} = {toml_value(value)}\n"
        for key, value in cfg.items()
        if not isinstance(value, dict | list)
    )
    peers = "".join(
        f"\n[[peers]]\nid = {p['id']}\nraft = {toml_value(p['raft'])}\n" for p in cfg["peers"]
    )
    broker = "".join(
        f"{toml_value(k)} = {toml_value(v)}\n" for k, v in cfg.get("broker", {}).items()
    )
    return (
        "# written by the host supervisor at each start, from its host config\n"
        + top
        + peers
        + (f"\n[broker]\n{broker}" if broker else "")
    )


def ports_in_use(host: HostConfig) -> str | None:
    """The ports a broker would listen on that something holds, each with its setting; None
    when all are free. Bound as the listeners bind (SO_REUSEADDR)."""
    wanted = [("host_listen", host.listen)]
    for spec in host.brokers:
        node_id = spec.node.node_id
        wanted += [(f"broker {node_id}'s {what}", a) for what, a in spec.bound().items()]
    busy = []
    for what, (address, port) in wanted:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address, port))
            except OSError:
                busy.append(f"{port} ({what})")
    return ", ".join(busy) or None


@dataclass
class Backoff:
    """When a broker that exited starts again: `first` seconds after its first exit, twice
    as long after each further exit in a row, at most `cap`. A run of `stable` seconds ends
    the row. `failing_after` exits in a row make the broker failing until a run is stable.
    Times are the caller's clock, so tests need not sleep."""

    first: float = 1.0
    cap: float = 60.0
    stable: float = 60.0
    failing_after: int = 3
    in_a_row: int = 0
    restarts: int = 0
    started_at: float | None = None  # None: not running

    def started(self, now: float) -> None:
        self.started_at = now

    def exited(self, now: float) -> float:
        """The delay before the next start."""
        if self.started_at is not None and now - self.started_at >= self.stable:
            self.in_a_row = 0
        self.started_at = None
        self.in_a_row += 1
        self.restarts += 1
        delay: float = min(self.cap, self.first * 2 ** (self.in_a_row - 1))
        return delay

    def failing(self, now: float) -> bool:
        running_stable = self.started_at is not None and now - self.started_at >= self.stable
        return self.in_a_row >= self.failing_after and not running_stable


@dataclass
class Slot:
    """One broker the supervisor keeps running."""

    spec: BrokerSpec
    backoff: Backoff
    proc: subprocess.Popen[bytes] | None = None
    last_exit: int | None = None
    next_start: float | None = None  # when waiting out a backoff
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def state(self, now: float) -> dict[str, Any]:
        node = self.spec.node
        if self.backoff.failing(now):
            what = "failing"
        else:
            what = "running" if self.running() else "starting again"
        return {
            "node_id": node.node_id,
            "pid": self.proc.pid if self.running() and self.proc else None,
            "state": "stopped" if self.stopping.is_set() and not self.running() else what,
            "restarts": self.backoff.restarts,
            "exits_in_a_row": self.backoff.in_a_row,
            "last_exit": self.last_exit,
            "next_start_in": (
                round(max(0.0, self.next_start - now), 1) if self.next_start is not None else None
            ),
            "kafka": "{}:{}".format(*node.advertised_kafka),
            "admin": "{}:{}".format(*node.admin_listen),
            "data_dir": str(node.data_dir),
        }


class _Metrics(Collector):
    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor

    def collect(self) -> Iterator[Metric]:
        labels = ["host", "node"]
        up = GaugeMetricFamily("raftlog_host_broker_up", "The broker process runs", labels=labels)
        failing = GaugeMetricFamily(
            "raftlog_host_broker_failing",
            "The broker exited Backoff.failing_after times in a row and has not run stably since",
            labels=labels,
        )
        restarts = CounterMetricFamily(
            "raftlog_host_broker_restarts",
            "Exits of the broker the supervisor restarted",
            labels=labels,
        )
        now = self._supervisor.clock()
        for slot in self._supervisor.slots:
            key = [self._supervisor.host.name, str(slot.spec.node.node_id)]
            up.add_metric(key, float(slot.running()))
            failing.add_metric(key, float(slot.backoff.failing(now)))
            restarts.add_metric(key, slot.backoff.restarts)
        yield from (up, failing, restarts)


class Supervisor:
    def __init__(
        self,
        host: HostConfig,
        log_to_files: bool,
        clock: Callable[[], float] = time.monotonic,
        backoff: Callable[[], Backoff] = Backoff,
        command: Callable[[Path], list[str]] | None = None,
    ) -> None:
        """`log_to_files`: each broker logs to its data directory's raftlog.log (its
        console.log keeps what never reaches the log); otherwise to the supervisor's stderr.
        `command`: a broker's argv from its config file (`raftlog serve --config` of it)."""
        self.host = host
        self.clock = clock
        self._command = command or (
            lambda path: [sys.executable, "-m", "raftlog_app", "serve", "--config", str(path)]
        )
        self.slots = [Slot(spec, backoff()) for spec in host.brokers]
        self._log_to_files = log_to_files
        self._registry = CollectorRegistry(auto_describe=True)
        self._registry.register(_Metrics(self))
        app = web.Application()
        app.router.add_get("/metrics", self._scrape)
        app.router.add_get("/v1/host", self._status)
        self._http = HttpListener("host", app, *host.listen, HttpLimits())
        self._libc = ctypes.CDLL(None, use_errno=True)

    def status(self) -> dict[str, Any]:
        now = self.clock()
        return {
            "host": self.host.name,
            "pid": os.getpid(),
            "brokers": [slot.state(now) for slot in self.slots],
        }

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Until `stop` is set, by default by SIGTERM or SIGINT."""
        if stop is None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
        await self._http.start()
        log.info(
            "host %s: brokers %s; /metrics and /v1/host on %s:%d",
            self.host.name,
            ", ".join(str(s.spec.node.node_id) for s in self.slots),
            *self.host.listen,
        )
        tasks = [asyncio.create_task(self._keep(slot)) for slot in self.slots]
        await stop.wait()
        log.info("stopping the brokers one after the other")
        for slot, task in zip(self.slots, tasks, strict=True):
            slot.stopping.set()
            await task
        await self._http.close()
        log.info("every broker stopped")

    async def _keep(self, slot: Slot) -> None:
        """Runs the broker until its slot is stopping, starting it again after each exit."""
        node_id = slot.spec.node.node_id
        while not slot.stopping.is_set():
            slot.next_start = None
            slot.backoff.started(self.clock())
            try:
                proc = self._start(slot.spec)
            except OSError as e:  # its data directory unwritable, say: an exit like others
                what = f"could not start ({e})"
            else:
                slot.proc = proc
                code = await self._wait_exit(proc, slot.stopping)
                if code is None:  # stopping
                    await self._stop(proc, node_id)
                    slot.last_exit = proc.returncode
                    return
                slot.last_exit = code
                what = f"(pid {proc.pid}) exited with {code}"
            delay = slot.backoff.exited(self.clock())
            slot.next_start = self.clock() + delay
            failing = " (failing)" if slot.backoff.failing(self.clock()) else ""
            log.warning(
                "broker %d %s (%d in a row)%s; starting it again in %.1f s",
                node_id,
                what,
                slot.backoff.in_a_row,
                failing,
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(slot.stopping.wait(), delay)

    def _start(self, spec: BrokerSpec) -> subprocess.Popen[bytes]:
        spec.node.data_dir.mkdir(parents=True, exist_ok=True)
        spec.config_path.write_text(spec.config_text)
        argv = self._command(spec.config_path)
        console: IO[bytes] | None = None
        if self._log_to_files:
            argv += ["--log-file", str(spec.node.data_dir / "raftlog.log")]
            console = open(spec.node.data_dir / "console.log", "ab")  # noqa: SIM115 - the child's
        parent = os.getpid()
        libc = self._libc

        def die_with_supervisor() -> None:
            # A supervisor killed with -9 leaves no broker behind holding its ports: each
            # gets SIGTERM (and hands over its leaderships) when its parent dies.
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != parent:
                os._exit(1)

        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT if console else None,
                start_new_session=True,  # a terminal's Ctrl-C reaches the supervisor alone
                preexec_fn=die_with_supervisor,  # noqa: PLW1509 - no threads here
                cwd=spec.node.data_dir,
            )
        finally:
            if console is not None:
                console.close()
        log.info("broker %d started (pid %d)", spec.node.node_id, proc.pid)
        return proc

    @staticmethod
    async def _wait_exit(proc: subprocess.Popen[bytes], stopping: asyncio.Event) -> int | None:
        """The broker's exit code, or None once `stopping` is set with the broker running.
        Waits on a pidfd: no thread, no polling."""
        loop = asyncio.get_running_loop()
        exited = asyncio.Event()
        fd = os.pidfd_open(proc.pid)
        loop.add_reader(fd, exited.set)
        try:
            waits = {asyncio.create_task(exited.wait()), asyncio.create_task(stopping.wait())}
            _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
        finally:
            loop.remove_reader(fd)
            os.close(fd)
        if exited.is_set():
            return proc.wait()
        return None

    async def _stop(self, proc: subprocess.Popen[bytes], node_id: int) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT."""
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        deadline = self.clock() + STOP_TIMEOUT
        while proc.poll() is None and self.clock() < deadline:
            await asyncio.sleep(0.05)
        if proc.poll() is None:
            log.warning("broker %d did not stop in %.0f s: killed", node_id, STOP_TIMEOUT)
            proc.kill()
            proc.wait()
        log.info("broker %d (pid %d) stopped with %d", node_id, proc.pid, proc.returncode)

    async def _scrape(self, request: web.Request) -> web.Response:
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response(self.status())


def serve(path: Path, log_file: Path | None) -> int:
    """`raftlog serve --config host.toml`: refuses a host it cannot place (one line, via
    ConfigError), else supervises the brokers until SIGTERM or SIGINT."""
    host = load(path)
    busy = ports_in_use(host)
    if busy:
        raise ConfigError(
            f"host {host.name}: ports in use: {busy}; stop what holds them or move "
            "kafka_listen, raft_listen, admin_listen or proxy_listen"
        )
    for spec in host.brokers:
        try:
            spec.node.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"data_dir {spec.node.data_dir}: {e.strerror or e}") from None
    try:
        handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler()
    except OSError as e:
        raise ConfigError(f"--log-file {log_file}: {e.strerror or e}") from None
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s [host {host.name}] %(name)s: %(message)s")
    )
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    cores = available_cores()
    if len(host.brokers) > cores:
        log.warning("%d brokers share %d cores: each runs slower", len(host.brokers), cores)
    try:
        asyncio.run(Supervisor(host, log_to_files=log_file is not None).run())
    except OSError as e:  # host_listen in use, a data directory it may not write
        raise ConfigError(f"host {host.name} cannot start: {e}") from None
    return 0
