"""Pseudo-relevance feedback for the first stage: RM3 for the BM25 leg, Rocchio for the dense leg.

Both take the first pass's top documents as relevant and change the query, never the index; a search with
feedback runs its mode twice, the second time with the changed query (:meth:`Searcher.search
<biorank.retrieval.searcher.Searcher.search>`). On questions over abstracts no training saw, the first stage is
where quality is made, and the BioASQ teams that lead add such query-side signals before any reranker.

- **RM3** (Lavrenko and Croft's relevance model as Anserini and Pyserini define it): each of the top ``docs``
  documents' ``terms`` most frequent terms (of the BM25 field, as the index analysed them: a term vector, so no
  text of a person's becomes query syntax), weighted by the document's first-pass score, give a distribution
  over terms; its top ``terms`` are mixed with the query's own at ``original_weight``. Anserini's filters are
  kept: terms of letters and digits, at least two characters, in at most :data:`MAX_DOC_FRACTION` of the
  entries.
- **Rocchio** on vectors (Li et al., "Pseudo relevance feedback with deep language models and dense
  retrievers"): ``q' = alpha·q + beta·mean(v_1..v_k)`` over the top ``rocchio_docs`` blocks' stored vectors,
  renormalised, so ``⟨q', p⟩`` stays a cosine and λ keeps its meaning.

The RM3 query is scaled by the query's length, so that with ``original_weight`` 1 it is exactly the BM25 part
without feedback: ``original_weight·BM25(q) + Σ_w (1 - original_weight)·|q|·P(w|R)·BM25(w)``, which is Anserini's
interpolation times ``|q|``. The defaults are the published ones (Anserini's RM3: 10 documents, 10 terms,
weight 0.5; Pyserini's vector PRF: 5 documents, alpha 0.4, beta 0.6), not values tuned on our dev sets.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from biorank.errors import BiorankError

KINDS = ("rm3", "rocchio")
"""The feedback a search can take; a name joins them with ``+`` (``rm3+rocchio``)."""
NAMES = ("none", "rm3", "rocchio", "rm3+rocchio")
FEEDBACK_MODES = ("bm25", "dense", "dense-exact", "hybrid", "hybrid-approx")
"""The modes whose last request ranks each query's documents itself (the fused modes rank in the client)."""
FEEDBACK_FIELDS = ("text", "passage")
"""The BM25 field sets of one field, whose term vectors RM3 reads."""
TERM = re.compile(r"[a-z0-9]{2,}")
MAX_DOC_FRACTION = 0.1
"""A term in more of the entries than this says nothing about the topic (Anserini's cut)."""
VECTOR_FIELD = "embedding"


class FeedbackError(BiorankError):
    """Feedback settings that cannot run (a mode or field set it does not read, a weight out of range)."""


@dataclass(frozen=True)
class Feedback:
    """Which feedback a first stage takes and with which parameters.

    Args:
        rm3: expand the BM25 leg with the relevance model of the top ``docs`` documents.
        rocchio: move the query vector towards the top ``rocchio_docs`` blocks' vectors.
        docs: RM3's feedback documents.
        terms: RM3's feedback terms (per document, and in the model).
        original_weight: RM3's weight of the query's own terms, from 0 to 1 (1: no change).
        rocchio_docs: Rocchio's feedback blocks.
        rocchio_alpha: Rocchio's weight of the query vector.
        rocchio_beta: Rocchio's weight of the feedback blocks' mean vector.

    Example:
        >>> Feedback.named("rm3+rocchio").kinds
        ('rm3', 'rocchio')
    """

    rm3: bool = False
    rocchio: bool = False
    docs: int = 10
    terms: int = 10
    original_weight: float = 0.5
    rocchio_docs: int = 5
    rocchio_alpha: float = 0.4
    rocchio_beta: float = 0.6

    def __post_init__(self) -> None:
        if min(self.docs, self.terms, self.rocchio_docs) < 1:
            raise FeedbackError("feedback needs at least 1 document and 1 term")
        if not 0 <= self.original_weight <= 1:
            raise FeedbackError(f"RM3's original-query weight is from 0 to 1, not {self.original_weight}")
        if self.rocchio_alpha < 0 or self.rocchio_beta < 0 or self.rocchio_alpha + self.rocchio_beta == 0:
            raise FeedbackError("Rocchio's weights must be at least 0, and not both 0")

    @classmethod
    def named(cls, name: str, **parameters: float) -> Feedback:
        """The feedback of ``name`` (:data:`NAMES`), with the published parameters unless ``parameters`` change
        them."""
        if name not in NAMES:
            raise FeedbackError(f"unknown feedback {name!r}; choose one of {', '.join(NAMES)}")
        kinds = set(name.split("+"))
        return cls(rm3="rm3" in kinds, rocchio="rocchio" in kinds, **parameters)  # type: ignore[arg-type]

    @classmethod
    def from_record(cls, stored: Mapping[str, Any] | None) -> Feedback:
        """The feedback an index record stores (:meth:`to_record`); none where it stores none."""
        if not stored:
            return cls()
        parameters = {f.name: stored[f.name] for f in fields(cls) if f.name in stored and f.name not in KINDS}
        return cls.named(str(stored.get("name", "none")), **parameters)

    def to_record(self) -> dict[str, Any]:
        """Its name and parameters as plain values, for an index record."""
        return {"name": self.name, **{k: v for k, v in asdict(self).items() if k not in KINDS}}

    def fits(self, mode: str, field_set: str, *, lexical: bool, vectors: bool) -> bool:
        """Whether it runs with that mode and field set (:meth:`check` without the error)."""
        try:
            self.check(mode, field_set, lexical=lexical, vectors=vectors)
        except FeedbackError:
            return False
        return True

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(k for k in KINDS if getattr(self, k))

    @property
    def name(self) -> str:
        """``none``, ``rm3``, ``rocchio`` or ``rm3+rocchio``."""
        return "+".join(self.kinds) or "none"

    def __bool__(self) -> bool:
        return bool(self.kinds)

    @property
    def depth(self) -> int:
        """How many documents the first pass must find."""
        return max(self.docs if self.rm3 else 0, self.rocchio_docs if self.rocchio else 0)

    def check(self, mode: str, field_set: str, *, lexical: bool, vectors: bool) -> None:
        """Refuses, in one line, a mode or field set this feedback cannot run with."""
        if not self:
            return
        if mode not in FEEDBACK_MODES:
            raise FeedbackError(f"feedback runs with {', '.join(FEEDBACK_MODES)}, not {mode} (it ranks in the "
                                "client, with no request of its own to feed back into)")
        if self.rm3 and not lexical:
            raise FeedbackError(f"RM3 adds terms to the BM25 leg, and {mode} has none")
        if self.rm3 and field_set not in FEEDBACK_FIELDS:
            raise FeedbackError(f"RM3 reads the term vectors of one field ({' or '.join(FEEDBACK_FIELDS)}), "
                                f"not the field set {field_set}")
        if self.rocchio and not vectors:
            raise FeedbackError(f"Rocchio moves the query vector, and {mode} uses none")


def first_pass_body(body: dict) -> dict:
    """A first-pass request that also returns each hit's stored vector (Rocchio's input)."""
    from biorank.store.inspection import VECTOR_COPY_SCRIPT

    return {**body, "script_fields": {**body.get("script_fields", {}),
                                      VECTOR_FIELD: {"script": VECTOR_COPY_SCRIPT}}}


def term_vectors_body(field: str, entries: Sequence[str], texts: Sequence[str]) -> dict:
    """One ``_mtermvectors`` body: the terms of ``field`` in each entry (by ``_id``), with their document
    frequencies, then each text as the field's analyser reads it (an artificial document: data, not syntax)."""
    wanted = {"fields": [field], "positions": False, "offsets": False, "payloads": False}
    return {"docs": [*({"_id": entry, **wanted, "term_statistics": True, "field_statistics": True}
                       for entry in entries),
                     *({"doc": {field: text}, **wanted} for text in texts)]}


def terms_of(answer: Mapping, field: str) -> tuple[dict[str, dict], int]:
    """The terms of one ``_mtermvectors`` answer (term -> its ``term_freq`` and ``doc_freq``) and how many
    entries hold the field (0 where the entry has none)."""
    vectors = answer.get("term_vectors", {}).get(field)
    if not vectors:
        return {}, 0
    return vectors.get("terms", {}), int(vectors.get("field_statistics", {}).get("doc_count", 0))


def relevance_model(documents: Sequence[tuple[float, Mapping[str, dict], int]], terms: int) -> dict[str, float]:
    """RM3's term distribution P(w|R) of the feedback documents, its top ``terms``, summing to 1.

    Args:
        documents: per document its first-pass score, its terms (:func:`terms_of`) and its field's entry count.
        terms: how many terms each document gives, and the model keeps.

    Returns:
        Term -> weight, best first.

    Example:
        >>> doc = {"folat": {"term_freq": 3, "doc_freq": 2}, "homocystein": {"term_freq": 1, "doc_freq": 1}}
        >>> relevance_model([(2.0, doc, 100)], terms=10)
        {'folat': 0.75, 'homocystein': 0.25}
    """
    weights: dict[str, float] = defaultdict(float)
    for score, vector, entries in documents:
        kept = {t: float(s["term_freq"]) for t, s in vector.items()
                if TERM.fullmatch(t) and s.get("doc_freq", 0) <= MAX_DOC_FRACTION * entries}
        top = dict(_best(kept, terms))
        norm = sum(top.values())
        if norm > 0:
            for term, tf in top.items():
                weights[term] += tf / norm * max(score, 0.0)
    best = _best(weights, terms)
    total = sum(w for _, w in best)
    return {t: w / total for t, w in best} if total > 0 else {}


def expansion(model: Mapping[str, float], query_terms: Mapping[str, dict], field: str,
              original_weight: float) -> tuple[dict, ...]:
    """The ``term`` clauses RM3 adds to the BM25 leg (the query's own text keeps ``original_weight``).

    Each boost is ``(1 - original_weight)·|q|·P(w|R)``, |q| the count of the query's analysed terms, so the
    mix is Anserini's times |q| and, at weight 1, adds nothing.
    """
    length = sum(int(s.get("term_freq", 1)) for s in query_terms.values())
    scale = (1.0 - original_weight) * length
    if scale <= 0:
        return ()
    return tuple({"term": {field: {"value": term, "boost": scale * weight}}} for term, weight in model.items())


def rocchio(query: Sequence[float], vectors: Sequence[Sequence[float]], alpha: float, beta: float) -> list[float]:
    """``alpha·q + beta·mean(vectors)``, renormalised to a unit vector (the query itself where there is nothing to mix).

    Example:
        >>> [round(x, 3) for x in rocchio([1.0, 0.0], [[0.0, 1.0]], 0.5, 0.5)]
        [0.707, 0.707]
    """
    if not vectors:
        return list(query)
    mean = [math.fsum(column) / len(vectors) for column in zip(*vectors, strict=True)]
    mixed = [alpha * q + beta * m for q, m in zip(query, mean, strict=True)]
    norm = math.sqrt(math.fsum(x * x for x in mixed))
    return [x / norm for x in mixed] if norm > 0 else list(query)


def _best(weights: Mapping[str, float], n: int) -> list[tuple[str, float]]:
    # Ties broken by the term, so the same first pass always gives the same query.
    return sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
