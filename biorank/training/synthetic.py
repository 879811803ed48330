"""Synthetic question-passage pairs made from the collection itself, with no generator model to download.

Ma et al. mix synthetic pairs (20% of each batch) into the dense encoder's supervised training. Theirs come
from a question-generation model; these come from the abstracts alone:

- the inverse cloze task (Lee et al., ICT): one sentence of an abstract is the pseudo-question, and the title
  with the sentences around it, *without* it, is its passage, so the encoder must find the context a
  sentence belongs to rather than the sentence itself;
- title → abstract: the title is the question and the abstract without the title the passage.

A pair never has a passage that still contains its question: the ICT sentence is removed with every copy of
it, and a pair whose question is still found in its passage (a sentence repeated inside another, a title
quoted in the abstract) is dropped. A generator is anything with a ``kind`` and a ``__call__(document, rng)``,
so a question-generation model, where one is available locally, can be added beside these two.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from biorank.indexer.readers import read_records
from biorank.indexer.sentences import split_sentences
from biorank.store.indices import entries_in_order
from biorank.store.record import check_record
from biorank.types import Abstract

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

MIN_QUESTION_WORDS = 5
"""Shorter sentences ("Results were mixed.") say too little to find their context by."""
MAX_SAMPLE = 10_000
"""OpenSearch returns at most this many hits per request (index.max_result_window)."""

Counter = Callable[[Sequence[str]], list[int]]
"""Word pieces per text, as the encoder splits them."""


@dataclass(frozen=True, slots=True)
class SourceDocument:
    """A document as the synthetic generators read it: title and abstract sentences, in order."""

    id: str
    title: str
    sentences: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SyntheticPair:
    question: str
    passage: str
    doc_id: str
    kind: str


class PairGenerator(Protocol):
    kind: str

    def __call__(self, document: SourceDocument, rng: random.Random) -> SyntheticPair | None: ...


def contains(passage: str, question: str) -> bool:
    """Whether ``question`` occurs in ``passage``, ignoring case and differences of white space."""
    return _normal(question) in _normal(passage)


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


class InverseCloze:
    """A sentence of the abstract as the question; the title and its neighbours, without it, as the passage.

    With ``count`` and ``budget``, the neighbours are taken nearest first while the passage stays within
    ``budget`` word pieces, as an indexed block does: an abstract longer than the encoder's window would
    otherwise lose the sentences around the question to truncation.
    """

    kind = "ict"

    def __init__(self, count: Counter | None = None, budget: int | None = None) -> None:
        self._count = count
        self._budget = budget

    def __call__(self, document: SourceDocument, rng: random.Random) -> SyntheticPair | None:
        sentences = document.sentences
        candidates = [i for i, s in enumerate(sentences) if len(s.split()) >= MIN_QUESTION_WORDS]
        if len(sentences) < 2 or not candidates:
            return None
        chosen = rng.choice(candidates)
        question = sentences[chosen]
        # Every copy of the question goes, not only the chosen one.
        others = [i for i, s in enumerate(sentences) if _normal(s) != _normal(question)]
        title = document.title.strip()
        context = self._window(title, sentences, others, chosen)
        if not context:
            return None
        passage = " ".join([title, *(sentences[i] for i in context)]).strip()
        if contains(passage, question):
            return None
        return SyntheticPair(question, passage, document.id, self.kind)

    def _window(self, title: str, sentences: Sequence[str], others: list[int], chosen: int) -> list[int]:
        if self._count is None or self._budget is None:
            return others
        pieces = dict(zip([-1, *others], self._count([title, *(sentences[i] for i in others)]), strict=True))
        room = self._budget - pieces[-1]
        before = [i for i in reversed(others) if i < chosen]
        after = [i for i in others if i > chosen]
        taken: list[int] = []
        used = 0
        while before or after:
            # Nearest first, alternating sides; a side whose next sentence does not fit is closed.
            for side in (after, before):
                if side and used + pieces[side[0]] <= room:
                    used += pieces[side[0]]
                    taken.append(side.pop(0))
                elif side:
                    side.clear()
        if not taken:
            # Even the nearest sentence is longer than the room: it is the passage, cut by the encoder.
            taken = [min(others, key=lambda i: abs(i - chosen))]
        return sorted(taken)


class TitleAbstract:
    """The title as the question, the abstract (without the title) as the passage."""

    kind = "title"

    def __call__(self, document: SourceDocument, rng: random.Random) -> SyntheticPair | None:
        title = document.title.strip()
        passage = " ".join(document.sentences).strip()
        if len(title.split()) < 3 or not passage or contains(passage, title):
            return None
        return SyntheticPair(title, passage, document.id, self.kind)


KINDS = ("ict", "title")


def generators(kinds: Sequence[str], *, count: Counter | None = None,
               budget: int | None = None) -> list[PairGenerator]:
    """The generators named by ``kinds`` (``ict``, ``title``), in that order."""
    made: dict[str, PairGenerator] = {"ict": InverseCloze(count, budget), "title": TitleAbstract()}
    unknown = [k for k in kinds if k not in made]
    if unknown:
        raise ValueError(f"unknown synthetic pair kinds {unknown}; known: {', '.join(KINDS)}")
    return [made[k] for k in kinds]


def make_pairs(documents: Iterable[SourceDocument], makers: Sequence[PairGenerator], *,
               seed: int = 0) -> Iterator[SyntheticPair]:
    """One pair per document, the kinds taking turns; a document a kind cannot use is offered to the next.

    Deterministic for a seed: each document has its own random stream.
    """
    for n, document in enumerate(documents):
        rng = random.Random(f"{seed}:{document.id}")
        for turn in range(len(makers)):
            pair = makers[(n + turn) % len(makers)](document, rng)
            if pair is not None:
                yield pair
                break


def corpus_documents(path: str | Path, *, format: str = "auto",
                     exclude: Collection[str] = ()) -> Iterator[SourceDocument]:
    """The documents of a corpus file (any format ``biorank index`` reads) as the generators read them, without
    an index: for pairs from every abstract at hand, before any judgement.

    Args:
        path: the corpus file (SciFact ``corpus.jsonl``, PubMed XML, BEIR, NFCorpus ``.docs``, ...).
        format: its format, or ``auto``.
        exclude: ids left out, e.g. the relevant documents of the dev queries a validation measures, so that
            an unseen dev set stays unseen.

    Returns:
        Each usable record in file order: the source's own sentences where it has them (SciFact), else the
        abstract split by biorank's splitter; rejected records are skipped.

    Example:
        >>> docs = list(corpus_documents("data/scifact/corpus.jsonl"))  # doctest: +SKIP
        >>> pairs = list(make_pairs(docs, generators(["ict", "title"])))  # doctest: +SKIP
    """
    excluded = set(exclude)
    for record in read_records(path, format):
        if isinstance(record, Abstract) and record.id not in excluded:
            sentences = record.sentences or tuple(record.abstract[b:e] for b, e in split_sentences(record.abstract))
            yield SourceDocument(record.id, record.title or "", tuple(sentences))


def sample_documents(client: OpenSearch, index: str, n: int, *, seed: int = 0) -> list[SourceDocument]:
    """Up to ``n`` documents of a biorank index, drawn at random (reproducibly for a seed and an index).

    The sentences are the sentences index's, exactly as indexing split them; an index built without one
    has its abstracts split again by biorank's splitter.
    """
    record = check_record(client, index)
    body = {
        "size": min(n, MAX_SAMPLE), "_source": ["id", "title", "abstract"],
        # Hashing the id, not the Lucene doc number, gives the same draw on a copy of the index.
        "query": {"function_score": {"query": {"term": {"block": 0}}, "boost_mode": "replace",
                                     "random_score": {"seed": seed, "field": "id"}}},
    }
    hits = [h["_source"] for h in client.search(index=index, body=body)["hits"]["hits"]]
    sentences_index = record.sentences_index
    if sentences_index and client.indices.exists(index=sentences_index):
        split = _indexed_sentences(client, sentences_index, [h["id"] for h in hits])
    else:
        split = {h["id"]: [h.get("abstract", "")[b:e] for b, e in split_sentences(h.get("abstract", ""))]
                 for h in hits}
    return [SourceDocument(h["id"], h.get("title") or "", tuple(split.get(h["id"], ()))) for h in hits]


def _indexed_sentences(client: OpenSearch, index: str, ids: list[str], chunk: int = 200) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for start in range(0, len(ids), chunk):
        query = {"bool": {"filter": [{"terms": {"doc_id": ids[start : start + chunk]}},
                                     {"term": {"section": "abstract"}}]}}
        for hits in entries_in_order(client, index, sort=("doc_id", "number"), source=("doc_id", "text"),
                                     query=query, size=MAX_SAMPLE):
            for h in hits:
                found.setdefault(h["_source"]["doc_id"], []).append(h["_source"]["text"])
    return found
