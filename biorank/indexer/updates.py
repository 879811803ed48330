"""Keeping a PubMed index current: NLM's baseline and update files applied in order, each once.

NLM publishes a yearly baseline (``pubmed25n0001.xml.gz`` …) and then daily update files of the same format whose
numbers go on from the baseline's last; an update file carries new citations, new versions of existing ones and
``<DeleteCitation>`` lists. The order matters — a citation revised twice must end as its last version, and one
deleted must not come back from an older file — so files are applied by their number, and every file applied in
full is recorded with its SHA-256 in the index record: applying a folder again skips what is in, a file applied
out of order is refused, and the record says how current the index is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from biorank.downloads import sha256_of
from biorank.errors import BiorankError
from biorank.indexer.indexer import Indexer, IndexOptions, IndexReport
from biorank.store.record import AppliedFile, read_record, store_applied_file

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

    from biorank.models.encoder import Encoder
    from biorank.types import Advance

PUBMED_NAME = re.compile(r"^(?:pubmed|medline)(\d{2})n(\d{4})\.xml(?:\.gz)?$")
"""NLM's file names: two digits of the baseline's year, then the file's number (``pubmed25n1275.xml.gz``)."""


class SyncRefused(BiorankError):
    """The files cannot be applied as given: one out of order, a name applied before with other content, or
    files that are not NLM's."""


@dataclass(frozen=True)
class PubmedFile:
    """One baseline or update file, ordered by (year, number) as NLM numbers them."""

    path: Path
    year: int
    number: int

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def key(self) -> tuple[int, int]:
        return self.year, self.number


@dataclass
class SyncPlan:
    """What a sync will do: the files to apply, in order, and those already in the index (skipped)."""

    apply: list[tuple[PubmedFile, str]] = field(default_factory=list)
    """Each file and its SHA-256."""
    skipped: list[PubmedFile] = field(default_factory=list)
    last_applied: AppliedFile | None = None
    """The file applied last before this sync, if any."""
    ignored: list[Path] = field(default_factory=list)
    """Files in the folders given that are not named as NLM names them (``.md5`` files, a README)."""


def file_key(name: str) -> tuple[int, int] | None:
    """(year, number) of an NLM file name, or None for any other name.

    Example:
        >>> file_key("pubmed25n1275.xml.gz")
        (25, 1275)
    """
    match = PUBMED_NAME.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def find_pubmed_files(paths: Iterable[str | Path]) -> tuple[list[PubmedFile], list[Path]]:
    """The NLM files among ``paths`` (files, or folders searched to any depth, e.g. ``baseline/`` and
    ``updatefiles/``), in order, and the other files found in those folders.

    A file named explicitly must have an NLM name: the order comes from it. The same name found twice is refused:
    NLM never reuses a name, so two copies would be either redundant or in conflict.
    """
    found: dict[str, PubmedFile] = {}
    ignored: list[Path] = []
    for given in map(Path, paths):
        if not given.exists():
            raise SyncRefused(f"no such file or folder: {given}")
        candidates = sorted(p for p in given.rglob("*") if p.is_file()) if given.is_dir() else [given]
        for path in candidates:
            key = file_key(path.name)
            if key is None:
                if not given.is_dir():
                    raise SyncRefused(f"{path.name!r} is not named as NLM names its files (pubmedYYnNNNN.xml.gz), "
                                      "which gives the order to apply it in; index it with `biorank index`")
                ignored.append(path)
                continue
            if path.name in found and found[path.name].path.resolve() != path.resolve():
                raise SyncRefused(f"two files named {path.name}: {found[path.name].path} and {path}; keep one")
            found[path.name] = PubmedFile(path, *key)
    return sorted(found.values(), key=lambda f: f.key), ignored


def plan_sync(files: list[PubmedFile], applied: Iterable[AppliedFile], *,
              allow_out_of_order: bool = False) -> SyncPlan:
    """Which of ``files`` (in order) to apply, given the files the index has applied.

    A file applied before with the same checksum is skipped; with another checksum it is refused (NLM does not
    republish a file under its name, so its content changed on the way or it is not NLM's). A new file numbered
    before the last one applied is refused unless ``allow_out_of_order``: its older versions of citations would
    overwrite newer ones, and citations deleted since would come back. Refusals raise :class:`SyncRefused`
    before anything is written.

    Args:
        files: the candidates, as :func:`find_pubmed_files` gives them.
        applied: the index record's ``applied_files``.
        allow_out_of_order: apply older-numbered new files anyway, in number order.

    Returns:
        The plan.

    Example:
        >>> files, _ = find_pubmed_files(["updatefiles"])  # doctest: +SKIP
        >>> plan_sync(files, read_record(client, "pubmed").applied_files).apply  # doctest: +SKIP
    """
    applied = list(applied)
    by_name = {a.name: a for a in applied}
    last = max(applied, key=lambda a: file_key(a.name) or (-1, -1), default=None)
    last_key = file_key(last.name) if last else None
    plan = SyncPlan(last_applied=applied[-1] if applied else None)
    for file in files:
        digest = sha256_of(file.path)
        before = by_name.get(file.name)
        if before is not None:
            if before.sha256 != digest:
                raise SyncRefused(f"{file.path} differs from the {file.name} applied on {before.applied} (SHA-256 "
                                  f"{digest[:12]}… here, {before.sha256[:12]}… then); download it again")
            plan.skipped.append(file)
            continue
        if last_key is not None and file.key < last_key and not allow_out_of_order:
            raise SyncRefused(f"{file.name} is numbered before {last.name}, already applied: applying it now could "
                              "bring back older versions and deleted citations; --allow-out-of-order applies it "
                              "anyway")
        plan.apply.append((file, digest))
    return plan


@dataclass
class FileApplied:
    """One file of a sync, applied in full and recorded."""

    file: PubmedFile
    report: IndexReport


def apply_files(client: OpenSearch, options: IndexOptions, plan: SyncPlan, *, encoder: Encoder | None = None,
                progress: Advance | None = None,
                applied: Callable[[FileApplied], None] | None = None) -> IndexReport:
    """Apply the plan's files in order, recording each in the index record once all its writes and deletions
    were acknowledged; an interrupted sync applies the interrupted file again (what is in is skipped).

    A file some of whose documents the cluster refused is not recorded, and the sync stops after it, so running
    the same sync again retries it before any later file.

    Args:
        client: the cluster.
        options: how to index (the index, sentences or not).
        plan: what :func:`plan_sync` decided.
        encoder: the passage encoder (the default one is loaded if None).
        progress: called with the number of records done since its last call.
        applied: called after each file is recorded.

    Returns:
        The counts of all the files together.

    Example:
        >>> apply_files(client, IndexOptions(index="pubmed"), plan).deleted  # doctest: +SKIP
    """
    checksums = {file.path: (file, digest) for file, digest in plan.apply}

    def record(path: Path, report: IndexReport) -> None:
        file, digest = checksums[path]
        if report.failed:
            raise SyncRefused(f"{report.failed} documents of {file.name} were refused by the cluster (see the "
                              "rejects file); it is not recorded as applied: run the same sync again to retry it")
        store_applied_file(client, options.index, AppliedFile(
            name=file.name, sha256=digest, applied=datetime.now(UTC).isoformat(timespec="seconds"),
            documents=report.indexed, deleted=report.deleted))
        if applied is not None:
            applied(FileApplied(file, report))

    if not plan.apply:
        return IndexReport()
    indexer = Indexer(client, options, encoder=encoder)
    return indexer.run([file.path for file, _ in plan.apply], progress=progress, file_done=record)


def applied_files(client: OpenSearch, index: str) -> tuple[AppliedFile, ...]:
    """The files applied to ``index``, oldest first; none for an index that does not exist yet."""
    if not client.indices.exists(index=index):
        return ()
    return read_record(client, index).applied_files
