"""biorank's embedded default: a real single-node OpenSearch with k-NN, assembled from Maven Central.

The node binds 127.0.0.1 only (which also keeps OpenSearch's production bootstrap checks off), keeps its
install, data and logs under one home directory, and outlives the command that started it: ``stop`` ends it.
OpenSearch refuses to run as root, so a root caller gets the node run as an unprivileged system user.
Each engine version (:data:`artifacts.ENGINES`) has its own install and data under that home, since an index
written by a newer Lucene cannot be opened by an older one; one node runs at a time.
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
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from biorank.cluster import artifacts, security
from biorank.cluster.java import VECTOR_MODULE, Java, find_java
from biorank.config import default_cache
from biorank.errors import NodeStartError

DEFAULT_HTTP_PORT = 9200
DEFAULT_TRANSPORT_PORT = 9300
SERVICE_USER = "biorank"
Echo = Callable[[str], None]


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


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the JVM does: a port whose last connections linger in TIME_WAIT (a node just stopped) is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nobody listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plugin_descriptor(engine: artifacts.Engine, name: str, module: artifacts.Module) -> str:
    # Exactly the keys OpenSearch knows (the same in 2.x and 3.x): an unknown key fails start-up.
    v = engine.version
    return (
        f"description=The {name} module, assembled by biorank from Maven Central\n"
        f"version={v}\nname={name}\nclassname={module.classname}\njava.version={engine.descriptor_java}\n"
        f"opensearch.version={v}\ncustom.foldername=\nextended.plugins={module.extends}\n"
        "has.native.controller=false\n"
    )


# The distribution's jvm.options adds the vector module on Java 20+, which fails start-up on a runtime
# without it (a runtime trimmed by jlink): the line is kept only where the runtime has the module.
_VECTOR_OPTION = f"20-:--add-modules={VECTOR_MODULE}"
_PRISTINE_JVM_OPTIONS = "jvm.options.opensearch"


# Lucene says at start-up whether its Panama (SIMD) vector scorer is on; the first such line decides.
_SIMD_ON = "Java vector incubator API enabled"
_SIMD_OFF = ("Java vector incubator module is not readable", "Java vector incubator module was enabled by",
             "Vector bitsize and/or integer vectors enforcement", "does not support the Java vector incubator")


def vector_simd(java: Java, console: str) -> str:
    """Whether Lucene scores vectors with SIMD on ``java``: what the node's start-up output says, else what the
    runtime implies (Lucene logs nothing on Java 17, and may log only at its first vector operation)."""
    for line in console.splitlines():
        if _SIMD_ON in line:
            return "on (" + line[line.index(_SIMD_ON):].strip().rstrip(".") + ")"
        if any(marker in line for marker in _SIMD_OFF):
            return "off (" + line.split("] ")[-1].strip().rstrip(".") + ")"
    if java.major < 20:
        return f"off (Java {java.major}; Lucene's SIMD vector scoring needs Java 20 or later)"
    if not java.vector_module:
        return f"off (this Java {java.major} runtime lacks {VECTOR_MODULE})"
    return f"on (Java {java.major} with {VECTOR_MODULE}; the node has not said so yet)"


def jvm_options_for(java: Java, pristine: str) -> str:
    """The distribution's ``jvm.options`` fitted to ``java``."""
    if java.vector_module:
        return pristine
    return "".join(line for line in pristine.splitlines(keepends=True) if line.strip() != _VECTOR_OPTION)


# Painless compiles scripts into classes of its own loader.
_PAINLESS_POLICY = """grant {
  permission java.lang.RuntimePermission "createClassLoader";
  permission java.lang.RuntimePermission "getClassLoader";
};
"""


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
    def data_dir(self) -> Path:
        # 2.19.1's data keeps the name it had when it was the only engine, so existing indices stay.
        version = self.engine.version
        return self.settings.home / ("data" if version == "2.19.1" else f"data-{version}")

    @property
    def logs_dir(self) -> Path:
        return self.settings.home / "logs"

    @property
    def server_log(self) -> Path:
        return self.logs_dir / f"{self.settings.cluster_name}.log"

    @property
    def console_log(self) -> Path:
        return self.logs_dir / "console.log"

    @property
    def _run_dir(self) -> Path:
        return self.settings.home / "run"

    @property
    def pid_file(self) -> Path:
        return self._run_dir / "opensearch.pid"

    @property
    def _state_file(self) -> Path:
        return self.settings.home / "node.json"

    @property
    def _marker(self) -> Path:
        return self.install_dir / ".biorank-assembled"

    # Install -------------------------------------------------------------------------------------------
    def _manifest(self) -> str:
        return "\n".join(f"{a.coordinates} {a.sha256}" for a in self.engine.artifacts(self.settings.secure))

    def is_installed(self) -> bool:
        return self._marker.is_file() and self._marker.read_text() == self._manifest()

    def install(self) -> None:
        """Download (once, verified) and assemble the distribution, modules and k-NN plugin."""
        if self.is_installed():
            return
        if self.settings.secure and isinstance(self.engine.security, str):
            raise NodeStartError(self.engine.security)
        downloads = self._download_all()
        self.settings.home.mkdir(parents=True, exist_ok=True)
        staging = self.settings.home / ".assembling"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        engine = self.engine
        with zipfile.ZipFile(downloads[engine.distribution]) as z:
            z.extractall(staging)
        root = staging / f"opensearch-{engine.version}"
        # zipfile drops the mode bits the scripts need.
        for script in (root / "bin").iterdir():
            script.chmod(0o755)
        for name, module in engine.modules.items():
            folder = root / "modules" / name
            folder.mkdir()
            for jar in module.jars:
                shutil.copyfile(downloads[jar], folder / jar.filename)
            (folder / "plugin-descriptor.properties").write_text(_plugin_descriptor(engine, name, module))
            if name == "lang-painless":
                (folder / "plugin-security.policy").write_text(_PAINLESS_POLICY)
        plugins = dict(engine.plugins)
        if self.settings.secure and isinstance(engine.security, artifacts.Artifact):
            plugins["opensearch-security"] = engine.security
        for folder, plugin in plugins.items():
            with zipfile.ZipFile(downloads[plugin]) as z:
                z.extractall(root / "plugins" / folder)
        if self.settings.secure:
            # As OpenSearch's plugin installer does: the plugin's configuration goes under config/.
            (root / "plugins" / "opensearch-security" / "config").rename(root / "config" / "opensearch-security")
        (root / ".biorank-assembled").write_text(self._manifest())
        shutil.rmtree(self.install_dir, ignore_errors=True)
        root.rename(self.install_dir)
        staging.rmdir()

    def _download_all(self) -> dict[artifacts.Artifact, Path]:
        from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

        cache = self.settings.cache_dir
        wanted = self.engine.artifacts(self.settings.secure)
        todo = artifacts.missing_bytes(cache, wanted)
        if todo:
            plugins = " and ".join(folder.removeprefix("opensearch-") for folder in self.engine.plugins)
            self._echo(
                f"downloading OpenSearch {self.engine.version} with {plugins} from "
                f"{artifacts.repository_url()} ({todo / 1e6:.0f} MB, once) into {cache}"
            )
        with Progress(
            "{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
            disable=not todo, transient=True,
        ) as bar:
            task = bar.add_task("OpenSearch artifacts", total=todo)
            return {
                a: artifacts.fetch(a, cache, lambda n: bar.advance(task, n)) for a in wanted
            }

    @property
    def credentials(self) -> security.Credentials | None:
        """Users and CA of a secured node (made on its first start); None for a plain one or before that."""
        if not self.settings.secure:
            return None
        return security.credentials(self.settings.home, self.install_dir / "config")

    # Start / stop --------------------------------------------------------------------------------------
    def start(self) -> str:
        """Start the node unless it runs already; return its URL once it is yellow or green."""
        with self._lock():
            status = self.status()
            if status.running and status.url:
                if self.settings.engine_version and status.engine_version != self.engine.version:
                    raise NodeStartError(
                        f"OpenSearch {status.engine_version} runs at {status.url}; stop it first "
                        f"(`biorank cluster stop`) to start {self.engine.version}"
                    )
                return status.url
            engine = self.engine
            java = find_java(engine.java, engine.version)
            self.install()
            http_port = self._choose_port(self.settings.port, DEFAULT_HTTP_PORT, "HTTP")
            transport_port = self._choose_port(None, DEFAULT_TRANSPORT_PORT, "transport")
            self._configure(http_port, transport_port, java)
            run_as = self._service_user()
            java_home = self._reachable_java(java, run_as)
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "JAVA_HOME": str(java_home),
                "OPENSEARCH_JAVA_HOME": str(java_home),
                "LANG": "C.UTF-8",
            }
            started = time.monotonic()
            with self.console_log.open("ab") as console:
                console_start = console.tell()
                proc = subprocess.Popen(
                    [str(self.install_dir / "bin" / "opensearch"), "-p", str(self.pid_file)],
                    cwd=self.install_dir, env=env, stdin=subprocess.DEVNULL, stdout=console,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    **({"user": run_as.pw_uid, "group": run_as.pw_gid, "extra_groups": []} if run_as else {}),
                )
            url = f"{'https' if self.settings.secure else 'http'}://127.0.0.1:{http_port}"
            self._state_file.write_text(json.dumps({
                "pid": proc.pid, "url": url, "engine": engine.version, "java": str(java.home),
                "java_major": java.major,
            }))
            self._wait_until_up(proc, url)
            with self.console_log.open("rb") as console:
                console.seek(console_start)
                simd = vector_simd(java, console.read().decode("utf-8", "replace"))
            self._state_file.write_text(json.dumps(self._state() | {"vector_simd": simd}))
            self._echo(f"OpenSearch {engine.version} is up at {url} (Java {java.major}, vector SIMD "
                       f"{simd}, {time.monotonic() - started:.1f} s)")
            return url

    def _wait_until_up(self, proc: subprocess.Popen, url: str) -> None:
        deadline = time.monotonic() + self.settings.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise NodeStartError(
                    f"OpenSearch exited with code {proc.returncode} while starting; last log lines "
                    f"({self.console_log}):\n{self.log_tail(25, self.console_log)}"
                )
            health = _http_json(f"{url}/_cluster/health?wait_for_status=yellow&timeout=1s", timeout=5,
                                users=self.credentials)
            if health and health.get("status") in ("yellow", "green"):
                return
            time.sleep(0.5)
        self.stop()
        raise NodeStartError(
            f"OpenSearch did not answer at {url} within {self.settings.start_timeout:.0f} s; last log lines "
            f"({self.console_log}):\n{self.log_tail(25, self.console_log)}"
        )

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the node; True if one was running."""
        pid = self._running_pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._pid_alive(pid):
            time.sleep(0.2)
        if self._pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            # Reap it when this very process started it (tests do), so no zombie keeps the pid "alive".
            os.waitpid(pid, os.WNOHANG)
        self._state_file.unlink(missing_ok=True)
        return True

    def status(self) -> NodeStatus:
        state = self._state()
        pid = self._running_pid()
        url = state.get("url") if pid else None
        health = None
        if url:
            answer = _http_json(f"{url}/_cluster/health", timeout=5, users=self.credentials)
            health = answer.get("status") if answer else "not answering"
        installed = tuple(v for v in artifacts.ENGINES
                          if (self.settings.home / f"opensearch-{v}" / ".biorank-assembled").is_file())
        if not pid:
            return NodeStatus(installed, False, None, None, None)
        java = f"Java {state['java_major']} at {state['java']}" if "java_major" in state else None
        # A node started by a biorank before engine versions existed is 2.19.1, the only one there was.
        return NodeStatus(installed, True, pid, url, health, state.get("engine", "2.19.1"), java,
                          state.get("vector_simd"))

    def log_tail(self, lines: int = 50, path: Path | None = None) -> str:
        path = path or self.server_log
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

    def _running_pid(self) -> int | None:
        pid = self._state().get("pid")
        return pid if isinstance(pid, int) and self._pid_alive(pid) else None

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

    def _choose_port(self, wanted: int | None, default: int, what: str) -> int:
        if wanted is not None:
            if not port_is_free(wanted):
                raise NodeStartError(
                    f"{what} port {wanted} on 127.0.0.1 is taken by another process; choose another with "
                    "--port or stop that process"
                )
            return wanted
        if port_is_free(default):
            return default
        port = free_port()
        self._echo(f"{what} port {default} is taken; the local node uses {port} instead")
        return port

    def _configure(self, http_port: int, transport_port: int, java: Java) -> None:
        for d in (self.data_dir, self.logs_dir, self._run_dir):
            d.mkdir(parents=True, exist_ok=True)
        s = self.settings
        (self.install_dir / "config" / "opensearch.yml").write_text(
            f"cluster.name: {s.cluster_name}\n"
            "node.name: biorank-local\n"
            "network.host: 127.0.0.1\n"
            f"http.port: {http_port}\n"
            f"transport.port: {transport_port}\n"
            "discovery.type: single-node\n"
            f"path.data: {self.data_dir.resolve()}\n"
            f"path.logs: {self.logs_dir.resolve()}\n"
            # A laptop's nearly full disk must not turn every index read-only.
            "cluster.routing.allocation.disk.threshold_enabled: false\n"
            + (security.configure_security(self.install_dir / "config", self.settings.home) if s.secure else "")
        )
        (self.install_dir / "config" / "jvm.options.d" / "biorank-heap.options").write_text(
            f"-Xms{s.heap}\n-Xmx{s.heap}\n"
        )
        config = self.install_dir / "config"
        pristine = config / _PRISTINE_JVM_OPTIONS
        if not pristine.is_file():
            # Kept once, before biorank first fits the distribution's options to a Java.
            shutil.copyfile(config / "jvm.options", pristine)
        (config / "jvm.options").write_text(jvm_options_for(java, pristine.read_text()))

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
