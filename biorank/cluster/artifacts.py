"""The pinned OpenSearch artifacts on Maven Central for each engine version.

OpenSearch publishes no module zips and no native k-NN libraries to Maven Central, so the local node is
assembled from a fixed set of files: the integ-test distribution, the painless and analysis-common module
jars (with painless's own dependencies, never the ``org.opensearch`` core jars the distribution already has:
a second copy fails start-up with "jar hell"), and the k-NN plugin zip. Each file is pinned by SHA-256, so a
corrupted or substituted download is refused instead of started (:mod:`biorank.downloads` fetches and verifies
them).

2.19.1 is pinned because it is the only 2.19.x for which Maven Central holds the k-NN plugin zip
(2.19.2 to 2.19.4 are absent there). 3.4.0 has k-NN and security there but no neural-search of any 3.x
version, so ``os-hybrid`` exists on 2.19.1 only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from biorank.downloads import Artifact
from biorank.errors import ArtifactError


@dataclass(frozen=True)
class Module:
    """A module OpenSearch ships in its full distribution but not in the integ-test zip: jars and descriptor."""

    classname: str
    extends: str
    jars: tuple[Artifact, ...]


@dataclass(frozen=True)
class Engine:
    """One OpenSearch version the local node can be: its artifacts and the Java majors that run it."""

    version: str
    distribution: Artifact
    plugins: dict[str, Artifact]
    """Plugin folder -> zip, in install order (neural-search extends k-NN)."""
    modules: dict[str, Module]
    security: Artifact | str
    """TLS, users and roles, for a node started with ``secure`` (only such a node downloads it); or why this
    version cannot have it."""
    java: range
    descriptor_java: int
    """The ``java.version`` a module descriptor of this version declares."""

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def artifacts(self, secure: bool = False) -> list[Artifact]:
        jars = [jar for module in self.modules.values() for jar in module.jars]
        security = [self.security] if secure and isinstance(self.security, Artifact) else []
        return [self.distribution, *self.plugins.values(), *jars, *security]


def _painless_dependencies() -> tuple[Artifact, ...]:
    # The same versions in 2.19.1's and 3.4.0's lang-painless POM.
    return (
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
    )


Pinned = tuple[str, int]
"""(sha256, size) of one of OpenSearch's own jars."""


def _modules(version: str, painless: Pinned, painless_spi: Pinned, analysis: Pinned, suffix: str) -> dict[str, Module]:
    """lang-painless (scripts) and analysis-common (language analysers, stemmers, shingles; extends painless).

    ``suffix`` ends the plugin class names: 3.x renamed ``PainlessPlugin`` to ``PainlessModulePlugin``.
    """
    def jar(name: str, pinned: Pinned) -> Artifact:
        return Artifact("org.opensearch.plugin", name, version, "jar", *pinned)

    return {
        "lang-painless": Module(f"org.opensearch.painless.Painless{suffix}", "", (
            jar("lang-painless", painless),
            jar("opensearch-scripting-painless-spi", painless_spi),
            *_painless_dependencies(),
        )),
        "analysis-common": Module(f"org.opensearch.analysis.common.CommonAnalysis{suffix}", "lang-painless", (
            jar("analysis-common", analysis),
        )),
    }


ENGINES: dict[str, Engine] = {
    "2.19.1": Engine(
        "2.19.1",
        Artifact("org.opensearch.distribution.integ-test-zip", "opensearch", "2.19.1", "zip",
                 "af7152d8b7f6f1cee09d47276b32b70479fe6dd8cdbb61213f84eb7f8098b261", 51_391_430),
        {
            "opensearch-knn": Artifact(
                "org.opensearch.plugin", "opensearch-knn", "2.19.1.0", "zip",
                "eab8c9818865bc035212eab5068cdacae164baa09d4c152f49b736d6f6b0e85c", 5_888_095),
            # OpenSearch's own hybrid query and normalisation pipeline, for comparison with biorank's exact
            # hybrid. It extends k-NN only: ml-commons and job-scheduler are needed for model inference, which
            # biorank does not ask of it.
            "opensearch-neural-search": Artifact(
                "org.opensearch.plugin", "neural-search", "2.19.1.0", "zip",
                "b17ca1d774692902c58cbae102bf463970740c31d81446866e8eabd336e285aa", 8_434_600),
        },
        _modules(
            "2.19.1",
            ("3cf5e02efa40ff5b88e74e1ab66a0bc462de3509fab4a6a4ffe90b8d13777a9a", 719_758),
            ("c2598797a5f6f897ce7e8d05f593ff96de3fbc56c52f299d63cddcae41556dda", 30_407),
            ("13fdc1071af42946b13153a62491a5e9b0ad214d44f7c8153d3afef60f558821", 199_627),
            "Plugin",
        ),
        Artifact("org.opensearch.plugin", "opensearch-security", "2.19.1.0", "zip",
                 "94a04f12ac6033902209fac1e4e512618d45beee604bbf0e42c3ed79c55220cf", 43_828_219),
        # 2.x installs a security manager, which Java 24 removed.
        java=range(11, 22),
        descriptor_java=11,
    ),
    "3.4.0": Engine(
        "3.4.0",
        Artifact("org.opensearch.distribution.integ-test-zip", "opensearch", "3.4.0", "zip",
                 "6540e95fe8bfaedc3eb1c58e829912ea2203af2ac1f88f76411c20a2fc5254a6", 133_384_684),
        {
            "opensearch-knn": Artifact(
                "org.opensearch.plugin", "opensearch-knn", "3.4.0.0", "zip",
                "f6cc96677277521e0dacc82aa078f87df70032026c8c7059623467a4141cfd2f", 5_710_868),
        },
        _modules(
            "3.4.0",
            ("2c6d2f22ef905744ce4681d8c06127f7b5f78da69da7a5d6dfa6cb16304e4813", 722_786),
            ("f35b1a391cdaee81bf419fa844fa5c52d71ba04b37952e15c5403d1b81c1a080", 30_326),
            ("4c2207ac94d242f35a0d83576c79744b8bbbc6142ef253f9ca81163e1605a944", 199_024),
            "ModulePlugin",
        ),
        # The zip is there (sha256 fc164c08…, 49,263,978 bytes), but it extends the rule-framework module, which
        # Maven Central does not publish: without it the plugin fails every request (NoClassDefFoundError).
        "the security plugin 3.4.0.0 extends OpenSearch's rule-framework module, which Maven Central does not "
        "publish, so a secured local node runs 2.19.1 only",
        # 3.x is built for Java 21 and later; its own distribution bundles a newer JDK.
        java=range(21, 26),
        descriptor_java=21,
    ),
}
DEFAULT_ENGINE = "2.19.1"


def engine(version: str | None = None) -> Engine:
    """The engine of ``version`` (``BIORANK_ENGINE_VERSION``, else the default)."""
    version = version or os.environ.get("BIORANK_ENGINE_VERSION") or DEFAULT_ENGINE
    if version not in ENGINES:
        raise ArtifactError(f"OpenSearch {version} is not one biorank assembles; choose {', '.join(ENGINES)}")
    return ENGINES[version]
