"""What MEDLINE carries beside the text (authors, DOI, publication types, major MeSH, the journal's abbreviation):
read from the real PubMed files, written on every block of a new index, and left out, with one line saying so,
of an index built before those fields existed, which stays readable, searchable and unchanged."""

from __future__ import annotations

import gzip
import hashlib
import html
import json
import re
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli import cli
from biorank.indexer.indexer import MEDLINE_FIELDS, Indexer, IndexOptions, content_hash
from biorank.indexer.readers import read_records
from biorank.models.names import PACKAGED_MODEL
from biorank.store.ids import storage_id
from biorank.store.mappings.documents import BIBLIOGRAPHIC, IndexSettings, documents_index_body
from biorank.store.record import MAPPING_VERSION, read_record
from biorank.types import Abstract


@pytest.fixture(scope="module")
def medline16(shared_data: Path) -> dict[str, Abstract]:
    records = read_records(shared_data / "pubmed" / "medline16n0902.xml.gz")
    return {r.id: r for r in records if isinstance(r, Abstract)}


def _oracle(raw: str) -> dict[str, dict]:
    """Each citation's bibliographic fields parsed from the raw text with regular expressions, not XML."""
    def text(fragment: str) -> str:
        return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()

    found = {}
    for citation in re.findall(r"<MedlineCitation .*?</MedlineCitation>", raw, re.S):
        pmid = re.search(r"<PMID[^>]*>(\d+)</PMID>", citation)[1]
        authors = []
        for author in re.findall(r"<Author[ >].*?</Author>", citation, re.S):
            last = re.search(r"<LastName>(.*?)</LastName>", author, re.S)
            initials = re.search(r"<Initials>(.*?)</Initials>", author, re.S)
            group = re.search(r"<CollectiveName>(.*?)</CollectiveName>", author, re.S)
            authors.append(f"{text(last[1])} {text(initials[1]) if initials else ''}".strip() if last
                           else text(group[1]))
        majors = [text(re.search(r"<DescriptorName[^>]*>(.*?)</DescriptorName>", h, re.S)[1])
                  for h in re.findall(r"<MeshHeading>.*?</MeshHeading>", citation, re.S) if 'MajorTopicYN="Y"' in h]
        doi = re.search(r'<ELocationID EIdType="doi"[^>]*>(.*?)</ELocationID>', citation, re.S)
        found[pmid] = {
            "authors": tuple(authors),
            "publication_types": tuple(text(t) for t in re.findall(r"<PublicationType[^>]*>(.*?)</PublicationType>",
                                                                     citation, re.S)),
            "mesh_major": tuple(majors),
            "journal_abbrev": text(re.search(r"<MedlineTA>(.*?)</MedlineTA>", citation, re.S)[1]),
            "doi": text(doi[1]) if doi else None,
        }
    return found


def test_every_medline16_citation_has_the_fields_its_xml_has(medline16: dict[str, Abstract], shared_data: Path) -> None:
    raw = gzip.decompress((shared_data / "pubmed" / "medline16n0902.xml.gz").read_bytes()).decode()
    expected = _oracle(raw)
    assert len(expected) == len(medline16) == 604
    for pmid, fields in expected.items():
        record = medline16[pmid]
        assert {name: getattr(record, name) for name in fields} == fields, pmid
    records = list(medline16.values())
    # The counts this file has (authors: 3,590 <Author> elements, 8 of them groups).
    assert sum(len(r.authors) for r in records) == 3590 and sum(bool(r.authors) for r in records) == 603
    assert sum(bool(r.doi) for r in records) == 579 and all(r.publication_types for r in records)
    assert sum(bool(r.mesh_major) for r in records) == 94 and all(r.journal_abbrev for r in records)
    assert sum(" " in a and not re.search(r" [A-Z]+$", a) for r in records for a in r.authors) >= 8

    first = medline16["17942999"]
    assert first.authors == ("Chandrasekaran B", "Gandour JT", "Krishnan A") and first.doi is None
    assert first.publication_types == ("Journal Article", "Research Support, Non-U.S. Gov't")
    # Major through a qualifier (physiology, MajorTopicYN="Y"), not through the descriptor itself.
    assert first.mesh_major == ("Neuronal Plasticity", "Pitch Perception")
    assert first.journal_abbrev == "Restor Neurol Neurosci"
    groups = [a for r in records for a in r.authors if a == "Movement Disorder Group"]
    assert groups == ["Movement Disorder Group"]


def test_current_pubmed_records_take_the_doi_from_pubmed_data(shared_data: Path) -> None:
    (nejm,) = read_records(shared_data / "pubmed" / "pubmed-29768149.xml")
    assert nejm.doi == "10.1056/NEJMoa1715274" and nejm.journal_abbrev == "N Engl J Med"
    assert nejm.authors[:3] == ("O'Byrne PM", "FitzGerald JM", "Bateman ED") and len(nejm.authors) == 10
    assert "Randomized Controlled Trial" in nejm.publication_types and len(nejm.publication_types) == 6
    assert nejm.mesh_major == ("Asthma", "Bronchodilator Agents", "Budesonide", "Formoterol Fumarate",
                               "Terbutaline")
    current = {r.id: r for r in read_records(shared_data / "pubmed" / "test_current_medline.xml.gz")}
    assert current["36400559"].doi == "10.1016/j.ncl.2022.07.002"
    assert current["36400559"].publication_types == ("Journal Article", "Review")
    assert current["36400559"].mesh_major == ("Low Back Pain", "Cognitive Behavioral Therapy")
    # Its references list DOIs of other papers in PubmedData: none of them is taken for the citation's own.
    assert current["2930949"].doi is None and current["2930949"].authors == ("Reuler JB",)
    assert current["28786991"].doi == "10.1371/journal.pone.0180707"


def _hash_before(record: Abstract, model: str, with_sentences: bool) -> str:
    """content_hash as biorank computed it before the bibliographic fields existed."""
    fields = {k: v for k, v in asdict(record).items() if k not in ("source", "line", *MEDLINE_FIELDS)}
    key = json.dumps([fields, model, MAPPING_VERSION, with_sentences], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def test_hashes_change_only_where_the_new_fields_reach_the_index(medline16: dict[str, Abstract]) -> None:
    pubmed = medline16["17942999"]
    beir = Abstract("d1", "A title", "An abstract.", source="corpus.jsonl", line=3)
    # A record of another source, and any record bound for an index without the fields: the hash of before, so
    # nothing already in such an index is re-encoded.
    assert content_hash(beir, model="m", with_sentences=True) == _hash_before(beir, "m", True)
    assert content_hash(pubmed, model="m", with_sentences=True, bibliographic=False) == _hash_before(
        pubmed, "m", True)
    # Into an index that stores them, a changed author list is a changed document.
    stored = content_hash(pubmed, model="m", with_sentences=True)
    assert stored != _hash_before(pubmed, "m", True)
    assert content_hash(replace(pubmed, authors=pubmed.authors[:-1]), model="m", with_sentences=True) != stored


def test_the_medline_index_holds_the_fields_on_every_block(opensearch: OpenSearch, medline_index: str,
                                                           medline16: dict[str, Abstract]) -> None:
    assert read_record(opensearch, medline_index).bibliographic
    opensearch.indices.refresh(index=medline_index)
    blocks = opensearch.search(index=medline_index, body={
        "size": 10_000, "_source": ["id", "block", "doi", *BIBLIOGRAPHIC]})["hits"]["hits"]
    later = [b["_source"] for b in blocks if b["_source"]["block"] > 0]
    assert later, "some citation of this file is longer than one block"
    for source in (b["_source"] for b in blocks):
        record = medline16[source["id"]]
        assert source["authors"] == list(record.authors) and source["journal_abbrev"] == record.journal_abbrev
        assert source["publication_types"] == list(record.publication_types)
        assert source["mesh_major"] == list(record.mesh_major)
        assert ("doi" in source) == (source["block"] == 0)
    # Filters select blocks by these fields, as they do by year and journal.
    body = {"size": 0, "query": {"bool": {"filter": [{"term": {"authors": "Gandour JT"}},
                                                       {"term": {"publication_types": "Journal Article"}}]}},
            "aggs": {"ids": {"terms": {"field": "id"}}}}
    ids = [b["key"] for b in opensearch.search(index=medline_index, body=body)["aggregations"]["ids"]["buckets"]]
    assert ids == sorted(i for i, r in medline16.items() if "Gandour JT" in r.authors) and "17942999" in ids


def _old_index(opensearch: OpenSearch, name: str, encoder) -> None:
    """An index as biorank built it before the bibliographic fields: no such fields, no such record key."""
    body = documents_index_body(IndexSettings(), model=encoder.model_name, dimension=encoder.dimension,
                                block_tokens=Indexer(opensearch, encoder=encoder).identity.block_tokens,
                                sentences_index=None, model_source=encoder.source,
                                prefixes=encoder.prefixes.as_prompts())
    for field in (*BIBLIOGRAPHIC, "doi"):
        del body["mappings"]["properties"][field]
    del body["mappings"]["_meta"]["biorank"]["bibliographic"]
    opensearch.indices.create(index=name, body=body)


def test_an_index_built_before_the_fields_is_written_without_them_and_says_so(
        opensearch: OpenSearch, opensearch_url: str, index_name: str, default_encoder, shared_data: Path,
        tmp_path: Path) -> None:
    raw = gzip.decompress((shared_data / "pubmed" / "medline16n0902.xml.gz").read_bytes()).decode()
    starts = [m.start() for m in re.finditer(r"<MedlineCitation ", raw)]
    few = tmp_path / "few.xml"
    few.write_text(raw[: starts[12]] + "</MedlineCitationSet>\n", encoding="utf-8")
    _old_index(opensearch, index_name, default_encoder)
    options = IndexOptions(index=index_name, sentences=False, rejects=tmp_path / "r.tsv")

    report = Indexer(opensearch, options, encoder=default_encoder).run([few])
    assert (report.indexed, report.failed, report.bibliographic_left_out) == (12, 0, 12)
    assert not read_record(opensearch, index_name).bibliographic
    stored = opensearch.get(index=index_name, id=storage_id("17942999"))["_source"]
    assert stored["journal"] == "Restorative neurology and neuroscience" and not set(stored) & set(MEDLINE_FIELDS)
    # Hashed as before: a second run finds every document in and unchanged.
    again = Indexer(opensearch, options, encoder=default_encoder).run([few])
    assert (again.indexed, again.unchanged, again.bibliographic_left_out) == (0, 12, 0)

    # The command says so in one line; the index stays searchable, and an export simply has no authors.
    runner = CliRunner()
    base = ["--url", opensearch_url]
    opensearch.delete(index=index_name, id=storage_id("17942999"), refresh=True)
    result = runner.invoke(cli, [*base, "index", str(few), "--index", index_name, "--no-sentences", "--model",
                                 PACKAGED_MODEL, "--rejects", str(tmp_path / "r.tsv")])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if "written without their authors" in line]
    assert len(notes) == 1 and "1 documents" in notes[0] and "--recreate" in notes[0], result.output
    # `biorank sync` writes through the same indexer: the same line, and no failure.
    updates = tmp_path / "updates"
    updates.mkdir()
    (updates / "pubmed26n0001.xml.gz").write_bytes(gzip.compress(few.read_bytes()))
    opensearch.delete(index=index_name, id=storage_id("17942999"), refresh=True)
    synced = runner.invoke(cli, [*base, "sync", str(updates), "--index", index_name, "--rejects",
                                 str(tmp_path / "r.tsv")])
    assert synced.exit_code == 0, synced.output
    assert "1 documents were written without their authors" in synced.output and "11 already in" in synced.output
    found = runner.invoke(cli, [*base, "query", "pitch processing mismatch negativity", "--index", index_name,
                                "--mode", "bm25", "--format", "ris", "-k", "3", "--no-log"])
    ris = found.stdout_bytes.decode()  # as printed: Result.output turns CR LF into LF
    assert found.exit_code == 0, found.output
    assert "AN  - 17942999\r\n" in ris and "T2  - Restorative neurology" in ris
    assert "AU  - " not in ris and "DO  - " not in ris
