"""The collection readers on the real development data, and on broken files made from real records."""

from __future__ import annotations

import gzip
import html
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from biorank.indexer.readers import FORMATS, ReaderError, detect_format, estimate_records, read_records
from biorank.types import Abstract, Deletion, Rejected

BIOASQ_CONCLUSIONS = (
    "CONCLUSIONS: Single-dose baloxavir was without evident safety concerns, was superior to placebo in "
    "alleviating influenza symptoms, and was superior to both oseltamivir and placebo in reducing the viral "
    "load 1 day after initiation of the trial regimen in patients with uncomplicated influenza."
)


def split(records: Iterable[Abstract | Rejected]) -> tuple[list[Abstract], list[Rejected]]:
    records = list(records)
    abstracts = [r for r in records if isinstance(r, Abstract)]
    rejected = [r for r in records if isinstance(r, Rejected)]
    return abstracts, rejected


def deletions(records: Iterable[Abstract | Rejected | Deletion]) -> list[tuple[int, str]]:
    """(line, PMID) of every DeleteCitation PMID: withdrawals for the indexer, neither abstracts nor rejects."""
    return [(r.line, r.id) for r in records if isinstance(r, Deletion)]


@pytest.fixture(scope="module")
def scifact_corpus(shared_data: Path) -> Path:
    return shared_data / "scifact" / "corpus.jsonl"


@pytest.fixture(scope="module")
def scifact(scifact_corpus: Path) -> list[Abstract]:
    abstracts, rejected = split(read_records(scifact_corpus, "scifact"))
    assert rejected == []
    return abstracts


@pytest.fixture(scope="module")
def medline16(shared_data: Path) -> Path:
    return shared_data / "pubmed" / "medline16n0902.xml.gz"


@pytest.fixture(scope="module")
def medline16_records(medline16: Path) -> tuple[list[Abstract], list[Rejected]]:
    return split(read_records(medline16))


# --- whole-file behaviour ------------------------------------------------------------------------------------


def test_formats_are_the_documented_ones() -> None:
    assert FORMATS == ("auto", "pubmed", "scifact", "beir", "nfcorpus", "bioasq", "jsonl")


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        ("scifact/corpus.jsonl", "scifact"),
        ("scifact/queries_train.jsonl", "beir"),
        ("nfcorpus/dev.docs", "nfcorpus"),
        ("bioasq/abstracts/biobert_7b_full_abstract.jsonl", "bioasq"),
        ("pubmed/medline16n0902.xml.gz", "pubmed"),
        ("pubmed/test_current_medline.xml.gz", "pubmed"),
        ("pubmed/pubmed-29768149.xml", "pubmed"),
    ],
)
def test_detect_format_on_real_files(shared_data: Path, relative: str, expected: str) -> None:
    assert detect_format(shared_data / relative) == expected


def test_detect_format_looks_at_content_not_only_the_name(shared_data: Path, tmp_path: Path) -> None:
    renamed = tmp_path / "download.txt"
    renamed.write_bytes(gzip.compress((shared_data / "pubmed" / "pubmed-29768149.xml").read_bytes()))
    assert detect_format(renamed) == "pubmed"
    assert detect_format(Path(__file__).parents[1] / "biorank" / "data" / "scifact-sample.jsonl.gz") == "scifact"


def test_undetectable_json_lines_say_which_options_to_pass(shared_data: Path) -> None:
    claims = shared_data / "scifact" / "claims_train.jsonl"
    with pytest.raises(ReaderError, match="--format jsonl --id-field") as raised:
        detect_format(claims)
    assert "id, claim, evidence, cited_doc_ids" in str(raised.value)
    with pytest.raises(ReaderError, match="--format jsonl"):
        read_records(claims)


def test_text_that_is_neither_xml_nor_json_is_not_guessed(shared_data: Path) -> None:
    with pytest.raises(ReaderError, match="neither XML nor JSON"):
        detect_format(shared_data / "nfcorpus" / "dev.titles.queries")


@pytest.mark.parametrize("name", ["missing.jsonl", "."])
def test_missing_file_or_directory_raises_at_the_call(tmp_path: Path, name: str) -> None:
    with pytest.raises(ReaderError, match=r"no such file|is a directory"):
        read_records(tmp_path / name, "scifact")


def test_unknown_format_raises(scifact_corpus: Path) -> None:
    with pytest.raises(ReaderError, match=r"unknown format 'medline'.*pubmed"):
        read_records(scifact_corpus, "medline")


def test_byte_order_mark_is_not_part_of_the_first_record(shared_data: Path, tmp_path: Path) -> None:
    real = (shared_data / "bioasq" / "abstracts" / "biobert_7b_full_abstract.jsonl").read_bytes()[:20000]
    saved_by_notepad = tmp_path / "abstracts.jsonl"
    saved_by_notepad.write_bytes(b"\xef\xbb\xbf" + real[: real.rindex(b"\n") + 1])
    assert detect_format(saved_by_notepad) == "bioasq"
    abstracts, rejected = split(read_records(saved_by_notepad))
    assert rejected == []
    assert abstracts[0].id == "1345168"


def test_empty_file_cannot_be_detected_but_reads_as_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(ReaderError, match="empty"):
        detect_format(empty)
    assert list(read_records(empty, "beir")) == []


def test_a_gz_file_that_is_not_gzip_raises_at_the_call(scifact_corpus: Path, tmp_path: Path) -> None:
    fake = tmp_path / "corpus.jsonl.gz"
    fake.write_bytes(b"\x1f\x8b" + scifact_corpus.read_bytes()[:1000])
    with pytest.raises(ReaderError, match="cannot read"):
        read_records(fake, "scifact")


def test_json_lines_given_as_pubmed_is_refused(scifact_corpus: Path) -> None:
    with pytest.raises(ReaderError, match="not PubMed XML"):
        list(read_records(scifact_corpus, "pubmed"))


def test_field_options_are_refused_for_formats_without_fields(medline16: Path) -> None:
    with pytest.raises(ReaderError, match="--id-field only apply to JSON Lines"):
        read_records(medline16, id_field="PMID")


# --- SciFact -------------------------------------------------------------------------------------------------


def test_scifact_corpus_counts_and_join(scifact: list[Abstract], scifact_corpus: Path) -> None:
    assert len(scifact) == 5183
    assert sum(len(a.sentences or ()) for a in scifact) == 45952
    assert [a.line for a in scifact] == list(range(1, 5184))
    assert all(a.source == str(scifact_corpus) for a in scifact)
    assert all(a.abstract == " ".join(a.sentences or ()) for a in scifact)
    # SciFact's raw sentences often end in "\n" or " "; stripped, the join has single spaces only.
    assert all(s == s.strip() and s for a in scifact for s in a.sentences or ())
    first = scifact[0]
    assert first.id == "4983"
    assert first.title.startswith("Microstructural development of human newborn cerebral white matter")
    assert first.sentences is not None
    assert first.sentences[7] == "0.24 versus 1.15 +/-"


def test_scifact_evidence_indices_address_the_sentences(scifact: list[Abstract], shared_data: Path) -> None:
    by_id = {a.id: a for a in scifact}
    evidence = 0
    with (shared_data / "scifact" / "claims_train.jsonl").open() as claims:
        for line in claims:
            for doc_id, sets in json.loads(line)["evidence"].items():
                for item in sets:
                    for index in item["sentences"]:
                        assert index < len(by_id[doc_id].sentences or ())
                        evidence += 1
    assert evidence == 1025


def test_bundled_sample_is_scifact_lines_unchanged(scifact: list[Abstract]) -> None:
    by_id = {a.id: a for a in scifact}
    sample = Path(__file__).parents[1] / "biorank" / "data" / "scifact-sample.jsonl.gz"
    abstracts, rejected = split(read_records(sample))
    assert (len(abstracts), rejected) == (300, [])
    for a in abstracts:
        full = by_id[a.id]
        assert (a.title, a.abstract, a.sentences) == (full.title, full.abstract, full.sentences)


def test_scifact_read_as_generic_jsonl_gives_the_same_sentences(scifact: list[Abstract], scifact_corpus: Path) -> None:
    generic, rejected = split(read_records(scifact_corpus, "jsonl", id_field="doc_id", text_field="abstract"))
    assert rejected == []
    assert [(a.id, a.sentences) for a in generic] == [(a.id, a.sentences) for a in scifact]


def test_broken_scifact_lines_are_rejected_and_the_rest_comes_through(scifact_corpus: Path, tmp_path: Path) -> None:
    with scifact_corpus.open("rb") as corpus:
        real = [corpus.readline() for _ in range(12)]
    objs = [json.loads(raw) for raw in real]

    def line(obj: object) -> bytes:
        return json.dumps(obj).encode() + b"\n"

    lines = list(real)
    lines[1] = real[1][: len(real[1]) // 2] + b"\n"
    lines[2] = real[2].replace(b'"title": "', b'"title": "\xff', 1)
    lines[3] = line({k: v for k, v in objs[3].items() if k != "doc_id"})
    lines[4] = line({**objs[4], "title": "", "abstract": []})
    lines[5] = line(objs[5]["abstract"])
    lines[6] = line({**objs[6], "title": objs[6]["title"].split()})
    lines[7] = b"\n"
    lines[8] = line({**objs[8], "abstract": " ".join(objs[8]["abstract"])})
    lines[9] = line({**objs[9], "doc_id": " "})
    lines[10] = line({**objs[10], "doc_id": [objs[10]["doc_id"]]})
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"".join(lines))

    abstracts, rejected = split(read_records(broken, "scifact"))
    assert [(r.line, r.id) for r in rejected] == [
        (2, None),
        (3, None),
        (4, None),
        (5, str(objs[4]["doc_id"])),
        (6, None),
        (7, str(objs[6]["doc_id"])),
        (9, str(objs[8]["doc_id"])),
        (10, None),
        (11, None),
    ]
    reasons = [r.reason for r in rejected]
    assert reasons[0].startswith("invalid JSON: ")
    column = real[2].index(b'"title": "') + len('"title": "') + 1
    assert reasons[1] == f"not valid UTF-8 (byte 0xff at column {column})"
    assert reasons[2:] == [
        "missing id field 'doc_id'",
        "empty title and abstract",
        "expected a JSON object, got array",
        "field 'title' must be a string, got array",
        "field 'abstract' must be a list of strings, got string",
        "empty id field 'doc_id'",
        "id field 'doc_id' must be a string or integer, got array",
    ]
    assert [(a.line, a.id) for a in abstracts] == [(1, str(objs[0]["doc_id"])), (12, str(objs[11]["doc_id"]))]
    assert all(r.source == str(broken) for r in rejected)

    gzipped = tmp_path / "broken.jsonl.gz"
    gzipped.write_bytes(gzip.compress(broken.read_bytes()))
    again = [(r.line, r.id, getattr(r, "reason", None)) for r in read_records(gzipped, "scifact")]
    assert again == [(r.line, r.id, getattr(r, "reason", None)) for r in read_records(broken, "scifact")]


def test_truncated_gzip_keeps_what_was_readable(scifact: list[Abstract], scifact_corpus: Path, tmp_path: Path) -> None:
    compressed = gzip.compress(scifact_corpus.read_bytes())
    truncated = tmp_path / "corpus.jsonl.gz"
    truncated.write_bytes(compressed[: len(compressed) // 2])
    abstracts, rejected = split(read_records(truncated))
    assert len(rejected) == 1
    assert "file unreadable from here on" in rejected[0].reason and rejected[0].rest_skipped
    # The partial line at the cut is not yielded: reading stops on the line it is in.
    assert rejected[0].line == len(abstracts) + 1
    assert len(abstracts) > 2000
    assert [(a.id, a.abstract) for a in abstracts] == [(a.id, a.abstract) for a in scifact[: len(abstracts)]]
    # The progress bar's estimate counts what it can read of it too (all but the last read of 64 KB) instead of
    # stopping the command.
    assert len(abstracts) - 50 < estimate_records(truncated) <= len(abstracts) + 1


def test_the_estimate_counts_a_last_line_without_newline(tmp_path: Path) -> None:
    lines = [json.dumps({"doc_id": i, "title": f"t{i}", "abstract": ["a."]}) for i in range(3)]
    for ending, expected in (("\n", 3), ("", 3)):
        path = tmp_path / f"corpus{len(ending)}.jsonl"
        path.write_text("\n".join(lines) + ending)
        assert estimate_records(path) == expected
    (tmp_path / "empty.jsonl").write_text("")
    assert estimate_records(tmp_path / "empty.jsonl") == 0


# --- BEIR, generic JSON Lines ----------------------------------------------------------------------------------


def test_beir_queries_file_reads_without_titles(shared_data: Path) -> None:
    queries, rejected = split(read_records(shared_data / "scifact" / "queries_train.jsonl"))
    assert (len(queries), rejected) == (809, [])
    assert all(q.title == "" and q.sentences is None for q in queries)
    with (shared_data / "scifact" / "claims_train.jsonl").open() as claims:
        assert [(q.id, q.abstract) for q in queries] == [(str(c["id"]), c["claim"]) for c in map(json.loads, claims)]


def test_beir_corpus_made_as_beir_made_it(scifact_corpus: Path, scifact: list[Abstract], tmp_path: Path) -> None:
    beir = tmp_path / "corpus.jsonl"
    expected = []
    with scifact_corpus.open() as corpus, beir.open("w") as out:
        for raw in corpus:
            doc = json.loads(raw)
            beir_doc = {"_id": str(doc["doc_id"]), "title": doc["title"], "text": " ".join(doc["abstract"])}
            out.write(json.dumps({**beir_doc, "metadata": {}}) + "\n")
            expected.append((beir_doc["_id"], beir_doc["title"], beir_doc["text"]))
    abstracts, rejected = split(read_records(beir))
    assert (len(abstracts), rejected) == (5183, [])
    # A string text is kept exactly as given, whitespace included, so offsets computed on it stay valid.
    assert [(a.id, a.title, a.abstract) for a in abstracts] == expected
    # BEIR joined SciFact's unstripped sentences, so its text is not always the SciFact reader's abstract.
    assert sum(b.abstract != s.abstract for b, s in zip(abstracts, scifact, strict=True)) == 1055
    assert all(b.abstract.split() == s.abstract.split() for b, s in zip(abstracts, scifact, strict=True))


def test_generic_jsonl_with_explicit_fields(shared_data: Path) -> None:
    claims = shared_data / "scifact" / "claims_train.jsonl"
    explicit, rejected = split(read_records(claims, "jsonl", text_field="claim"))
    assert (len(explicit), rejected) == (809, [])
    assert explicit[0].id == "0" and explicit[0].abstract == "0-dimensional biomaterials lack inductive properties."
    auto = list(read_records(claims, text_field="claim"))
    assert auto == explicit


# --- NFCorpus ------------------------------------------------------------------------------------------------


def test_nfcorpus_dev_docs(shared_data: Path) -> None:
    docs, rejected = split(read_records(shared_data / "nfcorpus" / "dev.docs"))
    assert (len(docs), rejected) == (3193, [])
    assert len({d.id for d in docs}) == 3193
    assert all(d.title == "" and d.id.startswith("MED-") and d.abstract for d in docs)
    assert docs[0].id == "MED-118"
    assert docs[0].abstract.startswith("alkylphenols human milk relations dietary habits central taiwan")
    # The file has no final newline; its last document must still come through.
    assert (docs[-1].id, docs[-1].line) == ("MED-5371", 3193)


def test_broken_nfcorpus_lines(shared_data: Path, tmp_path: Path) -> None:
    with (shared_data / "nfcorpus" / "dev.docs").open("rb") as docs:
        real = [docs.readline() for _ in range(6)]
    ids = [raw.split(b"\t", 1)[0].decode() for raw in real]
    lines = list(real)
    lines[1] = real[1].replace(b"\t", b" ", 1)
    lines[2] = real[2].split(b"\t")[0] + b"\t\n"
    lines[3] = real[3].replace(b" ", b" \xff", 1)
    lines[4] = b"\t" + real[4].split(b"\t", 1)[1]
    broken = tmp_path / "broken.docs"
    broken.write_bytes(b"".join(lines))
    abstracts, rejected = split(read_records(broken))
    assert [(r.line, r.id, r.reason.split(" (")[0]) for r in rejected] == [
        (2, None, "expected ID<TAB>TEXT, found no tab"),
        (3, ids[2], "empty text"),
        (4, None, "not valid UTF-8"),
        (5, None, "empty id"),
    ]
    assert [(a.line, a.id) for a in abstracts] == [(1, ids[0]), (6, ids[5])]


# --- BioASQ --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bioasq(shared_data: Path) -> dict[str, Abstract]:
    abstracts, rejected = split(read_records(shared_data / "bioasq" / "abstracts" / "biobert_7b_full_abstract.jsonl"))
    assert (len(abstracts), rejected) == (959, [])
    return {a.id: a for a in abstracts}


def test_bioasq_gold_offsets_slice_back(bioasq: dict[str, Abstract]) -> None:
    assert bioasq["28293123"].abstract[1139:1303] == (
        "The initial approval and subsequent studies of pembrolizumab required and utilized a companion "
        "diagnostic test, Dako's IHC 22C3, to assess PD-L1 status of patients."
    )


def test_bioasq_joins_labelled_sections_with_no_separator(bioasq: dict[str, Abstract], shared_data: Path) -> None:
    golden = json.loads((shared_data / "bioasq" / "Task7BGoldenEnriched" / "7B1_golden.json").read_text())
    snippets = {
        (s["offsetInBeginSection"], s["offsetInEndSection"]): s["text"]
        for q in golden["questions"]
        for s in q["snippets"]
        if s["document"].endswith("/30184455") and s["beginSection"] == "abstract"
    }
    assert snippets[(1917, 2209)] == BIOASQ_CONCLUSIONS
    abstract = bioasq["30184455"].abstract
    assert abstract[1917:2209] == BIOASQ_CONCLUSIONS
    # The previous section ends right before the label: BioASQ counts no separator between sections.
    assert abstract[1900:1917] == "al, respectively."
    assert abstract.startswith("BACKGROUND: Baloxavir marboxil")


# --- PubMed / MEDLINE XML ------------------------------------------------------------------------------------


def test_pubmed_structured_record_with_inline_markup(shared_data: Path) -> None:
    path = shared_data / "pubmed" / "pubmed-29768149.xml"
    (record,) = read_records(path)
    assert isinstance(record, Abstract)
    assert (record.id, record.year, record.line, record.source) == ("29768149", 2018, 4, str(path))
    assert record.title == "Inhaled Combined Budesonide-Formoterol as Needed in Mild Asthma."
    assert record.journal == "The New England journal of medicine"
    # The file has "&#946;\n\t\t\t\t\t\t<sub>2</sub>-agonist": the <sub> text stays, the indentation does not.
    assert record.abstract.startswith(
        "BACKGROUND: In patients with mild asthma, as-needed use of an inhaled glucocorticoid plus a fast-acting "
        "\u03b22-agonist may be an alternative to conventional treatment strategies.METHODS: We conducted a 52-week"
    )
    assert (
        "to as-needed terbutaline with regard to electronically recorded weeks with well-controlled asthma."
        "RESULTS: A total of 3849 patients" in record.abstract
    )
    assert record.abstract.endswith("SYGMA 1 ClinicalTrials.gov number, NCT02149199 .).")
    assert re.findall(r"([A-Z]{4,}): ", record.abstract) == [
        "BACKGROUND",
        "METHODS",
        "RESULTS",
        "CONCLUSIONS",
    ]
    assert not re.search(r"\s{2,}|[\t\n]", record.abstract)
    assert len(record.mesh) == 23 and record.mesh[0] == "Administration, Inhalation" and "Asthma" in record.mesh


def test_pubmed_plain_and_gzip_read_the_same(shared_data: Path, medline16: Path, tmp_path: Path) -> None:
    plain = shared_data / "pubmed" / "pubmed-29768149.xml"
    gzipped = tmp_path / "pubmed-29768149.xml.gz"
    gzipped.write_bytes(gzip.compress(plain.read_bytes()))
    unpacked = tmp_path / "medline16n0902.xml"
    unpacked.write_bytes(gzip.decompress(medline16.read_bytes()))
    for original, copy in ((plain, gzipped), (medline16, unpacked)):
        without_source = [(r.id, r.line, getattr(r, "abstract", None)) for r in read_records(original)]
        assert without_source == [(r.id, r.line, getattr(r, "abstract", None)) for r in read_records(copy)]


def test_medline16_counts(medline16_records: tuple[list[Abstract], list[Rejected]]) -> None:
    abstracts, rejected = medline16_records
    assert len(abstracts) == 604
    assert rejected == []
    assert len({a.id for a in abstracts}) == 604
    assert sum(a.abstract == "" for a in abstracts) == 78
    assert all(a.title and a.journal and a.year for a in abstracts)
    assert sum(bool(a.mesh) for a in abstracts) == 94
    first = abstracts[0]
    assert (first.id, first.line, first.year, first.journal) == (
        "17942999",
        5,
        2007,
        "Restorative neurology and neuroscience",
    )


def test_medline16_delete_citation_is_a_deletion(medline16: Path) -> None:
    assert deletions(read_records(medline16)) == [(89981, "26432306")]


def test_medline16_year_from_medline_date(medline16_records: tuple[list[Abstract], list[Rejected]]) -> None:
    by_id = {a.id: a for a in medline16_records[0]}
    assert by_id["18621939"].year == 2008  # PubDate has only <MedlineDate>2008 Jul-Aug</MedlineDate>


def test_medline16_other_abstracts_are_not_the_abstract(
    medline16_records: tuple[list[Abstract], list[Rejected]],
) -> None:
    assert not any("Abstract available from the publisher." in a.abstract for a in medline16_records[0])


def test_medline16_sections_joined_as_bioasq_joins_them(
    medline16: Path, medline16_records: tuple[list[Abstract], list[Rejected]]
) -> None:
    """Every record checked against the raw text, parsed here with regular expressions instead of XML.

    Sections are stripped: in this file 249 unlabelled one-section abstracts end in a space.
    """
    raw = gzip.decompress(medline16.read_bytes()).decode()
    section = r'<AbstractText(?: Label="([^"]*)")?[^>]*>(.*?)</AbstractText>'
    expected = {}
    for citation in re.findall(r"<MedlineCitation .*?</MedlineCitation>", raw, re.S):
        pmid = re.search(r"<PMID[^>]*>(\d+)</PMID>", citation).group(1)
        block = re.search(r"<Abstract>(.*?)</Abstract>", citation, re.S)
        sections = re.findall(section, block[1] if block else "")
        expected[pmid] = "".join(
            (f"{html.unescape(label)}: " if label else "") + html.unescape(text).strip() for label, text in sections
        )
    assert {a.id: a.abstract for a in medline16_records[0]} == expected
    by_id = {a.id: a.abstract for a in medline16_records[0]}
    assert by_id["17942999"].startswith(
        "PURPOSE: An auditory electrophysiological study was conducted to explore the influence of language "
        "experience on the saliency of dimensions underlying cortical pitch processing.METHODS: Mismatch negativity"
    )
    assert sum(bool(re.search(r"[.)]([A-Z][A-Z ()/]+): ", text)) for text in by_id.values()) > 100


def test_current_dtd_records(shared_data: Path) -> None:
    abstracts, rejected = split(read_records(shared_data / "pubmed" / "test_current_medline.xml.gz"))
    assert rejected == []
    assert [(a.id, a.year) for a in abstracts] == [
        ("36400559", 2023),
        ("2930949", 1985),
        ("11446611", 2001),
        ("28786991", 2017),
    ]
    title_only = abstracts[2]
    assert (title_only.title, title_only.abstract) == ("Acute back pain.", "")
    structured = abstracts[3].abstract
    assert structured.startswith("OBJECTIVE: To synthesize outputs and outcomes of community-based tuberculosis")
    assert "foreign-born populations (FBP) in the United States (US).METHODS: We systematically searched" in structured
    assert "CopyrightInformation" not in abstracts[0].abstract and "Elsevier" not in abstracts[0].abstract
    assert abstracts[0].mesh[:3] == ("Humans", "Low Back Pain", "Diagnosis, Differential")


def _medline16_prefix(medline16: Path, citations: int) -> tuple[str, str]:
    raw = gzip.decompress(medline16.read_bytes()).decode()
    starts = [m.start() for m in re.finditer(r"<MedlineCitation ", raw)]
    return raw[: starts[citations]], raw[starts[citations] :]


@pytest.mark.parametrize(
    ("remove", "count", "reason", "has_id"),
    [
        (r"<ArticleTitle>.*?</ArticleTitle>|<Abstract>.*?</Abstract>", 2, "empty title and abstract", True),
        (r"<PMID[^>]*>\d+</PMID>", 1, "citation without a PMID", False),
        (r"<Article .*?</Article>", 1, "citation without an Article", True),
    ],
)
def test_unusable_citation_is_rejected_and_its_neighbours_kept(
    medline16: Path, tmp_path: Path, remove: str, count: int, reason: str, has_id: bool
) -> None:
    head, rest = _medline16_prefix(medline16, 2)
    end = rest.index("</MedlineCitation>")
    edited = tmp_path / "edited.xml"
    text = head + re.sub(remove, "", rest[:end], count=count, flags=re.S) + rest[end:]
    edited.write_text(text)
    abstracts, rejected = split(read_records(edited))
    assert [(r.line, r.id, r.reason) for r in rejected] == [
        (head.count("\n") + 1, "19602546" if has_id else None, reason),
    ]
    assert deletions(read_records(edited)) == [(text[: text.index("<DeleteCitation>")].count("\n") + 2, "26432306")]
    assert len(abstracts) == 603


def test_truncated_xml_keeps_the_complete_citations(
    medline16: Path, medline16_records: tuple[list[Abstract], list[Rejected]], tmp_path: Path
) -> None:
    head, rest = _medline16_prefix(medline16, 100)
    truncated = tmp_path / "truncated.xml"
    truncated.write_text(head + rest[:500])
    abstracts, rejected = split(read_records(truncated))
    assert [a.id for a in abstracts] == [a.id for a in medline16_records[0][:100]]
    assert len(rejected) == 1
    assert rejected[0].reason.startswith("malformed XML, the rest of the file was skipped")
    assert rejected[0].rest_skipped
    assert rejected[0].line == (head + rest[:500]).count("\n") + 1


# --- bounded memory ------------------------------------------------------------------------------------------

# VmHWM is this process's own peak; ru_maxrss would start from the forking pytest process's size.
_PEAK_MEMORY = r"""
import json, re, sys
from pathlib import Path
from biorank.indexer.readers import read_records

def peak_kb():
    return int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1))

before = peak_kb()
count, rejected = 0, []
for record in read_records(sys.argv[1]):
    count += 1
    if type(record).__name__ == "Rejected":
        rejected.append([record.line, record.reason])
print(json.dumps([count, (peak_kb() - before) // 1024, rejected]))
"""


def read_in_a_process(path: Path) -> tuple[int, int, list[tuple[int, str]]]:
    """Read ``path`` in a fresh process: the records read, how many MB its peak memory grew, and the rejects."""
    run = subprocess.run([sys.executable, "-c", _PEAK_MEMORY, str(path)], capture_output=True, text=True, check=True)
    count, grown_mb, rejected = json.loads(run.stdout)
    return count, grown_mb, [tuple(r) for r in rejected]


@pytest.mark.parametrize("kind", ["pubmed", "scifact"])
def test_memory_stays_bounded_on_a_large_file(kind: str, medline16: Path, scifact_corpus: Path, tmp_path: Path) -> None:
    """Five copies of the real records (about 20 and 40 MB): reading them must not hold the file in memory."""
    if kind == "pubmed":
        head, rest = _medline16_prefix(medline16, 0)
        tail = rest.index("<DeleteCitation>")
        big = tmp_path / "big.xml"
        big.write_text(head + rest[:tail] * 5 + rest[tail:])
        expected = 604 * 5 + 1
    else:
        big = tmp_path / "big.jsonl"
        big.write_bytes(scifact_corpus.read_bytes() * 5)
        expected = 5183 * 5
    count, grown_mb, rejected = read_in_a_process(big)
    assert (count, rejected) == (expected, [])
    # Holding the parsed tree (or the lines) would take several times the file's size; the file is >= 19 MB.
    assert big.stat().st_size > 19_000_000
    assert grown_mb < 15, f"memory grew by {grown_mb} MB while streaming {big.stat().st_size} bytes"


def test_malformed_citations_are_skipped_one_by_one_and_reading_goes_on(
    medline16: Path, medline16_records: tuple[list[Abstract], list[Rejected]], tmp_path: Path
) -> None:
    """A bad byte, nesting past libxml2's depth limit and a text node over 10 MB, each in its own citation."""
    raw = gzip.decompress(medline16.read_bytes())
    starts = [m.start() for m in re.finditer(rb"<MedlineCitation ", raw)]
    damage = {3: b"\xff", 5: b"<i>" * 300 + b"</i>" * 300, 7: b"x" * 11_000_000}
    edited, last, damaged_lines = [], 0, []
    for citation, inserted in damage.items():
        title = raw.index(b"<ArticleTitle>", starts[citation]) + len(b"<ArticleTitle>")
        edited += [raw[last:title], inserted]
        last = title
        damaged_lines.append(raw[:title].count(b"\n") + 1)
    path = tmp_path / "damaged.xml"
    path.write_bytes(b"".join(edited) + raw[last:])
    abstracts, rejected = split(read_records(path))
    expected = [a for i, a in enumerate(medline16_records[0]) if i not in damage]
    assert [(a.id, a.abstract) for a in abstracts] == [(a.id, a.abstract) for a in expected]
    # libxml2 numbers lines past 65535 only roughly (the line of a child), so lines are compared below that.
    assert [a.line for a in abstracts if a.line < 65535] == [a.line for a in expected if a.line < 65535]
    malformed = [r for r in rejected if r.reason.startswith("malformed XML")]
    assert [r.line for r in malformed] == damaged_lines
    assert all("the citation there was skipped and reading went on at line" in r.reason for r in malformed)
    assert [r.reason for r in rejected if r not in malformed] == []
    assert not any(r.rest_skipped for r in rejected)


@pytest.mark.parametrize(("citations", "cut"), [(2, 10), (5, 4), (5, 40), (40, 300)])
def test_a_truncated_xml_gz_of_any_size_keeps_every_complete_citation(
    medline16: Path, medline16_records: tuple[list[Abstract], list[Rejected]], tmp_path: Path, citations: int,
    cut: int,
) -> None:
    """A gzip cut short, smaller than one read of the parser (32 KB) or larger: every citation that decompresses
    whole is read, and the break is one reject."""
    import zlib

    head, _ = _medline16_prefix(medline16, citations)
    whole = gzip.compress((head + "</MedlineCitationSet>\n").encode())
    truncated = tmp_path / "truncated.xml.gz"
    truncated.write_bytes(whole[: len(whole) - cut])
    readable = zlib.decompressobj(31).decompress(truncated.read_bytes()).count(b"</MedlineCitation>")
    abstracts, rejected = split(read_records(truncated))
    assert readable >= citations - 1
    assert [a.id for a in abstracts] == [a.id for a in medline16_records[0][:readable]]
    assert [r.reason.split(":")[0] for r in rejected] == ["file unreadable after this record, the rest was skipped"]
    assert rejected[0].rest_skipped


def test_a_text_node_over_10_mb_on_a_one_line_file_loses_only_its_citation(
    medline16: Path, medline16_records: tuple[list[Abstract], list[Rejected]], tmp_path: Path
) -> None:
    """Minified XML (one line): the resync must not pad the line back to the damaged spot, which is the same
    oversized text node again."""
    head, _ = _medline16_prefix(medline16, 8)
    one_line = re.sub(r"\n\s*", " ", head) + "</MedlineCitationSet>"
    damaged = [m.start() for m in re.finditer(r"<MedlineCitation ", one_line)][3]
    title = one_line.index("<ArticleTitle>", damaged) + len("<ArticleTitle>")
    path = tmp_path / "one-line.xml"
    path.write_text(one_line[:title] + "x" * 11_000_000 + one_line[title:])
    abstracts, rejected = split(read_records(path))
    expected = [a.id for i, a in enumerate(medline16_records[0][:8]) if i != 3]
    assert [a.id for a in abstracts] == expected
    assert len(rejected) == 1 and rejected[0].reason.startswith(
        "malformed XML, the citation there was skipped and reading went on at line 1"), rejected


def _billion_laughs(medline16: Path, damaged: int, one_line: bool) -> tuple[str, list[str]]:
    """Three real citations under a DTD of nested entities, citation ``damaged`` using the one that expands
    10⁹-fold; and the three PMIDs."""
    _, rest = _medline16_prefix(medline16, 0)
    citations = re.findall(r"<MedlineCitation .*?</MedlineCitation>\n", rest, re.S)[:3]
    pmids = [re.search(r"<PMID[^>]*>(\d+)</PMID>", c)[1] for c in citations]
    citations[damaged] = citations[damaged].replace("<ArticleTitle>", "<ArticleTitle>&lol9;", 1)
    entities = "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">\n' for i in range(1, 10))
    text = (f'<?xml version="1.0"?>\n<!DOCTYPE MedlineCitationSet [\n<!ENTITY lol0 "lol">\n{entities}]>\n'
            f"<MedlineCitationSet>\n{''.join(citations)}</MedlineCitationSet>\n")
    return (re.sub(r"\n\s*", " ", text) if one_line else text), pmids


@pytest.mark.parametrize("one_line", [False, True], ids=["lines", "one-line"])
@pytest.mark.parametrize("damaged", [0, 1])
def test_an_entity_error_never_sends_reading_back(medline16: Path, tmp_path: Path, damaged: int,
                                                  one_line: bool) -> None:
    """libxml2 places an amplification error inside the entity's text ("line 1, column 7"): reading goes on
    after the citation it was in, not at the file's line 1 (a false duplicate, then the rest skipped)."""
    text, pmids = _billion_laughs(medline16, damaged, one_line)
    path = tmp_path / "laughs.xml"
    path.write_text(text)
    abstracts, rejected = split(read_records(path))
    assert [a.id for a in abstracts] == [p for i, p in enumerate(pmids) if i != damaged]
    assert len(rejected) == 1 and not rejected[0].rest_skipped
    assert rejected[0].reason.startswith("malformed XML, the citation there was skipped and reading went on")
    # The reject points at the citation the error was in.
    start = [m.start() for m in re.finditer("<MedlineCitation ", text)][damaged]
    assert rejected[0].line == text[:start].count("\n") + 1


_BOMB_MB = 64


@pytest.fixture(scope="module")
def bombs(shared_data: Path, medline16: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real records around 64 MB that gzip packs into a few dozen KB: one line; a line of junk between two
    citations; a citation of 64 text nodes of 1 MB, each under libxml2's own limit of 10 MB. Written through
    gzip a MB at a time, so the test itself never holds them."""
    with (shared_data / "scifact" / "corpus.jsonl").open("rb") as corpus:
        first, second = corpus.readline(), corpus.readline()
    head, rest = _medline16_prefix(medline16, 1)
    citation_2 = rest[: rest.index("<MedlineCitation ", 1)]
    title = head.encode() + citation_2[: citation_2.index("<ArticleTitle>") + len("<ArticleTitle>")].encode()
    after_title = citation_2[citation_2.index("<ArticleTitle>") + len("<ArticleTitle>"):]
    citation_3 = rest[len(citation_2): rest.index("<MedlineCitation ", len(citation_2) + 1)]
    mb = 1 << 20
    parts = {
        "line.jsonl.gz": (first + b'{"doc_id": 1, "title": "', b"a" * mb, b'", "abstract": []}\n' + second),
        "junk.xml.gz": (head.encode(), b"x" * mb, f"\n{citation_2}</MedlineCitationSet>\n".encode()),
        "elements.xml.gz": (title, b"<i>" + b"a" * (mb - 7) + b"</i>",
                            f"{after_title}{citation_3}</MedlineCitationSet>\n".encode()),
    }
    folder = tmp_path_factory.mktemp("bombs")
    for name, (before, filler, after) in parts.items():
        with gzip.open(folder / name, "wb", compresslevel=9) as out:
            out.write(before)
            for _ in range(_BOMB_MB):
                out.write(filler)
            out.write(after)
    return {name: folder / name for name in parts}


@pytest.mark.parametrize(("name", "read", "line", "reason"), [
    ("line.jsonl.gz", [1, 3], 2, "record too large: a line of over 8,388,608 bytes"),
    ("junk.xml.gz", [5, 134], 133, "malformed XML, the XML there (outside any citation) was skipped and reading "
                                   "went on at line 134"),
    ("elements.xml.gz", [5, 295], 163, "record too large, the citation there was skipped and reading went on at "
                                       "line 295"),
])
def test_a_gzip_bomb_is_one_reject_read_in_bounded_memory(bombs: dict[str, Path], name: str, read: list[int],
                                                          line: int, reason: str) -> None:
    """The records around it come through; the line or element is read past in pieces, never held whole."""
    abstracts, rejected = split(read_records(bombs[name]))
    assert [a.line for a in abstracts] == read
    assert [(r.line, r.reason[: len(reason)], r.rest_skipped) for r in rejected] == [(line, reason, False)]
    count, grown_mb, _ = read_in_a_process(bombs[name])
    assert count == 3
    assert grown_mb < 60, f"memory grew by {grown_mb} MB reading {_BOMB_MB} MB of {name}"


def test_a_first_line_too_long_for_a_record_is_markup_or_refused(shared_data: Path, tmp_path: Path) -> None:
    """Telling the format reads one line, bounded like every other: markup on it is still XML (minified PubMed),
    anything else asks for --format, and read as the format given that line is one reject."""
    minified = tmp_path / "download.txt"
    minified.write_text(re.sub(r"\n\s*", " ", (shared_data / "pubmed" / "pubmed-29768149.xml").read_text()))
    assert [r.id for r in read_records(minified, max_record_bytes=100)] == ["29768149"]
    with (shared_data / "scifact" / "corpus.jsonl").open("rb") as corpus:
        real = [corpus.readline() for _ in range(2)]
    limit = max(map(len, real))
    first = json.dumps({"doc_id": 1, "title": "long", "abstract": ["x" * 100 * limit]}).encode() + b"\n"
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(first + b"".join(real))
    with pytest.raises(ReaderError, match=r"its first record is a line of over .* bytes; pass --format"):
        read_records(corpus, max_record_bytes=limit)
    abstracts, rejected = split(read_records(corpus, "scifact", max_record_bytes=limit))
    assert [a.line for a in abstracts] == [2, 3]
    assert [(r.line, r.reason.split(":")[0]) for r in rejected] == [(1, "record too large")]
