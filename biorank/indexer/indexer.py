"""Readers → sentences → blocks → encoder → bulk writer: one collection into a documents and a sentences index.

Nothing is lost and nothing is duplicated:
- every entry's ``_id`` is derived from the source id, so writing a document again overwrites it;
- a document's block 0 is written only after all its other blocks and sentences were acknowledged, and it
  carries a hash of the document's content: a document whose block 0 is in with the same hash is complete
  and is skipped, so an interrupted run (Ctrl-C, ``kill -9``, a lost cluster) resumes where it stopped;
- a document whose content changed is rewritten, and the blocks and sentences it no longer has are deleted;
- a document the input withdraws (a PubMed ``<DeleteCitation>``) loses its blocks and sentences, block 0 last,
  so an interrupted deletion is finished by the next run; withdrawing one that is not there changes nothing;
- when the same id comes again later in the input (a revised citation in a later update file), the later
  version wins: a batch that touches an id still being written waits for that write first;
- records a reader could not use, and documents the cluster refused, go to the rejects file with a reason.

The encoder of batch ``n + 1`` runs while the bulk requests of batch ``n`` are in flight (one writer
thread): on a CPU the encoder is the bound, and this hides the writes behind it. The writer sends a batch's
requests over one stream per data node (:class:`~biorank.store.writer.BulkWriter`), so without an encoder (vectors
from ``biorank encode``: :class:`VectorSource`) the cluster's ingest is the bound.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from biorank.indexer.batches import (
    Batch,
    IndexOptions,
    IndexReport,
    RejectsFile,
    counts_since,
    open_readers,
    read_batches,
)
from biorank.indexer.blocks import Block, block_budget, make_blocks
from biorank.indexer.sentences import sentences_of
from biorank.store.ids import block_id, sentence_id, storage_id
from biorank.store.indices import concrete_index, delete_indices, is_alias, refresh_paused, sentences_index_name
from biorank.store.mappings.documents import BIBLIOGRAPHIC, documents_index_body
from biorank.store.mappings.sentences import (
    DEFAULT_SENTENCE_VECTORS,
    sentences_index_body,
    stored_vector,
)
from biorank.store.record import MAPPING_VERSION, IndexMismatch, check_record, read_record
from biorank.store.server import bm25_similarity
from biorank.store.writer import BulkWriter, WriteFailure, data_nodes
from biorank.types import Abstract, Advance, Sentence

if TYPE_CHECKING:
    import numpy as np
    from opensearchpy import OpenSearch

    from biorank.models.encoder import Encoder


MEDLINE_FIELDS = (*BIBLIOGRAPHIC, "doi")
"""The :class:`~biorank.types.Abstract` fields only PubMed XML sets, which only an index built with them stores."""


def content_hash(record: Abstract, *, model: str, with_sentences: bool, bibliographic: bool = True) -> str:
    """Changes when anything that reaches the index changes: the record, the encoder, the mapping.

    A bibliographic field (:data:`MEDLINE_FIELDS`) counts only where it is set and the index stores it
    (``bibliographic``): a record of any other source, and any record bound for an index built before those fields
    existed, hashes as it did before them, so a run over such an index re-encodes nothing for fields that would
    not change what it holds. A PubMed index built with them hashes them, so a revised author list rewrites its
    citation.
    """
    fields = asdict(record)
    del fields["source"], fields["line"]
    for name in MEDLINE_FIELDS:
        if not bibliographic or not fields[name]:
            del fields[name]
    key = json.dumps([fields, model, MAPPING_VERSION, with_sentences], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class ModelIdentity:
    """What an index records of the encoder that made its vectors, and what its blocks were cut to: all that a
    load from shards (``biorank encode``) needs in place of the encoder itself."""

    name: str
    """The identity the index records (:attr:`Encoder.model_name`: weights, and prefixes not the model's own)."""
    source: str
    dimension: int
    max_seq_length: int
    prompts: dict[str, str] = field(default_factory=dict)
    default_lambda: float | None = None

    @classmethod
    def of(cls, encoder: Encoder) -> ModelIdentity:
        return cls(name=encoder.model_name, source=encoder.source, dimension=encoder.dimension,
                   max_seq_length=encoder.max_seq_length, prompts=encoder.prefixes.as_prompts(),
                   default_lambda=encoder.default_lambda)

    @property
    def block_tokens(self) -> int:
        return block_budget(self.max_seq_length)


@dataclass
class EncodedDocument:
    """One record as the index holds it: its blocks and (with sentences) its sentences, each with its vector."""

    id: str
    blocks: list[Block]
    block_vectors: np.ndarray
    sentences: list[Sentence]
    sentence_vectors: np.ndarray


def encode_records(encoder: Encoder, records: list[Abstract], *, with_sentences: bool,
                   encode_sentences: bool = True) -> list[EncodedDocument]:
    """Split ``records`` into sentences, cut them into blocks of the encoder's budget, and encode both: what
    ``biorank index`` writes and ``biorank encode`` stores, from this one function.

    Args:
        encoder: the passage encoder (its tokenizer cuts the blocks).
        records: the documents, in order.
        with_sentences: whether sentences are encoded too (else each document's sentence list is empty).
        encode_sentences: False for sentences without vectors (an index that stores none): each document's
            ``sentence_vectors`` then has no columns.

    Returns:
        One :class:`EncodedDocument` per record, in order.

    Example:
        >>> encode_records(Encoder(), [abstract], with_sentences=True)[0].blocks[0].text  # doctest: +SKIP
    """
    sentences = [sentences_of(r) for r in records]
    titles = [r.title.strip() for r in records]
    abstract_sentences = [[s for s in ss if s.section == "abstract"] for ss in sentences]
    pieces = encoder.tokenize_batch(titles + [s.text for ss in abstract_sentences for s in ss])
    title_pieces, sentence_pieces = pieces[: len(records)], iter(pieces[len(records):])
    budget = block_budget(encoder.max_seq_length)
    blocks = [
        make_blocks(title, tp, [s.text for s in ss], [next(sentence_pieces) for _ in ss], budget)
        for title, tp, ss in zip(titles, title_pieces, abstract_sentences, strict=True)
    ]
    if not with_sentences:
        sentences = [[] for _ in records]
    block_vectors = encoder.encode([b.text for bs in blocks for b in bs])
    texts = [s.text for ss in sentences for s in ss]
    if encode_sentences:
        sentence_vectors = encoder.encode(texts)
    else:
        import numpy as np

        sentence_vectors = np.zeros((len(texts), 0), dtype=np.float32)
    documents, b, s = [], 0, 0
    for record, doc_blocks, doc_sentences in zip(records, blocks, sentences, strict=True):
        documents.append(EncodedDocument(record.id, doc_blocks, block_vectors[b: b + len(doc_blocks)],
                                         doc_sentences, sentence_vectors[s: s + len(doc_sentences)]))
        b, s = b + len(doc_blocks), s + len(doc_sentences)
    return documents


class VectorSource(Protocol):
    """Where the vectors come from in place of an encoder: the shards ``biorank encode`` wrote
    (:class:`~biorank.indexer.shards.ShardReader`)."""

    @property
    def identity(self) -> ModelIdentity: ...

    def check(self, paths: list[Path], options: IndexOptions) -> None:
        """Refuse, in one line, input files or options other than those the vectors were made from."""

    def documents(self, records: list[Abstract], hashes: dict[str, str]) -> list[EncodedDocument]:
        """The encoded form of ``records`` (in the input's order), each made from the content ``hashes`` says."""


@dataclass
class _Prepared:
    """A batch ready to write: everything but block 0 first, then the block 0s that complete documents, then the
    documents the batch withdraws."""

    first: list[dict]
    last: dict[str, dict]  # doc id -> its block-0 action
    owners: dict[tuple[str, str], str]  # (index, _id) of every action in ``first`` -> its document's id
    deletions: list[str] = field(default_factory=list)
    records: int = 0  # records of the input the batch stands for, for the progress bar


@dataclass
class _Written:
    failures: list[WriteFailure]
    indexed: int
    deleted: int
    absent: int
    records: int


class Indexer:
    """Indexes collections of abstracts into ``index`` (documents) and ``index-sentences``.

    >>> report = Indexer(client, IndexOptions(index="scifact")).run(["corpus.jsonl"])  # doctest: +SKIP
    """

    def __init__(self, client: OpenSearch, options: IndexOptions | None = None, *,
                 encoder: Encoder | None = None, writer: BulkWriter | None = None,
                 vectors: VectorSource | None = None) -> None:
        """Args: ``vectors``, where given, supplies every block and sentence with its vector (the shards of
        ``biorank encode``), so no encoder is loaded; ``writer`` defaults to one bulk stream per data node."""
        self.client = client
        self.options = options or IndexOptions()
        self._encoder = encoder
        self._writer = writer
        self._vectors = vectors
        self.sentence_vectors = self.options.sentence_vectors or DEFAULT_SENTENCE_VECTORS
        """How the sentences index stores its vectors; :meth:`prepare_indices` settles it against the index."""
        self.bibliographic = True
        """Whether the documents index stores MEDLINE's bibliographic fields; :meth:`prepare_indices` reads it from
        an existing index's record (one built before them has no such fields, and its strict mapping would refuse
        every document that carried them)."""

    @property
    def encoder(self) -> Encoder | None:
        """The passage encoder, once given or loaded (:meth:`load`); None before."""
        return self._encoder

    def load(self) -> Encoder:
        """Loads the default encoder (:data:`~biorank.models.encoder.DEFAULT_MODEL`) unless one was given or loaded
        already; :meth:`run` calls it before its first batch.

        Returns:
            The encoder that writes the index's vectors.

        Example:
            >>> Indexer(client, IndexOptions(index="scifact")).load().model_name  # doctest: +SKIP
        """
        if self._encoder is None:
            from biorank.models.encoder import Encoder

            self._encoder = Encoder()
        return self._encoder

    @property
    def identity(self) -> ModelIdentity:
        """The encoder the index is written with: the shards' where vectors are given, else the encoder's."""
        return self._vectors.identity if self._vectors is not None else ModelIdentity.of(self.load())

    @property
    def sentences_index(self) -> str | None:
        """The name of the sentences index this run writes, or None with ``IndexOptions(sentences=False)``."""
        return sentences_index_name(self.options.index) if self.options.sentences else None

    def run(self, paths: Iterable[str | Path], progress: Advance | None = None, *,
            file_done: Callable[[Path, IndexReport], None] | None = None) -> IndexReport:
        """Index every record of ``paths``, in order: a document given again later replaces the earlier version,
        and one withdrawn (PubMed ``<DeleteCitation>``) is removed.

        Args:
            paths: the input files.
            progress: called with the number of records done since its last call.
            file_done: called once per file with the file and what it changed (its share of the report), as soon
                as every write and deletion of that file was acknowledged and before the next file is written.

        Returns:
            The counts of the whole run.

        Example:
            >>> Indexer(client, IndexOptions(index="pubmed")).run(["pubmed25n0001.xml.gz"]).indexed  # doctest: +SKIP
        """
        report = IndexReport()
        started = time.monotonic()
        # Problems with a whole file (missing, unreadable, unknown format) stop the run before any index exists.
        o = self.options
        paths = [Path(p) for p in paths]
        readers = open_readers(paths, o)
        if self._vectors is not None:
            self._vectors.check(paths, o)
        self.prepare_indices()
        if self._writer is None:
            self._writer = BulkWriter(self.client, streams=data_nodes(self.client))
        indices = [i for i in (self.options.index, self.sentences_index) if i]
        rejects = RejectsFile(self.options.rejects or Path(f"biorank-rejects-{self.options.index}.tsv"))
        try:
            with (refresh_paused(self.client, indices),
                  ThreadPoolExecutor(max_workers=1, thread_name_prefix="biorank-bulk") as pool):
                in_flight: Future | None = None
                in_flight_ids: set[str] = set()
                file_start = counts_since(report)
                for batch in read_batches(readers, o, report, rejects, ramp=True):
                    if in_flight is not None and batch.ids & in_flight_ids:
                        # A later version or a withdrawal of a document still being written: preparing it now
                        # would read the version before, and the older write could land last.
                        self._finish(in_flight.result(), report, rejects, progress)
                        in_flight = None
                    if batch.records or batch.deletions:
                        prepared = self._prepare(batch, report)
                        if in_flight is not None:
                            self._finish(in_flight.result(), report, rejects, progress)
                        in_flight, in_flight_ids = pool.submit(self._write, prepared), batch.ids
                    if batch.ends is not None and file_done is not None:
                        if in_flight is not None:
                            self._finish(in_flight.result(), report, rejects, progress)
                            in_flight = None
                        file_done(batch.ends, counts_since(report, since=file_start))
                        file_start = counts_since(report)
                if in_flight is not None:
                    self._finish(in_flight.result(), report, rejects, progress)
        finally:
            rejects.close()
        report.seconds = time.monotonic() - started
        report.rejects_file = rejects.path if rejects.used else None
        return report

    # Indices ---------------------------------------------------------------------------------------------
    def prepare_indices(self) -> None:
        """Create the indices, or check that existing ones were built by biorank with the same encoder."""
        o = self.options
        index = concrete_index(self.client, o.index, follow_alias=o.follow_alias, recreate=o.recreate)
        if index != o.index:
            self.options = replace(o, index=index, follow_alias=False)
        identity, settings = self.identity, self.options.settings
        model, dimension = identity.name, identity.dimension
        if self._vectors is None:
            self.load().export_for_queries()
        if self.options.recreate:
            delete_indices(self.client, self.options.index)
        similarity = bm25_similarity(self.client)
        self.sentence_vectors = self._sentence_vectors()
        bodies = {
            self.options.index: documents_index_body(
                settings, model=model, dimension=dimension,
                block_tokens=identity.block_tokens, sentences_index=self.sentences_index,
                model_source=identity.source, prefixes=identity.prompts,
                default_lambda=identity.default_lambda, similarity=similarity,
                sentence_vectors=self.sentence_vectors,
            )
        }
        if self.sentences_index:
            bodies[self.sentences_index] = sentences_index_body(
                settings, model=model, dimension=dimension, documents_index=self.options.index,
                similarity=similarity, vectors=self.sentence_vectors,
            )
        # Every existing index is checked before any is created: a refusal leaves nothing new behind.
        missing = {name: body for name, body in bodies.items() if not self.client.indices.exists(index=name)}
        for name in (name for name in bodies if name not in missing):
            if name == self.sentences_index and is_alias(self.client, name):
                raise IndexMismatch(f"{name!r} is an alias; the sentences of {self.options.index!r} are written "
                                    "only into an index of that name; delete the alias or choose another --index")
            record = check_record(self.client, name, model=model)
            if name == self.options.index:
                self.bibliographic = record.bibliographic
            if record.block_tokens not in (None, identity.block_tokens):
                raise IndexMismatch(f"{name!r} holds blocks of {record.block_tokens} word pieces, these are cut "
                                    f"to {identity.block_tokens}; index into another --index or --recreate")
            if name == self.sentences_index and (record.kind, record.documents_index) != (
                    "sentences", self.options.index):
                # Its own record says whose sentences it holds; writing ours beside them would mix two indices.
                raise IndexMismatch(f"{name!r} holds the sentences of {record.documents_index!r} by its own "
                                    f"record, not those of {self.options.index!r}; delete it or choose another "
                                    "--index name")
        for name, body in missing.items():
            self.client.indices.create(index=name, body=body)
            if name == self.options.index:
                self.bibliographic = True

    def _sentence_vectors(self) -> str:
        """How the sentences are stored: as the existing sentences index stores them, else as asked, else the
        default; asking an existing index for another choice is refused (its field could not take the vectors)."""
        asked, name = self.options.sentence_vectors, self.sentences_index
        if name and self.client.indices.exists(index=name):
            stored = read_record(self.client, name).sentence_vectors
            if asked not in (None, stored):
                raise IndexMismatch(f"{name!r} stores its sentence vectors as {stored!r}, not {asked!r}; leave "
                                    "--sentence-vectors out, or --recreate")
            return stored
        return asked or DEFAULT_SENTENCE_VECTORS

    # Preparing ---------------------------------------------------------------------------------------------
    def _prepare(self, input_batch: Batch, report: IndexReport) -> _Prepared:
        o = self.options
        batch = input_batch.records
        model = self.identity.name
        hashes = {r.id: content_hash(r, model=model, with_sentences=o.sentences, bibliographic=self.bibliographic)
                  for r in batch}
        previous = self._stored(list(hashes))
        todo = [r for r in batch if previous.get(r.id, {}).get("content_hash") != hashes[r.id]]
        report.unchanged += len(batch) - len(todo)
        report.replaced += sum(r.id in previous for r in todo)

        if not self.bibliographic:
            report.bibliographic_left_out += sum(any(getattr(r, name) for name in MEDLINE_FIELDS) for r in todo)
        if self._vectors is not None:
            # The shards hash every field the record has: they were made for no index in particular.
            made = hashes if self.bibliographic else {
                r.id: content_hash(r, model=model, with_sentences=o.sentences) for r in todo}
            encoded = self._vectors.documents(todo, made)
        else:
            encoded = encode_records(self.load(), todo, with_sentences=o.sentences,
                                     encode_sentences=self.sentence_vectors != "none")

        first: list[dict] = []
        last: dict[str, dict] = {}
        owners: dict[tuple[str, str], str] = {}

        def add(action: dict, doc_id: str) -> None:
            first.append(action)
            owners[action["_index"], action["_id"]] = doc_id
        for record, doc in zip(todo, encoded, strict=True):
            # Numbers past the last sentence of each section; sources may skip a blank sentence's number.
            extent: Counter = Counter()
            for s in doc.sentences:
                extent[s.section] = max(extent[s.section], s.number + 1)
            for b, vector in zip(doc.blocks, doc.block_vectors, strict=True):
                source = {
                    "id": record.id, "block": b.number, "n_blocks": len(doc.blocks), "title": record.title,
                    "passage": b.text, "wordpieces": " ".join(b.wordpieces), "embedding": vector.tolist(),
                    "journal": record.journal, "year": record.year, "mesh": list(record.mesh),
                }
                if self.bibliographic:
                    source |= {"authors": list(record.authors), "publication_types": list(record.publication_types),
                               "mesh_major": list(record.mesh_major), "journal_abbrev": record.journal_abbrev}
                if b.number == 0:
                    source |= {
                        "abstract": record.abstract, "text": f"{record.title}\n{record.abstract}".strip(),
                        "content_hash": hashes[record.id], "n_title_sentences": extent["title"],
                        "n_abstract_sentences": extent["abstract"],
                    }
                    if self.bibliographic:
                        source["doi"] = record.doi
                    last[record.id] = {"_index": o.index, "_id": storage_id(record.id), "_source": source}
                else:
                    add({"_index": o.index, "_id": block_id(record.id, b.number), "_source": source}, record.id)
            for action in self._stale(record.id, previous.get(record.id), len(doc.blocks), extent):
                add(action, record.id)
        for doc in encoded if o.sentences else ():
            for s, vector in zip(doc.sentences, doc.sentence_vectors, strict=True):
                add({
                    "_index": self.sentences_index, "_id": sentence_id(s.doc_id, s.section, s.number),
                    "_source": {"doc_id": s.doc_id, "section": s.section, "number": s.number, "begin": s.begin,
                                "end": s.end, "text": s.text, **stored_vector(self.sentence_vectors, vector)},
                }, s.doc_id)
        report.blocks += sum(len(doc.blocks) for doc in encoded)
        report.sentences += sum(len(doc.sentences) for doc in encoded) if o.sentences else 0
        return _Prepared(first, last, owners, [d.id for d in input_batch.deletions],
                         len(input_batch.records) + len(input_batch.deletions))

    def _stored(self, ids: list[str]) -> dict[str, dict]:
        """What block 0 of each id says now: its content hash and how many blocks and sentences it had."""
        if not ids:
            return {}  # a batch of deletions only; mget refuses an empty list
        # mget reads the translog, so documents of an unrefreshed (killed) run are seen too.
        found = self.client.mget(
            index=self.options.index, body={"ids": [storage_id(i) for i in ids]},
            _source_includes="content_hash,n_blocks,n_title_sentences,n_abstract_sentences",
        )
        return {i: d["_source"] for i, d in zip(ids, found["docs"], strict=True) if d.get("found")}

    def _stale(self, doc_id: str, before: dict | None, n_blocks: int, extent: Counter) -> Iterator[dict]:
        """Deletions of what an earlier version of the document had beyond what this one has."""
        if not before:
            return
        for n in range(n_blocks, before.get("n_blocks") or 0):
            yield {"_op_type": "delete", "_index": self.options.index, "_id": block_id(doc_id, n)}
        if self.sentences_index:
            for section in ("title", "abstract"):
                for n in range(extent[section], before.get(f"n_{section}_sentences") or 0):
                    yield {"_op_type": "delete", "_index": self.sentences_index,
                           "_id": sentence_id(doc_id, section, n)}

    # Writing -----------------------------------------------------------------------------------------------
    def _write(self, prepared: _Prepared) -> _Written:
        failures = self._writer.write(prepared.first)
        broken = {prepared.owners[f.index, f.id] for f in failures}
        # A document with a missing part gets no block 0, so the next run writes it again.
        complete = [action for doc_id, action in prepared.last.items() if doc_id not in broken]
        last_failures = self._writer.write(complete)
        # Withdrawals come after the batch's writes and, on the one writer thread, after every earlier batch's.
        deleted, absent, delete_failures = self._withdraw(prepared.deletions)
        return _Written(failures + last_failures + delete_failures, len(complete) - len(last_failures), deleted,
                        absent, prepared.records)

    def _withdraw(self, doc_ids: list[str]) -> tuple[int, int, list[WriteFailure]]:
        """Remove the documents ``doc_ids``: (removed, not there, failures).

        What to remove is read from each block 0 (how many blocks and sentences it has), in real time, so entries
        of this run not yet refreshed are found too, which a delete-by-query would miss. Block 0 goes last: a
        deletion cut short leaves the document findable, and the next run of the same file removes the rest.
        """
        if not doc_ids:
            return 0, 0, []
        stored = self._stored(doc_ids)
        sentences = sentences_index_name(self.options.index)
        owners: dict[tuple[str, str], str] = {}  # (index, _id) of every entry but block 0 -> its document's id
        for doc_id, before in stored.items():
            for n in range(1, before.get("n_blocks") or 1):
                owners[self.options.index, block_id(doc_id, n)] = doc_id
            # Counts above zero mean sentences were written, whether or not this run writes any.
            for section in ("title", "abstract"):
                for n in range(before.get(f"n_{section}_sentences") or 0):
                    owners[sentences, sentence_id(doc_id, section, n)] = doc_id
        failures = self._writer.write({"_op_type": "delete", "_index": index, "_id": entry} for index, entry in owners)
        broken = {owners.get((f.index, f.id)) for f in failures}
        firsts = [{"_op_type": "delete", "_index": self.options.index, "_id": storage_id(i)}
                  for i in stored if i not in broken]
        last_failures = self._writer.write(firsts)
        return len(firsts) - len(last_failures), len(doc_ids) - len(stored), failures + last_failures

    def _finish(self, result: _Written, report: IndexReport, rejects: RejectsFile,
                progress: Advance | None) -> None:
        report.indexed += result.indexed
        report.deleted += result.deleted
        report.absent += result.absent
        report.failed += len({f.id for f in result.failures})
        for f in result.failures:
            rejects.write(f.index, 0, f.id, f"indexing failed: {f.reason}")
        if progress is not None:
            progress(result.records)


