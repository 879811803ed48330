"""Pinned downloads from a Maven repository: a file named by its coordinates, fetched once into a cache and kept
only when its SHA-256 and size are the ones pinned, so a corrupted or substituted download is refused instead of
used.

A shared facility, at the bottom of the layers: the local node's OpenSearch artifacts
(:mod:`biorank.cluster.artifacts`) and the encoders of the catalogue (:mod:`biorank.models.catalogue`) are both
pinned files on Maven Central, and neither layer imports the other.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from biorank.errors import ArtifactError
from biorank.types import Advance

MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"


@dataclass(frozen=True)
class Artifact:
    """One file of a Maven repository, pinned: its coordinates, its SHA-256 and its size in bytes.

    Example:
        >>> Artifact("org.ow2.asm", "asm", "9.7", "jar", "adf4…", 125_428).repository_path
        'org/ow2/asm/asm/9.7/asm-9.7.jar'
    """

    group: str
    name: str
    version: str
    packaging: str
    sha256: str
    size: int

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.name}:{self.version}:{self.packaging}"

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}.{self.packaging}"

    @property
    def repository_path(self) -> str:
        """The file's path inside any Maven repository layout (Central, a mirror or ``~/.m2/repository``)."""
        return f"{self.group.replace('.', '/')}/{self.name}/{self.version}/{self.filename}"


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """The ``algorithm`` digest (a :mod:`hashlib` name) of the file at ``path``, in hex, read in 1 MiB chunks."""
    digest = hashlib.new(algorithm, usedforsecurity=algorithm != "md5")
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_of(path: Path) -> str:
    """The SHA-256 of the file at ``path``, in hex."""
    return file_digest(path)


def is_verified(path: Path, artifact: Artifact) -> bool:
    """Whether ``path`` is a file of ``artifact``'s pinned size and SHA-256."""
    return path.is_file() and path.stat().st_size == artifact.size and sha256_of(path) == artifact.sha256


def repository_url() -> str:
    """Maven Central unless ``BIORANK_MAVEN_REPO`` names a mirror (an in-house Nexus, say)."""
    return os.environ.get("BIORANK_MAVEN_REPO", MAVEN_CENTRAL).rstrip("/")


def fetch(artifact: Artifact, cache_dir: Path, progress: Advance | None = None) -> Path:
    """The verified local copy of ``artifact``, downloaded into ``cache_dir`` on first use.

    A copy already in the user's ``~/.m2/repository`` is reused when its hash matches, so a machine that
    has fetched the artifacts with Maven works without network.
    """
    dest = cache_dir / "maven" / artifact.repository_path
    if is_verified(dest, artifact):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".part")

    local_m2 = Path.home() / ".m2" / "repository" / artifact.repository_path
    if is_verified(local_m2, artifact):
        shutil.copyfile(local_m2, partial)
        partial.replace(dest)
        return dest

    url = f"{repository_url()}/{artifact.repository_path}"
    try:
        with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as out:
            while chunk := response.read(1 << 16):
                out.write(chunk)
                if progress is not None:
                    progress(len(chunk))
    except urllib.error.HTTPError as e:
        partial.unlink(missing_ok=True)
        raise ArtifactError(
            f"Maven repository answered {e.code} for {artifact.coordinates} ({url}); "
            "set BIORANK_MAVEN_REPO if you use a mirror"
        ) from None
    except (urllib.error.URLError, OSError) as e:
        partial.unlink(missing_ok=True)
        reason = getattr(e, "reason", e)
        raise ArtifactError(
            f"cannot download {artifact.coordinates} from {repository_url()}: {reason}; check the network "
            "or set BIORANK_MAVEN_REPO to a reachable mirror"
        ) from None

    if not is_verified(partial, artifact):
        got = sha256_of(partial)
        partial.unlink(missing_ok=True)
        raise ArtifactError(
            f"{artifact.coordinates} from {url} failed verification (sha256 {got}, expected {artifact.sha256}); "
            "the download was discarded"
        )
    partial.replace(dest)
    return dest


def missing_bytes(cache_dir: Path, artifacts: list[Artifact]) -> int:
    """How much of ``artifacts`` a first start still has to download: what is neither in the cache nor in
    ``~/.m2``."""
    total = 0
    for artifact in artifacts:
        cached = cache_dir / "maven" / artifact.repository_path
        local_m2 = Path.home() / ".m2" / "repository" / artifact.repository_path
        if not (cached.is_file() or local_m2.is_file()):
            total += artifact.size
    return total
