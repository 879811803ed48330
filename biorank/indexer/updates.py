"""Keeping a PubMed index current: NLM's baseline and update files applied in order, each once.

NLM publishes a yearly baseline (``pubmed25n0001.xml.gz`` …) and then daily update files of the same format whose
numbers go on from the baseline's last; an update file carries new citations, new versions of existing ones and
``<DeleteCitation>`` lists. The order matters — a citation revised twice must end as its last version, and one
deleted must not come back from an older file — so files are applied by their number, and every file applied in
full is recorded with its SHA-256 in the index record: applying a folder again skips what is in, a file applied
out of order, or past a gap in the numbering, is refused, and the record says how current the index is.

A file is recorded only when it was read to its end and every write was acknowledged, and one that is damaged (a
truncated download, XML that does not close) is refused before anything is written: a file recorded by mistake
could never be applied again, since a genuine copy of it differs from what was recorded.
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
from biorank.indexer.streams import PIECE, READ_ERRORS, open_binary
from biorank.store.record import AppliedFile, read_record, store_applied_file

if TYPE_CHECKING:
    from lxml import etree
    from opensearchpy import OpenSearch

    from biorank.models.encoder import Encoder
    from biorank.types import Advance

PUBMED_NAME = re.compile(r"^(?:pubmed|medline)(\d{2})n(\d{4})\.xml(?:\.gz)?$")
"""NLM's file names: two digits of the baseline's year, then the file's number (``pubmed25n1275.xml.gz``)."""


class SyncRefused(BiorankError):
    """The files cannot be applied as given: one out of order or past a gap, a name applied before with other
    content, a damaged file, or files that are not NLM's."""


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
    twins: list[tuple[PubmedFile, str]] = field(default_factory=list)
    """Files skipped because another file of the same number (``.xml`` beside ``.xml.gz``, ``medline`` beside
    ``pubmed``) is applied already or comes first in this sync; each with that other file's name."""


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
              allow_out_of_order: bool = False, allow_gaps: bool = False) -> SyncPlan:
    """Which of ``files`` (in order) to apply, given the files the index has applied.

    A file applied before with the same checksum is skipped; with another checksum it is refused (NLM does not
    republish a file under its name, so its content changed on the way or it is not NLM's). A file of a number
    applied before under another name (``.xml`` and ``.xml.gz``, ``medline`` and ``pubmed``), or given twice
    under two names, is one file: the first is applied, the others skipped (:attr:`SyncPlan.twins`). A new file
    numbered before the last one applied is refused unless ``allow_out_of_order``: its older versions of
    citations would overwrite newer ones, and citations deleted since would come back. A file that does not
    follow the one before it — a number skipped, or another year's series — is refused unless ``allow_gaps``:
    once applied, the skipped file could only go in out of order, and a name like ``pubmed99n9999`` would make
    every genuine file after it look old. Every file to apply is read through once (:func:`check_file`), so a
    damaged one is refused too. Refusals raise :class:`SyncRefused` before anything is written.

    Args:
        files: the candidates, as :func:`find_pubmed_files` gives them.
        applied: the index record's ``applied_files``.
        allow_out_of_order: apply older-numbered new files anyway, in number order.
        allow_gaps: apply a file that does not follow the one before it (a skipped number, another year).

    Returns:
        The plan.

    Example:
        >>> files, _ = find_pubmed_files(["updatefiles"])  # doctest: +SKIP
        >>> plan_sync(files, read_record(client, "pubmed").applied_files).apply  # doctest: +SKIP
    """
    applied = list(applied)
    by_name = {a.name: a for a in applied}
    by_key = {key: a.name for a in applied if (key := file_key(a.name)) is not None}
    last = max(applied, key=lambda a: file_key(a.name) or (-1, -1), default=None)
    last_key = file_key(last.name) if last else None
    plan = SyncPlan(last_applied=applied[-1] if applied else None)
    previous: tuple[str, tuple[int, int]] | None = (last.name, last_key) if last and last_key else None
    for file in files:
        before = by_name.get(file.name)
        if before is not None:
            digest = sha256_of(file.path)
            if before.sha256 != digest:
                raise SyncRefused(f"{file.path} differs from the {file.name} applied on {before.applied} (SHA-256 "
                                  f"{digest[:12]}… here, {before.sha256[:12]}… then); download it again")
            plan.skipped.append(file)
            continue
        if file.key in by_key:
            plan.twins.append((file, by_key[file.key]))
            continue
        if last_key is not None and file.key < last_key:
            if not allow_out_of_order:
                raise SyncRefused(f"{file.name} is numbered before {last.name}, already applied: applying it now "
                                  "could bring back older versions and deleted citations; --allow-out-of-order "
                                  "applies it anyway")
        elif previous is not None and not allow_gaps:
            _check_follows(file, *previous)
        plan.apply.append((file, check_file(file.path)))
        by_key[file.key] = file.name
        if last_key is None or file.key > last_key:
            previous = file.name, file.key
    return plan


def _check_follows(file: PubmedFile, name: str, key: tuple[int, int]) -> None:
    """Refuses ``file`` unless it is the next of the series whose last file so far is ``name``."""
    year, number = key
    if file.year != year:
        raise SyncRefused(f"{file.name} is of another year's series than {name}, the file before it: NLM numbers "
                          "each year's baseline and updates anew, so one index takes one series; --allow-gaps "
                          "applies it anyway")
    if file.number != number + 1:
        missing = f"number {number + 1:04d} is" if file.number == number + 2 else \
            f"numbers {number + 1:04d} to {file.number - 1:04d} are"
        raise SyncRefused(f"{file.name} does not follow {name}: {missing} missing, and applied after "
                          "this file it would be refused as out of order; add it, or --allow-gaps applies the "
                          "files anyway")


def check_file(path: Path) -> str:
    """The SHA-256 of the NLM file at ``path`` once it is read through whole: a gzip file to its trailer (its
    CRC and length checked), the XML parsed to its root's end, opened and parsed as the reader opens and parses
    it (gzip told from the first bytes, no entities resolved, nothing fetched). A file that fails is refused
    with what is wrong, before a sync writes anything.

    The parsed elements are dropped as they end, so the check holds one citation at a time, not the file.

    Args:
        path: a baseline or update file, ``.xml`` or ``.xml.gz``.

    Returns:
        The file's SHA-256, in hex.

    Example:
        >>> check_file(Path("pubmed25n1275.xml.gz"))  # doctest: +SKIP
        '3f1c…'
    """
    from lxml import etree

    parser = etree.XMLPullParser(events=("end",), resolve_entities=False, no_network=True)
    try:
        with open_binary(path) as stream:
            while chunk := stream.read(PIECE):
                parser.feed(chunk)
                _drop_ended(parser)
        parser.close()
    except EOFError:
        raise SyncRefused(f"{path.name} is cut short (its gzip stream ends before its trailer: an interrupted "
                          "download?); nothing was applied: download it again") from None
    except READ_ERRORS as exc:
        raise SyncRefused(f"{path.name} is damaged (it cannot be read through: {exc}); nothing was applied: "
                          "download it again") from None
    except etree.XMLSyntaxError as exc:
        raise SyncRefused(f"{path.name} is damaged or not PubMed XML (line {exc.lineno}: {exc.msg}); nothing "
                          "was applied: download it again") from None
    return sha256_of(path)


def _drop_ended(parser: etree.XMLPullParser) -> None:
    """Frees every element that has ended under the root, so a baseline file's check holds one citation at a
    time, not the file."""
    for _, element in parser.read_events():
        parent = element.getparent()
        if parent is not None and parent.getparent() is None:
            parent.remove(element)


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

    A file some of whose documents the cluster refused, or whose reading stopped before its end (it changed
    after :func:`plan_sync` checked it), is not recorded, and the sync stops after it, so running the same sync
    again retries it before any later file.

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
        if report.incomplete:
            raise SyncRefused(f"{file.name} was not read to its end ({report.incomplete[0]}); it is not recorded "
                              "as applied: download it again and run the same sync")
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
