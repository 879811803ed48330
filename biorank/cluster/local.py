"""biorank's embedded default: a real OpenSearch with k-NN, assembled from Maven Central, of one node or several.

This module runs the processes: it starts every node (as an unprivileged user under root), waits until the
cluster answers, reports its status and stops it; :mod:`.assembly` builds the install it runs, :mod:`.layout`
gives each node its ports and configuration.

The nodes bind 127.0.0.1 only (which also keeps OpenSearch's production bootstrap checks off), keep their
install, data and logs under one home directory, and outlive the command that started them: ``stop`` ends them.
OpenSearch refuses to run as root, so a root caller gets the nodes run as an unprivileged system user.
Each engine version (:data:`artifacts.ENGINES`) has its own install and data under that home, since an index
written by a newer Lucene cannot be opened by an older one; one cluster runs at a time.

A cluster of N > 1 nodes shares the one install; each node has its own configuration directory
(``OPENSEARCH_PATH_CONF``), data, logs and ports, and they find each other through their transport ports on
loopback. Its data is its own (``cluster-<version>-<N>/``): the single node's indices are not moved into it.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import pwd
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from biorank.cluster import artifacts, assembly, layout, security
from biorank.cluster.assembly import jvm_options_for, vector_simd
from biorank.cluster.java import Java, find_java
from biorank.cluster.layout import DEFAULT_HTTP_PORT, DEFAULT_TRANSPORT_PORT, free_port, port_is_free
from biorank.config import default_cache
from biorank.errors import NodeStartError
from biorank.types import Echo

__all__ = ["DEFAULT_HTTP_PORT", "DEFAULT_TRANSPORT_PORT", "LocalNode", "Member", "NodeSettings", "NodeStatus",
           "default_home", "free_port", "jvm_options_for", "port_is_free", "vector_simd"]
"""What others import from here; the ports and JVM helpers live in :mod:`.layout` and :mod:`.assembly`."""

SERVICE_USER = "biorank"


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / fallback)


def default_home() -> Path:
    if os.environ.get("BIORANK_HOME"):
        return Path(os.environ["BIORANK_HOME"])
    # root's home is private (0700), and the node runs as another user, which must traverse its directory.
    if os.geteuid() == 0:
        return Path("/var/lib/biorank")
    return _xdg("XDG_DATA_HOME", ".local/share") / "biorank"


@dataclass(frozen=True)
class NodeSettings:
    """Everything about the local node that a user may want to change; the defaults suit a laptop."""

    home: Path = field(default_factory=default_home)
    cache_dir: Path = field(default_factory=default_cache)
    port: int | None = None
    heap: str = field(default_factory=lambda: os.environ.get("BIORANK_HEAP", "1g"))
    cluster_name: str = "biorank"
    start_timeout: float = 180.0
    secure: bool = False
    """With the security plugin: HTTPS, basic auth, an admin and a read-only user (see :mod:`.security`)."""
    engine_version: str | None = None
    """An OpenSearch version of :data:`artifacts.ENGINES`; None: ``BIORANK_ENGINE_VERSION``, else the default."""
    nodes: int | None = None
    """How many nodes; None: as many as the cluster last started here had (1 if none). ``heap`` is per node."""

    @property
    def engine(self) -> artifacts.Engine:
        return artifacts.engine(self.engine_version)


@dataclass(frozen=True)
class NodeStatus:
    installed: tuple[str, ...]
    """The engine versions assembled under the node's home."""
    running: bool
    pid: int | None
    url: str | None
    health: str | None
    engine_version: str | None = None
    """The version of the running node (it may differ from the settings' when another was started)."""
    java: str | None = None
    vector_simd: str | None = None
    """Whether Lucene scores vectors with SIMD: "on (…)" or "off (…)", with the node's own words where it said."""
    members: tuple[Member, ...] = ()
    """Every node of the cluster, running or not (one for the single node)."""
    shards: dict | None = None
    """The cluster's health counts (nodes, active, primary, relocating, initializing, unassigned shards)."""

    @property
    def urls(self) -> tuple[str, ...]:
        """The HTTP addresses of the nodes that run: a client given them all fails over among them."""
        return tuple(m.url for m in self.members if m.running)


@dataclass(frozen=True)
class Member:
    """One node of the local cluster."""

    name: str
    url: str
    transport_port: int
    pid: int | None
    running: bool


def _http_json(url: str, timeout: float, users: security.Credentials | None = None) -> dict | None:
    request = urllib.request.Request(url)
    context = None
    if users is not None:
        token = base64.b64encode(f"{users.admin}:{users.admin_password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        context = ssl.create_default_context(cafile=str(users.ca_file))
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as r:
            return json.load(r)
    except (urllib.error.URLError, OSError, ValueError):
        return None


class LocalNode:
    """Install, start, inspect and stop the local node. Every method is safe to call in any state."""

    def __init__(self, settings: NodeSettings | None = None, echo: Echo | None = None) -> None:
        self.settings = settings or NodeSettings()
        self._echo = echo or (lambda message: print(message, file=sys.stderr))

    # Layout --------------------------------------------------------------------------------------------
    @property
    def engine(self) -> artifacts.Engine:
        return self.settings.engine

    @property
    def install_dir(self) -> Path:
        return self.settings.home / f"opensearch-{self.engine.version}"

    @property
    def size(self) -> int:
        """How many nodes the cluster has: the settings' count, else that of the cluster last started here."""
        return self.settings.nodes or len(self._state().get("members", ())) or 1

    @property
    def data_dir(self) -> Path:
        """The single node's data (a cluster's nodes keep theirs under :meth:`member_dir`)."""
        # 2.19.1's data keeps the name it had when it was the only engine, so existing indices stay.
        version = self.engine.version
        return self.settings.home / ("data" if version == "2.19.1" else f"data-{version}")

    def member_dir(self, number: int) -> Path:
        """Node ``number``'s configuration and data in a cluster of several nodes."""
        return self.settings.home / f"cluster-{self.engine.version}-{self.size}" / f"node-{number}"

    @property
    def logs_dir(self) -> Path:
        return self.settings.home / "logs"

    @property
    def server_log(self) -> Path:
        return self.log_path(1)

    @property
    def console_log(self) -> Path:
        return self.log_path(1, console=True)

    @property
    def _run_dir(self) -> Path:
        return self.settings.home / "run"

    @property
    def _state_file(self) -> Path:
        return self.settings.home / "node.json"

    # Install -------------------------------------------------------------------------------------------
    def is_installed(self) -> bool:
        """Whether this engine is assembled here from exactly its pinned artifacts."""
        return assembly.is_assembled(self.install_dir, self.engine, self.settings.secure)

    def install(self) -> None:
        """Download (once, verified) and assemble the distribution, modules and k-NN plugin."""
        if not self.is_installed():
            assembly.assemble(self.engine, self.settings.home, self.install_dir, self.settings.cache_dir,
                              secure=self.settings.secure, echo=self._echo)

    @property
    def credentials(self) -> security.Credentials | None:
        """Users and CA of a secured node (made on its first start); None for a plain one or before that."""
        if not self.settings.secure:
            return None
        return security.credentials(self.settings.home, self.install_dir / "config")

    # Start / stop --------------------------------------------------------------------------------------
    def start(self) -> str:
        """Start every node of the cluster that does not run (all of them, or the ones that were lost); return
        the first node's URL once all have joined and the cluster is yellow or green."""
        with self._lock():
            state = self._state()
            members = self._members(state)
            running = [m for m in members if m.running]
            if running:
                version = state.get("engine", "2.19.1")
                if self.settings.engine_version and version != self.engine.version:
                    raise NodeStartError(
                        f"OpenSearch {version} runs at {running[0].url}; stop it first "
                        f"(`biorank cluster stop`) to start {self.engine.version}"
                    )
                if self.settings.nodes and self.settings.nodes != len(members):
                    raise NodeStartError(
                        f"a cluster of {len(members)} node(s) runs at {running[0].url}; stop it first "
                        f"(`biorank cluster stop`) to start {self.settings.nodes}"
                    )
                if len(running) == len(members):
                    return running[0].url
                # A lost node comes back as the version the others run.
                self.settings = replace(self.settings, engine_version=version)
            if self.settings.secure and self.size > 1:
                raise NodeStartError("a secured local cluster has one node; use --nodes 1")
            engine = self.engine
            java = find_java(engine.java, engine.version)
            self.install()
            if running:
                # Lost nodes come back on their own ports: the others know them by their transport port.
                ports = [(urlsplit(m.url).port or DEFAULT_HTTP_PORT, m.transport_port) for m in members]
                todo = [n for n, m in enumerate(members, 1) if not m.running]
                for n in todo:
                    layout.check_port_free(ports[n - 1][0], f"node-{n}'s HTTP")
                    layout.check_port_free(ports[n - 1][1], f"node-{n}'s transport")
            else:
                ports = layout.choose_ports(self.size, self.settings.port, self._echo)
                todo = list(range(1, self.size + 1))
            assembly.fit_jvm_options(self.install_dir, java)
            for n in todo:
                self._configure(n, ports)
            run_as = self._service_user()
            java_home = self._reachable_java(java, run_as)
            scheme = "https" if self.settings.secure else "http"
            urls = [f"{scheme}://127.0.0.1:{http}" for http, _ in ports]
            started = time.monotonic()
            procs, console_start = {}, 0
            for n in todo:
                with self.log_path(n, console=True).open("ab") as console:
                    console_start = console_start or console.tell()
                    procs[n] = self._launch(n, java_home, run_as, console)
            pids = {n: m.pid for n, m in enumerate(members, 1) if m.running} | {n: p.pid for n, p in procs.items()}
            self._write_state(engine.version, java, urls, ports, pids)
            self._wait_until_up(procs, urls[todo[0] - 1], len(ports))
            with self.log_path(todo[0], console=True).open("rb") as console:
                console.seek(console_start)
                simd = vector_simd(java, console.read().decode("utf-8", "replace"))
            self._state_file.write_text(json.dumps(self._state() | {"vector_simd": simd}))
            what = f"OpenSearch {engine.version}" + (f", {len(todo)} of {len(ports)} nodes," if len(ports) > 1 else "")
            self._echo(f"{what} is up at {', '.join(urls[n - 1] for n in todo)} (Java {java.major}, vector SIMD "
                       f"{simd}, {time.monotonic() - started:.1f} s)")
            return urls[0]

    def _launch(self, number: int, java_home: Path, run_as: pwd.struct_passwd | None,
                console: BinaryIO) -> subprocess.Popen:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "JAVA_HOME": str(java_home),
            "OPENSEARCH_JAVA_HOME": str(java_home),
            "OPENSEARCH_PATH_CONF": str(self._config_dir(number)),
            "LANG": "C.UTF-8",
        }
        pid_file = self._run_dir / ("opensearch.pid" if self.size == 1 else f"opensearch-node-{number}.pid")
        return subprocess.Popen(
            [str(self.install_dir / "bin" / "opensearch"), "-p", str(pid_file)],
            cwd=self.install_dir, env=env, stdin=subprocess.DEVNULL, stdout=console,
            stderr=subprocess.STDOUT, start_new_session=True,
            **({"user": run_as.pw_uid, "group": run_as.pw_gid, "extra_groups": []} if run_as else {}),
        )

    def _write_state(self, version: str, java: Java, urls: list[str], ports: list[tuple[int, int]],
                     pids: dict[int, int]) -> None:
        members = [{"name": layout.node_name(n, len(urls)), "url": url, "transport": ports[n - 1][1],
                    "pid": pids.get(n)} for n, url in enumerate(urls, 1)]
        self._state_file.write_text(json.dumps({
            "engine": version, "java": str(java.home), "java_major": java.major, "members": members,
        }))

    def _wait_until_up(self, procs: dict[int, subprocess.Popen], url: str, size: int) -> None:
        deadline = time.monotonic() + self.settings.start_timeout
        while time.monotonic() < deadline:
            for n, proc in procs.items():
                if proc.poll() is not None:
                    console = self.log_path(n, console=True)
                    self._kill(procs.values())
                    raise NodeStartError(
                        f"OpenSearch{f' node-{n}' if size > 1 else ''} exited with code {proc.returncode} while "
                        f"starting; last log lines ({console}):\n{self.log_tail(25, n, console=True)}"
                    )
            health = _http_json(f"{url}/_cluster/health?wait_for_status=yellow&wait_for_nodes={size}&timeout=1s",
                                timeout=5, users=self.credentials)
            if health and health.get("status") in ("yellow", "green") and health.get("number_of_nodes", 0) >= size:
                return
            time.sleep(0.5)
        self._kill(procs.values())
        raise NodeStartError(
            f"OpenSearch did not answer at {url} with {size} node(s) within {self.settings.start_timeout:.0f} s; "
            f"last log lines ({self.log_path(1, console=True)}):\n{self.log_tail(25, console=True)}"
        )

    @staticmethod
    def _kill(procs: Iterable[subprocess.Popen]) -> None:
        # Only the nodes this start launched: nodes that were running stay up.
        for proc in procs:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait(10)

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop every node of the cluster; True if one was running. The cluster's size is kept for the next start."""
        state = self._state()
        pids = [m.pid for m in self._members(state) if m.running and m.pid]
        if not pids:
            return False
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(self._pid_alive(pid) for pid in pids):
            time.sleep(0.2)
        for pid in pids:
            if self._pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                # Reap it when this very process started it (tests do), so no zombie keeps the pid "alive".
                os.waitpid(pid, os.WNOHANG)
        for member in state.get("members", ()):
            member["pid"] = None
        self._state_file.write_text(json.dumps({k: v for k, v in state.items() if k != "pid"}))
        return True

    def status(self) -> NodeStatus:
        state = self._state()
        members = self._members(state)
        installed = tuple(v for v in artifacts.ENGINES
                          if (self.settings.home / f"opensearch-{v}" / assembly.MARKER).is_file())
        running = [m for m in members if m.running]
        if not running:
            return NodeStatus(installed, False, None, None, None, members=members)
        answer = None
        for member in running:
            answer = _http_json(f"{member.url}/_cluster/health", timeout=5, users=self.credentials)
            if answer:
                break
        health = answer.get("status") if answer else "not answering"
        counts = {k: v for k, v in (answer or {}).items() if k.startswith(("number_of_", "active_"))
                  or k.endswith("_shards")}
        java = f"Java {state['java_major']} at {state['java']}" if "java_major" in state else None
        # A node started by a biorank before engine versions existed is 2.19.1, the only one there was.
        return NodeStatus(installed, True, running[0].pid, running[0].url, health, state.get("engine", "2.19.1"),
                          java, state.get("vector_simd"), members, counts or None)

    def log_path(self, number: int = 1, *, console: bool = False) -> Path:
        """Node ``number``'s log, or its JVM's console output (start-up errors)."""
        folder = self.logs_dir if self.size == 1 else self.logs_dir / f"node-{number}"
        return folder / ("console.log" if console else f"{self.settings.cluster_name}.log")

    def log_tail(self, lines: int = 50, number: int = 1, *, console: bool = False) -> str:
        path = self.log_path(number, console=console)
        if not path.is_file():
            return f"(no log yet at {path})"
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 400 * lines))
            tail = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join(tail[-lines:])

    # Helpers -------------------------------------------------------------------------------------------
    def _state(self) -> dict:
        try:
            return json.loads(self._state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _members(self, state: dict) -> tuple[Member, ...]:
        raw = state.get("members")
        if raw is None and "pid" in state:  # the state file of a biorank from before clusters of several nodes
            raw = [{"name": "biorank-local", "url": state.get("url"), "transport": DEFAULT_TRANSPORT_PORT,
                    "pid": state["pid"]}]
        return tuple(Member(m["name"], m["url"], m["transport"], m.get("pid"),
                            isinstance(m.get("pid"), int) and self._pid_alive(m["pid"])) for m in raw or ())

    @staticmethod
    def _pid_alive(pid: int) -> bool:
        # A recycled pid must not pass for our node: check that it is an OpenSearch JVM.
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        zombie = stat.rsplit(")", 1)[-1].split()[0] == "Z"
        return not zombie and b"org.opensearch.bootstrap.OpenSearch" in cmdline

    def _config_dir(self, number: int) -> Path:
        return self.install_dir / "config" if self.size == 1 else self.member_dir(number) / "config"

    def _configure(self, number: int, ports: list[tuple[int, int]]) -> None:
        """Write node ``number``'s configuration for a cluster whose nodes listen on ``ports``. Runs after
        :func:`~.assembly.fit_jvm_options`: a node of several copies the install's configuration."""
        if len(ports) == 1:
            data = self.data_dir
        else:
            shutil.copytree(self.install_dir / "config", self._config_dir(number), dirs_exist_ok=True)
            data = self.member_dir(number) / "data"
        logs = self.log_path(number).parent
        for d in (data, logs, self._run_dir):
            d.mkdir(parents=True, exist_ok=True)
        s = self.settings
        target = self._config_dir(number)
        (target / "opensearch.yml").write_text(
            layout.node_configuration(cluster_name=s.cluster_name, number=number, ports=ports, data=data, logs=logs)
            + (security.configure_security(target, self.settings.home) if s.secure else "")
        )
        (target / "jvm.options.d" / "biorank-heap.options").write_text(f"-Xms{s.heap}\n-Xmx{s.heap}\n")

    def _reachable_java(self, java: Java, run_as: pwd.struct_passwd | None) -> Path:
        """``java.home``, or a copy in the node's home where the service user cannot enter it (a JDK installed
        by pip under root's private home)."""
        if run_as is None or all(p.stat().st_mode & 0o001 for p in java.home.resolve().parents):
            return java.home
        copy = self.settings.home / f"java-{java.major}"
        if not (copy / "bin" / "java").is_file():
            self._echo(f"copying Java {java.major} from {java.home} into {copy}: user {run_as.pw_name!r} cannot "
                       "reach it there")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(java.home, copy, symlinks=True)
        for path in (copy, *copy.rglob("*")):
            os.lchown(path, run_as.pw_uid, run_as.pw_gid)
        return copy

    def _service_user(self) -> pwd.struct_passwd | None:
        """As root: the unprivileged user that runs the node (created once), owning the node's home."""
        if os.geteuid() != 0:
            return None
        name = os.environ.get("BIORANK_NODE_USER", SERVICE_USER)
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            result = subprocess.run(
                ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                 "--shell", "/usr/sbin/nologin", name],
                capture_output=True, text=True,
            )
            if result.returncode != 0 and "already exists" not in result.stderr:
                raise NodeStartError(
                    f"OpenSearch refuses to run as root and creating system user {name!r} failed: "
                    f"{result.stderr.strip()}; create it or run biorank as an ordinary user"
                ) from None
            user = pwd.getpwnam(name)
            self._echo(f"created system user {name!r}: OpenSearch refuses to run as root")
        home = self.settings.home.resolve()
        for parent in home.parents:
            if not parent.stat().st_mode & 0o001:
                raise NodeStartError(
                    f"the node runs as user {name!r}, which cannot enter {parent}; set BIORANK_HOME to a "
                    "directory outside it (the default for root is /var/lib/biorank)"
                )
        for path in (home, *home.rglob("*")):
            os.lchown(path, user.pw_uid, user.pw_gid)
        self._echo(f"running the node as system user {name!r} (OpenSearch refuses root)")
        return user

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        # Two commands starting the node at once must not assemble or launch it twice.
        self.settings.home.mkdir(parents=True, exist_ok=True)
        with (self.settings.home / ".lock").open("w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
