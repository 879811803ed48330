"""OpenSearch in a container, for machines with a Docker engine (the test fixture prefers it there).

The official image bundles k-NN with its native libraries; its version is one the local node runs, so both
give the same engine (testcontainers' own default image is 2.4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from biorank.cluster.artifacts import engine

if TYPE_CHECKING:
    from testcontainers.community.opensearch import OpenSearchContainer

def docker_available(timeout: float = 3.0) -> bool:
    """True when a Docker daemon answers; a client binary alone (as on our build machines) is not enough."""
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=timeout)
        return bool(client.ping())
    except Exception:
        # docker-py raises a zoo of types for "no daemon" (socket missing, permission, bad env).
        return False


def opensearch_container(version: str | None = None) -> OpenSearchContainer:
    """A not-yet-started container of ``version`` (default: the local node's) with security off, the way the
    local node runs."""
    from testcontainers.community.opensearch import OpenSearchContainer

    image = f"opensearchproject/opensearch:{engine(version).version}"
    # Images since 2.12 reject a weak initial admin password even with security off.
    container = OpenSearchContainer(image, security_enabled=False, initial_admin_password="Biorank-local-1")
    return container.with_env("OPENSEARCH_JAVA_OPTS", "-Xms1g -Xmx1g")
