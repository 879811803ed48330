"""The local node's installer and its failure messages, on the real artifacts and a real JVM."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from biorank.cluster import artifacts
from biorank.cluster.java import find_java, java_major
from biorank.cluster.local import LocalNode, NodeSettings
from biorank.errors import ArtifactError, JavaNotFound, NodeStartError

SMALL = artifacts.MODULES["lang-painless"][2][-2]  # asm-tree, 52 kB


@pytest.fixture
def node_home() -> Iterator[Path]:
    home = Path(tempfile.mkdtemp(prefix="biorank-test-home-"))
    home.chmod(0o755)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_fetch_verifies_and_caches(tmp_path: Path) -> None:
    path = artifacts.fetch(SMALL, tmp_path)
    assert path.stat().st_size == SMALL.size
    assert artifacts.sha256_of(path) == SMALL.sha256
    assert artifacts.fetch(SMALL, tmp_path) == path


def test_tampered_download_is_refused_and_discarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = artifacts.fetch(SMALL, tmp_path / "good")
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
        artifacts.fetch(SMALL, cache)
    assert not any(p.is_file() for p in cache.rglob("*")), "nothing unverified may stay in the cache"


def test_unreachable_repository_names_the_coordinates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    monkeypatch.setenv("BIORANK_MAVEN_REPO", f"http://127.0.0.1:{closed_port}/maven2")
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ArtifactError, match=r"org\.ow2\.asm:asm-tree:9\.7:jar.*BIORANK_MAVEN_REPO"):
        artifacts.fetch(SMALL, tmp_path / "cache")


def test_install_assembles_modules_without_jar_hell(node_home: Path) -> None:
    node = LocalNode(NodeSettings(home=node_home))
    node.install()
    modules = node.install_dir / "modules"
    assert sorted(p.name for p in modules.iterdir()) == ["analysis-common", "lang-painless", "transport-netty4"]
    for module in ("lang-painless", "analysis-common"):
        jars = [p.name for p in (modules / module).glob("*.jar")]
        assert not [j for j in jars if j.startswith(("lucene-", f"opensearch-{artifacts.OPENSEARCH_VERSION}"))]
        keys = {
            line.split("=", 1)[0]
            for line in (modules / module / "plugin-descriptor.properties").read_text().splitlines()
        }
        assert keys == {"description", "version", "name", "classname", "java.version", "opensearch.version",
                        "custom.foldername", "extended.plugins", "has.native.controller"}
    for plugin in ("opensearch-knn", "opensearch-neural-search"):
        assert (node.install_dir / "plugins" / plugin / "plugin-descriptor.properties").is_file()
    assert node.is_installed()


def test_find_java_picks_a_supported_jdk() -> None:
    java = find_java()
    assert java_major(java.home) == java.major
    assert 11 <= java.major <= 21


def test_unsupported_java_home_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIORANK_JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaNotFound, match=r"not a Java home.*needs Java 11-21"):
        find_java()


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
