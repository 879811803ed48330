"""The local node's installer and its failure messages, on the real artifacts and a real JVM."""

from __future__ import annotations

import shutil
import socket
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from biorank import downloads
from biorank.cli.cluster import ENGINE_VERSIONS
from biorank.cluster import artifacts
from biorank.cluster.java import Java, find_java, java_major
from biorank.cluster.local import LocalNode, NodeSettings, jvm_options_for, vector_simd
from biorank.errors import ArtifactError, JavaNotFound, NodeStartError

DEFAULT = artifacts.ENGINES[artifacts.DEFAULT_ENGINE]
SMALL = DEFAULT.modules["lang-painless"].jars[-2]  # asm-tree, 52 kB


@pytest.fixture
def node_home() -> Iterator[Path]:
    home = Path(tempfile.mkdtemp(prefix="biorank-test-home-"))
    home.chmod(0o755)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_fetch_verifies_and_caches(tmp_path: Path) -> None:
    path = downloads.fetch(SMALL, tmp_path)
    assert path.stat().st_size == SMALL.size
    assert downloads.sha256_of(path) == SMALL.sha256
    assert downloads.fetch(SMALL, tmp_path) == path


def test_tampered_download_is_refused_and_discarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = downloads.fetch(SMALL, tmp_path / "good")
    mirror = tmp_path / "mirror"
    tampered = mirror / SMALL.repository_path
    tampered.parent.mkdir(parents=True)
    data = bytearray(good.read_bytes())
    data[100] ^= 0xFF
    tampered.write_bytes(bytes(data))
    monkeypatch.setenv("BIORANK_MAVEN_REPO", mirror.as_uri())
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.m2 copy to fall back on

    cache = tmp_path / "cache"
    with pytest.raises(ArtifactError, match="failed verification"):
        downloads.fetch(SMALL, cache)
    assert not any(p.is_file() for p in cache.rglob("*")), "nothing unverified may stay in the cache"


def test_unreachable_repository_names_the_coordinates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    monkeypatch.setenv("BIORANK_MAVEN_REPO", f"http://127.0.0.1:{closed_port}/maven2")
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ArtifactError, match=r"org\.ow2\.asm:asm-tree:9\.7:jar.*BIORANK_MAVEN_REPO"):
        downloads.fetch(SMALL, tmp_path / "cache")


def test_the_cli_offers_exactly_the_engines_there_are() -> None:
    assert tuple(artifacts.ENGINES) == ENGINE_VERSIONS
    with pytest.raises(ArtifactError, match=r"OpenSearch 9\.9\.9 is not one biorank assembles; choose 2\.19\.1"):
        artifacts.engine("9.9.9")


@pytest.mark.parametrize("version", list(artifacts.ENGINES))
def test_install_assembles_modules_without_jar_hell(node_home: Path, version: str) -> None:
    node = LocalNode(NodeSettings(home=node_home, engine_version=version))
    node.install()
    modules = node.install_dir / "modules"
    assert node.install_dir.name == f"opensearch-{version}"
    # The integ-test zip's own transport modules (3.x adds gRPC, which k-NN 3.x extends), and the two biorank adds.
    shipped = {"2.19.1": ["transport-netty4"], "3.4.0": ["transport-grpc", "transport-netty4"]}[version]
    assert sorted(p.name for p in modules.iterdir()) == sorted(["analysis-common", "lang-painless", *shipped])
    for module in ("lang-painless", "analysis-common"):
        jars = [p.name for p in (modules / module).glob("*.jar")]
        assert not [j for j in jars if j.startswith(("lucene-", f"opensearch-{version}"))]
        keys = {
            line.split("=", 1)[0]
            for line in (modules / module / "plugin-descriptor.properties").read_text().splitlines()
        }
        assert keys == {"description", "version", "name", "classname", "java.version", "opensearch.version",
                        "custom.foldername", "extended.plugins", "has.native.controller"}
        classname = dict(line.split("=", 1) for line in (modules / module / "plugin-descriptor.properties")
                         .read_text().splitlines())["classname"]
        assert any(path.endswith(classname.replace(".", "/") + ".class")
                   for jar in (modules / module).glob(f"{module}-{version}.jar")
                   for path in zipfile.ZipFile(jar).namelist())
    for plugin in node.engine.plugins:
        assert (node.install_dir / "plugins" / plugin / "plugin-descriptor.properties").is_file()
    assert ("opensearch-neural-search" in node.engine.plugins) == (version == "2.19.1")
    assert node.is_installed()


@pytest.mark.parametrize("version", list(artifacts.ENGINES))
def test_find_java_picks_a_jdk_the_engine_supports(version: str) -> None:
    engine = artifacts.ENGINES[version]
    java = find_java(engine.java, version)
    assert java_major(java.home) == java.major
    assert java.major in engine.java


def test_a_runtime_without_the_vector_module_loses_only_the_option_that_needs_it(tmp_path: Path) -> None:
    # A jlink-trimmed runtime lacks jdk.incubator.vector: the distribution's option for it would stop the JVM.
    pristine = "11-:-XX:+UseG1GC\n20-:--add-modules=jdk.incubator.vector\n-Xss1m\n"
    assert jvm_options_for(Java(tmp_path, 21, vector_module=False), pristine) == "11-:-XX:+UseG1GC\n-Xss1m\n"
    assert jvm_options_for(Java(tmp_path, 21, vector_module=True), pristine) == pristine


def test_a_secured_node_of_a_version_without_its_security_plugin_is_one_line(node_home: Path) -> None:
    node = LocalNode(NodeSettings(home=node_home, engine_version="3.4.0", secure=True))
    with pytest.raises(NodeStartError, match="rule-framework module, which Maven Central does not publish"):
        node.start()
    assert not node.status().running and not node.install_dir.exists()


def test_vector_simd_is_what_the_node_said_else_what_its_java_implies(tmp_path: Path) -> None:
    said = "[WARN ][stderr ] [n] INFO: Java vector incubator API enabled; uses preferredBitSize=256"
    assert vector_simd(Java(tmp_path, 25, True), said) == ("on (Java vector incubator API enabled; uses "
                                                          "preferredBitSize=256)")
    assert vector_simd(Java(tmp_path, 17, False), "").startswith("off (Java 17; Lucene's SIMD")
    assert vector_simd(Java(tmp_path, 21, False), "") == "off (this Java 21 runtime lacks jdk.incubator.vector)"


def test_unsupported_java_home_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIORANK_JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaNotFound, match=r"not a Java home.*OpenSearch 2\.19\.1 needs Java 11-21"):
        find_java(DEFAULT.java, DEFAULT.version)


def test_taken_port_is_refused_with_its_number(node_home: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(NodeStartError, match=f"port {port} on 127.0.0.1 is taken"):
            LocalNode(NodeSettings(home=node_home, port=port)).start()


def test_failed_start_shows_the_log(node_home: Path) -> None:
    node = LocalNode(NodeSettings(home=node_home, heap="12zz"))
    with pytest.raises(NodeStartError, match="exited with code") as failure:
        node.start()
    assert "Invalid" in str(failure.value) and "heap" in str(failure.value).lower()
    assert not node.status().running


def test_a_started_node_says_its_version_java_and_vector_simd(node_home: Path) -> None:
    node = LocalNode(NodeSettings(home=node_home, heap="512m"))
    try:
        url = node.start()
        status = node.status()
        java = find_java(DEFAULT.java, DEFAULT.version)
        assert status.running and status.url == url and status.engine_version == DEFAULT.version
        assert status.java == f"Java {java.major} at {java.home}"
        assert status.vector_simd is not None and status.vector_simd.startswith("on" if java.simd else "off")
        assert status.installed == (DEFAULT.version,)
    finally:
        node.stop()
