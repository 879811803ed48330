"""Index names are exact: a name biorank is given names one index, never a pattern or a list.

OpenSearch expands ``*``, ``,``-lists and ``_all`` in most index APIs, so a name passed on as given could make a
delete or a search reach indices nobody named. Every name a command takes is checked here before anything
reaches the cluster.
"""

from __future__ import annotations

import re

from biorank.config import QUERY_LOG_INDEX
from biorank.errors import BiorankError

SENTENCES_SUFFIX = "-sentences"
MAX_NAME_BYTES = 255
_NAME = re.compile(r"[a-z0-9][a-z0-9._+-]*")


class IndexNameError(BiorankError):
    """A name that is not one exact index name biorank may use for documents."""


def plain_name(name: str) -> bool:
    """Whether ``name`` can only ever name one index: no pattern, list, ``_all`` or system-index dot, at most
    :data:`MAX_NAME_BYTES` — what OpenSearch takes literally in every index API.

    Example:
        >>> plain_name("biorank-queries"), plain_name("*"), plain_name("a,b")
        (True, False, False)
    """
    return bool(name) and bool(_NAME.fullmatch(name)) and name not in (".", "..") and \
        len(name.encode()) <= MAX_NAME_BYTES


def check_query_log_name(name: str) -> str:
    """``name`` if it can be the query log's index (BIORANK_QUERY_LOG_INDEX); otherwise a one-line reason.

    The log is refreshed, searched and written by name, so a pattern there would make ``biorank log`` refresh
    and read every index it matches.

    Example:
        >>> check_query_log_name("biorank-queries")
        'biorank-queries'
    """
    if not plain_name(name):
        raise IndexNameError(
            f"query log index {name[:100]!r} (BIORANK_QUERY_LOG_INDEX) is not one index name: use lower-case "
            "letters, digits, '.', '_', '-' or '+', not starting with '_', '-' or '+', no wildcards or lists")
    if name.endswith(SENTENCES_SUFFIX):
        raise IndexNameError(f"query log index {name!r} (BIORANK_QUERY_LOG_INDEX) is a sentences index name; "
                             "choose another")
    return name


def check_index_name(name: str) -> str:
    """``name`` if it is one plain documents index name; otherwise a one-line reason and what to use instead.

    Refused: wildcards, lists and other characters OpenSearch treats specially, upper case, a leading ``_``,
    ``-`` or ``+``, ``.``/``..``, names over 255 bytes, and names biorank reserves — the query log's and those
    of sentences indices, which belong to their documents index.
    """
    if not name or not _NAME.fullmatch(name) or name in (".", ".."):
        raise IndexNameError(
            f"{name!r} is not an index name biorank accepts: one name of lower-case letters, digits, '.', '_', '-' "
            "or '+', not starting with '_', '-' or '+' (no wildcards or lists: a command acts on exactly the index "
            "it is given)")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise IndexNameError(f"index names are at most {MAX_NAME_BYTES} bytes; {name[:40]!r}… has "
                             f"{len(name.encode())}")
    if name == QUERY_LOG_INDEX or name.startswith(QUERY_LOG_INDEX + "-"):
        raise IndexNameError(f"{name!r} is reserved for biorank's query log (`biorank log` reads it); choose "
                             "another --index name")
    if name.endswith(SENTENCES_SUFFIX):
        raise IndexNameError(f"{name!r} is a sentences index name: name its documents index "
                             f"({name.removesuffix(SENTENCES_SUFFIX)!r}), which brings its sentences with it")
    return name
