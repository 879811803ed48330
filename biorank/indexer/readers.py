"""Streaming readers for collections of abstracts: one interface, one typed record per input record.

Every reader yields :class:`Abstract` for a usable record and :class:`Rejected` for one that is not, with its
1-based line, so a bad record is counted and reported instead of stopping the run or vanishing; a PMID that a
PubMed update file withdraws (``<DeleteCitation>``) comes as a :class:`Deletion`. Only problems
with the whole file (missing, unreadable, unknown or undetectable format) raise :class:`ReaderError`, and they
do so when :func:`read_records` is called, before anything is indexed; the one exception is a file given as
pubmed that turns out not to be XML, which is found on the first record.

Files are read as a stream (plain or gzip, told apart by their first bytes, not their name), so memory stays
bounded whatever the collection's size, and bounded whatever one record's size too: a few hundred KB of gzip can
unpack to a line or an element of gigabytes, so a line past the limit, or XML that runs past it without a
complete citation, is read past in bounded pieces and rejected, never held whole.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING

from biorank.config import MAX_RECORD_BYTES
from biorank.errors import BiorankError
from biorank.types import Abstract, Deletion, Rejected

if TYPE_CHECKING:
    from lxml import etree

FORMATS: tuple[str, ...] = ("auto", "pubmed", "scifact", "beir", "nfcorpus", "bioasq", "jsonl")

Record = Abstract | Rejected | Deletion


class ReaderError(BiorankError):
    """The file as a whole cannot be read: missing, unreadable, or in a format that is unknown or not detectable."""


class _BadRecord(Exception):
    """Raised while parsing one record; the reader turns it into a Rejected and goes on with the next."""

    def __init__(self, reason: str, id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.id = id


@dataclass(frozen=True)
class _JsonLayout:
    """Where a JSON Lines format keeps id, title and text; ``text_kind`` is list (sentences), str, or None (either)."""

    id: str
    title: str
    text: str
    text_kind: type | None


_LAYOUTS: dict[str, _JsonLayout] = {
    "scifact": _JsonLayout("doc_id", "title", "abstract", list),
    "beir": _JsonLayout("_id", "title", "text", str),
    "bioasq": _JsonLayout("pmid", "title", "abstract", str),
    "jsonl": _JsonLayout("id", "title", "text", None),
}

# Decompression and I/O failures part-way through a file (truncated or corrupt gzip).
_READ_ERRORS = (OSError, EOFError, zlib.error)

_LINE_ALLOWANCE = 8
"""A line may be this many times ``max_record_bytes`` before it is refused unread. The record limit counts title
and abstract as UTF-8, but JSON's ``\\uXXXX`` escapes take six bytes for one of text, and a line carries its id
and other fields besides: a record the indexer would take must not be refused for its line."""
_XML_ALLOWANCE = 16 << 20
"""Bytes of XML a citation may take beyond its lines' allowance: its author lists, MeSH and references, which
run to thousands of entries in consortium papers, do not count towards the record's size."""
_PIECE = 1 << 20
"""What is read at a time while reading past an over-long line or scanning for the next citation."""


def read_records(
    path: str | Path,
    format: str = "auto",
    *,
    id_field: str | None = None,
    title_field: str | None = None,
    text_field: str | None = None,
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> Iterator[Record]:
    """Stream the records of ``path`` as Abstract, Rejected or (PubMed only) Deletion, in file order.

    ``format`` is one of :data:`FORMATS`; ``"auto"`` asks :func:`detect_format`. For the JSON Lines formats,
    ``id_field``/``title_field``/``text_field`` override where the format keeps those values, and with
    ``"auto"`` they make an otherwise unknown JSON Lines file readable as ``jsonl``. File-level problems raise
    :class:`ReaderError` here, at the call, rather than part-way through an indexing run.

    ``max_record_bytes`` is the indexer's limit on a record's title and abstract; a line, or a citation's XML,
    far past anything a record within it takes is rejected as ``record too large`` without being held in memory.
    """
    if format not in FORMATS:
        raise ReaderError(f"unknown format {format!r}: choose one of {', '.join(FORMATS)}")
    file = _readable_file(path)
    source = str(path)
    overrides = {"id": id_field, "title": title_field, "text": text_field}
    explicit = {key: value for key, value in overrides.items() if value is not None}
    if format == "auto":
        format = _detect(file, source, fallback="jsonl" if explicit else None, max_record_bytes=max_record_bytes)
    if format == "pubmed":
        _refuse_fields(format, explicit)
        return _read_pubmed(file, source, max_record_bytes)
    if format == "nfcorpus":
        _refuse_fields(format, explicit)
        return _read_lines(file, source, _nfcorpus_record, max_record_bytes)
    layout = replace(_LAYOUTS[format], **explicit)
    return _read_lines(file, source, partial(_json_record, layout=layout), max_record_bytes)


def detect_format(path: str | Path) -> str:
    """Name the format of ``path`` from its file name and first non-empty record only, so it costs one line.

    ``.xml``/``.xml.gz`` (or a first line that is markup) is pubmed, ``.docs`` is nfcorpus; JSON Lines are told
    apart by the fields of the first record. Raises :class:`ReaderError` saying which ``--format`` to pass when
    the file matches none of them.
    """
    return _detect(_readable_file(path), str(path), fallback=None, max_record_bytes=MAX_RECORD_BYTES)


def _detect(file: Path, source: str, fallback: str | None, *, max_record_bytes: int) -> str:
    name = file.name.lower().removesuffix(".gz")
    if name.endswith(".xml"):
        return "pubmed"
    if name.endswith(".docs"):
        return "nfcorpus"
    first = _first_line(file, source, _LINE_ALLOWANCE * max_record_bytes)
    if first.startswith("<"):
        return "pubmed"
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        raise ReaderError(
            f"cannot tell the format of {source}: its first record is neither XML nor JSON; pass --format"
        ) from None
    found = _json_format(obj)
    if found:
        return found
    if fallback:
        return fallback
    fields = ", ".join(map(str, obj)) if isinstance(obj, dict) else _json_type(obj)
    raise ReaderError(
        f"cannot tell the format of {source}: its first record ({fields}) matches none of scifact "
        "(doc_id + abstract list), beir (_id + text) or bioasq (pmid + abstract); "
        "pass --format jsonl --id-field ID --title-field TITLE --text-field TEXT"
    )


def _json_format(obj: object) -> str | None:
    if not isinstance(obj, dict):
        return None
    if "doc_id" in obj and isinstance(obj.get("abstract"), list):
        return "scifact"
    if "_id" in obj and "text" in obj:
        return "beir"
    if "pmid" in obj and "abstract" in obj:
        return "bioasq"
    return None


def _refuse_fields(format: str, explicit: dict[str, str]) -> None:
    if explicit:
        flags = ", ".join(f"--{key}-field" for key in explicit)
        raise ReaderError(f"{flags} only apply to JSON Lines formats, not to {format}")


def _readable_file(path: str | Path) -> Path:
    file = Path(path)
    if not file.exists():
        raise ReaderError(f"no such file: {path}")
    if file.is_dir():
        raise ReaderError(f"{path} is a directory; give the collection file itself")
    try:
        # A first read through the decompressor catches an unreadable file or a broken gzip header now.
        with _open_binary(file) as stream:
            stream.read(1)
    except _READ_ERRORS as exc:
        raise ReaderError(f"cannot read {path}: {exc}") from None
    return file


def _open_binary(file: Path) -> IO[bytes]:
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
            except _READ_ERRORS as error:
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


def _first_line(file: Path, source: str, limit: int) -> str:
    try:
        with _open_binary(file) as stream:
            for raw in _bounded_lines(stream, limit):
                if len(raw) > limit:
                    head = raw.removeprefix(_BOM).lstrip()
                    if head.startswith(b"<"):
                        # Markup on one long line is still markup: minified XML is one line.
                        return head[:64].decode("utf-8", "replace")
                    raise ReaderError(f"cannot tell the format of {source}: its first record is a line of over "
                                      f"{limit:,} bytes; pass --format")
                text = _decode(raw, first=True).strip()
                if text:
                    return text
    except _READ_ERRORS as exc:
        raise ReaderError(f"cannot read {source}: {exc}") from None
    except _BadRecord as bad:
        raise ReaderError(f"cannot tell the format of {source}: its first record is {bad.reason}") from None
    raise ReaderError(f"cannot tell the format of {source}: the file is empty")


# --- line formats --------------------------------------------------------------------------------------------


def _read_lines(file: Path, source: str, parse: Callable[[str, str, int], Abstract],
                max_record_bytes: int) -> Iterator[Record]:
    limit = _LINE_ALLOWANCE * max_record_bytes
    number = 0
    with _open_binary(file) as stream:
        try:
            for number, raw in enumerate(_bounded_lines(stream, limit), start=1):
                if len(raw) > limit:
                    yield Rejected(source, number, None, f"record too large: a line of over {limit:,} bytes, more "
                                                         f"than any record of --max-record-bytes {max_record_bytes:,} "
                                                         "takes; read past unparsed")
                    continue
                try:
                    text = _decode(raw, first=number == 1)
                    if text.strip():
                        yield parse(text, source, number)
                except _BadRecord as bad:
                    yield Rejected(source, number, bad.id, bad.reason)
        except _READ_ERRORS as exc:
            yield Rejected(source, number + 1, None, f"file unreadable from here on, the rest was skipped: {exc}",
                           rest_skipped=True)


def _bounded_lines(stream: IO[bytes], limit: int) -> Iterator[bytes]:
    """The lines of ``stream``, each with its line end; one of over ``limit`` bytes comes as its first
    ``limit + 1`` bytes, and the rest of it is read past in pieces, never held whole."""
    while raw := stream.readline(limit + 1):
        yield raw
        if len(raw) > limit:
            while raw and not raw.endswith(b"\n"):
                raw = stream.readline(_PIECE)


_BOM = "\ufeff".encode()  # the byte order mark some editors put first, before the first record


def _decode(raw: bytes, *, first: bool) -> str:
    # Decoding line by line confines a bad byte to its own record instead of failing the whole file.
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadRecord(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})") from None
    return text.removeprefix("\ufeff") if first else text


def _nfcorpus_record(text: str, source: str, line: int) -> Abstract:
    doc_id, tab, body = text.rstrip("\r\n").partition("\t")
    if not tab:
        raise _BadRecord("expected ID<TAB>TEXT, found no tab")
    doc_id = doc_id.strip()
    if not doc_id:
        raise _BadRecord("empty id")
    return _abstract(doc_id, "", body, None, source, line, empty="empty text")


def _json_record(text: str, source: str, line: int, *, layout: _JsonLayout) -> Abstract:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _BadRecord(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise _BadRecord(f"expected a JSON object, got {_json_type(obj)}")
    doc_id = _json_id(obj, layout.id)
    title = obj.get(layout.title)
    if title is None:
        title = ""
    elif not isinstance(title, str):
        raise _BadRecord(f"field {layout.title!r} must be a string, got {_json_type(title)}", doc_id)
    abstract, sentences = _json_text(obj.get(layout.text), layout, doc_id)
    return _abstract(doc_id, title, abstract, sentences, source, line, empty=f"empty {layout.title} and {layout.text}")


def _json_id(obj: dict, field: str) -> str:
    value = obj.get(field)
    if value is None:
        raise _BadRecord(f"missing id field {field!r}")
    # bool is an int subclass, but true/false is never a meant id.
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _BadRecord(f"id field {field!r} must be a string or integer, got {_json_type(value)}")
    doc_id = str(value).strip()
    if not doc_id:
        raise _BadRecord(f"empty id field {field!r}")
    return doc_id


def _json_text(value: object, layout: _JsonLayout, doc_id: str) -> tuple[str, tuple[str, ...] | None]:
    """The abstract text, and the source's sentences when it gives a list.

    Sentences are stripped (SciFact's often end in a newline or space) and never dropped, even when empty, so
    sentence ``i`` stays the source's sentence ``i``; the abstract is their join by single spaces, which is what
    character offsets into it refer to.
    """
    if value is None:
        value = [] if layout.text_kind is list else ""
    if isinstance(value, str) and layout.text_kind is not list:
        return value, None
    if isinstance(value, list) and layout.text_kind is not str and all(isinstance(s, str) for s in value):
        sentences = tuple(s.strip() for s in value)
        return " ".join(sentences), sentences
    wanted = {list: "a list of strings", str: "a string", None: "a string or a list of strings"}[layout.text_kind]
    raise _BadRecord(f"field {layout.text!r} must be {wanted}, got {_json_type(value)}", doc_id)


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _abstract(
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
) -> Abstract:
    if not title.strip() and not abstract.strip():
        raise _BadRecord(empty, doc_id)
    return Abstract(doc_id, title, abstract, sentences, journal, year, mesh, source, line)


# --- PubMed / MEDLINE XML ------------------------------------------------------------------------------------

# PubmedArticleSet wraps MedlineCitation in PubmedArticle; the old MedlineCitationSet has it bare.
_PUBMED_TAGS = ("PubmedArticle", "MedlineCitation", "DeleteCitation", "PubmedBookArticle")
_PUBMED_ROOTS = ("PubmedArticleSet", "MedlineCitationSet")
_YEAR = re.compile(r"\d{4}")
_EDGE_BREAK = re.compile(r"^(?:\r?\n[ \t]*)+|(?:\r?\n[ \t]*)+$")
_INNER_BREAK = re.compile(r"[ \t]*\r?\n\s*")


def _read_pubmed(file: Path, source: str, max_record_bytes: int) -> Iterator[Record]:
    """Citations in file order; after malformed or oversized XML, reading goes on at the next citation.

    One bad byte, a nesting past libxml2's limit, a text node over 10 MB or an entity that expands too far stops
    a parser for good, and a 30,000-citation baseline file would lose every citation after it. So the reader
    opens the file again, finds the next citation's start tag past both the error and every citation the parser
    had begun, and parses on from there inside the same root. XML that runs on past the citation allowance
    without completing a citation (text nodes each under libxml2's limit, or junk between citations) is cut off
    the same way, before the parser's tree can hold it.
    """
    # Imported here so the JSON Lines readers work without lxml installed.
    from lxml import etree

    root = _sniff_root(file)
    tags = _citation_tags(root)
    budget = _LINE_ALLOWANCE * max_record_bytes + _XML_ALLOWANCE
    line = 0  # of the last record read, for a read error that does not say where it happened
    resume: _Resume | None = None
    with ExitStack() as streams:
        stream: IO[bytes] = streams.enter_context(_open_binary(file))
        while True:
            offset = resume.line - 2 if resume else 0
            metered = _Metered(resume.stream(stream) if resume else stream, budget)
            events = etree.iterparse(metered, events=("start", "end"), tag=_PUBMED_TAGS, resolve_entities=False,
                                     no_network=True)
            begun = ended = 0  # citations whose start (end) tag the parser has read in this pass
            try:
                for event, element in events:
                    citation = element.tag in tags
                    if event == "start":
                        begun += citation
                        continue
                    if citation:
                        ended += 1
                        metered.restart()
                    if element.tag == "MedlineCitation" and _parent_tag(element) == "PubmedArticle":
                        continue  # read with its PubmedArticle, which ends next
                    line = offset + (element.sourceline or 1)
                    yield from _pubmed_element(element, source, offset)
                    _release(element)
                break
            except etree.XMLSyntaxError as exc:
                if root is None:
                    raise ReaderError(f"{source} is not PubMed XML: {exc.msg}") from None
                problem, detail, where = "malformed XML", exc.msg, None
                # The resumed citation's line starts at the citation (line 2 of what the parser reads), so the
                # parser's columns on it are short of the file's by the bytes left out before the citation.
                error: _Position | None = _Position(
                    offset + exc.lineno, (exc.offset or 0) + (resume.column if resume and exc.lineno == 2 else 0))
            except _TooLarge:
                if root is None:
                    raise ReaderError(f"{source} is not PubMed XML: over {budget:,} bytes without a PubMed root or "
                                      "citation") from None
                problem, error, where = "record too large", None, offset + metered.lines
                detail = (f"over {budget:,} bytes of XML without a complete citation, more than one with a record "
                          f"of --max-record-bytes {max_record_bytes:,} takes")
            except _READ_ERRORS as exc:
                # The parser does not say how far it got; the last record read is the best place to point at.
                yield Rejected(source, line, None, f"file unreadable after this record, the rest was skipped: {exc}",
                               rest_skipped=True)
                return
            # The parser has read past the error; the file is read again up to it (a damaged file costs one pass
            # per damaged spot), and the last pass's stream is closed.
            stream.close()
            stream = streams.enter_context(_open_binary(file))
            starts = _citation_starts(stream, root)
            # Never back to a citation already begun: a resumed pass begins with the citation it resumed at.
            passed = _nth_start(starts, resume, max(begun, 1) if resume else begun)
            # libxml2 places an error inside an entity's replacement text in that text ("line 1, column 7"): a
            # position before the last citation begun is no place in the file, and never a place to resume.
            if error is not None and passed is not None and error < passed.position:
                error = None
            if where is None:
                where = error.line if error else passed.line if passed else 1
            after = next((found for found in starts if error is None or found.position > error), None)
            if after is None:
                yield Rejected(source, where, None, f"{problem}, the rest of the file was skipped: {detail}",
                               rest_skipped=True)
                return
            skipped = "the citation there" if begun > ended else "the XML there (outside any citation)"
            yield Rejected(source, where, None, f"{problem}, {skipped} was skipped and reading went on at line "
                                                f"{after.line}: {detail}")
            resume = after
    if not line and root is None:
        raise ReaderError(f"{source} has no PubMed records: its root is not PubmedArticleSet or MedlineCitationSet")


class _TooLarge(Exception):
    """The parser asked for more XML than a citation may take."""


class _Metered:
    """The parser's input, refused past ``budget`` bytes since the last citation ended.

    libxml2 bounds each text node (10 MB) but not a citation made of many of them, nor what lies between two
    citations: either would be held whole in the parser's tree. ``lines`` counts the lines handed over, so a
    refusal can say where it happened.
    """

    def __init__(self, stream: IO[bytes] | _Joined, budget: int) -> None:
        self._stream = stream
        self._budget = budget
        self._since = 0
        self.lines = 1

    def read(self, size: int = -1) -> bytes:
        if self._since > self._budget:
            raise _TooLarge
        chunk = self._stream.read(size)
        self._since += len(chunk)
        self.lines += chunk.count(b"\n")
        return chunk

    def restart(self) -> None:
        """A citation ended: the next one has the whole budget."""
        self._since = 0


@dataclass(frozen=True, order=True)
class _Position:
    """A place in the file: 1-based line, 0-based byte column (libxml2's columns are 0-based too)."""

    line: int
    column: int


@dataclass(frozen=True)
class _Resume:
    """A citation's start tag, ``offset`` bytes into the file at ``line``/``column``: where parsing can start
    again, from byte ``at`` of ``piece``, the last bytes the scan read."""

    root: str
    offset: int
    line: int
    column: int
    piece: bytes
    at: int

    @property
    def position(self) -> _Position:
        return _Position(self.line, self.column)

    def stream(self, rest: IO[bytes]) -> _Joined:
        # The root's start tag on a line of its own, then the citation's line from the citation on, so the
        # parser's lines are the file's (less one line) and no half element is read. What came before the
        # citation is left out, not blanked: on a one-line file it can be a text node over libxml2's 10 MB
        # limit, and blanks in its place hit the same limit again.
        return _Joined(f"<{self.root}>\n".encode() + self.piece[self.at:], rest)


class _Joined:
    """A read-only binary stream of some bytes followed by the rest of another stream."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head = head
        self._rest = rest

    def read(self, size: int = -1) -> bytes:
        if self._head:
            size = len(self._head) if size is None or size < 0 else size
            chunk, self._head = self._head[:size], self._head[size:]
            return chunk
        return self._rest.read(size)


def _sniff_root(file: Path) -> str | None:
    """The root element's name from the file's first bytes, if it is one of PubMed's."""
    try:
        with _open_binary(file) as stream:
            head = stream.read(1 << 16)
    except _READ_ERRORS:
        return None
    match = re.search(rb"<(" + "|".join(_PUBMED_ROOTS).encode() + rb")[\s>]", head)
    return match.group(1).decode() if match else None


def _citation_tags(root: str | None) -> tuple[str, ...]:
    """The elements that are records under ``root``: those the parser counts and the scan looks for alike."""
    # Under PubmedArticleSet a bare MedlineCitation start is the inside of a PubmedArticle, not a record.
    if root == "PubmedArticleSet":
        return "PubmedArticle", "DeleteCitation", "PubmedBookArticle"
    return "MedlineCitation", "DeleteCitation"


def _citation_starts(stream: IO[bytes], root: str) -> Iterator[_Resume]:
    """Every citation start tag in ``stream`` (read from its start), in file order.

    The file is scanned in pieces, lines counted as they pass, so a line of hundreds of MB is never held whole.
    While a start is being handled, ``stream`` stands right after the piece it was found in, so parsing can go
    on from there.
    """
    tags = _citation_tags(root)
    pattern = re.compile(rb"<(?:" + "|".join(tags).encode() + rb")[\s>]")
    # A tag cut between two pieces is found whole in the next, which starts with the last bytes of this one.
    keep = max(map(len, tags)) + 1
    buffer, start = b"", 0  # the bytes in hand, and their offset in the file
    lines = _Lines()
    last = -1  # offset of the last tag yielded, which the kept bytes can show again
    try:
        while piece := stream.read(_PIECE):
            drop = max(0, len(buffer) - keep)
            lines.count(buffer, start, start + drop)
            buffer, start = buffer[drop:] + piece, start + drop
            for match in pattern.finditer(buffer):
                at = start + match.start()
                if at > last:
                    lines.count(buffer, start, at)
                    yield _Resume(root, at, lines.line, at - lines.line_start, buffer, match.start())
                    last = at
    except _READ_ERRORS:
        return  # a truncated file: the starts before the break are all there are


class _Lines:
    """Lines counted along a file as it passes, each byte once: ``line`` is the line at offset ``counted``, and
    starts at offset ``line_start``."""

    def __init__(self) -> None:
        self.counted, self.line, self.line_start = 0, 1, 0

    def count(self, buffer: bytes, start: int, end: int) -> None:
        """Count on to offset ``end``, through ``buffer``, which holds the file from offset ``start``."""
        if end <= self.counted:
            return
        begin = self.counted - start
        if newlines := buffer.count(b"\n", begin, end - start):
            self.line += newlines
            self.line_start = start + buffer.rindex(b"\n", begin, end - start) + 1
        self.counted = end


def _nth_start(starts: Iterator[_Resume], since: _Resume | None, count: int) -> _Resume | None:
    """The ``count``-th of ``starts`` from ``since`` on (``since`` itself the first), taken from ``starts``; None
    for a count of 0, or past the last."""
    if not count:
        return None
    for found in starts:
        if since is None or found.offset >= since.offset:
            count -= 1
            if not count:
                return found
    return None


def _parent_tag(element: etree._Element) -> str | None:
    parent = element.getparent()
    return None if parent is None else parent.tag


def _release(element: etree._Element) -> None:
    # iterparse keeps building the whole tree; dropping each finished record keeps memory bounded.
    element.clear(keep_tail=True)
    parent = element.getparent()
    if parent is not None:
        while element.getprevious() is not None:
            del parent[0]


def _pubmed_element(element: etree._Element, source: str, offset: int) -> Iterator[Record]:
    """The record of one citation element; ``offset`` is how many lines of the file precede the parser's."""
    line = offset + (element.sourceline or 1)
    if element.tag == "DeleteCitation":
        # Update files withdraw citations this way: the indexer removes them, so they are not rejects.
        for pmid in element.iterfind("PMID"):
            where = offset + pmid.sourceline if pmid.sourceline else line
            pmid_text = _inner_text(pmid)
            yield Deletion(source, where, pmid_text) if pmid_text else Rejected(
                source, where, None, "empty PMID in DeleteCitation")
    elif element.tag == "PubmedBookArticle":
        pmid = _inner_text(element.find("BookDocument/PMID")) or None
        yield Rejected(source, line, pmid, "PubMed book record (PubmedBookArticle), not read")
    else:
        citation = element if element.tag == "MedlineCitation" else element.find("MedlineCitation")
        try:
            yield _citation(citation, source, line)
        except _BadRecord as bad:
            yield Rejected(source, line, bad.id, bad.reason)


def _citation(citation: etree._Element | None, source: str, line: int) -> Abstract:
    if citation is None:
        raise _BadRecord("PubmedArticle without a MedlineCitation")
    pmid = _inner_text(citation.find("PMID"))
    if not pmid:
        raise _BadRecord("citation without a PMID")
    article = citation.find("Article")
    if article is None:
        raise _BadRecord("citation without an Article", pmid)
    return _abstract(
        pmid,
        _inner_text(article.find("ArticleTitle")),
        _join_sections(article.iterfind("Abstract/AbstractText")),
        None,
        source,
        line,
        empty="empty title and abstract",
        journal=_inner_text(article.find("Journal/Title")) or None,
        year=_pubmed_year(article),
        mesh=tuple(_inner_text(name) for name in citation.iterfind("MeshHeadingList/MeshHeading/DescriptorName")),
    )


def _join_sections(sections: Iterator[etree._Element]) -> str:
    """Join AbstractText sections the way BioASQ does, so its gold snippet offsets index our text.

    A labelled section becomes ``"LABEL: text"``, and sections follow each other with no separator at all
    (``"...interaction data.RESULTS: An object..."``). Each section's text is stripped first: 2016 MEDLINE files
    end many unlabelled sections with a space.
    """
    parts = []
    for section in sections:
        text = _inner_text(section)
        label = (section.get("Label") or "").strip()
        parts.append(f"{label}: {text}" if label else text)
    return "".join(parts)


def _inner_text(element: etree._Element | None) -> str:
    """The element's text with that of inline markup (``<sub>``, ``<i>``, ...) kept in place.

    Pretty-printed PubMed XML puts a line break and indentation next to inline tags (``β\\n\\t\\t<sub>2</sub>``):
    that is layout, so it is dropped at a tag boundary and becomes one space inside a text run.
    """
    if element is None:
        return ""
    chunks = (
        _INNER_BREAK.sub(" ", _EDGE_BREAK.sub("", chunk)) if "\n" in chunk else chunk for chunk in element.itertext()
    )
    return "".join(chunks).strip()


def _pubmed_year(article: etree._Element) -> int | None:
    # PubDate has Year, or only a free-text MedlineDate ("1998 Dec-1999 Jan"); ArticleDate is the e-pub date.
    for path in ("Journal/JournalIssue/PubDate/Year", "Journal/JournalIssue/PubDate/MedlineDate", "ArticleDate/Year"):
        match = _YEAR.search(article.findtext(path) or "")
        if match:
            return int(match.group())
    return None
