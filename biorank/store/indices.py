"""biorank's indices on a cluster: which there are, what built them, and removing them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from biorank.store.names import SENTENCES_SUFFIX, check_index_name, plain_name
from biorank.store.record import IndexMismatch, IndexRecord, read_record, update_record

if TYPE_CHECKING:
    from opensearchpy import OpenSearch


def sentences_index_name(index: str) -> str:
    return f"{index}{SENTENCES_SUFFIX}"


@dataclass(frozen=True)
class IndexInfo:
    name: str
    documents: int
    blocks: int
    sentences: int
    size_bytes: int
    model: str
    mapping_version: int


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
        record = IndexRecord.from_meta(name, meta)
        documents = client.count(index=name, body={"query": {"term": {"block": 0}}})["count"]
        sentences_index = record.sentences_index
        sentences = stats.get(sentences_index, {}).get("primaries", {}).get("docs", {}).get("count", 0)
        size = sum(stats.get(i, {}).get("total", {}).get("store", {}).get("size_in_bytes", 0)
                   for i in (name, sentences_index) if i)
        blocks = stats.get(name, {}).get("primaries", {}).get("docs", {}).get("count", 0)
        rows.append(IndexInfo(name, documents, blocks, sentences, size, record.model or "?",
                              record.mapping_version or 0))
    return rows


def is_alias(client: OpenSearch, name: str) -> bool:
    """Whether ``name`` (one plain name) is an alias rather than an index: a write through it lands in the index
    behind it, and a DELETE of it is acknowledged and removes nothing."""
    return bool(client.indices.exists_alias(name=name))


def concrete_index(client: OpenSearch, name: str, *, follow_alias: bool = False, recreate: bool = False) -> str:
    """The index a command that writes or deletes acts on: ``name`` itself; where ``name`` is an alias, the one
    index behind it if ``follow_alias``, else a one-line refusal.

    An alias is how a cluster swaps a rebuilt index in (blue/green): writing or deleting through it would act on
    an index the user did not name, so that is done only when asked for — and never to rebuild (``recreate``):
    deleting an alias deletes nothing, and the writes would then land in the index behind it.

    Args:
        client: the cluster.
        name: one exact documents index name (:func:`check_index_name`).
        follow_alias: act on the index behind an alias (refused still where it has several).
        recreate: the index is to be deleted and built anew; an alias is refused whatever ``follow_alias`` says.

    Returns:
        The name of the index to act on.

    Example:
        >>> concrete_index(client, "pubmed", follow_alias=True)  # doctest: +SKIP
        'pubmed-v2'
    """
    check_index_name(name)
    if not is_alias(client, name):
        return name
    behind = sorted(client.indices.get_alias(name=name, expand_wildcards="all"))
    if recreate:
        raise IndexMismatch(f"{name!r} is an alias of {', '.join(behind)[:200]}: --recreate rebuilds an index named "
                            "by its own name, never through an alias; name the index")
    if not follow_alias:
        raise IndexMismatch(f"{name!r} is an alias of {', '.join(behind)[:200]}: biorank writes to and deletes only "
                            "an index named by its own name; name the index, or --follow-alias acts on the one "
                            "behind the alias")
    if len(behind) != 1:
        raise IndexMismatch(f"{name!r} is an alias of {len(behind)} indices ({', '.join(behind)[:200]}); name one "
                            "of them")
    return check_index_name(behind[0])


def owned_indices(client: OpenSearch, name: str) -> list[str]:
    """The indices that deleting documents index ``name`` removes: ``name`` itself and its sentences index, if they
    exist. An index biorank did not build as a documents index is refused.

    Args:
        client: the cluster.
        name: one exact documents index name (:func:`check_index_name`).

    Returns:
        ``[name]``, or ``[name, name + "-sentences"]`` when that sentences index is genuinely ``name``'s
        (:func:`foreign_sentences` says why another one is left alone); ``[]`` when ``name`` does not exist.

    Example:
        >>> owned_indices(client, "scifact")  # doctest: +SKIP
        ['scifact', 'scifact-sentences']
    """
    check_index_name(name)
    if not client.indices.exists(index=name):
        return []
    concrete_index(client, name)  # an alias is refused, naming the index behind it
    record = read_record(client, name)
    if record.kind != "documents":
        raise IndexMismatch(f"{name!r} is a biorank {record.kind} index, not a documents index; biorank deletes a "
                            "documents index together with its sentences")
    sentences = record.sentences_index
    # Only the sentences index biorank derives from the name, an index (not an alias) that exists and whose own
    # record points back: a name a record merely mentions never reaches a DELETE.
    if not sentences or sentences != sentences_index_name(name) or not client.indices.exists(index=sentences) \
            or is_alias(client, sentences) or _disowned(client, name, sentences) is not None:
        return [name]
    return [name, sentences]


def foreign_sentences(client: OpenSearch, name: str) -> str | None:
    """Why the sentences index that documents index ``name``'s record names is not deleted with it, in one line;
    None when it is (or the record names none, or it does not exist).

    A record is only data, copied by ``_clone``, a snapshot restore or a hand-made mapping: deleting whatever it
    names would let a copy of ``scifact`` take ``scifact-sentences`` with it, or a record naming ``*`` or another
    documents index delete those. So a sentences index goes with ``name`` only where both sides agree: its name is
    the one biorank derives from ``name`` and its own record says it holds ``name``'s sentences.

    Args:
        client: the cluster.
        name: an existing biorank documents index.

    Returns:
        The one-line reason, naming the mismatch, or None.

    Example:
        >>> foreign_sentences(client, "scifact-copy")  # doctest: +SKIP
        "'scifact-copy' names 'scifact-sentences' as its sentences index, not 'scifact-copy-sentences' ..."
    """
    check_index_name(name)
    if not client.indices.exists(index=name):
        return None
    sentences = read_record(client, name).sentences_index
    return _disowned(client, name, sentences) if sentences else None


def _disowned(client: OpenSearch, name: str, sentences: str) -> str | None:
    """None if ``sentences`` exists and belongs to ``name`` (exact derived name, record pointing back); else why not
    (and None where it does not exist: there is nothing to delete or to leave alone)."""
    expected = sentences_index_name(name)
    left = "; it is left alone (delete it by itself if it is yours)"
    if sentences != expected:
        # Compared before the name reaches the cluster: a pattern or a list is never sent, and a plain name only
        # to say nothing where there is nothing (the original of a copy, deleted since).
        if plain_name(sentences) and not client.indices.exists(index=sentences):
            return None
        return (f"{name!r} names {sentences[:100]!r} as its sentences index, not {expected!r} (a copy of another "
                f"index, or a record edited by hand){left}")
    if not client.indices.exists(index=sentences):
        return None
    if is_alias(client, sentences):
        return f"{sentences!r} is an alias, not {name!r}'s sentences index{left}"
    try:
        record = read_record(client, sentences)
    except IndexMismatch:
        return f"{sentences!r} was not created by biorank, so it is not {name!r}'s sentences index{left}"
    if record.kind != "sentences" or record.documents_index != name:
        holder = f"a {record.kind} index" if record.kind != "sentences" else \
            f"the sentences of {record.documents_index!r}"
        return f"{sentences!r} holds {holder} by its own record, not those of {name!r}{left}"
    return None


def delete_indices(client: OpenSearch, name: str) -> list[str]:
    """Delete the documents index ``name`` and its sentences index (:func:`owned_indices`); what was deleted.

    Args:
        client: the cluster.
        name: one exact documents index name.

    Returns:
        The names OpenSearch confirmed deleted, the documents index first.

    Example:
        >>> delete_indices(client, "scifact")  # doctest: +SKIP
        ['scifact', 'scifact-sentences']
    """
    deleted = []
    for index in owned_indices(client, name):
        # One exact name a request, never expanded, so nothing but these can ever match; reported deleted only
        # where OpenSearch acknowledged it and the index is gone.
        answer = client.indices.delete(index=index, expand_wildcards="none")
        if answer.get("acknowledged") and not client.indices.exists(index=index):
            deleted.append(index)
    return deleted


BULK_REFRESH_INTERVAL = "30s"


@contextlib.contextmanager
def refresh_paused(client: OpenSearch, names: Sequence[str]) -> Iterator[None]:
    """Bulk writes into ``names`` with refreshing slowed down, searchable again at the end, failed or not.

    Refreshing every second during a bulk load only makes segments to merge later. It is slowed, not turned
    off (-1): a run killed with SIGKILL cannot restore the setting, and its documents must still become
    searchable by themselves, within :data:`BULK_REFRESH_INTERVAL`, instead of staying invisible.
    """
    from opensearchpy.exceptions import ConnectionError

    client.indices.put_settings(index=",".join(names), body={"index": {"refresh_interval": BULK_REFRESH_INTERVAL}})
    try:
        yield
    finally:
        try:
            # None restores the index's default refresh interval.
            client.indices.put_settings(index=",".join(names), body={"index": {"refresh_interval": None}})
            client.indices.refresh(index=",".join(names))
        except ConnectionError:
            pass  # the cluster is gone; the run reports that, and the next run restores the setting


def bm25_parameters(client: OpenSearch, index: str) -> tuple[float, float]:
    """The index's BM25 ``(k1, b)``, as its default similarity has them now."""
    found = client.indices.get_settings(index=index)[index]["settings"]["index"]["similarity"]["default"]
    return float(found["k1"]), float(found["b"])


def set_bm25_parameters(client: OpenSearch, index: str, k1: float, b: float) -> IndexRecord:
    """Sets the index's BM25 ``k1`` and ``b``, and its record's settings with them (what ``stats`` shows and a
    rebuild takes).

    A similarity is fixed while an index is open, so the index is closed, set and opened again: searches of it
    fail for that moment. It is opened again whatever happened between, so a failed setting never leaves it closed.
    """
    current = client.indices.get_settings(index=index)[index]["settings"]["index"]["similarity"]["default"]
    client.indices.close(index=index)
    try:
        client.indices.put_settings(index=index, body={"index": {"similarity": {"default": {
            **current, "k1": k1, "b": b}}}})
    finally:
        client.indices.open(index=index, wait_for_active_shards="all")
    record = read_record(client, index)
    return update_record(client, index, settings={**record.settings, "k1": k1, "b": b})
