"""Streaming readers for collections of abstracts: one interface, one typed record per input record.

Every reader yields :class:`Abstract` for a usable record and :class:`Rejected` for one that is not, with its
1-based line, so a bad record is counted and reported instead of stopping the run or vanishing; a PMID that a
PubMed update file withdraws (``<DeleteCitation>``) comes as a :class:`Deletion`. Only problems
with the whole file (missing, unreadable, unknown or undetectable format) raise :class:`ReaderError`, and they
do so when :func:`read_records` is called, before anything is indexed; the one exception is a file given as
pubmed that turns out not to be XML, which is found on the first record.

The PubMed XML reader is :mod:`biorank.indexer.pubmed_xml`, what they share :mod:`biorank.indexer.streams`.
Files are read as a stream (plain or gzip, told apart by their first bytes, not their name), so memory stays
bounded whatever the collection's size, and bounded whatever one record's size too: a few hundred KB of gzip can
unpack to a line or an element of gigabytes, so a line past the limit, or XML that runs past it without a
complete citation, is read past in bounded pieces and rejected, never held whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import IO, Any

from biorank.config import MAX_RECORD_BYTES
from biorank.indexer.pubmed_xml import read_pubmed
from biorank.indexer.streams import (
    LINE_ALLOWANCE,
    PIECE,
    READ_ERRORS,
    BadRecord,
    ReaderError,
    Record,
    new_abstract,
    open_binary,
    readable_file,
)
from biorank.types import Abstract, Rejected

__all__ = ["FORMATS", "ReaderError", "Record", "detect_format", "estimate_records", "read_records"]

FORMATS: tuple[str, ...] = ("auto", "pubmed", "scifact", "beir", "nfcorpus", "bioasq", "jsonl")


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
    file = readable_file(path)
    source = str(path)
    overrides = {"id": id_field, "title": title_field, "text": text_field}
    explicit = {key: value for key, value in overrides.items() if value is not None}
    if format == "auto":
        format = _detect(file, source, fallback="jsonl" if explicit else None, max_record_bytes=max_record_bytes)
    if format == "pubmed":
        _refuse_fields(format, explicit)
        return read_pubmed(file, source, max_record_bytes)
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
    return _detect(readable_file(path), str(path), fallback=None, max_record_bytes=MAX_RECORD_BYTES)


def estimate_records(path: str | Path) -> int:
    """A quick upper bound of the records in a file, for the progress bar: lines, or citations for XML."""
    path = Path(path)
    xml = ".xml" in path.suffixes
    count = 0
    tail = b""
    try:
        with open_binary(path) as f:
            # A truncated .gz hands over what it holds before the break (open_binary), then raises it.
            while chunk := f.read(1 << 16):
                if xml:
                    # A tag split across two chunks is counted through the previous chunk's last bytes.
                    window = tail + chunk
                    count += window.count(b"</MedlineCitation>") - tail.count(b"</MedlineCitation>")
                else:
                    count += chunk.count(b"\n")
                tail = chunk[-32:]
    except READ_ERRORS:
        # A truncated or corrupt .gz: the readers report what they cannot read; the estimate is what was seen.
        pass
    # The last line of a file need not end with a newline.
    return count + (not xml and tail[-1:] not in (b"", b"\n"))


def _detect(file: Path, source: str, fallback: str | None, *, max_record_bytes: int) -> str:
    name = file.name.lower().removesuffix(".gz")
    if name.endswith(".xml"):
        return "pubmed"
    if name.endswith(".docs"):
        return "nfcorpus"
    first = _first_line(file, source, LINE_ALLOWANCE * max_record_bytes)
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


def _first_line(file: Path, source: str, limit: int) -> str:
    try:
        with open_binary(file) as stream:
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
    except READ_ERRORS as exc:
        raise ReaderError(f"cannot read {source}: {exc}") from None
    except BadRecord as bad:
        raise ReaderError(f"cannot tell the format of {source}: its first record is {bad.reason}") from None
    raise ReaderError(f"cannot tell the format of {source}: the file is empty")


# --- line formats --------------------------------------------------------------------------------------------


def _read_lines(file: Path, source: str, parse: Callable[[str, str, int], Abstract],
                max_record_bytes: int) -> Iterator[Record]:
    limit = LINE_ALLOWANCE * max_record_bytes
    number = 0
    with open_binary(file) as stream:
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
                except BadRecord as bad:
                    yield Rejected(source, number, bad.id, bad.reason)
        except READ_ERRORS as exc:
            yield Rejected(source, number + 1, None, f"file unreadable from here on, the rest was skipped: {exc}",
                           rest_skipped=True)


def _bounded_lines(stream: IO[bytes], limit: int) -> Iterator[bytes]:
    """The lines of ``stream``, each with its line end; one of over ``limit`` bytes comes as its first
    ``limit + 1`` bytes, and the rest of it is read past in pieces, never held whole."""
    while raw := stream.readline(limit + 1):
        yield raw
        if len(raw) > limit:
            while raw and not raw.endswith(b"\n"):
                raw = stream.readline(PIECE)


_BOM = "\ufeff".encode()  # the byte order mark some editors put first, before the first record


def _decode(raw: bytes, *, first: bool) -> str:
    # Decoding line by line confines a bad byte to its own record instead of failing the whole file.
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRecord(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})") from None
    return text.removeprefix("\ufeff") if first else text


def _nfcorpus_record(text: str, source: str, line: int) -> Abstract:
    doc_id, tab, body = text.rstrip("\r\n").partition("\t")
    if not tab:
        raise BadRecord("expected ID<TAB>TEXT, found no tab")
    doc_id = doc_id.strip()
    if not doc_id:
        raise BadRecord("empty id")
    return new_abstract(doc_id, "", body, None, source, line, empty="empty text")


def _json_record(text: str, source: str, line: int, *, layout: _JsonLayout) -> Abstract:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRecord(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise BadRecord(f"expected a JSON object, got {_json_type(obj)}")
    doc_id = _json_id(obj, layout.id)
    title = obj.get(layout.title)
    if title is None:
        title = ""
    elif not isinstance(title, str):
        raise BadRecord(f"field {layout.title!r} must be a string, got {_json_type(title)}", doc_id)
    abstract, sentences = _json_text(obj.get(layout.text), layout, doc_id)
    return new_abstract(doc_id, title, abstract, sentences, source, line,
                        empty=f"empty {layout.title} and {layout.text}", **_json_metadata(obj, doc_id))


def _json_metadata(obj: dict, doc_id: str) -> dict[str, Any]:
    """The journal, year and MeSH headings a JSON record may carry, at its top level or in BEIR's ``metadata``
    object: what filters, facets and a MeSH boost read, as they read PubMed XML's."""
    nested = obj.get("metadata")
    found = {key: obj[key] if key in obj else nested.get(key) for key in ("journal", "year", "mesh")
             if key in obj or (isinstance(nested, dict) and key in nested)}
    metadata: dict[str, Any] = {}
    if (journal := found.get("journal")) is not None:
        if not isinstance(journal, str):
            raise BadRecord(f"field 'journal' must be a string, got {_json_type(journal)}", doc_id)
        metadata["journal"] = journal.strip() or None
    if (year := found.get("year")) is not None:
        # A date's leading year is the year ("2019-05-01", 2019.0): what a filter on years needs.
        leading = None if isinstance(year, bool) else re.match(r"(\d{4})(?!\d)", str(year).strip())
        if leading is None or not isinstance(year, int | float | str):
            raise BadRecord("field 'year' must be a year such as 2019 (or a date that starts with one)", doc_id)
        metadata["year"] = int(leading[1])
    if (mesh := found.get("mesh")) is not None:
        if not isinstance(mesh, list) or not all(isinstance(heading, str) for heading in mesh):
            raise BadRecord("field 'mesh' must be a list of MeSH headings (strings)", doc_id)
        metadata["mesh"] = tuple(heading.strip() for heading in mesh if heading.strip())
    return metadata


def _json_id(obj: dict, field: str) -> str:
    value = obj.get(field)
    if value is None:
        raise BadRecord(f"missing id field {field!r}")
    # bool is an int subclass, but true/false is never a meant id.
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise BadRecord(f"id field {field!r} must be a string or integer, got {_json_type(value)}")
    doc_id = str(value).strip()
    if not doc_id:
        raise BadRecord(f"empty id field {field!r}")
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
    raise BadRecord(f"field {layout.text!r} must be {wanted}, got {_json_type(value)}", doc_id)


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
