"""Finding a Java runtime the pinned OpenSearch supports (11 to 21; 17 preferred).

A newer JDK is not merely untested: OpenSearch 2.x installs a security manager, which Java 24 removed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from biorank.errors import JavaNotFound

SUPPORTED = range(11, 22)
PREFERRED = 17
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


@dataclass(frozen=True)
class Java:
    home: Path
    major: int


def java_major(java_home: Path) -> int | None:
    """The major version of ``java_home/bin/java``, or None when it does not run."""
    exe = java_home / "bin" / "java"
    if not os.access(exe, os.X_OK):
        return None
    try:
        out = subprocess.run([str(exe), "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _VERSION.search(out)
    if m is None:
        return None
    major = int(m.group(1))
    # Java 8 and older report "1.8.0_x".
    return int(m.group(2) or 0) if major == 1 else major


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


def find_java() -> Java:
    """The JDK to run OpenSearch with: ``BIORANK_JAVA_HOME`` if set, else the best supported one found."""
    explicit = os.environ.get("BIORANK_JAVA_HOME")
    if explicit:
        major = java_major(Path(explicit))
        if major not in SUPPORTED:
            raise JavaNotFound(
                f"BIORANK_JAVA_HOME={explicit} is {'not a Java home' if major is None else f'Java {major}'}; "
                f"OpenSearch 2.19 needs Java {SUPPORTED.start}-{SUPPORTED.stop - 1}"
            )
        return Java(Path(explicit), major)

    seen: dict[Path, int] = {}
    for home in _candidates():
        key = home.resolve()
        if key not in seen and (major := java_major(key)) is not None:
            seen[key] = major
    usable = [Java(home, major) for home, major in seen.items() if major in SUPPORTED]
    if not usable:
        others = ", ".join(f"Java {m} at {h}" for h, m in seen.items()) or "none"
        raise JavaNotFound(
            f"no Java {SUPPORTED.start}-{SUPPORTED.stop - 1} found (seen: {others}); install one, e.g. "
            "`apt-get install openjdk-17-jdk-headless`, or set BIORANK_JAVA_HOME"
        )
    # 17 first, then the newest supported: 2.19 is built and tested on 17 and 21.
    return min(usable, key=lambda j: (j.major != PREFERRED, -j.major))
