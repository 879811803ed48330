"""biorank's indices on a cluster: which there are, what built them, and removing them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from biorank.errors import BiorankError
from biorank.mappings.documents import MAPPING_VERSION

if TYPE_CHECKING:
    from opensearchpy import OpenSearch


REENCODING = "reencoding"
"""Key of ``_meta.biorank`` that is present while ``biorank reindex-vectors`` re-encodes the index."""


class IndexMismatch(BiorankError):
    """The index exists but was built differently (another encoder or mapping version, or not by biorank)."""


def sentences_index_name(index: str) -> str:
    return f"{index}-sentences"


@dataclass(frozen=True)
class IndexInfo:
    name: str
    documents: int
    blocks: int
    sentences: int
    size_bytes: int
    model: str
    mapping_version: int


def check_index_meta(client: OpenSearch, index: str, *, model: str | None = None) -> dict:
    """The index's biorank record; refuses an index of another mapping version or encoder with the fix."""
    mapping = client.indices.get_mapping(index=index)
    meta = next(iter(mapping.values()))["mappings"].get("_meta", {}).get("biorank")
    if not meta:
        raise IndexMismatch(f"index {index!r} was not created by biorank; choose another --index name")
    if meta.get("mapping_version") != MAPPING_VERSION:
        raise IndexMismatch(
            f"index {index!r} has mapping version {meta.get('mapping_version')}, this biorank writes "
            f"{MAPPING_VERSION}; rebuild it with `biorank index ... --index {index} --recreate`"
        )
    if model is not None and REENCODING in meta:
        # Its vectors are part old encoder, part new: neither encoder's queries would rank them fairly.
        state = meta[REENCODING]
        raise IndexMismatch(
            f"index {index!r} is half re-encoded with {state.get('model')!r}; finish with `biorank "
            f"reindex-vectors --index {index} --model {state.get('model_source') or state.get('model')}`"
        )
    if model is not None and meta.get("model") != model:
        raise IndexMismatch(
            f"index {index!r} was built with the encoder {meta.get('model')!r}, not {model!r}; use that "
            f"encoder (--model), or rebuild with --recreate"
        )
    return meta


def update_index_meta(client: OpenSearch, index: str, *, remove: Iterable[str] = (), **entries: object) -> dict:
    """Set ``entries`` in the index's biorank record (tuned λ, a reranker, snippet weights) and drop the keys
    in ``remove``; returns the record.

    ``_meta`` is replaced as a whole by a mapping update, so the rest of the record is sent back with it.
    """
    mapping = client.indices.get_mapping(index=index)
    meta = next(iter(mapping.values()))["mappings"].get("_meta", {})
    biorank = {key: value for key, value in meta.get("biorank", {}).items() if key not in set(remove)}
    biorank |= entries
    client.indices.put_mapping(index=index, body={"_meta": {**meta, "biorank": biorank}})
    return biorank


def entries_in_order(client: OpenSearch, index: str, *, sort: Sequence[str], source: Sequence[str],
                     query: dict | None = None, size: int = 500, after: list | None = None) -> Iterator[list[dict]]:
    """Every entry matching ``query``, a page of hits at a time, ordered by the ``sort`` fields (which must
    identify an entry); each hit's ``sort`` is where a later call can continue (``after``)."""
    while True:
        body = {"size": size, "query": query or {"match_all": {}}, "_source": list(source),
                "sort": [{name: "asc"} for name in sort]}
        if after:
            body["search_after"] = after
        hits = client.search(index=index, body=body)["hits"]["hits"]
        if not hits:
            return
        yield hits
        after = hits[-1]["sort"]


def list_indices(client: OpenSearch) -> list[IndexInfo]:
    """Every documents index that biorank built, with its counts (documents = block 0 entries)."""
    mappings = client.indices.get_mapping(index="*", expand_wildcards="open")
    stats = client.indices.stats(index="*", metric="docs,store", expand_wildcards="open")["indices"]
    rows = []
    for name in sorted(mappings):
        meta = mappings[name]["mappings"].get("_meta", {}).get("biorank")
        if not meta or meta.get("kind") != "documents":
            continue
        documents = client.count(index=name, body={"query": {"term": {"block": 0}}})["count"]
        sentences_index = meta.get("sentences_index")
        sentences = stats.get(sentences_index, {}).get("primaries", {}).get("docs", {}).get("count", 0)
        size = sum(stats.get(i, {}).get("total", {}).get("store", {}).get("size_in_bytes", 0)
                   for i in (name, sentences_index) if i)
        blocks = stats.get(name, {}).get("primaries", {}).get("docs", {}).get("count", 0)
        rows.append(IndexInfo(name, documents, blocks, sentences, size, meta.get("model", "?"),
                              meta.get("mapping_version", 0)))
    return rows


def delete_indices(client: OpenSearch, name: str) -> list[str]:
    """Delete the documents index ``name`` and its sentences index; the names of those that existed."""
    existing = [i for i in (name, sentences_index_name(name)) if client.indices.exists(index=i)]
    if existing:
        client.indices.delete(index=",".join(existing))
    return existing


@contextlib.contextmanager
def refresh_paused(client: OpenSearch, names: Sequence[str]) -> Iterator[None]:
    """Bulk writes into ``names`` with refreshing off, searchable again at the end, failed or not.

    Refreshing during a bulk load only makes segments to merge later.
    """
    from opensearchpy.exceptions import ConnectionError

    client.indices.put_settings(index=",".join(names), body={"index": {"refresh_interval": "-1"}})
    try:
        yield
    finally:
        try:
            # None restores the index's default refresh interval.
            client.indices.put_settings(index=",".join(names), body={"index": {"refresh_interval": None}})
            client.indices.refresh(index=",".join(names))
        except ConnectionError:
            pass  # the cluster is gone; the run reports that, and the next run restores the setting
