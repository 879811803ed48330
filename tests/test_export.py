"""Exports: RIS, BibTeX, CSV, TREC, PMIDs and JSON Lines checked against their specifications' rules (RIS: the
RIS Format Specifications of Research Information Systems; CSV: RFC 4180), for any text an index may hold, and
end to end on the real MEDLINE index: the CLI's `query --format` and `search --format`, the API's downloads and
the page's links."""

from __future__ import annotations

import csv
import io
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from opensearchpy import OpenSearch
from running import serving

from biorank.cli import cli
from biorank.evaluation.runs import write_trec
from biorank.export import (
    CSV_COLUMNS,
    ExportError,
    check_format,
    one_line,
    render,
    split_name,
    tex_escape,
    to_bibtex,
    to_csv,
    to_ris,
)
from biorank.indexer.readers import read_records
from biorank.pipeline import Pipeline
from biorank.retrieval.searcher import Searcher, SearchSettings
from biorank.service.app import SearchService, ServiceSettings
from biorank.service.downloads import file_name
from biorank.types import Abstract, Hit

# --- the specifications' rules ------------------------------------------------------------------------------
RIS_LINE = re.compile(r"^([A-Z][A-Z0-9])  - (.*)$")
"""Tag: an uppercase letter, an uppercase letter or digit, two spaces, a dash, a space; then the value."""
NO_ASTERISK = {"AU", "A1", "A2", "KW", "T2", "JO", "JA", "JF", "J1", "J2"}
"""Author, keyword and periodical name fields: the specification allows no asterisk in them."""


def ris_records(text: str) -> list[list[tuple[str, str]]]:
    """The references of an RIS file, each a list of (tag, value), after checking every rule the specification
    gives: CR LF after every line, every line a tag, TY first and ER (empty) last, nothing between references,
    reference ids of 0-9 and A-Z (20 at most), values of printable characters, no asterisk where it is refused."""
    assert text.endswith("\r\n") and "\n" not in text.replace("\r\n", "") and "\r" not in text.replace("\r\n", "")
    records: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] | None = None
    for line in text.split("\r\n")[:-1]:
        match = RIS_LINE.match(line)
        assert match, repr(line)
        tag, value = match.groups()
        assert not re.search(r"[\x00-\x1f\x7f]", value), repr(value)
        if current is None:
            assert (tag, value) == ("TY", "JOUR"), "every reference begins with TY"
            current = [(tag, value)]
        elif tag == "ER":
            assert value == "", "ER has no value"
            records.append([*current, (tag, value)])
            current = None
        else:
            assert tag != "TY", "a reference ends with ER before the next begins"
            current.append((tag, value))
        if tag == "ID":
            assert re.fullmatch(r"[0-9A-Z]{1,20}", value), value
        if tag in NO_ASTERISK:
            assert "*" not in value
    assert current is None, "the last reference ends with ER"
    return records


def ris_values(record: list[tuple[str, str]], tag: str) -> list[str]:
    return [value for t, value in record if t == tag]


_TEX_UNESCAPE = re.compile(r"\\textbackslash\{\}|\\textasciitilde\{\}|\\textasciicircum\{\}|\\([{}%&#$_])")


def tex_unescape(text: str) -> str:
    named = {r"\textbackslash{}": "\\", r"\textasciitilde{}": "~", r"\textasciicircum{}": "^"}
    return _TEX_UNESCAPE.sub(lambda m: m[1] if m[1] else named[m[0]], text)


def bibtex_entries(text: str) -> list[tuple[str, dict[str, str]]]:
    """(key, fields) of each ``@article``, after checking that every field's value is brace-balanced (escaped
    braces aside) and has none of TeX's special characters unescaped, outside the verbatim doi and url."""
    entries = []
    for match in re.finditer(r"@article\{([^,\s]+),\n((?:  [a-z]+ = \{.*\},\n)*)\}\n", text):
        fields = {}
        for line in match[2].splitlines():
            name, value = re.fullmatch(r"  ([a-z]+) = \{(.*)\},", line).groups()
            bare = re.sub(r"\\[{}]", "", value)
            depth = 0
            for char in bare:
                depth += {"{": 1, "}": -1}.get(char, 0)
                assert depth >= 0, (name, value)
            assert depth == 0, (name, value)
            if name in ("doi", "url"):
                assert not re.search(r"[{}\\\s]", value) and not re.search(r"%(?![0-9A-F]{2})", value), value
            else:
                unescaped = re.sub(r"\\(?:[{}%&#$_]|textbackslash\{\}|textasciitilde\{\}|textasciicircum\{\})", "",
                                   value)
                assert not re.search(r"[\\%&#$_~^]", unescaped), (name, value)
            fields[name] = value
        entries.append((match[1], fields))
    assert "".join(m[0] for m in re.finditer(r"@article\{.*?\n\}\n", text, re.S)) == text.replace("}\n\n@", "}\n@")
    return entries


texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)
rows = st.lists(st.fixed_dictionaries({
    "id": st.one_of(st.from_regex(r"\d{1,9}", fullmatch=True), texts.filter(one_line)),
    "rank": st.integers(1, 1000), "score": st.floats(-50, 50),
    "title": texts, "abstract": texts, "authors": st.lists(texts, max_size=4), "journal": texts,
    "journal_abbrev": texts, "year": st.integers(1800, 2100), "doi": texts, "mesh": st.lists(texts, max_size=3),
}), min_size=1, max_size=5)


@settings(max_examples=150, deadline=None, database=None)
@given(rows)
def test_ris_keeps_the_specifications_rules_for_any_text(given_rows: list[dict[str, Any]]) -> None:
    records = ris_records(to_ris(given_rows))
    assert len(records) == len(given_rows)
    for row, record in zip(given_rows, records, strict=True):
        assert ris_values(record, "TI") == ([one_line(row["title"])] if one_line(row["title"]) else [])
        assert ris_values(record, "AN") == [one_line(row["id"])]
        assert len(ris_values(record, "AU")) == sum(bool(one_line(a.replace("*", ""))) for a in row["authors"])
        assert ris_values(record, "PY") == [str(row["year"])]


@settings(max_examples=150, deadline=None, database=None)
@given(rows)
def test_bibtex_escapes_any_text_and_keys_are_unique_and_safe(given_rows: list[dict[str, Any]]) -> None:
    entries = bibtex_entries(to_bibtex(given_rows))
    assert len(entries) == len(given_rows)
    keys = [key for key, _ in entries]
    assert len(set(keys)) == len(keys) and all(re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", k) for k in keys)
    for row, (_, fields) in zip(given_rows, entries, strict=True):
        if one_line(row["title"]):
            assert tex_unescape(fields["title"][1:-1]) == one_line(row["title"])
        if one_line(row["abstract"]):
            assert tex_unescape(fields["abstract"]) == one_line(row["abstract"])


@settings(max_examples=150, deadline=None, database=None)
@given(rows)
def test_csv_reads_back_as_written_and_never_starts_a_formula(given_rows: list[dict[str, Any]]) -> None:
    text = to_csv(given_rows)
    assert text.endswith("\r\n")
    header, *lines = list(csv.reader(io.StringIO(text, newline="")))
    assert header[:3] == ["rank", "id", "score"] and set(header) <= set(CSV_COLUMNS) and len(lines) == len(given_rows)
    for row, line in zip(given_rows, lines, strict=True):
        cells = dict(zip(header, line, strict=True))
        assert (int(cells["rank"]), float(cells["score"])) == (row["rank"], row["score"])  # numbers stay numbers
        for name in ("title", "abstract", "journal"):
            if name in cells:
                expected = one_line(row[name])
                assert cells[name] == ("'" + expected if expected[:1] in ("=", "+", "-", "@") else expected)
        for name in ("id", "title", "abstract", "journal", "journal_abbrev", "doi", "authors", "mesh"):
            assert cells.get(name, "")[:1] not in ("=", "+", "-", "@"), (name, cells[name])


def test_formula_cells_and_the_columns_a_beir_index_lacks() -> None:
    text = to_csv([{"rank": 1, "id": "d1", "score": -0.25, "title": "=HYPERLINK(\"http://x\",\"y\")"},
                   {"rank": 2, "id": "-2", "score": 0.5, "title": "+1, \"quoted\"", "abstract": "@SUM(A1)"}])
    assert text.split("\r\n")[0] == "rank,id,score,title,abstract", "no author, journal or DOI column"
    _header, first, second = list(csv.reader(io.StringIO(text, newline="")))
    assert first == ["1", "d1", "-0.25", "'=HYPERLINK(\"http://x\",\"y\")", ""]
    assert second == ["2", "'-2", "0.5", "'+1, \"quoted\"", "'@SUM(A1)"]
    assert '"\'+1, ""quoted"""' in text, "RFC 4180: a field with a comma or quote in quotes, its quotes doubled"


def test_names_bibtex_keys_and_verbatim_links() -> None:
    assert split_name("van der Berg JA") == ("van der Berg", ("J", "A"))
    assert split_name("Writing Group for the WHI") is None and split_name("Ma") is None
    medline = {"id": "17942999", "journal": "J", "title": "A_b", "doi": "10.1002/(SICI)1097_x{y}", "authors": [
        "Smith JA", "Movement Disorder Group", "Study Group on Kids ABC"]}
    text = to_bibtex([medline, {**medline}, {"id": "a b", "title": "t"}, {"id": "a_b", "title": "t"}])
    entries = bibtex_entries(text)
    assert [key for key, _ in entries] == ["pmid17942999", "pmid17942999_2", "doc_a_b", "doc_a_b_2"]
    fields = entries[0][1]
    assert fields["author"] == "Smith, J. A. and {Movement Disorder Group} and {Study Group on Kids ABC}"
    assert fields["title"] == r"{A\_b}" and fields["doi"] == "10.1002/(SICI)1097_x%7By%7D"
    assert fields["url"] == "https://pubmed.ncbi.nlm.nih.gov/17942999/" and fields["pmid"] == "17942999"
    assert tex_escape("a\\b") == r"a\textbackslash{}b"


def test_trec_pmids_and_json_lines() -> None:
    hits = {"q1": [Hit("17942999", "t", 1, 2.5), Hit("18621939", "u", 2, 1.0)], "q2": [Hit("17942999", "t", 1, 3.0)]}
    made = [{"query_id": q, **h.to_dict()} for q, ranked in hits.items() for h in ranked]
    assert render("pmids", made) == "17942999\n18621939\n"
    assert [json.loads(line)["query_id"] for line in render("json", made).splitlines()] == ["q1", "q1", "q2"]
    with pytest.raises(ExportError, match="choose one of json, csv"):
        check_format("docx")
    assert file_name("a/b\r\nContent-Type: x", "ris") == "biorank-a-b-Content-Type-x.ris"


def test_trec_lines_are_write_trecs(tmp_path: Path) -> None:
    hits = {"q1": [Hit("17942999", "t", 1, 2.5), Hit("18621939", "u", 2, -1.0 / 3)]}
    write_trec(tmp_path / "run.txt", hits, tag="biorank-bm25")
    made = [{"query_id": q, **h.to_dict()} for q, ranked in hits.items() for h in ranked]
    assert render("trec", made, tag="biorank-bm25") == (tmp_path / "run.txt").read_text()


# --- on the real MEDLINE index ------------------------------------------------------------------------------
QUERY = "cataract surgery visual acuity"


@pytest.fixture(scope="module")
def medline16(shared_data: Path) -> dict[str, Abstract]:
    records = read_records(shared_data / "pubmed" / "medline16n0902.xml.gz")
    return {r.id: r for r in records if isinstance(r, Abstract)}


def _cli(opensearch_url: str, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--url", opensearch_url, *args])
    assert result.exit_code == 0, result.output
    return result.stdout_bytes.decode()  # as printed: Result.stdout turns CR LF into LF


def test_query_formats_from_the_cli(opensearch_url: str, medline_index: str,
                                    medline16: dict[str, Abstract]) -> None:
    base = ["query", QUERY, "--index", medline_index, "--mode", "bm25", "-k", "5", "--no-log"]
    as_json = _cli(opensearch_url, *base, "--json")
    assert as_json == _cli(opensearch_url, *base, "--format", "json"), "--json is --format json"
    ids = [json.loads(line)["id"] for line in as_json.splitlines()]
    assert len(ids) == 5

    records = ris_records(_cli(opensearch_url, *base, "--format", "ris"))
    assert [ris_values(r, "AN") for r in records] == [[i] for i in ids]
    for record, doc_id in zip(records, ids, strict=True):
        cited = medline16[doc_id]
        assert [_as_stored(a) for a in ris_values(record, "AU")] == list(cited.authors)
        assert ris_values(record, "T2") == [cited.journal] and ris_values(record, "JA") == [cited.journal_abbrev]
        assert ris_values(record, "PY") == [str(cited.year)] and ris_values(record, "DO") == (
            [cited.doi] if cited.doi else [])
        assert ris_values(record, "UR") == [f"https://pubmed.ncbi.nlm.nih.gov/{doc_id}/"]

    entries = bibtex_entries(_cli(opensearch_url, *base, "--format", "bibtex"))
    assert [key for key, _ in entries] == [f"pmid{i}" for i in ids]
    table = list(csv.reader(io.StringIO(_cli(opensearch_url, *base, "--format", "csv"), newline="")))
    assert table[0][:3] == ["rank", "id", "score"] and {"authors", "journal", "year"} <= set(table[0])
    assert [line[1] for line in table[1:]] == ids
    assert _cli(opensearch_url, *base, "--format", "pmids") == "".join(f"{i}\n" for i in ids)
    trec = _cli(opensearch_url, *base, "--format", "trec").splitlines()
    assert [line.split()[2] for line in trec] == ids and all(line.endswith(" biorank-bm25") for line in trec)
    refused = CliRunner().invoke(cli, ["--url", opensearch_url, *base, "--json", "--format", "ris"])
    assert refused.exit_code == 2 and "not both" in refused.output


def test_search_writes_trec_as_before_and_any_other_format(opensearch: OpenSearch, opensearch_url: str,
                                                          medline_index: str, tmp_path: Path) -> None:
    queries = {"c1": QUERY, "c2": "pitch perception in tone languages", "c3": "cataract surgery outcomes"}
    topics = tmp_path / "queries.tsv"
    topics.write_text("".join(f"{q}\t{t}\n" for q, t in queries.items()), encoding="utf-8")
    base = ["search", "--queries", str(topics), "--index", medline_index, "--mode", "bm25", "-k", "4", "--no-log"]
    _cli(opensearch_url, *base, "--output", str(tmp_path / "default.txt"))
    _cli(opensearch_url, *base, "--output", str(tmp_path / "trec.txt"), "--format", "trec")
    searcher = Searcher.open(opensearch, medline_index, SearchSettings(mode="bm25"))
    answers = Pipeline.build("bm25", searcher).run(queries, 4)
    write_trec(tmp_path / "direct.txt", {q: a.hits for q, a in answers.items()}, tag="biorank-bm25")
    direct = (tmp_path / "direct.txt").read_bytes()
    assert (tmp_path / "default.txt").read_bytes() == (tmp_path / "trec.txt").read_bytes() == direct

    found = [h.id for a in answers.values() for h in a.hits]
    distinct = list(dict.fromkeys(found))
    for fmt in ("ris", "bibtex", "csv", "pmids", "json"):
        _cli(opensearch_url, *base, "--output", str(tmp_path / f"out.{fmt}"), "--format", fmt)
    records = ris_records((tmp_path / "out.ris").read_bytes().decode())
    assert [ris_values(r, "AN")[0] for r in records] == distinct, "each document once, where it first came"
    assert len(bibtex_entries((tmp_path / "out.bibtex").read_text())) == len(distinct)
    assert (tmp_path / "out.pmids").read_text().split() == distinct
    table = list(csv.reader(io.StringIO((tmp_path / "out.csv").read_bytes().decode(), newline="")))
    assert table[0][:4] == ["query_id", "rank", "id", "score"] and [r[2] for r in table[1:]] == found
    lines = [json.loads(line) for line in (tmp_path / "out.json").read_text().splitlines()]
    assert [(r["query_id"], r["id"]) for r in lines] == [(q, h.id) for q, a in answers.items() for h in a.hits]
    assert all(r["journal_abbrev"] and r["year"] for r in lines) and sum("authors" in r for r in lines) >= len(
        lines) - 1, "one citation of this file has no authors"


def _as_stored(ris_author: str) -> str:
    """"Smith, J.A." as the index stores it ("Smith JA"); a group's name as it is."""
    last, _, initials = ris_author.partition(", ")
    return f"{last} {initials.replace('.', '')}" if initials else last


def _get(url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers.items()), e.read()


@pytest.fixture(scope="module")
def medline_service(opensearch: OpenSearch, medline_index: str, default_encoder) -> Iterator[str]:
    service = SearchService(opensearch, ServiceSettings(index=medline_index, query_log=False),
                            query_log_index="unused",
                            searcher=Searcher.open(opensearch, medline_index, encoder=default_encoder))
    with serving(service) as url:
        yield url


def test_the_api_answers_json_by_default_and_files_when_asked(medline_service: str) -> None:
    url = medline_service
    status, _, body = _get(f"{url}/api/search", {"q": QUERY, "mode": "bm25", "k": 5})
    answer = json.loads(body)
    assert status == 200 and answer["query"] == QUERY and len(answer["hits"]) == 5
    ids = [h["id"] for h in answer["hits"]]
    expected = {"ris": "application/x-research-info-systems", "bibtex": "application/x-bibtex", "csv": "text/csv",
                "trec": "text/plain", "pmids": "text/plain"}
    for fmt, media in expected.items():
        status, headers, body = _get(f"{url}/api/search", {"q": QUERY, "mode": "bm25", "k": 5, "format": fmt})
        assert status == 200 and headers["content-type"] == f"{media}; charset=utf-8", (fmt, headers)
        assert re.fullmatch(r'attachment; filename="biorank-cataract-surgery-visual-acuity\.[a-z.]+"',
                            headers["content-disposition"])
        assert headers["x-content-type-options"] == "nosniff"
        if fmt == "ris":
            assert [ris_values(r, "AN")[0] for r in ris_records(body.decode())] == ids
        if fmt == "pmids":
            assert body.decode().split() == ids
    status, _, body = _get(f"{url}/api/search", {"q": QUERY, "format": "docx"})
    assert status == 422 and "format" in json.loads(body)["error"]
    spec = json.loads(_get(f"{url}/openapi.json")[2])
    content = spec["paths"]["/api/search"]["post"]["responses"]["200"]["content"]
    assert {"application/json", *expected.values()} <= content.keys()
    assert "format" in json.dumps(spec["components"]["schemas"]["SearchRequest"])


def test_the_page_links_each_format_and_a_link_downloads_it(medline_service: str) -> None:
    url = medline_service
    status, _, page = _get(f"{url}/?q=cataract+surgery&mode=bm25&year=2014-2015")
    assert status == 200
    links = dict((html_unescape(label), html_unescape(href)) for href, label in
                 re.findall(r'<a href="(/export\?[^"]+)">([^<]+)</a>', page.decode()))
    assert list(links) == ["RIS", "BibTeX", "CSV", "PMIDs", "JSON Lines", "TREC run"]
    assert "year=2014-2015" in links["RIS"] and links["RIS"].endswith("&page=1&format=ris")
    status, headers, body = _get(url + links["RIS"])
    assert status == 200 and headers["content-type"].startswith("application/x-research-info-systems")
    records = ris_records(body.decode())
    assert len(records) == page.decode().count('<li class="hit">') and all(
        ris_values(r, "PY")[0] in ("2014", "2015") for r in records)
    status, _, error = _get(f"{url}/export?q=&format=ris")
    assert status == 422 and b'role="alert"' in error


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_downloads_keep_the_api_key_rule(opensearch: OpenSearch, medline_index: str, default_encoder) -> None:
    service = SearchService(opensearch, ServiceSettings(index=medline_index, api_key="s3cret", query_log=False),
                            query_log_index="unused",
                            searcher=Searcher.open(opensearch, medline_index, encoder=default_encoder))
    with serving(service) as url:
        assert _get(f"{url}/export?q=cataract&mode=bm25&format=ris")[0] == 401
        assert _get(f"{url}/api/search", {"q": "cataract", "mode": "bm25", "format": "ris"})[0] == 401
        status, _, page = _get(f"{url}/?q=cataract&mode=bm25&key=s3cret")
        ris = [html_unescape(h) for h in re.findall(r'<a href="(/export\?[^"]+format=ris[^"]*)"', page.decode())]
        assert status == 200 and len(ris) == 1 and ris[0].endswith("&format=ris&key=s3cret")
        status, _, body = _get(url + ris[0])
        assert status == 200 and ris_records(body.decode())
