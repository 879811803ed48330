"""Assembling OpenSearch from its pinned Maven Central artifacts (:mod:`biorank.cluster.artifacts`): the
integ-test distribution, the modules it lacks (with the descriptors OpenSearch reads) and the plugins, unpacked
into a folder that :class:`~biorank.cluster.local.LocalNode` starts, with the distribution's JVM options fitted
to the Java that runs it.

Everything here writes files only; starting and stopping processes is :mod:`biorank.cluster.local`'s, the
layout of one node or several :mod:`biorank.cluster.layout`'s.
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

from biorank import downloads
from biorank.cluster import artifacts
from biorank.cluster.java import VECTOR_MODULE, Java
from biorank.downloads import Artifact
from biorank.errors import NodeStartError

MARKER = ".biorank-assembled"
"""The file an assembled install holds: the coordinates and hashes it was assembled from."""


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


def manifest(engine: artifacts.Engine, secure: bool) -> str:
    """What an install of ``engine`` (with the security plugin where ``secure``) is assembled from, one artifact a
    line: an install whose marker says otherwise is assembled again."""
    return "\n".join(f"{a.coordinates} {a.sha256}" for a in engine.artifacts(secure))


def is_assembled(install_dir: Path, engine: artifacts.Engine, secure: bool) -> bool:
    """Whether ``install_dir`` holds ``engine`` assembled from exactly its pinned artifacts."""
    marker = install_dir / MARKER
    return marker.is_file() and marker.read_text() == manifest(engine, secure)


def download_all(engine: artifacts.Engine, cache: Path, secure: bool,
                 echo: Callable[[str], None]) -> dict[Artifact, Path]:
    """Every artifact of ``engine``, verified, from ``cache`` or downloaded into it once, behind a progress bar."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    wanted = engine.artifacts(secure)
    todo = downloads.missing_bytes(cache, wanted)
    if todo:
        plugins = " and ".join(folder.removeprefix("opensearch-") for folder in engine.plugins)
        echo(
            f"downloading OpenSearch {engine.version} with {plugins} from "
            f"{downloads.repository_url()} ({todo / 1e6:.0f} MB, once) into {cache}"
        )
    with Progress(
        "{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        disable=not todo, transient=True,
    ) as bar:
        task = bar.add_task("OpenSearch artifacts", total=todo)
        return {
            a: downloads.fetch(a, cache, lambda n: bar.advance(task, n)) for a in wanted
        }


def assemble(engine: artifacts.Engine, home: Path, install_dir: Path, cache: Path, *, secure: bool,
             echo: Callable[[str], None]) -> None:
    """Download (once, verified) and assemble the distribution, modules and plugins of ``engine`` into
    ``install_dir``, through a staging folder under ``home`` so that a half-assembled install is never started."""
    if secure and isinstance(engine.security, str):
        raise NodeStartError(engine.security)
    files = download_all(engine, cache, secure, echo)
    home.mkdir(parents=True, exist_ok=True)
    staging = home / ".assembling"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    with zipfile.ZipFile(files[engine.distribution]) as z:
        z.extractall(staging)
    root = staging / f"opensearch-{engine.version}"
    # zipfile drops the mode bits the scripts need.
    for script in (root / "bin").iterdir():
        script.chmod(0o755)
    for name, module in engine.modules.items():
        folder = root / "modules" / name
        folder.mkdir()
        for jar in module.jars:
            shutil.copyfile(files[jar], folder / jar.filename)
        (folder / "plugin-descriptor.properties").write_text(_plugin_descriptor(engine, name, module))
        if name == "lang-painless":
            (folder / "plugin-security.policy").write_text(_PAINLESS_POLICY)
    plugins = dict(engine.plugins)
    if secure and isinstance(engine.security, Artifact):
        plugins["opensearch-security"] = engine.security
    for folder, plugin in plugins.items():
        with zipfile.ZipFile(files[plugin]) as z:
            z.extractall(root / "plugins" / folder)
    if secure:
        # As OpenSearch's plugin installer does: the plugin's configuration goes under config/.
        (root / "plugins" / "opensearch-security" / "config").rename(root / "config" / "opensearch-security")
    (root / MARKER).write_text(manifest(engine, secure))
    shutil.rmtree(install_dir, ignore_errors=True)
    root.rename(install_dir)
    staging.rmdir()


def fit_jvm_options(install_dir: Path, java: Java) -> None:
    """The install's ``jvm.options`` fitted to ``java`` (see :func:`jvm_options_for`), from the distribution's own,
    kept aside the first time."""
    config = install_dir / "config"
    pristine = config / _PRISTINE_JVM_OPTIONS
    if not pristine.is_file():
        # Kept once, before biorank first fits the distribution's options to a Java.
        shutil.copyfile(config / "jvm.options", pristine)
    (config / "jvm.options").write_text(jvm_options_for(java, pristine.read_text()))
