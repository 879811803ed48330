"""Highlights that read: whole terms as the analyser matched them, and a one- or two-character term only in a
phrase with its neighbour in the query — on real SciFact abstracts, where "vitamin D" meets "microg/d"."""

from __future__ import annotations

import itertools
import re

import pytest
from opensearchpy import OpenSearch

from biorank.errors import BiorankError
from biorank.pipeline import Pipeline
from biorank.retrieval.searcher import Searcher
from biorank.stages.marks import readable, tagged_spans, titles_and_fields
from biorank.stages.snippets import sentences_request
from biorank.store.inspection import first_blocks
from biorank.types import Hit

MICROGRAMS = "12810152"
"""Folate and vitamin B6 intake: doses in "microg/d" and "mg/d"."""
RECEPTOR = "3701541"
"""p62/SQSTM1 by Binding to Vitamin D Receptor ...: "Vitamin D" in the title and the abstract."""


def _marked(text: str, spans) -> list[str]:
    return [text[b:e] for b, e in spans]


@pytest.mark.parametrize(("text", "query", "kept"), [
    ("Vitamin D 10 microg/d", "vitamin D", ["Vitamin", "D"]),
    ("25(OH)D and vitamins D", "vitamin D levels", ["vitamins", "D"]),
    ("IL-6 rose; 6 of 9 had IL-6R", "IL-6 in sepsis", ["IL", "6"]),
    ("calcium D and vitamin", "vitamin D", ["vitamin"]),
])
def test_short_terms_are_marked_only_beside_their_query_neighbour(text, query, kept) -> None:
    # Every word of the text that a query word could match is tagged, as a highlighter would tag it.
    words = {w.lower() for w in query.replace("-", " ").split()}
    tagged = [(m.start(), m.end()) for m in re.finditer(r"\w+", text)
              if m.group().lower() in words or (m.group().lower().startswith("vitamin") and "vitamin" in words)]
    assert _marked(text, readable(tagged, text, query)) == kept


def test_snippets_mark_vitamin_d_but_never_the_d_of_microg_per_day(opensearch: OpenSearch, sample_index: str,
                                                                    default_encoder) -> None:
    searcher = Searcher.open(opensearch, sample_index, encoder=default_encoder)
    snippets = Pipeline.build("hybrid+snippets-lexical", searcher, highlight=True).snippets
    hits = [Hit(MICROGRAMS, "", 1, 1.0), Hit(RECEPTOR, "", 2, 0.5)]
    found = snippets.candidates_many({"q": "vitamin D"}, {"q": hits}, perspectives=(), highlight=True)["q"]
    by_doc = {doc: [(s.text, m) for s, m in zip(found.sentences, found.matches, strict=True) if s.doc_id == doc]
              for doc in (MICROGRAMS, RECEPTOR)}
    doses = [(text, m) for text, m in by_doc[MICROGRAMS] if "microg/d" in text]
    assert doses, "the abstract's doses are gone from the sample"
    for text, matches in doses:
        assert all(text[b:e].lower() != "d" for b, e in matches), _marked(text, matches)
    # Its title's "vitamin B6" is still marked, whole.
    assert any("vitamin" in _marked(text, m) for text, m in by_doc[MICROGRAMS])
    phrases = [_marked(text, m) for text, m in by_doc[RECEPTOR] if "Vitamin D" in text]
    assert phrases and all(("Vitamin", "D") in itertools.pairwise(p) for p in phrases), phrases
    # What OpenSearch's highlighter itself tagged: the stray "d"s the rule takes out.
    raw = opensearch.search(index=searcher.record.sentences_index,
                            body=sentences_request("vitamin D", [MICROGRAMS], highlight=True))["hits"]["hits"]
    tagged = [_marked(h["_source"]["text"], tagged_spans(h["highlight"]["text"][0], h["_source"]["text"]))
              for h in raw if "highlight" in h and "microg/d" in h["_source"]["text"]]
    assert any("d" in marks for marks in tagged), "the highlighter no longer tags a lone d: the rule is moot"


def test_titles_are_marked_by_the_same_rule(opensearch: OpenSearch, sample_index: str) -> None:
    fields = ("title", "abstract")
    found = titles_and_fields(opensearch, sample_index, "vitamin D receptor", [RECEPTOR, MICROGRAMS, "no-such-doc"],
                              fields, refused=BiorankError)
    titles = {doc_id: spans for doc_id, (_, spans) in found.items()}
    title = opensearch.get(index=sample_index, id=RECEPTOR)["_source"]["title"]
    assert _marked(title, titles[RECEPTOR]) == ["Vitamin", "D", "Receptor"]
    folate = opensearch.get(index=sample_index, id=MICROGRAMS)["_source"]["title"]
    assert _marked(folate, titles[MICROGRAMS]) == ["vitamin"]
    assert titles_and_fields(opensearch, sample_index, "D", [RECEPTOR], (), refused=BiorankError)[RECEPTOR][1] == ()
    # The results page reads the marks and the stored fields in one search: the fields as a read of them alone.
    alone = first_blocks(opensearch, sample_index, [RECEPTOR, MICROGRAMS, "no-such-doc"], fields)
    assert {doc_id: stored for doc_id, (stored, _) in found.items()} == alone
