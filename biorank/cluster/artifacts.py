"""The pinned OpenSearch artifacts on Maven Central, and a verified download of each.

OpenSearch publishes no module zips and no native k-NN libraries to Maven Central, so the local node is
assembled from a fixed set of files: the integ-test distribution, the painless and analysis-common module
jars (with painless's own dependencies, never the ``org.opensearch`` core jars the distribution already has:
a second copy fails start-up with "jar hell"), and the k-NN plugin zip. Each file is pinned by SHA-256, so a
corrupted or substituted download is refused instead of started.

2.19.1 is pinned because it is the only 2.19.x for which Maven Central holds the k-NN plugin zip
(2.19.2 to 2.19.4 are absent there).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from biorank.errors import ArtifactError

OPENSEARCH_VERSION = "2.19.1"
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"

ProgressCallback = Callable[[int], None]


@dataclass(frozen=True)
class Artifact:
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


_V = OPENSEARCH_VERSION

DISTRIBUTION = Artifact(
    "org.opensearch.distribution.integ-test-zip", "opensearch", _V, "zip",
    "af7152d8b7f6f1cee09d47276b32b70479fe6dd8cdbb61213f84eb7f8098b261", 51_391_430,
)
KNN_PLUGIN = Artifact(
    "org.opensearch.plugin", "opensearch-knn", f"{_V}.0", "zip",
    "eab8c9818865bc035212eab5068cdacae164baa09d4c152f49b736d6f6b0e85c", 5_888_095,
)

# OpenSearch's own hybrid query and normalisation pipeline, for comparison with biorank's exact hybrid. It
# extends k-NN only: ml-commons and job-scheduler are needed for model inference, which biorank does not ask of it.
NEURAL_SEARCH_PLUGIN = Artifact(
    "org.opensearch.plugin", "neural-search", f"{_V}.0", "zip",
    "b17ca1d774692902c58cbae102bf463970740c31d81446866e8eabd336e285aa", 8_434_600,
)
PLUGINS = {"opensearch-knn": KNN_PLUGIN, "opensearch-neural-search": NEURAL_SEARCH_PLUGIN}
"""Plugin folder -> zip, in install order (neural-search extends k-NN)."""

# TLS, users and roles, for a node started with ``secure``; only such a node downloads it.
SECURITY_PLUGIN = Artifact(
    "org.opensearch.plugin", "opensearch-security", f"{_V}.0", "zip",
    "94a04f12ac6033902209fac1e4e512618d45beee604bbf0e42c3ed79c55220cf", 43_828_219,
)

# module name -> (plugin class, plugins it extends, jars of the module directory)
MODULES: dict[str, tuple[str, str, tuple[Artifact, ...]]] = {
    "lang-painless": (
        "org.opensearch.painless.PainlessPlugin",
        "",
        (
            Artifact("org.opensearch.plugin", "lang-painless", _V, "jar",
                     "3cf5e02efa40ff5b88e74e1ab66a0bc462de3509fab4a6a4ffe90b8d13777a9a", 719_758),
            Artifact("org.opensearch.plugin", "opensearch-scripting-painless-spi", _V, "jar",
                     "c2598797a5f6f897ce7e8d05f593ff96de3fbc56c52f299d63cddcae41556dda", 30_407),
            Artifact("org.antlr", "antlr4-runtime", "4.13.1", "jar",
                     "54665d2838cc66458343468efc539e454fc95b46a8a04b13c6ac43fc9be63505", 326_305),
            Artifact("org.ow2.asm", "asm", "9.7", "jar",
                     "adf46d5e34940bdf148ecdd26a9ee8eea94496a72034ff7141066b3eea5c4e9d", 125_428),
            Artifact("org.ow2.asm", "asm-analysis", "9.7", "jar",
                     "7bc6bcbc21379948a0c8c467fb0f864206e5b818f6bc0b546872f5c9f941556f", 34_776),
            Artifact("org.ow2.asm", "asm-commons", "9.7", "jar",
                     "389bc247958e049fc9a0408d398c92c6d370c18035120395d4cba1d9d9304b7a", 73_426),
            Artifact("org.ow2.asm", "asm-tree", "9.7", "jar",
                     "62f4b3bc436045c1acb5c3ba2d8ec556ec3369093d7f5d06c747eb04b56d52b1", 51_934),
            Artifact("org.ow2.asm", "asm-util", "9.7", "jar",
                     "37a6414d36641973f1af104937c95d6d921b2ddb4d612c66c5a9f2b13fc14211", 93_784),
        ),
    ),
    # Gives the language analysers (english, ...), stemmers and shingles; it extends painless.
    "analysis-common": (
        "org.opensearch.analysis.common.CommonAnalysisPlugin",
        "lang-painless",
        (
            Artifact("org.opensearch.plugin", "analysis-common", _V, "jar",
                     "13fdc1071af42946b13153a62491a5e9b0ad214d44f7c8153d3afef60f558821", 199_627),
        ),
    ),
}


def all_artifacts(secure: bool = False) -> list[Artifact]:
    jars = [jar for _, _, module_jars in MODULES.values() for jar in module_jars]
    return [DISTRIBUTION, *PLUGINS.values(), *jars, *([SECURITY_PLUGIN] if secure else [])]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _is_verified(path: Path, artifact: Artifact) -> bool:
    return path.is_file() and path.stat().st_size == artifact.size and sha256_of(path) == artifact.sha256


def repository_url() -> str:
    """Maven Central unless ``BIORANK_MAVEN_REPO`` names a mirror (an in-house Nexus, say)."""
    return os.environ.get("BIORANK_MAVEN_REPO", MAVEN_CENTRAL).rstrip("/")


def fetch(artifact: Artifact, cache_dir: Path, progress: ProgressCallback | None = None) -> Path:
    """The verified local copy of ``artifact``, downloaded into ``cache_dir`` on first use.

    A copy already in the user's ``~/.m2/repository`` is reused when its hash matches, so a machine that
    has fetched the artifacts with Maven works without network.
    """
    dest = cache_dir / "maven" / artifact.repository_path
    if _is_verified(dest, artifact):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".part")

    local_m2 = Path.home() / ".m2" / "repository" / artifact.repository_path
    if _is_verified(local_m2, artifact):
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

    if not _is_verified(partial, artifact):
        got = sha256_of(partial)
        partial.unlink(missing_ok=True)
        raise ArtifactError(
            f"{artifact.coordinates} from {url} failed verification (sha256 {got}, expected {artifact.sha256}); "
            "the download was discarded"
        )
    partial.replace(dest)
    return dest


def missing_bytes(cache_dir: Path, secure: bool = False) -> int:
    """How much a first start still has to download: what is neither in the cache nor in ``~/.m2``."""
    total = 0
    for artifact in all_artifacts(secure):
        cached = cache_dir / "maven" / artifact.repository_path
        local_m2 = Path.home() / ".m2" / "repository" / artifact.repository_path
        if not (cached.is_file() or local_m2.is_file()):
            total += artifact.size
    return total
