"""The development split that tuning uses: a fixed share of a query set (e.g. 20% of SciFact train).

Tuning on the dev split and reporting on the rest (or on a kept-back test set) keeps a tuned number honest.
A query is in the dev split by a hash of its id alone, never by the other ids of its file: the claims that
SciFact's cited-abstract qrels and its evidence file put in dev are the same, and a judged query added or
removed later moves no other query, so tuned values and dev figures stay comparable.

**Unseen documents.** A hash of the query id keeps a query out of training, not its documents: SciFact's
sibling claims (a claim and its negation, written from one citing sentence) cite the same abstracts from both
sides of the split, and BioASQ's years share documents, so a dev figure also measures what a model memorised of
them. ``dev-unseen`` is the part of the dev split that shares no relevant document with the training queries:
the dev queries none of whose documents is one of a ``rest`` query's (nor in ``seen``: documents judged for
queries trained on elsewhere, e.g. NFCorpus train or BioASQ's other years). ``unseen`` does the same for a
query set held out as a whole (NFCorpus dev, BioASQ 7B's fully covered questions): every judged query whose
documents are not in ``seen``. The training split stays the hash's, so a model trained on it (the shipped one)
is measured on documents it never saw. A query's documents are those judged at the file's top grade, what it
is about: every relevant one where judgements are binary; NFCorpus's direct links (2), since its indirect
links (1) join 314 of its 324 dev queries, and nearly every training query, through shared articles.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable, Mapping
from typing import Literal, TypeVar

from biorank.types import Qrels

DEV_FRACTION = 0.2
JUDGED = "judged"
"""The name that :func:`split_judged` hashes with every query id (the supervision's own sources use theirs)."""


def hashed_fraction(source: str, query_id: str) -> float:
    """A number in [0, 1) fixed by a hash of the source's name and the query id alone: a query below a share
    stays below it whatever other queries are added, removed or reordered."""
    digest = hashlib.sha256(f"{source}\0{query_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def hashed_split(source: str, query_id: str, fraction: float = DEV_FRACTION) -> Literal["dev", "train"]:
    """``dev`` for a fixed ``fraction`` of query ids, by :func:`hashed_fraction`."""
    return "dev" if hashed_fraction(source, query_id) < fraction else "train"


Split = Literal["dev", "rest", "all", "dev-unseen", "unseen"]
SPLITS: tuple[Split, ...] = ("dev", "rest", "all", "dev-unseen", "unseen")


def judged_queries(qrels: Qrels) -> list[str]:
    """The ids of the queries with at least one relevant document: what every split is drawn from."""
    return sorted(q for q, docs in qrels.items() if any(grade > 0 for grade in docs.values()))


def top_documents(qrels: Qrels) -> dict[str, frozenset[str]]:
    """Each judged query's documents at the file's top grade: what the unseen splits keep apart."""
    top = max((grade for docs in qrels.values() for grade in docs.values()), default=0)
    found = {q: frozenset(d for d, grade in docs.items() if grade == top) for q, docs in qrels.items()}
    return {q: docs for q, docs in found.items() if docs and top > 0}


Q = TypeVar("Q", bound=Hashable)


def unseen_queries(documents: Mapping[Q, Iterable[str]], seen: Iterable[str]) -> list[Q]:
    """The queries none of whose ``documents`` is in ``seen``, sorted; a query without documents is never unseen.

    Args:
        documents: each candidate query's relevant documents.
        seen: the documents of the queries trained on.

    Returns:
        The candidates that share no document with training.

    Example:
        >>> unseen_queries({"1": ["a"], "2": ["b", "c"]}, {"c"})
        ['1']
    """
    seen = set(seen)
    return sorted(q for q, docs in documents.items() if (found := set(docs)) and not found & seen)


def split_judged(qrels: Qrels, split: Split, seen: Iterable[str] = ()) -> list[str]:
    """The judged queries of ``split``. Tuning, training and evaluation all choose their queries here, so
    "dev" names the same queries everywhere.

    Args:
        qrels: the judgements of a query set.
        split: ``dev`` (the fixed share by a hash of each id), ``rest`` (the others: what training uses),
            ``all``, ``dev-unseen`` (the dev queries sharing no top-grade document with a ``rest`` query nor
            with ``seen``) or ``unseen`` (every judged query sharing none with ``seen``). A query without a
            document at the file's top grade is in neither.
        seen: documents judged relevant for queries trained on outside ``qrels`` (see :func:`top_documents`).

    Returns:
        The query ids, sorted.

    Example:
        >>> qrels = {"1": {"a": 1}, "2": {"a": 1}, "3": {"b": 1}}
        >>> split_judged(qrels, "unseen", seen=["a"])
        ['3']
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    judged = judged_queries(qrels)
    if split == "all":
        return judged
    if split in ("dev-unseen", "unseen"):
        top = top_documents(qrels)
        candidates = split_judged(qrels, "dev") if split == "dev-unseen" else judged
        trained = split_judged(qrels, "rest") if split == "dev-unseen" else []
        seen = {*seen, *(d for q in trained for d in top.get(q, ()))}
        return unseen_queries({q: top.get(q, ()) for q in candidates}, seen)
    wanted = "dev" if split == "dev" else "train"
    return [q for q in judged if hashed_split(JUDGED, q) == wanted]


def halves(ids: Iterable[Q]) -> tuple[list[Q], list[Q]]:
    """``ids`` in two halves by a hash of each id (the same id always in the same half, whatever the others): one
    to choose a setting on, one to report it on.

    Example:
        >>> choose, report = halves([str(i) for i in range(100)])
        >>> len(choose) + len(report), set(choose) & set(report)
        (100, set())
    """
    ordered = list(ids)
    choose = [q for q in ordered if hashed_fraction("half", str(q)) < 0.5]
    return choose, [q for q in ordered if hashed_fraction("half", str(q)) >= 0.5]


def seen_documents(qrels: Iterable[Qrels]) -> set[str]:
    """The top-grade documents of every judged query of ``qrels`` (the judgements trained on): ``seen`` for
    :func:`split_judged`."""
    return {d for one in qrels for docs in top_documents(one).values() for d in docs}
