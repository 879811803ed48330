"""What every reader of :mod:`biorank.indexer.readers` shares: a file opened as a stream (plain or gzip, told apart
by its first bytes), the errors, the limits that keep one record's memory bounded, and a record's own checks."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import IO, Any

from biorank.errors import BiorankError
from biorank.types import Abstract, Deletion, Rejected

Record = Abstract | Rejected | Deletion


class ReaderError(BiorankError):
    """The file as a whole cannot be read: missing, unreadable, or in a format that is unknown or not detectable."""


class BadRecord(Exception):
    """Raised while parsing one record; the reader turns it into a Rejected and goes on with the next."""

    def __init__(self, reason: str, id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.id = id


# Decompression and I/O failures part-way through a file (truncated or corrupt gzip).
READ_ERRORS = (OSError, EOFError, zlib.error)

LINE_ALLOWANCE = 8
"""A line may be this many times ``max_record_bytes`` before it is refused unread. The record limit counts title
and abstract as UTF-8, but JSON's ``\\uXXXX`` escapes take six bytes for one of text, and a line carries its id
and other fields besides: a record the indexer would take must not be refused for its line."""
PIECE = 1 << 20
"""What is read at a time while reading past an over-long line or scanning for the next citation."""


def readable_file(path: str | Path) -> Path:
    file = Path(path)
    if not file.exists():
        raise ReaderError(f"no such file: {path}")
    if file.is_dir():
        raise ReaderError(f"{path} is a directory; give the collection file itself")
    try:
        # A first read through the decompressor catches an unreadable file or a broken gzip header now.
        with open_binary(file) as stream:
            stream.read(1)
    except READ_ERRORS as exc:
        raise ReaderError(f"cannot read {path}: {exc}") from None
    return file


def open_binary(file: Path) -> IO[bytes]:
    # The magic number, not the name, decides: renamed or re-compressed files are common in shared data folders.
    with file.open("rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    return _UpToTheBreak(gzip.open(file, "rb")) if gzipped else file.open("rb")


class _UpToTheBreak:
    """A gzip stream whose ``read`` hands over every byte decompressed before a break (a truncated or corrupt
    file), and raises the break only at the next call.

    ``GzipFile.read(n)`` gathers n bytes through a buffer and drops what it gathered when the decompressor fails
    on the way: lxml reads 32 KB at a time, so a truncated file smaller than that gave no citation at all, and a
    larger one lost those of its last read. Gathering with ``read1`` (one decompression step each) keeps them.
    """

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._break: BaseException | None = None

    def read(self, size: int | None = -1) -> bytes:
        if self._break is not None:
            error, self._break = self._break, None
            raise error
        if size is None or size < 0:
            size = 1 << 62
        chunks: list[bytes] = []
        got = 0
        while got < size:
            try:
                chunk = self._stream.read1(size - got)
            except READ_ERRORS as error:
                if not chunks:
                    raise
                self._break = error
                break
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def readline(self, size: int = -1) -> bytes:
        # Lines: a line cut by the break is incomplete anyway, and every complete line before it comes out.
        return self._stream.readline(size)

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> _UpToTheBreak:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def new_abstract(
    doc_id: str,
    title: str,
    abstract: str,
    sentences: tuple[str, ...] | None,
    source: str,
    line: int,
    *,
    empty: str,
    journal: str | None = None,
    year: int | None = None,
    mesh: tuple[str, ...] = (),
    **medline: Any,
) -> Abstract:
    """The record, unless it has neither title nor abstract (then ``BadRecord(empty)``); ``medline`` is the
    bibliographic fields only PubMed XML has (:class:`~biorank.types.Abstract`'s ``authors``, ``doi``, ...)."""
    if not title.strip() and not abstract.strip():
        raise BadRecord(empty, doc_id)
    return Abstract(doc_id, title, abstract, sentences, journal, year, mesh, source, line, **medline)
