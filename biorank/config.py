"""Defaults every layer shares, and how biorank reaches a cluster: one settings object, filled from options or
the environment. A leaf module: the CLI's options read their defaults from here and from the settings
dataclasses of the layers, never from literals of their own."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DEFAULT_INDEX = "biorank"
"""The documents index a command uses when none is named; its sentences go to ``biorank-sentences``."""
QUERY_LOG_INDEX = "biorank-queries"
SEED = 20261122
"""The one seed of everything biorank draws at random: training and the tuners' samplers (the dev split is a
hash of each query's id, :mod:`biorank.evaluation.splits`)."""
DEFAULT_LAMBDA = 0.03
"""λ of the hybrid when the index has no tuned one and its encoder names none: all-MiniLM-L6-v2's best on
SciFact's dev split by ``biorank tune-lambda`` (docs/measurements/retrieval.md, "Which encoder"). Encoders of the
catalogue carry their own (:mod:`biorank.models.catalogue`)."""
MAX_RECORD_BYTES = 1 << 20
"""Title + abstract of one indexed record; PubMed's longest abstracts are tens of kilobytes."""
RESULT_WINDOW = 10_000
"""OpenSearch's ``index.max_result_window``: the most hits one search returns (a run's depth, a facet's candidates,
the entries one read fetches)."""
SHOWN_HITS = 1000
"""The most hits a command or page shows for one query: past that no reader reads, and each is a table row."""

_FALSE = {"0", "false", "no", "off"}


def default_cache() -> Path:
    """Where downloads and derived files (the node's artifacts, exported models) are kept [BIORANK_CACHE]."""
    if os.environ.get("BIORANK_CACHE"):
        return Path(os.environ["BIORANK_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "biorank"


@dataclass(frozen=True)
class ConnectionSettings:
    """Where the cluster is. ``url=None`` means the local node that biorank manages itself."""

    url: str | None = None
    user: str | None = None
    password: str | None = None
    ca_file: str | None = None
    verify: bool = True
    timeout: float = 60.0
    query_log: bool = True
    """Whether query, search and eval write a record per query to ``query_log_index`` [BIORANK_QUERY_LOG=0]."""
    query_log_index: str = QUERY_LOG_INDEX
    """[BIORANK_QUERY_LOG_INDEX] One exact index name: the query log refuses a pattern or a list in one line
    (``biorank.store.names.check_query_log_name``; this leaf module cannot raise biorank's errors)."""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ConnectionSettings:
        """The settings the environment gives (``BIORANK_URL``, ``BIORANK_USER``, ``BIORANK_PASSWORD``,
        ``BIORANK_CA_FILE``, ``BIORANK_VERIFY``, ``BIORANK_QUERY_LOG``, ``BIORANK_QUERY_LOG_INDEX``).

        Args:
            environ: the variables to read; None reads the process's own.

        Returns:
            The settings; a variable that is unset or empty leaves its default.

        Example:
            >>> ConnectionSettings.from_env({"BIORANK_URL": "https://search.example.org:9200"}).url
            'https://search.example.org:9200'
        """
        env = os.environ if environ is None else environ
        return cls(
            url=env.get("BIORANK_URL") or None,
            user=env.get("BIORANK_USER") or None,
            password=env.get("BIORANK_PASSWORD") or None,
            ca_file=env.get("BIORANK_CA_FILE") or None,
            verify=env.get("BIORANK_VERIFY", "true").strip().lower() not in _FALSE,
            query_log=env.get("BIORANK_QUERY_LOG", "true").strip().lower() not in _FALSE,
            query_log_index=env.get("BIORANK_QUERY_LOG_INDEX") or QUERY_LOG_INDEX,
        )

    def with_overrides(self, **values: object) -> ConnectionSettings:
        """Options given on the command line win over the environment; ``None`` means not given."""
        return replace(self, **{k: v for k, v in values.items() if v is not None})


def redact_url(url: str) -> str:
    """``url`` without the user and password it may carry (``https://user:pw@host``), for messages; each of
    several comma-separated URLs."""
    if "," in url:
        return ",".join(redact_url(part) for part in url.split(","))
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


@cache
def biorank_version() -> str:
    """The installed biorank's version ("unknown" when it runs from a source tree that was never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("biorank")
    except PackageNotFoundError:
        return "unknown"
