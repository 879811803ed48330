"""Every reader on arbitrary input: no crash, every record indexed or rejected with a reason, counts that add up.

Hypothesis writes the files: random bytes and hostile ids for the line formats, and real PubMed XML cut or
damaged at random places. The only exception a reader may raise is ReaderError, and only for the file as a
whole (its format cannot be read at all).
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import pytest
from conftest import SHARED_DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from biorank.indexer.readers import ReaderError, read_records
from biorank.types import Abstract, Rejected

PUBMED = (SHARED_DATA / "pubmed" / "test_current_medline.xml.gz")
PROPERTIES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_ids = st.one_of(st.text(min_size=0, max_size=40), st.integers(), st.none(), st.booleans(), st.lists(st.integers()))
_texts = st.one_of(st.text(max_size=80), st.none(), st.integers(), st.lists(st.text(max_size=20), max_size=4))
# Where each JSON Lines format keeps id, title and text.
_FIELDS = {"jsonl": ("id", "title", "text"), "beir": ("_id", "title", "text"),
           "scifact": ("doc_id", "title", "abstract"), "bioasq": ("pmid", "title", "abstract")}


def _lines(fmt: str) -> st.SearchStrategy[list[bytes]]:
    id_key, title_key, text_key = _FIELDS[fmt]
    records = st.fixed_dictionaries({id_key: _ids, title_key: _texts, text_key: _texts})
    return st.lists(st.one_of(records.map(lambda r: json.dumps(r).encode()), st.binary(max_size=60)), max_size=12)


def _read(data: bytes, fmt: str, name: str) -> list[Abstract | Rejected] | None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        try:
            return list(read_records(path, fmt))
        except ReaderError:
            return None


def _check(records: list[Abstract | Rejected]) -> None:
    for record in records:
        assert isinstance(record, Abstract | Rejected)
        if isinstance(record, Rejected):
            assert record.reason.strip()
        else:
            assert record.id.strip() and (record.title.strip() or record.abstract.strip())


@pytest.mark.parametrize("fmt", list(_FIELDS))
@PROPERTIES
@given(data=st.data())
def test_json_lines_every_line_is_indexed_or_rejected(fmt: str, data: st.DataObject) -> None:
    lines = [line.replace(b"\n", b" ").replace(b"\r", b" ") for line in data.draw(_lines(fmt))]
    records = _read(b"\n".join(lines), fmt, "docs.jsonl")
    if records is None:
        # The one whole-file refusal: gzip's magic number on a file that is not gzip.
        assert b"\n".join(lines).startswith(b"\x1f\x8b")
        return
    _check(records)
    # Blank lines are no records; every other line is exactly one record, at its own line number.
    expected = [n for n, line in enumerate(lines, start=1) if line.decode("utf-8", "replace").strip()]
    assert [r.line for r in records] == expected


@PROPERTIES
@given(st.lists(st.tuples(st.text(max_size=20), st.text(max_size=60)), max_size=10))
def test_nfcorpus_every_line_is_indexed_or_rejected(rows: list[tuple[str, str]]) -> None:
    lines = [f"{i}\t{t}".replace("\n", " ").replace("\r", " ").encode() for i, t in rows]
    records = _read(b"\n".join(lines), "nfcorpus", "docs.docs")
    assert records is not None
    _check(records)
    assert len(records) == sum(bool(line.decode().strip()) for line in lines)


@PROPERTIES
@given(st.data())
def test_damaged_pubmed_never_crashes_and_keeps_only_real_citations(data: st.DataObject) -> None:
    original = gzip.decompress(PUBMED.read_bytes())
    real = {r.id: r for r in read_records(PUBMED) if isinstance(r, Abstract)}
    where = data.draw(st.integers(0, len(original)))
    damage = data.draw(st.sampled_from(["cut", "insert", "replace"]))
    inserted = data.draw(st.binary(min_size=1, max_size=8))
    damaged = {"cut": original[:where], "insert": original[:where] + inserted + original[where:],
               "replace": original[:where] + inserted + original[where + len(inserted):]}[damage]
    gzipped = data.draw(st.booleans())
    records = _read(gzip.compress(damaged) if gzipped else damaged, "pubmed", "damaged.xml")
    if records is None:
        return  # the root itself was damaged: the file as a whole is refused with a reason
    _check(records)
    # Damage reaches one citation at most: every citation wholly before it is read as it was.
    before = [r for r in real.values() if original.find(b"</PubmedArticle>", original.find(
        f">{r.id}</PMID>".encode())) + len(b"</PubmedArticle>") < where]
    read = {r.id: (r.title, r.abstract) for r in records if isinstance(r, Abstract)}
    assert all(read.get(r.id) == (r.title, r.abstract) for r in before)


@PROPERTIES
@given(texts=st.lists(st.text(max_size=120), max_size=10), max_record_bytes=st.integers(1, 60),
       gzipped=st.booleans())
def test_a_line_too_long_is_one_reject_and_every_other_line_reads_as_without_a_limit(
        texts: list[str], max_record_bytes: int, gzipped: bool) -> None:
    lines = [json.dumps({"id": i, "text": text}).encode() + b"\n" for i, text in enumerate(texts)]
    data = b"".join(lines)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "docs.jsonl"
        path.write_bytes(gzip.compress(data) if gzipped else data)
        bounded = list(read_records(path, "jsonl", max_record_bytes=max_record_bytes))
        unbounded = list(read_records(path, "jsonl"))
    too_large = {r.line for r in bounded if isinstance(r, Rejected) and r.reason.startswith("record too large")}
    assert [r.line for r in bounded] == [r.line for r in unbounded] == list(range(1, len(lines) + 1))
    # One limit, at least the record's, splits the lines: those over it are rejected unread, and the rest read
    # as they would with no limit.
    rejected = [len(line) for n, line in enumerate(lines, start=1) if n in too_large]
    kept = [len(line) for n, line in enumerate(lines, start=1) if n not in too_large]
    assert all(length > max([max_record_bytes, *kept]) for length in rejected)
    assert all(r == u for r, u in zip(bounded, unbounded, strict=True) if r.line not in too_large)
