"""Every biomedical judgement of a data folder as training material, with BM25 negatives from a pooled corpus.

The reranker and the encoder learn from more than one collection's judgements (issue 16): each source's
queries come with their relevant texts, and with the BM25 top of a pool of every text gathered, so that a
negative can be a hard one from another collection as well as from the query's own.

- **SciFact** (``scifact/``): a claim against each abstract it cites (BEIR relevance), and against each
  evidence sentence (kind ``sentence``).
- **BioASQ 7B-9B** (``bioasq/``): a question against each gold snippet's text (kind ``snippet``; snippets are
  real relevant passages even where the abstract's text is missing) and against each gold abstract whose
  text is in ``bioasq/abstracts/``.
- **NFCorpus** (``nfcorpus/``): a ``titles`` query against each judged document, with its grade (2 or 1).
- **PubMedQA** (``pubmedqa/``): a question against its own abstract (the contexts, without the conclusion).
- The MEDLINE sample (``pubmed/``) only adds texts to the pool.

**What is held out.** A query is ``dev`` (never trained on) when an evaluation measures it: SciFact's dev split
(:func:`~biorank.evaluation.splits.split_judged`'s hash of the claim id, the same claims under either notion of
relevance, so neither evaluation sees a trained claim), all NFCorpus dev queries, the 7B questions whose gold
abstracts are all present (the BioASQ evaluation set). The other queries of BioASQ and PubMedQA are split by a hash
of the query's id (:func:`~biorank.evaluation.splits.hashed_split`), which a new source or a changed file never
moves. A training query whose text is also a held-out query's (BioASQ repeats questions across years) is dropped.

**Unseen documents** (:func:`mark_unseen`): a held-out query is ``unseen`` when none of its relevant documents
(at its source's top grade, as :func:`~biorank.evaluation.splits.top_documents` has it) is a relevant document
of a training query of any source: what a model trained here has never read as a positive. The splits stay
the hash's (so a model trained on them is measured on the same held-out queries); ``unseen`` picks the part of
them that measures generalisation, and :func:`later_year` the BioASQ questions of a later year whose documents
no earlier year's question cites.

**Negatives** (:func:`bm25_negatives`): the pool goes into a working index, each query's BM25 top ``depth``
comes back best first, without any text of a document judged for the query (relevant or not) and without a
text equal to one of its positives. Trainers draw from that list.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from biorank.errors import BiorankError
from biorank.evaluation.bioasq import read_golden
from biorank.evaluation.phase_a import read_evidence_sentences
from biorank.evaluation.splits import JUDGED, hashed_fraction, hashed_split, unseen_queries
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.indexer.readers import read_records
from biorank.stages.rerank import document_text
from biorank.store.msearch import msearch
from biorank.types import Abstract, Qrels

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

SOURCES = ("scifact", "bioasq", "nfcorpus", "pubmedqa")
KINDS = ("abstract", "sentence", "snippet")
POOL_INDEX = "biorank-training-pool"


class SupervisionError(BiorankError):
    """A data folder without any source, or a source file that cannot be read."""


@dataclass(frozen=True, slots=True)
class Passage:
    """A text of the pool: an abstract (title + abstract), a sentence or a snippet of ``document``."""

    id: str
    document: str
    kind: str
    text: str


@dataclass(slots=True)
class SupervisedQuery:
    """A judged query: its relevant passages with their grades, every document judged for it (never a negative),
    and, once :func:`bm25_negatives` has run, the pool's BM25 top without those, best first."""

    source: str
    id: str
    text: str
    split: str
    positives: dict[str, int]
    judged: frozenset[str]
    negatives: list[str] = field(default_factory=list)
    unseen: bool = False
    """Held out, and none of its relevant documents is a training query's (see :func:`mark_unseen`)."""


@dataclass
class Supervision:
    passages: dict[str, Passage] = field(default_factory=dict)
    queries: list[SupervisedQuery] = field(default_factory=list)
    dropped: int = 0
    """Training queries left out because a held-out query has the same text."""

    def add(self, passage: Passage) -> str:
        self.passages.setdefault(passage.id, passage)
        return passage.id

    def counts(self) -> dict[tuple[str, str], Counter[str]]:
        """Per (source, split): queries, positives by kind, queries with negatives (0 where none)."""
        counts: dict[tuple[str, str], Counter[str]] = {}
        for query in self.queries:
            count = counts.setdefault((query.source, query.split), Counter())
            count["queries"] += 1
            count["unseen"] += query.unseen
            count["with negatives"] += bool(query.negatives)
            count.update(self.passages[passage].kind for passage in query.positives)
        return dict(sorted(counts.items()))


def gather(data: str | Path, *, log: Callable[[str], None] = print) -> Supervision:
    """The judged queries and the pool of every source found under ``data`` (the layout of the shared data
    folder: ``scifact/``, ``bioasq/``, ``nfcorpus/``, ``pubmedqa/``, ``pubmed/``); a missing source is skipped."""
    data = Path(data)
    if not data.is_dir():
        raise SupervisionError(f"{data} is not a folder")
    found = [s for s in SOURCES if (data / s).is_dir()]
    if not found:
        raise SupervisionError(f"{data} holds none of {', '.join(f'{s}/' for s in SOURCES)}")
    for missing in sorted(set(SOURCES) - set(found)):
        log(f"no {missing}/ in {data}: skipped")
    supervision = Supervision()
    readers = {"scifact": _scifact, "bioasq": _bioasq, "nfcorpus": _nfcorpus, "pubmedqa": _pubmedqa}
    queries = [q for source in found for q in readers[source](data / source, supervision)]
    held_out = {normal_text(q.text) for q in queries if q.split == "dev"}
    for query in queries:
        if query.split == "train" and normal_text(query.text) in held_out:
            supervision.dropped += 1
        elif query.positives:
            supervision.queries.append(query)
    mark_unseen(supervision)
    if (data / "pubmed").is_dir():
        for path in sorted((data / "pubmed").glob("*.xml*")):
            for record in read_records(path, "pubmed"):
                if isinstance(record, Abstract):
                    supervision.add(_abstract_passage(f"pmid:{record.id}", record))
    return supervision


def relevant_documents(supervision: Supervision, query: SupervisedQuery, grade: int) -> set[str]:
    """The documents of ``query``'s positives of ``grade`` (an abstract's, a sentence's or a snippet's)."""
    return {supervision.passages[p].document for p, g in query.positives.items() if g == grade}


def mark_unseen(supervision: Supervision) -> None:
    """Set ``unseen`` on every held-out query none of whose relevant documents is a relevant document of a
    training query of any source, each at its source's top grade (as eval's ``--split unseen`` compares them)."""
    top: dict[str, int] = {}
    for query in supervision.queries:
        top[query.source] = max(top.get(query.source, 0), *query.positives.values())
    seen = {d for q in supervision.queries if q.split == "train"
            for d in relevant_documents(supervision, q, top[q.source])}
    held_out = [q for q in supervision.queries if q.split == "dev"]
    unseen = set(unseen_queries({(q.source, q.id): relevant_documents(supervision, q, top[q.source])
                                 for q in held_out}, seen))
    for query in held_out:
        query.unseen = (query.source, query.id) in unseen


def later_year(folder: str | Path, later: str = "9B") -> tuple[list[str], int]:
    """The BioASQ questions of the year ``later`` (``9B``) none of whose gold documents a question of an
    earlier year (``7B``, ``8B``) cites, and how many questions that year has: a dev set by time as well as by
    document, e.g. for the gold snippets, as 8B and 9B have no abstract text here.

    Args:
        folder: the ``bioasq/`` folder (``Task*BGoldenEnriched/*_golden.json``).
        later: the later year's name as in the folder names.

    Returns:
        (the ids of those questions sorted, the year's questions).

    Example:
        >>> unseen, total = later_year("data/bioasq")  # doctest: +SKIP
    """
    folder = Path(folder)
    years: dict[str, dict[str, set[str]]] = {}
    for path in sorted(folder.glob("Task*BGoldenEnriched/*_golden.json")):
        year = path.parent.name.removeprefix("Task").removesuffix("GoldenEnriched")
        for question in read_golden(path):
            years.setdefault(year, {})[question.id] = set(question.documents)
    if later not in years:
        raise SupervisionError(f"{folder} has no Task{later}GoldenEnriched/*_golden.json")
    # Year names (7B, 8B, 9B, 10B) order by their number.
    number = int(later.removesuffix("B"))
    seen = {d for year, questions in years.items() if int(year.removesuffix("B")) < number
            for docs in questions.values() for d in docs}
    return unseen_queries(years[later], seen), len(years[later])


def bm25_negatives(client: OpenSearch, supervision: Supervision, depth: int = 100, *, index: str = POOL_INDEX,
                   progress: Callable[[int], None] | None = None) -> None:
    """Fill every query's ``negatives`` with the pool's BM25 top ``depth`` that it may be trained against.

    The pool is written to ``index`` (replaced if it exists, deleted afterwards); the search is a ``match`` on
    the text, the same BM25 (english analysis, k1 0.9, b 0.4) as the documents index's ``text``.
    """
    from biorank.store.mappings.documents import IndexSettings
    from biorank.store.mappings.pool import pool_index_body
    from biorank.store.server import bm25_similarity
    from biorank.store.writer import BulkWriter

    client.indices.delete(index=index, ignore_unavailable=True)
    client.indices.create(index=index, body=pool_index_body(IndexSettings(), bm25_similarity(client)))
    try:
        failures = BulkWriter(client).write(
            {"_index": index, "_id": p.id, "_source": {"document": p.document, "text": p.text}}
            for p in supervision.passages.values())
        if failures:
            raise SupervisionError(f"{len(failures)} pool texts could not be written, e.g. {failures[0].id}: "
                                   f"{failures[0].reason}")
        client.indices.refresh(index=index)
        texts = {p.id: normal_text(p.text) for p in supervision.passages.values()}
        for start in range(0, len(supervision.queries), 50):
            batch = supervision.queries[start:start + 50]
            lines: list[dict] = []
            for query in batch:
                # Judged documents are filtered out in the search, so the top ``depth`` is all usable.
                lines += [{"index": index}, {
                    "size": depth, "_source": False, "query": {"bool": {
                        "must": [{"match": {"text": query.text}}],
                        "must_not": [{"terms": {"document": sorted(query.judged)}}]}}}]
            responses = msearch(client, lines, refused=lambda i, error, batch=batch: SupervisionError(
                f"the pool search for {batch[i].source} query {batch[i].id} failed: {error}"))
            for query, response in zip(batch, responses, strict=True):
                positives = {texts[p] for p in query.positives}
                query.negatives = [h["_id"] for h in response["hits"]["hits"] if texts[h["_id"]] not in positives]
            if progress:
                progress(len(batch))
    finally:
        client.indices.delete(index=index, ignore_unavailable=True)


@dataclass(frozen=True, slots=True)
class TrainingPair:
    """A training query, one of its relevant passages, and BM25 negatives of the same grain."""

    query: SupervisedQuery
    positive: Passage
    negatives: tuple[Passage, ...]


def training_pairs(supervision: Supervision, *, positives_per_query: int = 2, negatives: int = 0, seed: int = 0,
                   leave_out: Iterable[str] = (), shares: Mapping[str, float] | None = None) -> list[TrainingPair]:
    """Pairs from the ``train`` queries: up to ``positives_per_query`` of each query's best-graded positives, each
    with up to ``negatives`` drawn from its BM25 negatives.

    A snippet or sentence is drawn against snippets and sentences, an abstract against abstracts: a model that
    saw short positives beside long negatives would learn length, not relevance. Queries whose text (as
    :func:`normal_text` has it) is in ``leave_out`` — the queries a validation measures — are skipped.
    ``shares`` trains only that share of a source's queries (by :func:`hashed_fraction`, so the same ones each
    time): NFCorpus has more training queries than every other source together, and a cross-encoder that
    learnt mostly from it lost on SciFact and BioASQ. Deterministic for a seed; each query draws from its own
    random stream.
    """
    skipped = {normal_text(t) for t in leave_out}
    shares = shares or {}
    passages = supervision.passages
    pairs = []
    for query in supervision.queries:
        if query.split != "train" or normal_text(query.text) in skipped:
            continue
        if hashed_fraction(query.source, query.id) >= shares.get(query.source, 1.0):
            continue
        rng = random.Random(f"{seed}:{query.source}:{query.id}")
        best = max(query.positives.values())
        chosen = sorted(p for p, grade in query.positives.items() if grade == best)
        for positive in rng.sample(chosen, min(positives_per_query, len(chosen))):
            short = passages[positive].kind != "abstract"
            pool = [n for n in query.negatives if (passages[n].kind != "abstract") == short]
            drawn = rng.sample(pool, min(negatives, len(pool)))
            pairs.append(TrainingPair(query, passages[positive], tuple(passages[n] for n in drawn)))
    return pairs


def trained_on(pairs: Sequence[TrainingPair]) -> tuple[dict[str, int], int]:
    """Pairs per source (in the order the sources come) and how many distinct queries they are of."""
    return dict(Counter(p.query.source for p in pairs)), len({(p.query.source, p.query.id) for p in pairs})


def write(supervision: Supervision, out: Path) -> None:
    """``passages.jsonl`` (the pool) and ``queries.jsonl`` (one judged query a line) in the folder ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "passages.jsonl").open("w", encoding="utf-8") as f:
        for p in supervision.passages.values():
            f.write(json.dumps({"id": p.id, "document": p.document, "kind": p.kind, "text": p.text},
                               ensure_ascii=False) + "\n")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as f:
        for q in supervision.queries:
            f.write(json.dumps({"source": q.source, "id": q.id, "text": q.text, "split": q.split,
                                "positives": q.positives, "judged": sorted(q.judged), "negatives": q.negatives,
                                "unseen": q.unseen}, ensure_ascii=False) + "\n")


def read(folder: Path) -> Supervision:
    """What :func:`write` wrote."""
    supervision = Supervision()
    try:
        with (folder / "passages.jsonl").open(encoding="utf-8") as f:
            for line in f:
                supervision.add(Passage(**json.loads(line)))
        with (folder / "queries.jsonl").open(encoding="utf-8") as f:
            for line in f:
                q = json.loads(line)
                # Folders written before the unseen flag existed read as if nothing were unseen.
                supervision.queries.append(SupervisedQuery(q["source"], q["id"], q["text"], q["split"],
                                                           q["positives"], frozenset(q["judged"]), q["negatives"],
                                                           q.get("unseen", False)))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SupervisionError(f"{folder} holds no supervision that biorank wrote ({e})") from None
    return supervision


def _scifact(folder: Path, supervision: Supervision) -> Iterator[SupervisedQuery]:
    claims_path = folder / "claims_train.jsonl"
    documents = {}
    for record in read_records(folder / "corpus.jsonl", "scifact"):
        if isinstance(record, Abstract):
            documents[record.id] = record
            supervision.add(_abstract_passage(f"scifact:{record.id}", record))
    cited = read_qrels(folder / "qrels" / "train.tsv") if (folder / "qrels" / "train.tsv").is_file() else {}
    evidence = read_qrels(claims_path)
    sentences = read_evidence_sentences(claims_path)
    for qid, text in read_queries(claims_path).items():
        positives = {f"scifact:{d}": grade for d, grade in cited.get(qid, evidence.get(qid, {})).items()
                     if grade > 0 and d in documents}
        for doc, number in sorted(sentences.get(qid, ())):
            if doc in documents and number < len(documents[doc].sentences or ()):
                sentence = documents[doc].sentences[number]
                positives[supervision.add(Passage(f"scifact:{doc}:{number}", f"scifact:{doc}", "sentence",
                                                  sentence))] = 1
        judged = {f"scifact:{d}" for d in (*cited.get(qid, {}), *evidence.get(qid, {}))}
        # The dev split is a hash of the id alone, so both notions of relevance hold out the same claims.
        yield SupervisedQuery("scifact", qid, text, hashed_split(JUDGED, qid), positives, frozenset(judged))


def _bioasq(folder: Path, supervision: Supervision) -> Iterator[SupervisedQuery]:
    abstracts = folder / "abstracts"
    texts: dict[str, str] = {}
    if (abstracts / "biobert_7b_full_abstract.jsonl").is_file():
        for record in read_records(abstracts / "biobert_7b_full_abstract.jsonl", "bioasq"):
            if isinstance(record, Abstract):
                texts[record.id] = supervision.add(_abstract_passage(f"pmid:{record.id}", record))
    evaluated: set[str] = set()
    if (abstracts / "fully_covered_questions.json").is_file():
        covered = json.loads((abstracts / "fully_covered_questions.json").read_text(encoding="utf-8"))
        evaluated = {q for ids in covered.values() for q in ids}
    golden = sorted(folder.glob("Task*BGoldenEnriched/*_golden.json"))
    if not golden:
        raise SupervisionError(f"{folder} has no Task*BGoldenEnriched/*_golden.json")
    seen: set[str] = set()
    for path in golden:
        for question in read_golden(path):
            if question.id in seen:
                continue
            seen.add(question.id)
            positives = {texts[d]: 1 for d in question.documents if d in texts}
            for snippet in question.snippets:
                text = snippet.text.strip()
                if text:
                    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
                    positives[supervision.add(Passage(f"snippet:{digest}", f"pmid:{snippet.span.document}",
                                                      "snippet", text))] = 1
            judged = {f"pmid:{d}" for d in (*question.documents, *question.snippet_documents_missing)}
            split = "dev" if question.id in evaluated else hashed_split("bioasq", question.id)
            yield SupervisedQuery("bioasq", question.id, question.body, split, positives, frozenset(judged))


def _nfcorpus(folder: Path, supervision: Supervision) -> Iterator[SupervisedQuery]:
    for record in read_records(folder / "dev.docs", "nfcorpus"):
        if isinstance(record, Abstract):
            supervision.add(_abstract_passage(f"nfcorpus:{record.id}", record))
    dev_ids = set(read_queries(folder / "dev.titles.queries"))
    for split, prefix in (("dev", "dev"), ("train", "train")):
        queries = read_queries(folder / f"{prefix}.titles.queries")
        qrels: Qrels = read_qrels(folder / f"{prefix}.2-1-0.qrel")
        for qid, text in queries.items():
            if split == "train" and qid in dev_ids:
                continue
            judged = qrels.get(qid, {})
            positives = {f"nfcorpus:{d}": g for d, g in judged.items()
                         if g > 0 and f"nfcorpus:{d}" in supervision.passages}
            yield SupervisedQuery("nfcorpus", qid, text, split, positives,
                                  frozenset(f"nfcorpus:{d}" for d in judged))


def _pubmedqa(folder: Path, supervision: Supervision) -> Iterator[SupervisedQuery]:
    for path in sorted(folder.glob("*.json")):
        for pmid, item in json.loads(path.read_text(encoding="utf-8")).items():
            contexts = " ".join(item.get("CONTEXTS") or ())
            if not contexts.strip():
                continue
            passage = supervision.add(Passage(f"pmid:{pmid}", f"pmid:{pmid}", "abstract", contexts.strip()))
            yield SupervisedQuery("pubmedqa", str(pmid), str(item["QUESTION"]), hashed_split("pubmedqa", str(pmid)),
                                  {passage: 1}, frozenset({f"pmid:{pmid}"}))


def _abstract_passage(passage_id: str, record: Abstract) -> Passage:
    return Passage(passage_id, passage_id, "abstract", document_text(record.title, record.abstract))


def normal_text(text: str) -> str:
    """Lower case, words only: two queries that differ in case or punctuation are the same query."""
    return re.sub(r"\W+", " ", text.lower()).strip()

