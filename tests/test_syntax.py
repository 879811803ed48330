"""PubMed's query syntax: the parser offline (golden trees and request clauses, properties over any string, one-line
errors), which real questions it leaves alone, and what a parsed query finds on the real node."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from running import serving
from test_service import call

from biorank.cli import cli
from biorank.evaluation.topics import read_queries
from biorank.retrieval.searcher import Searcher, SearchSettings
from biorank.retrieval.syntax import (
    MAX_EXPANSIONS,
    MAX_TERMS,
    MAX_TRUNCATIONS,
    QuerySyntaxError,
    has_syntax,
    parse,
    read,
)
from biorank.service.app import SearchService, ServiceSettings
from biorank.store.inspection import first_blocks

GOLDEN = json.loads((Path(__file__).parent / "data" / "pubmed_queries.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", GOLDEN, ids=[c["query"] for c in GOLDEN])
def test_golden_queries_parse_into_their_trees_and_clauses(case: dict) -> None:
    parsed = parse(case["query"])
    assert has_syntax(case["query"])
    assert parsed.describe() == case["tree"]
    assert parsed.free_text == case["free_text"]
    assert parsed.words == case["words"]
    assert list(parsed.notes) == case["notes"]
    assert json.dumps(parsed.filter_clause()) == json.dumps(case["filter"])
    assert json.dumps(list(parsed.lexical_clauses())) == json.dumps(case["lexical"])


def test_the_golden_set_is_large_and_covers_every_tag() -> None:
    assert len(GOLDEN) >= 30
    tags = {m for c in GOLDEN for m in re.findall(r"\b(\w+):", c["tree"])}
    assert {"tiab", "ti", "ab", "au", "mh", "majr", "ta", "pt", "dp", "pmid"} <= tags


def test_operators_read_left_to_right_and_tags_take_the_words_before_them() -> None:
    assert parse("a OR b AND c").describe() == parse("(a OR b) AND c").describe()
    assert parse("a OR b AND c").describe() != parse("a OR (b AND c)").describe()
    assert parse("smith j[au]").describe() == "au:smith j"
    assert parse("x AND smith j[au]").describe() == "AND(tiab:x, au:smith j)"
    # Lower-case operators are words; a word that starts with one is a word.
    assert parse("cancer and ANDROGEN[ti]").describe() == "AND(ti:cancer, ti:and, ti:ANDROGEN)"
    # Star alleles keep their star: only a trailing * truncates.
    assert parse("CYP2C19*2 AND warfarin").free_text == "CYP2C19*2 warfarin"


def test_clauses_never_carry_syntax_of_opensearch() -> None:
    text = json.dumps([c["filter"] for c in GOLDEN] + [c["lexical"] for c in GOLDEN])
    for forbidden in ("query_string", "simple_query_string", "script", "wildcard", "regexp", "fuzzy"):
        assert forbidden not in text
    # A user's Lucene syntax stays a value.
    clause = parse('title:x AND "a:(b OR c)"[ti] AND y').filter_clause()
    tree = clause["bool"]["filter"][1]
    assert {"match_phrase": {"title": {"query": "a:(b OR c)", "zero_terms_query": "all"}}} in tree["bool"]["filter"]


@pytest.mark.parametrize(("query", "problem"), [
    ("(a AND b", r"1 '\(' never closed .*column 1"),
    ("a AND", r"ends too early .*column 6"),
    ("a) OR b", r"'\)' without its '\(' at column 2"),
    ('"gestational diabetes AND x', r"quote opened at column 1 is never closed"),
    ("x[foo] AND y", r"unknown field tag \[foo\] at column 2"),
    ("AND a", r"operator AND has no term before it at column 1"),
    ("[ti]", r"field tag \[ti\] follows no term at column 1"),
    ("a [ti", r"'\[' never closed at column 3"),
    ("x AND ()", r"empty parentheses at column 8"),
    ("ab* AND x", r"3 characters before its \*"),
    ('"" AND x', r'empty phrase "" at column 1'),
    ("x AND 2015:2010[dp]", r"first year is after its last"),
    ("x AND spring[dp]", r"YEAR or FIRST:LAST"),
    ("(" * 17 + "a" + ")" * 17, r"nested more than 16 deep at column 17"),
])
def test_a_malformed_query_is_one_line_with_its_column(query: str, problem: str) -> None:
    with pytest.raises(QuerySyntaxError, match=problem) as raised:
        parse(query)
    assert "\n" not in str(raised.value)


def test_expansions_and_terms_are_bounded() -> None:
    with pytest.raises(QuerySyntaxError, match=f"{MAX_TRUNCATIONS} at most"):
        parse(" OR ".join(f"term{i}*" for i in range(MAX_TRUNCATIONS + 1)))
    with pytest.raises(QuerySyntaxError, match=f"{MAX_TERMS} at most"):
        parse(" OR ".join(f"t{i}" for i in range(MAX_TERMS + 1)))


_PIECES = st.sampled_from(["AND", "OR", "NOT", "(", ")", '"', "[", "]", "*", "[ti]", "[au]", "[dp]", "[pt]", "[xx]",
                           "2015:2020", "smith j", "cancer", "a", ":", " ", "\t", "é", "\\", "{", "}", "+", "-"])


def _walk(value: object) -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key, inner
            yield from _walk(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from _walk(inner)


def _check_any(query: str) -> None:
    try:
        parsed = parse(query)
    except QuerySyntaxError as e:
        assert "\n" not in str(e) and str(e).startswith("query syntax:")
        return
    clause = parsed.filter_clause()
    prefixes = [inner for key, inner in _walk(clause) if key == "prefix"]
    assert all(f"top_terms_{MAX_EXPANSIONS}" in json.dumps(p) for p in prefixes)
    assert len([t for t in parsed.terms() if t.kind == "prefix"]) <= MAX_TRUNCATIONS
    assert not {"query_string", "script", "wildcard", "regexp"} & {key for key, _ in _walk(clause)}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PIECES, max_size=30).map(" ".join))
def test_any_mix_of_syntax_parses_or_is_one_line(query: str) -> None:
    _check_any(query)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_string_parses_or_is_one_line(query: str) -> None:
    _check_any(query)


def test_no_development_question_is_read_as_syntax(shared_data: Path) -> None:
    """Claims and questions in plain words, quotes and parentheses included, are searched exactly as before."""
    questions = [*read_queries(shared_data / "scifact" / "claims_train.jsonl").values(),
                 *read_queries(shared_data / "nfcorpus" / "dev.titles.queries").values()]
    for path in sorted((shared_data / "bioasq").glob("Task*/*.json")):
        questions += [q["body"] for q in json.loads(path.read_text(encoding="utf-8"))["questions"]]
    assert len(questions) > 2000
    assert any('"' in q for q in questions) and any("(" in q for q in questions)
    read_as_syntax = [q for q in questions if read(q, "auto") is not None]
    assert read_as_syntax == []


# On the real node: the 604 MEDLINE citations --------------------------------------------------------------------
def _ids(searcher: Searcher, query: str, k: int = 604) -> list[str]:
    return [h.id for h in searcher.search(query, k)]


def test_a_parsed_query_finds_exactly_the_documents_its_tree_allows(opensearch, medline_index,
                                                                      default_encoder) -> None:
    searcher = Searcher.open(opensearch, medline_index, encoder=default_encoder)
    found = _ids(searcher, "cancer AND 2015[dp] NOT review[pt]")
    assert found
    stored = first_blocks(opensearch, medline_index, found, ("year", "abstract", "title", "publication_types"))
    for doc in found:
        fields = stored[doc]
        assert fields["year"] == 2015
        assert "cancer" in (fields.get("title", "") + " " + fields.get("abstract", "")).lower()
        assert "Review" not in (fields.get("publication_types") or [])
    # Every 2015 abstract with the word is found, whatever the dense leg thinks of it.
    everything = first_blocks(opensearch, medline_index, _ids(Searcher.open(
        opensearch, medline_index, SearchSettings(mode="bm25"), encoder=default_encoder), "cancer", 604),
        ("year", "publication_types"))
    expected = {d for d, f in everything.items() if f.get("year") == 2015
                and "Review" not in (f.get("publication_types") or [])}
    assert expected <= set(found)


def test_truncation_finds_the_stemmed_words_and_sends_the_analysis(opensearch, medline_index,
                                                                   default_encoder) -> None:
    searcher = Searcher.open(opensearch, medline_index, SearchSettings(mode="bm25"), encoder=default_encoder)
    truncated = set(_ids(searcher, "therap*[tiab]"))
    therapy, therapeutic = set(_ids(searcher, "therapy[tiab]")), set(_ids(searcher, "therapeutic[tiab]"))
    # English stems: "therapy" and "therapies" are "therapi", "therapeutic" is "therapeut"; the prefix takes both.
    assert therapy and therapeutic - therapy and truncated >= therapy | therapeutic
    sent = searcher.sent_requests("biguanide* AND insulin", 10)
    assert sent[0][0].endswith("/_analyze") and sent[0][1] == {"field": "text", "text": "biguanide"}
    assert '"prefix": {"text": {"value": "biguanid"' in json.dumps(sent[1][1])


def test_an_all_tagged_query_runs_lexical_only_and_a_tag_without_values_is_one_line(
        opensearch, medline_index, sample_index, default_encoder) -> None:
    searcher = Searcher.open(opensearch, medline_index, encoder=default_encoder)
    parsed = searcher.parse("insulin[ti]")
    assert parsed is not None and parsed.notes
    hits = searcher.search("insulin[ti]", 50)
    assert hits and all(h.dense is None and "insulin" in h.title.lower() for h in hits)
    beir = Searcher.open(opensearch, sample_index, encoder=default_encoder)
    with pytest.raises(QuerySyntaxError, match=r"holds no MeSH headings, so \[mh\] cannot"):
        beir.search("asthma[mh]")
    with pytest.raises(QuerySyntaxError, match=r"holds no publication dates, so \[dp\] cannot"):
        beir.search("asthma AND 2015:2020[dp]")


def test_syntax_plain_sends_todays_requests(opensearch, medline_index, default_encoder) -> None:
    """A query with syntax under ``plain`` is text, exactly as before the parser; parsed, its tags never reach the
    request as text."""
    query = "metformin[tiab] AND pregnancy"
    plain = Searcher.open(opensearch, medline_index, SearchSettings(syntax="plain", lam=0.01), encoder=default_encoder)
    sent = plain.sent_requests(query, 5)
    assert len(sent) == 1 and json.dumps(sent[0][1]).count(json.dumps(query)) == 1
    parsed = plain.with_settings(syntax="auto").sent_requests(query, 5)
    assert len(parsed) == 1 and "[tiab]" not in json.dumps(parsed[0][1])
    assert '"passage": "metformin pregnancy"' in json.dumps(parsed[0][1])


def test_the_cli_prints_the_tree_and_refuses_a_malformed_query_in_one_line(opensearch_url, medline_index) -> None:
    runner = CliRunner()
    base = ["--url", opensearch_url, "query", "--index", medline_index, "--no-log", "--mode", "bm25"]
    shown = runner.invoke(cli, [*base, "cataract[ti] AND 2014:2015[dp]", "--show-query", "-k", "3"],
                          terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "# parsed as PubMed syntax: AND(ti:cataract, dp:2014:2015)" in shown.output
    assert "note: the query has no untagged terms" in shown.output
    refused = runner.invoke(cli, [*base, "(cataract AND surgery"])
    assert refused.exit_code != 0 and "column 1" in refused.output and "Traceback" not in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    plain = runner.invoke(cli, [*base, "cataract[ti] AND 2014:2015[dp]", "--syntax", "plain", "--show-query"])
    assert plain.exit_code == 0 and "parsed as PubMed syntax" not in plain.output


def test_the_api_parses_says_so_and_answers_a_malformed_query_with_400(opensearch, medline_index,
                                                                        default_encoder) -> None:
    service = SearchService(opensearch, ServiceSettings(index=medline_index, query_log=False),
                            query_log_index="unused",
                            searcher=Searcher.open(opensearch, medline_index, encoder=default_encoder))
    with serving(service) as url:
        status, answer = call(f"{url}/api/search", {"q": "cataract AND 2014:2015[dp]", "k": 20, "facets": False})
        assert status == 200, answer
        assert answer["parsed"] == "AND(tiab:cataract, dp:2014:2015)" and answer["hits"]
        assert all(h["year"] in (2014, 2015) for h in answer["hits"])
        status, plain = call(f"{url}/api/search", {"q": "cataract AND 2014:2015[dp]", "syntax": "plain",
                                                   "facets": False})
        assert status == 200 and "parsed" not in plain
        status, refused = call(f"{url}/api/search", {"q": "cataract[xx] AND lens", "facets": False})
        assert status == 400 and "unknown field tag [xx] at column 9" in refused["error"]
        # A bracket that names no tag is text, unless the query has syntax otherwise ("[18F]FDG uptake").
        status, text = call(f"{url}/api/search", {"q": "[18F]FDG uptake", "facets": False})
        assert status == 200 and "parsed" not in text
        # The page reads the same syntax, shows how it read it, and the same one line for a malformed query.
        status, page = call(f"{url}/?" + urllib.parse.urlencode({"q": "cataract AND 2014:2015[dp]"}))
        assert status == 200 and "read as PubMed syntax: <code>AND(tiab:cataract, dp:2014:2015)</code>" in page
        status, page = call(f"{url}/?" + urllib.parse.urlencode({"q": "cataract[xx] AND lens"}))
        assert status == 400 and "unknown field tag [xx] at column 9" in page
