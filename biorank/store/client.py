"""An OpenSearch client for the configured cluster, or for the local node, started on demand."""

from __future__ import annotations

from typing import TYPE_CHECKING

from biorank.cluster.local import LocalNode
from biorank.config import ConnectionSettings, redact_url
from biorank.errors import ClusterUnavailable
from biorank.store.failures import describe

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

    from biorank.types import Echo


def split_urls(url: str) -> list[str]:
    """The nodes of ``--url``/``BIORANK_URL``: one URL, or several separated by commas."""
    return [u.strip() for u in url.split(",") if u.strip()]


def make_client(settings: ConnectionSettings, urls: list[str]) -> OpenSearch:
    """A client of every node in ``urls``: a request that meets a dead node is retried on the next one."""
    from opensearchpy import OpenSearch

    options: dict = {
        "hosts": urls,
        "timeout": settings.timeout,
        "verify_certs": settings.verify,
        "ssl_show_warn": settings.verify,
        # Bulk writes meet 429s under load; the writer retries those itself, with backoff.
        "retry_on_timeout": True,
        "max_retries": 3,
        # urllib3 keeps one connection per node by default: the indexer's bulk thread and its look-up of stored
        # documents (mget) share the client, and the second connection was opened and thrown away, with a warning.
        "pool_maxsize": 4,
    }
    if settings.user:
        options["http_auth"] = (settings.user, settings.password or "")
    if settings.ca_file:
        options["ca_certs"] = settings.ca_file
    return OpenSearch(**options)


def connect(
    settings: ConnectionSettings | str | None = None,
    *,
    start_local: bool = True,
    node: LocalNode | None = None,
    echo: Echo | None = None,
) -> OpenSearch:
    """A client that has answered once, so a down cluster fails here with one clear message.

    ``settings`` may be a URL, or several separated by commas (nodes of one cluster, among which requests fail
    over); credentials and TLS options then come from the environment (``BIORANK_USER``, ...). With no URL
    configured this is the local cluster, every running node of it: it is started when it is not running (and
    ``start_local`` allows), which is said on ``echo``; a node of it that was lost is left for `cluster start`.
    """
    from opensearchpy.exceptions import AuthorizationException, ConnectionError, SSLError, TransportError

    if not isinstance(settings, ConnectionSettings):
        settings = ConnectionSettings.from_env().with_overrides(url=settings)
    if settings.url:
        urls = split_urls(settings.url)
    else:
        node = node or LocalNode(echo=echo)
        status = node.status()
        if status.running and status.urls:
            urls = list(status.urls)
        elif start_local:
            if echo:
                echo("no --url/BIORANK_URL given and the local node is not running: starting it")
            node.start()
            urls = list(node.status().urls)
        else:
            raise ClusterUnavailable("the local node is not running; start it with `biorank cluster start`")

    client = make_client(settings, urls)
    shown = ", ".join(redact_url(url) for url in urls)
    try:
        client.info()
    except AuthorizationException:
        pass  # authenticated, without the cluster-monitor permission (a read-only user): each request decides
    except SSLError as e:
        raise ClusterUnavailable(describe(e, f"OpenSearch at {shown}")) from None
    except ConnectionError as e:
        reason = e.info if isinstance(e.info, str) else type(e.info).__name__
        hint = "is it running? `biorank cluster status` tells" if not settings.url else "check --url/BIORANK_URL"
        raise ClusterUnavailable(f"cannot reach OpenSearch at {shown} ({reason}); {hint}") from None
    except TransportError as e:
        raise ClusterUnavailable(describe(e, f"OpenSearch at {shown}")) from None
    return client
