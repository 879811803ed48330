"""What an indexing run is told and what it reads: its options, its input in batches (one file at a time, what
cannot be indexed reported to the rejects file), and its counts. ``index`` and ``encode`` read through here alike,
so equal settings read equal batches."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from biorank.config import DEFAULT_INDEX, MAX_RECORD_BYTES
from biorank.indexer.readers import Record, read_records
from biorank.store.ids import id_problem
from biorank.store.mappings.documents import IndexSettings
from biorank.store.mappings.sentences import SENTENCE_VECTORS
from biorank.store.names import check_index_name
from biorank.types import Abstract, Deletion, Rejected


@dataclass(frozen=True)
class IndexOptions:
    """How a collection is indexed. The defaults index title + abstract with sentences, 64 documents a batch."""

    index: str = DEFAULT_INDEX
    format: str = "auto"
    id_field: str | None = None
    title_field: str | None = None
    text_field: str | None = None
    sentences: bool = True
    recreate: bool = False
    batch_size: int = 64
    settings: IndexSettings = field(default_factory=IndexSettings)
    rejects: Path | None = None
    """Where rejected records are listed (tab-separated: source, line, id, reason); written only when needed."""
    max_record_bytes: int = MAX_RECORD_BYTES
    """A longer record (title + abstract, UTF-8) is rejected: its text would cost minutes and gigabytes."""
    sentence_vectors: str | None = None
    """How a new sentences index stores its vectors (:data:`~biorank.store.mappings.sentences.SENTENCE_VECTORS`);
    None: an existing index's own choice, else the default."""
    follow_alias: bool = False
    """Where ``index`` is an alias, write into the one index behind it (refused otherwise, and always with
    ``recreate``): see :func:`~biorank.store.indices.concrete_index`."""

    def __post_init__(self) -> None:
        check_index_name(self.index)
        if self.sentence_vectors not in (None, *SENTENCE_VECTORS):
            raise ValueError(f"sentence_vectors must be one of {', '.join(SENTENCE_VECTORS)}, "
                             f"not {self.sentence_vectors!r}")


@dataclass
class IndexReport:
    read: int = 0
    indexed: int = 0
    unchanged: int = 0
    replaced: int = 0
    """Documents that were in the index with other content: changed since, or repeated in this input."""
    deleted: int = 0
    """Documents removed because the input withdraws them (PubMed ``<DeleteCitation>``)."""
    absent: int = 0
    """Withdrawn documents that were not in the index: nothing to remove."""
    blocks: int = 0
    sentences: int = 0
    rejected: Counter = field(default_factory=Counter)
    failed: int = 0
    incomplete: tuple[str, ...] = ()
    """Where reading a file stopped before its end (a truncated download, XML past repair), one line each: what
    followed was never read, so a sync must not record that file as applied."""
    bibliographic_left_out: int = 0
    """Documents written without their authors, DOI, publication types and major MeSH: the index was built before
    it had fields for them (rebuilding it with ``--recreate`` stores them)."""
    seconds: float = 0.0
    rejects_file: Path | None = None

    @property
    def docs_per_second(self) -> float:
        return self.indexed / self.seconds if self.seconds else 0.0


@dataclass
class Batch:
    """Up to ``batch_size`` records of the input: documents to write and ids to remove, never the same id in both
    (whichever came later in the input wins)."""

    records: list[Abstract]
    deletions: list[Deletion]
    ends: Path | None = None
    """The file whose last batch this is."""

    @property
    def ids(self) -> set[str]:
        return {r.id for r in self.records} | {d.id for d in self.deletions}


def open_readers(paths: Iterable[Path], options: IndexOptions) -> list[tuple[Path, Iterator[Record]]]:
    """Each input file with its records as ``options`` say to read them: how ``index`` and ``encode`` open their
    input, so both read alike. Problems with a whole file are raised here, before anything is written."""
    o = options
    return [(p, read_records(p, o.format, id_field=o.id_field, title_field=o.title_field, text_field=o.text_field,
                             max_record_bytes=o.max_record_bytes)) for p in paths]


FIRST_BATCH = 8
"""Records in the first batch of a run; each next batch is twice as large, up to ``IndexOptions.batch_size``."""


def read_batches(readers: Iterable[tuple[Path, Iterator[Abstract | Rejected | Deletion]]], options: IndexOptions,
                 report: IndexReport, rejects: RejectsFile, *, ramp: bool = False) -> Iterator[Batch]:
    """The input in batches of ``options.batch_size`` records, each within one file (the last of each file says
    so), with what cannot be indexed reported to ``rejects``: how ``index`` and ``encode`` both read.

    With ``ramp`` the first batches are smaller (:data:`FIRST_BATCH`, doubling up to the batch size): ``index``
    says its progress per batch written, and a first batch of 64 abstracts with sentences keeps a slow CPU silent
    for a minute. ``encode`` keeps whole batches: its shards and their resumption count batches of that size."""
    batch: dict[str, Abstract] = {}
    deletions: dict[str, Deletion] = {}
    size = min(FIRST_BATCH, options.batch_size) if ramp else options.batch_size
    for path, records in readers:
        for record in records:
            report.read += 1
            if isinstance(record, Deletion):
                # A version earlier in this input is withdrawn with it, before it was ever written.
                batch.pop(record.id, None)
                deletions[record.id] = record
                if len(batch) + len(deletions) >= size:
                    yield Batch(list(batch.values()), list(deletions.values()))
                    batch, deletions, size = {}, {}, min(2 * size, options.batch_size)
                continue
            if isinstance(record, Abstract) and (problem := record_problem(record, options)):
                record = Rejected(record.source, record.line, record.id, problem)
            if isinstance(record, Rejected):
                if record.rest_skipped:
                    report.incomplete += (f"{record.source}:{record.line}: {record.reason}",)
                report.rejected[record.reason.split(":")[0]] += 1
                rejects.write(record.source, record.line, record.id, record.reason)
                continue
            # Withdrawn earlier in the file and given again: it is back.
            deletions.pop(record.id, None)
            # The same id twice in a batch: the later record wins, as a second write would, and the earlier
            # one is reported (a repeat in a later batch is counted as replaced).
            earlier = batch.pop(record.id, None)
            if earlier is not None:
                report.rejected["duplicate id"] += 1
                rejects.write(earlier.source, earlier.line, earlier.id,
                              f"duplicate id: replaced by the record at line {record.line}")
            batch[record.id] = record
            if len(batch) + len(deletions) >= size:
                yield Batch(list(batch.values()), list(deletions.values()))
                batch, deletions, size = {}, {}, min(2 * size, options.batch_size)
        # A batch never spans two files, so every file's writes can be known complete (``file_done``); the
        # last batch of a file says so, even an empty one.
        yield Batch(list(batch.values()), list(deletions.values()), ends=path)
        batch, deletions = {}, {}


def record_problem(record: Abstract, options: IndexOptions) -> str | None:
    """Why ``record`` cannot be indexed (too large, an id OpenSearch cannot hold), or None."""
    size = len(record.title.encode()) + len(record.abstract.encode())
    if size > options.max_record_bytes:
        return (f"record too large: {size:,} bytes of title and abstract, the limit is "
                f"{options.max_record_bytes:,} (--max-record-bytes)")
    return id_problem(record.id)


def counts_since(report: IndexReport, since: IndexReport | None = None) -> IndexReport:
    """A copy of ``report``'s counts, less those of ``since`` (an earlier copy): one file's share of a run."""
    copy = IndexReport(read=report.read, indexed=report.indexed, unchanged=report.unchanged,
                       replaced=report.replaced, blocks=report.blocks, sentences=report.sentences,
                       rejected=Counter(report.rejected), failed=report.failed, deleted=report.deleted,
                       absent=report.absent, incomplete=report.incomplete)
    if since is None:
        return copy
    copy.incomplete = copy.incomplete[len(since.incomplete):]
    for name in ("read", "indexed", "unchanged", "replaced", "blocks", "sentences", "failed", "deleted", "absent"):
        setattr(copy, name, getattr(copy, name) - getattr(since, name))
    copy.rejected = copy.rejected - since.rejected
    return copy


class RejectsFile:
    """Opened on the first reject only, so a clean run leaves no empty file behind."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.used = False
        self._file: TextIO | None = None

    def write(self, source: str, line: int, doc_id: str | None, reason: str) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w", encoding="utf-8")
            self._file.write("source\tline\tid\treason\n")
            self.used = True
        clean = " ".join(reason.split())
        self._file.write(f"{source}\t{line}\t{doc_id or ''}\t{clean}\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
