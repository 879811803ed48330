"""The biorank record of an index: what built it and what was tuned for it, kept in the index's ``_meta``.

This module is the only one that reads or writes ``_meta.biorank``: every other layer sees an
:class:`IndexRecord`, typed, and changes it through :func:`update_record` and the ``store_*`` functions, so a
key is spelled in one place. The record travels with the index (a snapshot, a remote cluster), which is why
tuned values live there and not in a file beside biorank.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from biorank.config import DEFAULT_LAMBDA
from biorank.errors import BiorankError

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

MAPPING_VERSION = 2
"""Raised whenever the mappings change in a way older indices cannot serve; such indices are refused."""
REENCODING = "reencoding"
"""Key present while ``biorank reindex-vectors`` re-encodes the index."""
BUILD_KEYS = frozenset({"kind", "mapping_version", "model", "model_source", "prefixes", "default_lambda",
                        "dimension", "settings",
                        "block_tokens", "sentences_index", "documents_index", "filterable", "sentence_vectors",
                        "bibliographic", "searchable_mesh"})
"""What the build writes; every other key was stored later (tuned values, a reranker, re-encoding state)."""
APPLIED_FILES = "applied_files"
"""Key of the input files ``biorank sync`` applied, in the order applied: facts about the content, not tuning."""
LEGACY_SENTENCE_VECTORS = "hnsw"
"""How an index built before the choice existed stores its sentence vectors (a record without
``sentence_vectors``): float vectors in an HNSW graph."""
TUNED_FOR_ENCODER = ("lambda", "lambda_tuning", "feedback", "boosts", "rerank_weight")
"""Values that hold only for the encoder they were tuned with (the rerank weight mixes the first stage's scores),
set aside when the index is re-encoded."""


class IndexMismatch(BiorankError):
    """The index exists but was built differently (another encoder or mapping version, or not by biorank)."""


@dataclass(frozen=True)
class AppliedFile:
    """One input file applied to the index in full (PubMed baseline or update file), as ``biorank sync`` records it.

    The name (not the path) and the SHA-256 identify it: NLM's file names are unique and never reused, so the same
    name with another checksum is another file, not the same one moved.
    """

    name: str
    sha256: str
    applied: str
    """When its last write was acknowledged (UTC, ISO 8601)."""
    documents: int = 0
    """Documents it wrote or replaced (those already in and unchanged not counted)."""
    deleted: int = 0
    """Documents it withdrew that were in the index."""

    @classmethod
    def from_meta(cls, entry: Mapping[str, Any]) -> AppliedFile:
        return cls(name=str(entry.get("name")), sha256=str(entry.get("sha256")), applied=str(entry.get("applied")),
                   documents=int(entry.get("documents") or 0), deleted=int(entry.get("deleted") or 0))


@dataclass(frozen=True)
class IndexRecord:
    """``_meta.biorank`` of one index, typed. ``raw`` keeps every key, those of later biorank versions too."""

    index: str
    kind: str
    mapping_version: int | None
    model: str | None = None
    """The encoder's identity (package@version, folder@digest or a hub name), as :func:`model_identity` gives."""
    model_source: str | None = None
    """How the encoder was named when the index was built: what loads it again."""
    prefixes: Mapping[str, str] = field(default_factory=dict)
    """What the encoder put before queries and passages (``query``, ``passage``); none in older indices."""
    dimension: int | None = None
    block_tokens: int | None = None
    filterable: bool = False
    """Whether every block carries its document's year, journal and MeSH (indices built before filters existed
    have them on block 0 only, so filtering them would drop blocks)."""
    bibliographic: bool = False
    """Whether the mapping has MEDLINE's bibliographic fields (authors, DOI, publication types, major MeSH, the
    journal's abbreviation): indices built before them have no such fields, and ``dynamic: strict`` refuses a
    document that carries them, so the indexer leaves them out there."""
    searchable_mesh: bool = False
    """Whether MeSH headings have their text sub-field (``mesh.text``), which BM25 can score: indices built before
    it have the keyword only, so a MeSH boost is refused there."""
    sentences_index: str | None = None
    documents_index: str | None = None
    sentence_vectors: str = LEGACY_SENTENCE_VECTORS
    """How the sentences index stores its vectors (``hnsw``, ``exact``, ``byte``, ``none``: the sentences mappings'
    ``SENTENCE_VECTORS``), written in the records of both indices."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    default_lambda: float | None = None
    """The encoder's λ until one is tuned, where its catalogue entry names one."""
    tuned_lambda: float | None = None
    lambda_tuning: Mapping[str, Any] | None = None
    feedback: Mapping[str, Any] | None = None
    """The first stage's pseudo-relevance feedback tuned with λ (its name and parameters), for the modes that
    take it; None where none was tuned."""
    boosts: Mapping[str, Any] | None = None
    """The title's and MeSH's weights in the BM25 leg tuned with λ; None where none were tuned."""
    reranker: str | None = None
    """The cross-encoder ``biorank train-reranker`` gave the index (a folder), or the ensemble ``tune-rerank`` tuned
    for it (its members separated by commas, as ``--reranker`` names them)."""
    rerank_tuning: Mapping[str, Any] | None = None
    """The rerank weight ``biorank tune-rerank`` found (``weight``), for the cross-encoder of identity
    ``reranker``, and how it was found."""
    snippet_weights: Mapping[str, Any] | None = None
    reencoding: Mapping[str, Any] | None = None
    applied_files: tuple[AppliedFile, ...] = ()
    """The input files applied in full, oldest first (``biorank sync``); empty for an index built otherwise."""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_meta(cls, index: str, meta: Mapping[str, Any]) -> IndexRecord:
        return cls(
            index=index, kind=meta.get("kind", "?"), mapping_version=meta.get("mapping_version"),
            model=meta.get("model"), model_source=meta.get("model_source"),
            prefixes=MappingProxyType(dict(meta.get("prefixes") or {})), dimension=meta.get("dimension"),
            block_tokens=meta.get("block_tokens"), filterable=bool(meta.get("filterable")),
            bibliographic=bool(meta.get("bibliographic")), searchable_mesh=bool(meta.get("searchable_mesh")),
            sentences_index=meta.get("sentences_index"),
            documents_index=meta.get("documents_index"),
            sentence_vectors=meta.get("sentence_vectors") or LEGACY_SENTENCE_VECTORS,
            settings=MappingProxyType(dict(meta.get("settings", {}))),
            default_lambda=float(meta["default_lambda"]) if meta.get("default_lambda") else None,
            tuned_lambda=float(meta["lambda"]) if "lambda" in meta else None,
            lambda_tuning=meta.get("lambda_tuning"), reranker=(meta.get("reranker") or {}).get("model"),
            rerank_tuning=meta.get("rerank_weight"), feedback=meta.get("feedback"), boosts=meta.get("boosts"),
            snippet_weights=meta.get("snippet_weights"), reencoding=meta.get(REENCODING),
            applied_files=tuple(AppliedFile.from_meta(entry) for entry in meta.get(APPLIED_FILES) or ()),
            raw=MappingProxyType(dict(meta)),
        )

    @property
    def lam(self) -> float:
        """The λ hybrid searches use: the tuned one, else the encoder's default, else :data:`DEFAULT_LAMBDA`."""
        if self.tuned_lambda is not None:
            return self.tuned_lambda
        return self.default_lambda or DEFAULT_LAMBDA

    @property
    def encoder_source(self) -> str:
        """What loads the index's encoder again: the name it was built with (a folder, a hub name)."""
        return self.model_source or (self.model or "").rsplit("@", 1)[0]

    @property
    def tuned(self) -> dict[str, Any]:
        """Every key stored after the build: λ and its provenance, a reranker, snippet weights (not the applied
        files: a record of content, thousands of entries for a kept-current PubMed)."""
        return {k: v for k, v in self.raw.items() if k not in BUILD_KEYS and k != APPLIED_FILES}


def new_record(settings: Mapping[str, Any], *, kind: str, model: str, dimension: int, **extra: object) -> dict:
    """The ``_meta`` an index is created with: what built it, so a mismatch is refused, not misread.

    ``settings`` are the index's settings as plain values (``dataclasses.asdict`` of the mappings'
    ``IndexSettings``): the record keeps them without knowing their class, so no import runs back from here to
    the mappings that call it.
    """
    return {"biorank": {"kind": kind, "mapping_version": MAPPING_VERSION, "model": model, "dimension": dimension,
                        "settings": dict(settings), **extra}}


def _meta(client: OpenSearch, index: str) -> dict:
    mapping = client.indices.get_mapping(index=index)
    return next(iter(mapping.values()))["mappings"].get("_meta", {})


def read_record(client: OpenSearch, index: str) -> IndexRecord:
    """The index's record as it is; an index biorank did not build is refused with one line."""
    meta = _meta(client, index).get("biorank")
    if not meta:
        raise IndexMismatch(f"index {index!r} was not created by biorank; choose another --index name")
    return IndexRecord.from_meta(index, meta)


def check_record(client: OpenSearch, index: str, *, model: str | None = None) -> IndexRecord:
    """The index's record, read now and checked by :func:`verify_record`."""
    return verify_record(read_record(client, index), model=model)


def verify_record(record: IndexRecord, *, model: str | None = None) -> IndexRecord:
    """``record`` itself, unless it is of another mapping version or (given ``model``, an encoder's identity)
    built with another encoder or half re-encoded: those are refused, saying how to fix it. Reads nothing.

    Args:
        record: an index's record (:func:`read_record`).
        model: the identity of the encoder that will encode queries for it, if one will.

    Returns:
        The same record.

    Example:
        >>> verify_record(read_record(client, "scifact"), model=encoder.model_name)  # doctest: +SKIP
    """
    index = record.index
    if record.mapping_version != MAPPING_VERSION:
        raise IndexMismatch(
            f"index {index!r} has mapping version {record.mapping_version}, this biorank writes "
            f"{MAPPING_VERSION}; rebuild it with `biorank index ... --index {index} --recreate`"
        )
    if model is not None and record.reencoding is not None:
        # Its vectors are part old encoder, part new: neither encoder's queries would rank them fairly.
        state = record.reencoding
        raise IndexMismatch(
            f"index {index!r} is half re-encoded with {state.get('model')!r}; finish with `biorank "
            f"reindex-vectors --index {index} --model {state.get('model_source') or state.get('model')}`"
        )
    if model is not None and record.model != model:
        raise IndexMismatch(
            f"index {index!r} was built with the encoder {record.model!r}, not {model!r}; use that "
            f"encoder (--model, and --query-prefix/--passage-prefix where it names prefixes), or rebuild with "
            f"--recreate"
        )
    return record


def update_record(client: OpenSearch, index: str, *, remove: Iterable[str] = (), **entries: object) -> IndexRecord:
    """Set ``entries`` in the index's record and drop the keys in ``remove``; returns the new record.

    ``_meta`` is replaced as a whole by a mapping update, so the rest of the record is sent back with it.
    """
    mapping = client.indices.get_mapping(index=index)
    if list(mapping) != [index]:
        # An alias: a mapping update would write the record into every index behind it, under another name.
        raise IndexMismatch(f"{index!r} is an alias of {', '.join(sorted(mapping))[:200]}: a record is written to "
                            "an index by its own name; name the index")
    meta = mapping[index]["mappings"].get("_meta", {})
    dropped = set(remove)
    record = {key: value for key, value in meta.get("biorank", {}).items() if key not in dropped} | entries
    client.indices.put_mapping(index=index, body={"_meta": {**meta, "biorank": record}})
    return IndexRecord.from_meta(index, record)


def store_lambda(client: OpenSearch, index: str, lam: float, **provenance: object) -> IndexRecord:
    """Record a tuned λ (and how it was found): hybrid searches use it from now on."""
    return update_record(client, index, **{"lambda": lam, "lambda_tuning": provenance})


def store_feedback(client: OpenSearch, index: str, feedback: Mapping[str, Any]) -> IndexRecord:
    """Record the first stage's tuned pseudo-relevance feedback (its name and parameters, as
    :meth:`~biorank.retrieval.feedback.Feedback.to_record` gives them): searches whose mode takes it use it from
    now on."""
    return update_record(client, index, feedback=dict(feedback))


def store_boosts(client: OpenSearch, index: str, boosts: Mapping[str, Any]) -> IndexRecord:
    """Record the title's and MeSH's tuned weights in the BM25 leg (and how they were found), as
    :meth:`~biorank.retrieval.boosts.Boosts.to_record` gives them: searches whose field set takes them use them."""
    return update_record(client, index, boosts=dict(boosts))


def store_reranker(client: OpenSearch, index: str, model: str) -> IndexRecord:
    """Make the cross-encoder in folder ``model`` (or the ensemble ``A,B`` of such folders and the shipped one) the
    index's reranker."""
    return update_record(client, index, reranker={"model": model})


def store_rerank_weight(client: OpenSearch, index: str, weight: float, *, reranker: str,
                        **provenance: object) -> IndexRecord:
    """Record a tuned rerank weight for the cross-encoder of identity ``reranker`` (and how it was found):
    reranking with that cross-encoder uses it from now on."""
    return update_record(client, index, rerank_weight={"weight": weight, "reranker": reranker, **provenance})


def store_snippet_weights(client: OpenSearch, index: str, weights: Mapping[str, Any]) -> IndexRecord:
    """Record tuned snippet weights (with how they were tuned): ``+snippets`` systems use them from now on."""
    return update_record(client, index, snippet_weights=dict(weights))


def store_applied_file(client: OpenSearch, index: str, applied: AppliedFile) -> IndexRecord:
    """Record that the file ``applied`` is in the index in full; call it only once all its writes and deletions
    were acknowledged, so an interrupted file is applied again, never skipped.

    Args:
        client: the cluster.
        index: the documents index.
        applied: the file, its checksum and what it changed.

    Returns:
        The new record, ``applied`` last in its ``applied_files``.

    Example:
        >>> store_applied_file(client, "pubmed", AppliedFile("pubmed25n1275.xml.gz", digest, now))  # doctest: +SKIP
    """
    meta = _meta(client, index).get("biorank", {})
    # A file applied again (allowed out of order, or after its entry was set aside) moves to the end, once.
    entries = [e for e in meta.get(APPLIED_FILES) or () if e.get("name") != applied.name]
    return update_record(client, index, **{APPLIED_FILES: [*entries, asdict(applied)]})
