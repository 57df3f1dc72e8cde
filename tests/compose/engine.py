"""The Docker engine and the images make compose-test builds on.

A daemon that already answers is used as it is. Otherwise (root only) this starts Debian's
dockerd with options that leave the host's firewall and forwarding alone: no iptables rules,
no masquerading, no ip_forward (the containers talk over their compose bridge, and published
ports go through docker-proxy on loopback), so the network fault suite (tests/faults), which
runs its own bridge and iptables rules, works on the same machine afterwards. The host's
iptables rules and bridge/forwarding sysctls are read before and compared after; a sysctl
the daemon changed is set back. Storage drivers are tried in turn (the daemon's choice,
fuse-overlayfs, vfs) until one runs a container.

The base image: python:3.11-slim when it can be pulled; else one made from Debian 12's
packages (debootstrap: python3 3.11, pip, a Java runtime for the audit, and gcc with the
Python headers for the node image's mypyc stage, which can reach no apt mirror here), shaped
like the slim image (python, pip, no EXTERNALLY-MANAGED marker). Either way the dependencies'
wheels (mypy's among them, at the pin of the mypyc extra), built on the host by `pip wheel`,
go into a layer at /wheels, and the Dockerfiles' WHEELS build argument installs from there
with no index: a container here reaches no package index.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build" / "compose"
PULLED_BASE = "python:3.11-slim"
# gcc, libc6-dev and python3-dev: the C build of the node image's mypyc stage (Dockerfile)
DEBIAN_PACKAGES = "python3,python3-pip,openjdk-17-jre-headless,gcc,libc6-dev,python3-dev"
# named by its package list, so a base made from an older list is not taken for this one
DEBIAN_BASE = (
    f"raftlog-test-base:bookworm-{hashlib.sha256(DEBIAN_PACKAGES.encode()).hexdigest()[:8]}"
)
WHEELS_IN_IMAGE = "/wheels"
SYSCTLS = (
    "net.ipv4.ip_forward",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
)
STORAGE_DRIVERS: tuple[str | None, ...] = (None, "fuse-overlayfs", "vfs")


class EngineError(RuntimeError):
    """The engine or an image could not be had; the message says what failed."""


def log(line: str) -> None:
    print(f"[compose-test {time.strftime('%H:%M:%S')}] {line}", flush=True)


def run(
    argv: list[str], timeout: float, check: bool = True, **kw: object
) -> subprocess.CompletedProcess[str]:
    """Runs a command with its output captured; a failure raises with the output's tail."""
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        **kw,  # type: ignore[call-overload]
    )
    if check and proc.returncode != 0:
        out = (proc.stdout + proc.stderr).strip()[-3000:]
        raise EngineError(f"{' '.join(argv[:4])} ... exited {proc.returncode}:\n{out}")
    return proc


def docker_exe() -> str:
    """Debian's docker client when installed (the same version as its daemon), else any."""
    for exe in ("/usr/bin/docker", shutil.which("docker")):
        if exe and os.access(exe, os.X_OK):
            return exe
    raise EngineError("no docker client: apt-get install docker.io")


def _daemon_answers(docker: str) -> bool:
    try:
        return (
            run([docker, "info", "--format", "{{.ServerVersion}}"], 20, check=False).returncode == 0
        )
    except subprocess.TimeoutExpired:
        return False


def _host_network_state() -> tuple[str, dict[str, str]]:
    rules = ""
    for table in ("filter", "nat"):
        if shutil.which("iptables"):
            rules += run(["iptables", "-t", table, "-S"], 30, check=False).stdout
    sysctls = {}
    for key in SYSCTLS:
        path = Path("/proc/sys") / key.replace(".", "/")
        if path.exists():
            sysctls[key] = path.read_text().strip()
    return rules, sysctls


class Engine:
    """A Docker daemon for the test: the running one, or dockerd started (and stopped) here."""

    def __init__(self) -> None:
        self.docker = docker_exe()
        self.proc: subprocess.Popen[bytes] | None = None
        self.driver = ""
        self._before: tuple[str, dict[str, str]] | None = None
        self._log = BUILD / "dockerd.log"
        self._drivers = list(STORAGE_DRIVERS)

    @property
    def started_here(self) -> bool:
        return self.proc is not None

    def start(self) -> None:
        if _daemon_answers(self.docker):
            self.driver = self._info("{{.Driver}}")
            log(
                f"using the running Docker daemon ({self._info('{{.ServerVersion}}')}, {self.driver})"
            )
            return
        if os.geteuid() != 0:
            raise EngineError("no Docker daemon answers, and starting dockerd needs root")
        if not shutil.which("dockerd"):
            raise EngineError("no dockerd: apt-get install docker.io")
        self._before = _host_network_state()
        self._start_next_driver()

    def _start_next_driver(self) -> None:
        errors = []
        while self._drivers:
            driver = self._drivers.pop(0)
            try:
                self._start_dockerd(driver)
                return
            except EngineError as e:
                errors.append(f"storage driver {driver or 'default'}: {e}")
                log(errors[-1])
                self._stop_dockerd()
        raise EngineError("dockerd did not start:\n" + "\n".join(errors))

    def _start_dockerd(self, driver: str | None) -> None:
        BUILD.mkdir(parents=True, exist_ok=True)
        argv = [
            "dockerd",
            "--iptables=false",
            "--ip-masq=false",
            "--ip-forward=false",
            "--userland-proxy=true",
        ]
        if driver:
            argv.append(f"--storage-driver={driver}")
        log(f"starting {' '.join(argv)} (log: {self._log})")
        out = open(self._log, "ab")  # noqa: SIM115 - the daemon's stdout for its whole life
        self.proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        out.close()
        deadline = time.monotonic() + 60
        while not _daemon_answers(self.docker):
            if self.proc.poll() is not None:
                raise EngineError(f"dockerd exited {self.proc.returncode}:\n{self._log_tail()}")
            if time.monotonic() > deadline:
                raise EngineError(f"dockerd did not answer in 60 s:\n{self._log_tail()}")
            time.sleep(0.5)
        self.driver = self._info("{{.Driver}}")
        log(f"dockerd {self._info('{{.ServerVersion}}')} up, storage driver {self.driver}")

    def retry_with_next_driver(self, why: str) -> bool:
        """After a container failed to run on this storage driver: the next one, if any
        (only for a daemon started here)."""
        if not self.started_here or not self._drivers:
            return False
        log(f"storage driver {self.driver} cannot run a container ({why.strip()[-400:]})")
        self._stop_dockerd()
        self._start_next_driver()
        return True

    def _info(self, fmt: str) -> str:
        return run([self.docker, "info", "--format", fmt], 30).stdout.strip()

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-15:])
        return ""

    def _stop_dockerd(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.proc = None

    def stop(self) -> list[str]:
        """Stops a daemon started here and puts the host's network settings back; returns
        what differed from before (empty: the host is as it was)."""
        if self._before is None:
            return []
        self._stop_dockerd()
        # dockerd leaves its default bridge behind; nothing of the host uses it
        if Path("/sys/class/net/docker0").exists():
            run(["ip", "link", "delete", "docker0"], 30, check=False)
        rules, sysctls = _host_network_state()
        before_rules, before_sysctls = self._before
        changed = []
        for key, value in before_sysctls.items():
            if sysctls.get(key) != value:
                changed.append(f"{key} was {value}, dockerd left {sysctls.get(key)}: set back")
                run(["sysctl", "-qw", f"{key}={value}"], 30, check=False)
        if rules != before_rules:
            changed.append(f"iptables differ:\nbefore:\n{before_rules}\nafter:\n{rules}")
        return changed

    # ---------------------------------------------------------------- images

    def has_image(self, tag: str) -> bool:
        return run([self.docker, "image", "inspect", tag], 60, check=False).returncode == 0

    def base_image(self) -> str:
        """python:3.11-slim if it is here or can be pulled, else the Debian-built one."""
        if self.has_image(PULLED_BASE):
            return PULLED_BASE
        try:
            pull = run([self.docker, "pull", PULLED_BASE], 120, check=False)
            if pull.returncode == 0:
                return PULLED_BASE
            why = (pull.stdout + pull.stderr).strip().splitlines()[-1:]
        except subprocess.TimeoutExpired:
            why = ["timed out after 120 s"]
        log(f"cannot pull {PULLED_BASE} ({' '.join(why)}): building {DEBIAN_BASE} from Debian")
        if not self.has_image(DEBIAN_BASE):
            rootfs = debian_rootfs()
            log(f"importing {rootfs} as {DEBIAN_BASE}")
            tar = subprocess.Popen(
                ["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."],
                stdout=subprocess.PIPE,
            )
            imported = subprocess.run(
                [self.docker, "import", "--change", "ENV LANG=C.UTF-8",
                 "--change", 'CMD ["python3"]', "-", DEBIAN_BASE],
                stdin=tar.stdout, capture_output=True, text=True, timeout=900,
            )  # fmt: skip
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait(timeout=60)
            if imported.returncode != 0 or tar.returncode != 0:
                raise EngineError(f"docker import failed: {imported.stderr.strip()[-2000:]}")
        return DEBIAN_BASE

    def wheels_image(self, base: str) -> str:
        """`base` plus every dependency's wheel at /wheels, tagged by the wheels' names."""
        wheels = host_wheels()
        names = sorted(p.name for p in wheels.glob("*.whl"))
        digest = hashlib.sha256(("\n".join([base, *names])).encode()).hexdigest()[:12]
        tag = f"raftlog-test-wheels:{digest}"
        if not self.has_image(tag):
            log(f"building {tag}: {base} with {len(names)} wheels at {WHEELS_IN_IMAGE}")
            (wheels / "Dockerfile").write_text(f"FROM {base}\nCOPY *.whl {WHEELS_IN_IMAGE}/\n")
            run([self.docker, "build", "-q", "-t", tag, str(wheels)], 900,
                env={**os.environ, "DOCKER_BUILDKIT": "0"})  # fmt: skip
        return tag

    def runs_a_container(self, image: str) -> str | None:
        """None when `image` runs Python 3.11 here, else the error."""
        proc = run(
            [self.docker, "run", "--rm", "--network", "none", image, "python3", "-c",
             "import sys; assert sys.version_info[:2] == (3, 11), sys.version"],
            300, check=False,
        )  # fmt: skip
        return None if proc.returncode == 0 else (proc.stdout + proc.stderr)


def debian_rootfs() -> Path:
    """A Debian 12 root filesystem under build/compose/ (made once; debootstrap, root)."""
    rootfs = BUILD / "rootfs"
    complete = rootfs / ".complete"
    if complete.exists() and complete.read_text() == DEBIAN_PACKAGES:
        return rootfs
    if not shutil.which("debootstrap"):
        raise EngineError("no debootstrap to build a base image: apt-get install debootstrap")
    tmp = BUILD / "rootfs.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(rootfs, ignore_errors=True)
    BUILD.mkdir(parents=True, exist_ok=True)
    log(f"debootstrap bookworm into {tmp} ({DEBIAN_PACKAGES}; a few minutes)")
    run(["debootstrap", "--variant=minbase", f"--include={DEBIAN_PACKAGES}", "bookworm",
         str(tmp)], 1800)  # fmt: skip
    # shaped like python:3.11-slim: `python` and `pip`, and pip may install into the system
    # Python (the image is the environment, as in the slim image)
    for marker in (tmp / "usr" / "lib").glob("python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    python = tmp / "usr" / "bin" / "python"
    if not python.exists():
        python.symlink_to("python3")
    if not (tmp / "usr" / "bin" / "pip").exists():
        raise EngineError("the Debian root filesystem has no pip")
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (tmp / cache).glob("*"):
            if entry.is_file():
                entry.unlink()
    tmp.rename(rootfs)
    complete.write_text(DEBIAN_PACKAGES)
    return rootfs


def wheel_requirements() -> list[str]:
    """What host_wheels builds beside raftlog and its extras: the build backend."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    return list(project["build-system"]["requires"])


def host_wheels() -> Path:
    """build/compose/wheels: a wheel for every dependency of raftlog, of its audit extra, of
    its mypyc extra (mypy, which the node image's mypyc stage installs) and of
    wheel_requirements(), made by the host's pip (again only when those change)."""
    wheels = BUILD / "wheels"
    stamp = wheels / ".requirements-sha256"
    requirements = wheel_requirements()
    digest = hashlib.sha256(
        (REPO / "pyproject.toml").read_bytes() + "\n".join(requirements).encode()
    ).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return wheels
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    log(f"pip wheel: the dependencies' wheels into {wheels}")
    run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-q", "-w",
         str(wheels), f"{REPO}[audit,mypyc]", *requirements], 1800)  # fmt: skip
    for own in wheels.glob("raftlog-*.whl"):
        own.unlink()  # the images install raftlog from its source
    stamp.write_text(digest)
    return wheels
