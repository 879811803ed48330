"""What is stored, read back without Dashboards: one document with its blocks and sentences, one index's facts.

Vectors are excluded from ``_source`` (they would be most of the stored bytes), and the ``fields`` API reads
``_source`` for a ``knn_vector`` on OpenSearch 2.19, while ``docvalue_fields`` is refused ("doesn't support
sorting"). A script field reads the vector from the vector field itself, which is what search scores with.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from biorank.config import RESULT_WINDOW
from biorank.errors import BiorankError
from biorank.store.ids import storage_id
from biorank.store.indices import list_indices
from biorank.store.mappings.sentences import BYTE_SCALE
from biorank.store.msearch import msearch
from biorank.store.record import IndexRecord, check_record

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

VECTOR_SCRIPT = {"source": "doc['embedding'].size() == 0 ? null : doc['embedding'].value"}
"""A hit's vector as the k-NN plugin hands it (a byte vector as its bytes); the sentences' inspection reads it."""
VECTOR_COPY_SCRIPT = {"source": "if (doc['embedding'].size() == 0) { return null; } def v = doc['embedding'].value; "
                                "List out = new ArrayList(); for (int i = 0; i < v.length; ++i) { out.add(v[i]); } "
                                "return out;"}
"""The float vector of each hit of a search, copied: the k-NN plugin hands every hit the same array, refilled per
document, so returning that array itself over many hits answers the last one's vector for all of them."""
SECTIONS = ("title", "abstract")
FIELD_ORDER = ("id", "title", "journal", "year", "mesh", "abstract")
"""What a reader looks for first; the other stored fields follow by name."""


class NotFound(BiorankError):
    """No such index or document."""


@dataclass(frozen=True)
class Vector:
    dimension: int
    norm: float

    @classmethod
    def of(cls, values: Sequence[float] | None) -> Vector | None:
        if not values:
            return None
        return cls(len(values), math.sqrt(sum(v * v for v in values)))


@dataclass
class StoredDocument:
    """A document as the indices hold it: block 0's fields, every block, every sentence."""

    index: str
    id: str
    fields: dict[str, Any]
    blocks: list[dict[str, Any]]
    sentences_index: str | None
    sentences: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def stored_vector(hit: dict) -> list[float] | None:
    """The components of the vector a search hit's :data:`VECTOR_COPY_SCRIPT` (or :data:`VECTOR_SCRIPT`) script
    field read, or None where the entry has none.

    Args:
        hit: one hit of a search that asked for ``script_fields: {"embedding": {"script": VECTOR_COPY_SCRIPT}}``.

    Returns:
        The vector as floats (a byte vector's components over the scale they were stored at), or None.

    Example:
        >>> stored_vector({"fields": {"embedding": [[0.6, 0.8]]}})
        [0.6, 0.8]
    """
    values = hit.get("fields", {}).get("embedding") or [None]
    if isinstance(values[0], list | str | None):
        values = values[0]  # the array :data:`VECTOR_SCRIPT` returns is one value; a copied list is the values
    if isinstance(values, str):
        # A byte vector's doc value comes back as its bytes in base64: the components are those bytes, signed,
        # over the scale they were stored at.
        values = [(b - 256 if b > 127 else b) / BYTE_SCALE for b in base64.b64decode(values)]
    return [float(v) for v in values] if values else None


def _vector(hit: dict) -> dict | None:
    vector = Vector.of(stored_vector(hit))
    return asdict(vector) if vector else None


def _record(client: OpenSearch, index: str) -> IndexRecord:
    from opensearchpy.exceptions import NotFoundError

    try:
        return check_record(client, index)
    except NotFoundError:
        raise NotFound(f"no index {index!r}; `biorank indices` lists biorank's indices") from None


def first_blocks(client: OpenSearch, index: str, ids: Sequence[str], fields: Sequence[str]) -> dict[str, dict]:
    """``fields`` of each document's first block (which holds the whole document and its metadata), by id; ids
    not in the index are left out."""
    unique = list(dict.fromkeys(ids))
    found: dict[str, dict] = {}
    for start in range(0, len(unique), 1000):
        some = unique[start : start + 1000]
        response = client.mget(index=index, body={"ids": [storage_id(i) for i in some]},
                               _source_includes=list(fields))
        found |= {doc_id: doc["_source"] for doc_id, doc in zip(some, response["docs"], strict=True)
                  if doc.get("found")}
    return found


def block_vectors(client: OpenSearch, index: str, ids: Sequence[str],
                  fields: Sequence[str] = ()) -> dict[str, tuple[dict[str, Any], list[float] | None]]:
    """Each document's first block: ``fields`` of it and its stored vector, by id, in one ``_msearch``.

    The vector field is left out of ``_source``, so a script field reads it (see the module's docstring), copying
    each (:data:`VECTOR_COPY_SCRIPT`); block 0 of a document is stored under the document's own storage id.

    Args:
        client: the cluster's client.
        index: a documents index.
        ids: document ids (repeats are read once).
        fields: stored fields of the first block to return beside the vector (``title``, ``year``).

    Returns:
        id -> (those fields, the vector or None); ids not in the index are left out.

    Example:
        >>> block_vectors(client, "scifact", ["4983"], ["title"])["4983"][0]["title"]  # doctest: +SKIP
        'Microstructural development of human newborn cerebral white matter ...'
    """
    unique = list(dict.fromkeys(ids))
    lines: list[dict] = []
    for start in range(0, len(unique), RESULT_WINDOW):
        some = unique[start : start + RESULT_WINDOW]
        lines += [{"index": index}, {"size": len(some), "query": {"ids": {"values": [storage_id(i) for i in some]}},
                                     "_source": ["id", *fields],
                                     "script_fields": {"embedding": {"script": VECTOR_COPY_SCRIPT}}}]
    responses = msearch(client, lines, refused=lambda _, error: NotFound(f"cannot read the vectors of {index!r}: "
                                                                          f"{error.get('reason', error)}"))
    found: dict[str, tuple[dict[str, Any], list[float] | None]] = {}
    for response in responses:
        for hit in response["hits"]["hits"]:
            source = hit.get("_source", {})
            found[source.get("id", hit["_id"])] = ({f: source.get(f) for f in fields}, stored_vector(hit))
    return found


def inspect_document(client: OpenSearch, index: str, doc_id: str) -> StoredDocument:
    """Every stored entry of ``doc_id`` in ``index`` and its sentences index, vectors as dimension and norm."""
    record = _record(client, index)
    body = {"size": RESULT_WINDOW, "query": {"term": {"id": doc_id}}, "sort": [{"block": "asc"}], "_source": True,
            "script_fields": {"embedding": {"script": VECTOR_COPY_SCRIPT}}}
    hits = client.search(index=index, body=body)["hits"]["hits"]
    if not hits:
        raise NotFound(f"no document {doc_id!r} in {index!r}")
    blocks = [{"_id": h["_id"], **h["_source"], "vector": _vector(h)} for h in hits]
    first = blocks[0] if blocks[0].get("block") == 0 else {}
    names = sorted(set(first) - {"_id", "vector", "passage", "wordpieces"},
                   key=lambda k: (FIELD_ORDER.index(k) if k in FIELD_ORDER else len(FIELD_ORDER), k))
    fields = {k: first[k] for k in names}
    document = StoredDocument(index, doc_id, fields, blocks, record.sentences_index)
    if document.sentences_index and client.indices.exists(index=document.sentences_index):
        body = {"size": RESULT_WINDOW, "query": {"term": {"doc_id": doc_id}}, "_source": True}
        if record.sentence_vectors != "none":  # an index without vectors has no field for the script to read
            body["script_fields"] = {"embedding": {"script": VECTOR_SCRIPT}}
        hits = client.search(index=document.sentences_index, body=body)["hits"]["hits"]
        sentences = [{"_id": h["_id"], **h["_source"], "vector": _vector(h)} for h in hits]
        rank = {section: i for i, section in enumerate(SECTIONS)}
        document.sentences = sorted(sentences, key=lambda s: (rank.get(s.get("section"), len(rank)),
                                                              s.get("number", 0)))
    return document


@dataclass
class IndexStats:
    """One documents index and its sentences index: counts, sizes, what built them and what was tuned."""

    index: str
    sentences_index: str | None
    documents: int
    blocks: int
    sentences: int
    size_bytes: dict[str, int]
    model: str
    model_source: str | None
    prefixes: dict[str, str]
    """What the encoder put before queries and passages."""
    dimension: int | None
    mapping_version: int
    block_tokens: int | None
    settings: dict[str, Any]
    """As built (shards, replicas, analyser, k1, b), k1 and b as the cluster applies them now."""
    lam: float
    lambda_tuned: bool
    tuned: dict[str, Any]
    """Every ``_meta.biorank`` key stored after the build (λ and its provenance, later stages' weights)."""
    files_applied: int = 0
    """How many input files ``biorank sync`` applied (PubMed baseline and update files)."""
    last_file: dict[str, Any] | None = None
    """The file applied last (name, SHA-256, when, documents written and deleted), or None."""
    sentence_vectors: str | None = None
    """How the sentences index stores its vectors (``hnsw``, ``exact``, ``byte``, ``none``), or None without one."""

    @property
    def bytes_per_document(self) -> dict[str, float]:
        """Each index's size on disk (``size_bytes``) per document of the collection: what an abstract costs."""
        return {name: size / self.documents for name, size in self.size_bytes.items()} if self.documents else {}

    def to_dict(self) -> dict:
        return asdict(self) | {"bytes_per_document": self.bytes_per_document}


def index_stats(client: OpenSearch, index: str) -> IndexStats:
    record = _record(client, index)
    info = next((row for row in list_indices(client) if row.name == index), None)
    if info is None:
        raise NotFound(f"{index!r} is a biorank {record.kind} index, not a documents index")
    sentences_index = record.sentences_index
    names = [i for i in (index, sentences_index) if i and client.indices.exists(index=i)]
    stats = client.indices.stats(index=",".join(names), metric="store")["indices"]
    sizes = {name: stats[name]["total"]["store"]["size_in_bytes"] for name in names}
    live = client.indices.get_settings(index=index, flat_settings=True)[index]["settings"]
    settings = dict(record.settings)
    for key in ("k1", "b"):
        # The similarity can be changed on a closed index after the build: what counts is what applies.
        if f"index.similarity.default.{key}" in live:
            settings[key] = float(live[f"index.similarity.default.{key}"])
    return IndexStats(
        index=index, sentences_index=sentences_index, documents=info.documents, blocks=info.blocks,
        sentences=info.sentences, size_bytes=sizes, model=info.model, model_source=record.model_source,
        prefixes=dict(record.prefixes),
        dimension=record.dimension, mapping_version=info.mapping_version,
        block_tokens=record.block_tokens, settings=settings, lam=record.lam,
        lambda_tuned=record.tuned_lambda is not None, tuned=record.tuned,
        files_applied=len(record.applied_files),
        last_file=asdict(record.applied_files[-1]) if record.applied_files else None,
        sentence_vectors=record.sentence_vectors if sentences_index else None,
    )


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``a.b.c`` keys, for printing tuned settings whatever their shape."""
    if not isinstance(value, dict) or not value:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, inner in value.items():
        flat.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
    return flat
