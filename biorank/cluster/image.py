"""An OpenSearch image built from what the local node runs, for machines with a Docker engine but no registry.

The image holds the same distribution, modules and plugins that :mod:`~biorank.cluster.assembly` assembles from
Maven Central, on a Debian base that carries a JRE of the engine's Java range from Debian's own packages. No
image registry is needed: the base is made with ``debootstrap`` from the Debian mirror apt already uses and
``docker import``-ed. Both steps are cached in Docker itself: the base by a tag naming what went into it, the
image by a label holding the digest of everything that went into it, so a second build with the same inputs does
nothing.

Settings pass as the official image takes them: every environment variable whose name has a dot
(``cluster.name``, ``discovery.seed_hosts``, ...) becomes ``-E name=value``; a container given no discovery
setting runs as a single node. Security is off, as on the local node without ``--secure``; a secured image
(``secure=True``) carries the security plugin with the certificates and users the local node's secured start
makes, kept on this machine so that rebuilds keep them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biorank.cluster import artifacts, assembly, security
from biorank.cluster.java import VECTOR_MODULE, Java
from biorank.errors import ContainerError

if TYPE_CHECKING:
    import docker

Echo = Callable[[str], None]

REPOSITORY = "biorank/opensearch"
"""Where built images are tagged, one tag per engine version (``biorank/opensearch:2.19.1``)."""
BASE_REPOSITORY = "biorank/debian"
RECIPE_LABEL = "org.biorank.recipe"
"""The label holding the digest of what went into an image: the same digest means nothing to rebuild."""
DEFAULT_MIRROR = "http://deb.debian.org/debian"
HOME = "/usr/share/opensearch"
UID = 1000


@dataclass(frozen=True)
class Base:
    """A Debian release with a JRE the engine runs on (Java 17 is bookworm's newest; 21 is trixie's)."""

    suite: str
    java_major: int
    packages: tuple[str, ...] = ()

    @property
    def include(self) -> tuple[str, ...]:
        # bash and passwd come with minbase; curl answers the health check.
        return (f"openjdk-{self.java_major}-jre-headless", "curl", *self.packages)

    @property
    def tag(self) -> str:
        recipe = json.dumps([self.suite, "minbase", sorted(self.include)]).encode()
        return f"{BASE_REPOSITORY}:{self.suite}-java{self.java_major}-{hashlib.sha256(recipe).hexdigest()[:12]}"


BASES = (Base("bookworm", 17), Base("trixie", 21))


def base_for(engine: artifacts.Engine) -> Base:
    """The oldest Debian release whose JRE runs ``engine`` (the Java each line was built on)."""
    return next(b for b in BASES if b.java_major in engine.java)


# The official image's way with settings, in bash (minbase has it): dotted variables become -E settings.
ENTRYPOINT = r"""#!/bin/bash
# Starts OpenSearch with Debian's JRE; every environment variable named like a setting (a dot in its name:
# cluster.name, discovery.seed_hosts, ...) becomes -E name=value, as in the official image.
set -euo pipefail
java=$(readlink -f "$(command -v java)")
export OPENSEARCH_JAVA_HOME=${OPENSEARCH_JAVA_HOME:-${java%/bin/java}}
settings=()
discovery=no
while IFS='=' read -r -d '' name value; do
  if [[ $name =~ ^[a-z0-9_]+(\.[a-z0-9_-]+)+$ ]]; then
    settings+=("-E" "$name=$value")
    [[ $name == discovery.* || $name == cluster.initial_* ]] && discovery=yes
  fi
done < <(env -0)
# A container told nothing about other nodes is a cluster of one (which also skips the production checks).
[[ $discovery == yes ]] || settings+=("-E" "discovery.type=single-node")
exec "$OPENSEARCH_HOME/bin/opensearch" "${settings[@]}" "$@"
"""

CONFIG = f"""# Written by biorank cluster image; settings given as -E (or dotted environment variables) override these.
cluster.name: biorank
network.host: 0.0.0.0
http.port: 9200
transport.port: 9300
path.data: {HOME}/data
path.logs: {HOME}/logs
# A laptop's nearly full disk must not turn every index read-only.
cluster.routing.allocation.disk.threshold_enabled: false
"""

DOCKERFILE = """FROM {base}
RUN useradd --uid {uid} --user-group --home-dir {home} --no-create-home --shell /usr/sbin/nologin opensearch
COPY --chown={uid}:{uid} opensearch {home}
COPY entrypoint.sh /usr/local/bin/biorank-opensearch
ENV OPENSEARCH_HOME={home} OPENSEARCH_PATH_CONF={home}/config LANG=C.UTF-8 PATH={home}/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR {home}
USER {uid}:{uid}
EXPOSE 9200 9300
VOLUME {home}/data
HEALTHCHECK --interval=5s --timeout=5s --start-period=120s --retries=60 CMD {health}
ENTRYPOINT ["/usr/local/bin/biorank-opensearch"]
"""


HEALTH = 'curl -fsS "http://127.0.0.1:9200/_cluster/health?wait_for_status=yellow&timeout=4s" >/dev/null || exit 1'
# A secured node answers 401 to a caller without a password: it is up.
SECURE_HEALTH = "curl -ks -o /dev/null -w '%{http_code}' https://127.0.0.1:9200/ | grep -qE '^(200|401)$' || exit 1"
CERTIFICATES = ("root-ca.pem", "node.pem", "node-key.pem", "admin.pem", "admin-key.pem")


def secure_home(version: str) -> Path:
    """Where a secured image's users and certificates are kept (the CA to trust, ``credentials.json``): made
    once, reused by every rebuild, so clients keep working across them."""
    from biorank.cluster.local import NodeSettings

    return NodeSettings().home / "images" / f"opensearch-{version}-secure"


def _secured(home: Path) -> str:
    """A digest of a secured image's users and certificates ("" before they exist)."""
    h = hashlib.sha256()
    for name in ("credentials.json", *CERTIFICATES):
        if (home / name).is_file():
            h.update(name.encode() + (home / name).read_bytes())
    return h.hexdigest() if (home / "credentials.json").is_file() else ""


@dataclass(frozen=True)
class BuiltImage:
    """What :func:`build_image` made or found: its tags, digest of inputs, size and whether it was built now."""

    tags: tuple[str, ...]
    recipe: str
    size_bytes: int
    built: bool
    seconds: float
    base_seconds: float | None
    """Time spent making the Debian base now (None: it was there already)."""
    credentials: security.Credentials | None = None
    """A secured image's users and the CA to trust (None for a plain one)."""


def docker_client(timeout: float = 10.0) -> docker.DockerClient:
    """A client of the Docker daemon, or a one-line :class:`ContainerError` saying what is missing and what to do."""
    try:
        from docker.errors import DockerException

        import docker
    except ImportError:
        raise ContainerError("the Docker SDK for Python is not installed: pip install 'biorank[docker]'") from None
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    socket = host.removeprefix("unix://") if host.startswith("unix://") else None
    if socket and not Path(socket).exists():
        found = shutil.which("dockerd") or shutil.which("docker")
        raise ContainerError(
            f"no Docker daemon: {socket} does not exist; " + (
                "start it (`systemctl start docker`, or as root without systemd `dockerd >/var/log/dockerd.log 2>&1 &`)"
                if found else "install Docker (Debian/Ubuntu: `apt-get install docker.io`) and start it")
        )
    try:
        client = docker.DockerClient(base_url=host, timeout=timeout)
        client.ping()
    except DockerException as e:
        text = str(e)
        if "PermissionError" in text or "Permission denied" in text:
            raise ContainerError(
                f"no permission on {socket or host}: add your user to the docker group (`sudo usermod -aG docker "
                "$USER`, then log in again) or run as root") from None
        raise ContainerError(
            f"the Docker daemon at {host} does not answer ({_first_line(text)}): start it (`systemctl start "
            "docker`, or as root without systemd `dockerd >/var/log/dockerd.log 2>&1 &`)") from None
    return client


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:200] if text.strip() else "no reason given"


def apt_mirror() -> str:
    """The Debian mirror apt uses here (deb822 or one-line sources), else deb.debian.org."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                words = line.split()
                if words[:1] == ["URIs:"] or words[:1] == ["deb"]:
                    url = next((w for w in words[1:] if w.startswith(("http://", "https://"))), None)
                    if url and url.rstrip("/").endswith("/debian"):
                        return url.rstrip("/")
    return DEFAULT_MIRROR


def _has_image(client: docker.DockerClient, name: str) -> Any:
    from docker.errors import ImageNotFound

    try:
        return client.images.get(name)
    except ImageNotFound:
        return None


def make_base(client: docker.DockerClient, base: Base, mirror: str, echo: Echo) -> float | None:
    """Tag ``base.tag`` with a Debian root made by debootstrap, unless Docker has it; the seconds it took."""
    if _has_image(client, base.tag) is not None:
        return None
    if shutil.which("debootstrap") is None:
        raise ContainerError("debootstrap is not installed: `apt-get install debootstrap` (it makes the image's "
                             "Debian base from packages, as no image registry is needed)")
    if os.geteuid() != 0:
        raise ContainerError("making the Debian base needs root (debootstrap); run `sudo biorank cluster image` "
                             "once, later builds reuse the base")
    echo(f"making a Debian {base.suite} base with Java {base.java_major} from {mirror} (debootstrap, once; about a "
         "minute)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="biorank-base-") as tmp:
        root, log = Path(tmp) / "root", Path(tmp) / "debootstrap.log"
        with log.open("wb") as out:
            done = subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={','.join(base.include)}", base.suite, str(root),
                 mirror], stdout=out, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            kept = Path(tempfile.gettempdir()) / f"biorank-debootstrap-{base.suite}.log"
            shutil.copyfile(log, kept)
            lines = log.read_text(errors="replace").strip().splitlines() or ["no output"]
            raise ContainerError(f"debootstrap of Debian {base.suite} from {mirror} failed ({lines[-1][:200]}); "
                                 f"its log is {kept}")
        # The package cache and lists are of no use in an image.
        for folder in (root / "var/cache/apt/archives", root / "var/lib/apt/lists"):
            for path in folder.glob("*"):
                if path.is_file():
                    path.unlink()
        tar = Path(tmp) / "root.tar"
        subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(tar), "."], check=True)
        repository, tag = base.tag.split(":")
        client.api.import_image_from_file(str(tar), repository=repository, tag=tag)
    return time.monotonic() - started


def base_java(client: docker.DockerClient, base: Base) -> Java:
    """The base's JRE as :func:`~biorank.cluster.assembly.jvm_options_for` needs it (whether it has the vector
    module decides a line of ``jvm.options``)."""
    modules = run_once(client, base.tag, ["java", "--list-modules"]).splitlines()
    return Java(Path("/usr/lib/jvm"), base.java_major, any(m.startswith(VECTOR_MODULE + "@") for m in modules))


def run_once(client: docker.DockerClient, image: str, command: list[str]) -> str:
    """What ``command`` prints in a throwaway container of ``image`` (no network), removed with its volumes (an
    OpenSearch image declares one for data, which ``docker run --rm`` through the SDK would leave behind)."""
    container = client.containers.run(image, entrypoint=command, detach=True, network_disabled=True)
    try:
        container.wait(timeout=120)
        return container.logs().decode(errors="replace")
    finally:
        container.remove(force=True, v=True)


def recipe(engine: artifacts.Engine, base_id: str, files: dict[str, str], secure: bool = False) -> str:
    """The digest of everything an image is made of: the pinned artifacts, the base and the files written."""
    h = hashlib.sha256(assembly.manifest(engine, secure).encode())
    h.update(base_id.encode())
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()


def build_image(version: str | None = None, *, secure: bool = False, tag: str | None = None,
                cache: Path | None = None, mirror: str | None = None, echo: Echo = print) -> BuiltImage:
    """Build (or find, when nothing that goes into it changed) the OpenSearch image of ``version``.

    Args:
        version: The engine version (default: the local node's default).
        secure: With the security plugin, TLS and users, as ``cluster start --secure`` makes them (tagged
            ``VERSION-secure``; the users' passwords and the CA stay in :func:`secure_home`).
        tag: Another name to tag the image with, besides ``biorank/opensearch:VERSION``.
        cache: Where the Maven artifacts are kept (default: the local node's download cache).
        mirror: The Debian mirror for the base (default: the one apt uses here).
        echo: Where progress lines go.

    Returns:
        The image's tags, recipe digest and size, and whether it was built now.

    Example:
        >>> build_image("2.19.1").tags[0]  # doctest: +SKIP
        'biorank/opensearch:2.19.1'
    """
    from biorank.cluster.local import NodeSettings

    started = time.monotonic()
    engine = artifacts.engine(version)
    if secure and isinstance(engine.security, str):
        raise ContainerError(engine.security)
    client = docker_client()
    base = base_for(engine)
    base_seconds = make_base(client, base, mirror or apt_mirror(), echo)
    java = base_java(client, base)
    keys = secure_home(engine.version) if secure else None
    files = {
        "Dockerfile": DOCKERFILE.format(base=base.tag, uid=UID, home=HOME, health=SECURE_HEALTH if secure else HEALTH),
        "entrypoint.sh": ENTRYPOINT,
        "opensearch.yml": CONFIG,
        # jvm.options is the distribution's, fitted to the base's Java: these two decide it.
        "java": f"{java.major} {java.vector_module}",
        **({"security": _secured(keys)} if keys else {}),
    }
    base_id = client.images.get(base.tag).id
    digest = recipe(engine, base_id, files, secure)
    tags = (f"{REPOSITORY}:{engine.version}{'-secure' if secure else ''}", *([tag] if tag else []))
    found = _has_image(client, tags[0])
    users = security.credentials(keys, keys) if keys else None
    if found is not None and found.labels.get(RECIPE_LABEL) == digest:
        for name in tags[1:]:
            found.tag(name)
        echo(f"{tags[0]} is up to date (recipe {digest[:12]})")
        return BuiltImage(tags, digest, found.attrs["Size"], False, time.monotonic() - started, base_seconds, users)
    settings = NodeSettings(engine_version=engine.version)
    with _context(engine, java, settings.cache_dir if cache is None else cache, files, keys, echo) as context:
        if keys:
            # Users and certificates are made with the context the first time: the label names them.
            files["security"] = _secured(keys)
            digest, users = recipe(engine, base_id, files, secure), security.credentials(keys, keys)
        echo(f"building {tags[0]} (OpenSearch {engine.version}, Java {java.major} from Debian {base.suite}"
             f"{', security on' if secure else ''})")
        image = _docker_build(client, context, tags[0], {RECIPE_LABEL: digest,
                                                         "org.opencontainers.image.version": engine.version})
    for name in tags[1:]:
        image.tag(name)
    image.reload()
    seconds = time.monotonic() - started
    echo(f"built {', '.join(tags)} in {seconds:.0f} s ({image.attrs['Size'] / 1e6:.0f} MB)")
    return BuiltImage(tags, digest, image.attrs["Size"], True, seconds, base_seconds, users)


@contextlib.contextmanager
def _context(engine: artifacts.Engine, java: Java, cache: Path, files: dict[str, str], keys: Path | None,
             echo: Echo) -> Iterator[Path]:
    """A build folder: the assembled distribution with the image's configuration (secured with the users and
    certificates kept in ``keys``, made there the first time), and the recipe's files."""
    with tempfile.TemporaryDirectory(prefix="biorank-image-") as tmp:
        context = Path(tmp)
        install = context / "opensearch"
        assembly.assemble(engine, context / "staging", install, cache, secure=keys is not None, echo=echo)
        shutil.rmtree(context / "staging", ignore_errors=True)
        config = install / "config"
        settings = files["opensearch.yml"]
        if keys is not None:
            keys.mkdir(parents=True, exist_ok=True)
            # The node's private keys and the passwords are kept here: for their owner only.
            keys.chmod(0o700)
            for name in CERTIFICATES:
                if (keys / name).is_file():
                    shutil.copyfile(keys / name, config / name)
            settings += security.configure_security(config, keys)
            for name in CERTIFICATES:
                shutil.copyfile(config / name, keys / name)
        (config / "opensearch.yml").write_text(settings)
        assembly.fit_jvm_options(install, java)
        for folder in ("data", "logs"):
            (install / folder).mkdir(exist_ok=True)
        (context / "Dockerfile").write_text(files["Dockerfile"])
        entrypoint = context / "entrypoint.sh"
        entrypoint.write_text(files["entrypoint.sh"])
        # COPY keeps the mode (the classic builder has no --chmod).
        entrypoint.chmod(0o755)
        yield context


def _docker_build(client: docker.DockerClient, context: Path, tag: str, labels: dict[str, str]) -> Any:
    from docker.errors import BuildError

    try:
        image, _ = client.images.build(path=str(context), tag=tag, labels=labels, rm=True, forcerm=True)
    except BuildError as e:
        said = [str(chunk.get("stream", chunk.get("error", ""))).strip() for chunk in e.build_log]
        raise ContainerError(f"docker build of {tag} failed: {_first_line(e.msg)} "
                             f"(last output: {next((s for s in reversed(said) if s), 'none')[:200]})") from None
    return image
