"""What does the shipped cross-encoder gain over the hybrid on dev queries whose documents no training query has?

Issue 44: the dev gains that chose the shipped reranker (v2) come from queries held out by a hash of their id,
which share abstracts (SciFact's sibling claims) or documents (BioASQ's years) with the queries it was trained
on. Each collection's query set of the old figures is measured beside its unseen part
(``biorank.evaluation.splits``: the queries none of whose relevant documents a training query has):

- SciFact: the dev split (BEIR qrels) and ``dev-unseen``, the dev claims none of whose cited abstracts a
  training claim (the other 80%, what v2 trained on) cites;
- BioASQ 7B: the questions whose gold abstracts are all in ``bioasq/abstracts/`` (held out whole from v2's
  training) and ``unseen``, those none of whose gold documents another 7B-9B question cites;
- NFCorpus: the dev queries and ``unseen``, those none of whose directly linked articles (grade 2) an NFCorpus
  training query links directly (its indirect links join nearly every query: see the splits' docstring).

Each query's first-stage top 20 is scored once by the cross-encoder, one query at a time as ``biorank query
--rerank`` runs (timed: the first stage, and scoring the 20 pairs); the mix at the given weight (the one tuned
per collection on its dev split) and the cross-encoder alone both reorder those scores. p: paired t-test
against the first stage on the same queries (``biorank eval``'s test). The first stage is the hybrid of a
biorank index (``--first-stage hybrid``: indexes built with ``biorank index FILE --index NAME
--no-sentences``), or BM25 over a working index of the corpus that holds no vectors (``--first-stage bm25``,
the protocol of ``train-reranker``'s validation: no encoding, so it runs where the corpora cannot be encoded in
the time at hand; the working index is deleted afterwards). The record is written after each collection.

``--sizes`` records instead how many queries each split holds, per source (no cluster, seconds).

Usage:
    python -m benchmarks.studies.unseen_dev --sizes
    python -m benchmarks.studies.unseen_dev --first-stage hybrid --weights scifact=0.7,bioasq=0.4,nfcorpus=0.2
    python -m benchmarks.studies.unseen_dev --first-stage bm25
"""

from __future__ import annotations

import json
import os
import time

from benchmarks import suite
from biorank.evaluation.bioasq import read_golden
from biorank.evaluation.measures import run_from_hits
from biorank.evaluation.report import evaluate_runs
from biorank.evaluation.splits import seen_documents, split_judged
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.types import Qrels

DATA = suite.DATA
DEPTH = 20
CORPORA = {"scifact": ("scifact/corpus.jsonl", "scifact"),
           "bioasq": ("bioasq/abstracts/biobert_7b_full_abstract.jsonl", "bioasq"),
           "nfcorpus": ("nfcorpus/dev.docs", "nfcorpus")}
WORKING_INDEX = "biorank-unseen-dev-bm25"
"""Its name, with the collection's after it (so that runs over several collections can run side by side)."""


def table_columns(first: str) -> list[suite.Column]:
    return suite.columns(("query_set", "query set"), ("queries", "queries"), ("measure", "measure"),
                         ("first", first, ".4f"), ("mixed", f"{first} + v2, w"), ("alone", "v2 alone"),
                         ("first_ms", f"{first} ms/query", ".0f"), ("rerank_ms", "rerank ms/query (20 pairs)", ".0f"))


class Bm25:
    """BM25 (english analysis, k1 0.9, b 0.4, as the documents index's ``text``) over a working index of a corpus
    file that holds no vectors; its hits carry the texts the cross-encoder reads."""

    def __init__(self, client, name: str) -> None:
        from biorank.indexer.readers import read_records
        from biorank.stages.rerank import document_text
        from biorank.store.mappings.documents import IndexSettings
        from biorank.store.mappings.pool import pool_index_body
        from biorank.store.server import bm25_similarity
        from biorank.store.writer import BulkWriter
        from biorank.types import Abstract

        self.client = client
        self.index = f"{WORKING_INDEX}-{name}"
        path, reader = CORPORA[name]
        client.indices.delete(index=self.index, ignore_unavailable=True)
        client.indices.create(index=self.index, body=pool_index_body(IndexSettings(), bm25_similarity(client)))
        BulkWriter(client).write({"_index": self.index, "_id": r.id,
                                  "_source": {"document": r.id, "text": document_text(r.title, r.abstract)}}
                                 for r in read_records(DATA / path, reader) if isinstance(r, Abstract))
        client.indices.refresh(index=self.index)

    def top(self, query: str) -> list[tuple[str, float, str]]:
        body = {"size": DEPTH, "query": {"match": {"text": query}}}
        hits = self.client.search(index=self.index, body=body)["hits"]["hits"]
        return [(h["_id"], h["_score"], h["_source"]["text"]) for h in hits]

    def close(self) -> None:
        self.client.indices.delete(index=self.index, ignore_unavailable=True)


def bioasq_covered() -> tuple[dict[str, str], Qrels, set[str]]:
    """The fully covered 7B questions (texts, gold documents) and every other 7B-9B question's gold documents."""
    covered = json.loads((DATA / "bioasq/abstracts/fully_covered_questions.json").read_text(encoding="utf-8"))
    wanted = {q for batch, ids in covered.items() if batch.startswith("7B") for q in ids}
    queries, qrels, others = {}, {}, []
    for golden in sorted((DATA / "bioasq").glob("Task*BGoldenEnriched/*_golden.json")):
        for q in read_golden(golden):
            if q.id in wanted and golden.name.startswith("7B"):
                queries[q.id], qrels[q.id] = q.body, dict.fromkeys(q.documents, 1)
            elif q.id not in wanted:
                others.append({q.id: dict.fromkeys(q.documents, 1)})
    return queries, qrels, seen_documents(others)


def collections() -> dict[str, tuple[str, dict[str, str], Qrels, list[tuple[str, list[str]]]]]:
    """Per collection: its name in the table, queries, qrels, and (query set, ids) for the old and unseen sets
    (and for SciFact the dev claims that are not unseen)."""
    sq = read_queries(DATA / "scifact/queries_train.jsonl")
    sr = read_qrels(DATA / "scifact/qrels/train.tsv")
    bq, br, bseen = bioasq_covered()
    nq = read_queries(DATA / "nfcorpus/dev.titles.queries")
    nr = read_qrels(DATA / "nfcorpus/dev.2-1-0.qrel")
    nseen = seen_documents([read_qrels(DATA / "nfcorpus/train.2-1-0.qrel")])
    return {
        "scifact": ("SciFact", sq, sr, [("dev (hash)", split_judged(sr, "dev")),
                                         ("dev-unseen", split_judged(sr, "dev-unseen")),
                                         # The other dev claims: each cites an abstract a training claim cites.
                                         ("dev-seen", sorted(set(split_judged(sr, "dev"))
                                                             - set(split_judged(sr, "dev-unseen"))))]),
        "bioasq": ("BioASQ 7B", bq, br, [("fully covered", split_judged(br, "all")),
                                          ("unseen", split_judged(br, "unseen", bseen))]),
        "nfcorpus": ("NFCorpus", nq, nr, [("dev", split_judged(nr, "all")),
                                           ("unseen", split_judged(nr, "unseen", nseen))]),
    }


SIZE_COLUMNS = suite.columns(("source", "source"), ("query_set", "query set"), ("held_out", "held out"),
                             ("unseen", "unseen"), ("trained", "trained on"),
                             ("rule", "unseen: no relevant document of"))


def sizes(args) -> None:
    """How many queries each split holds: gather-supervision's (every source) and eval's query sets."""
    from biorank.training.supervision import gather, later_year

    supervision = gather(DATA, log=print)
    rows = []
    for (source, split), count in supervision.counts().items():
        if split == "dev":
            trained = supervision.counts()[(source, "train")]["queries"]
            rows.append({"source": source, "query_set": "gather-supervision dev", "held_out": count["queries"],
                         "unseen": count["unseen"], "trained": trained,
                         "rule": "a training query of any source (each at its source's top grade)"})
    for title, _, _, sets in collections().values():
        (old, held), (new, unseen) = sets[:2]
        rows.append({"source": title, "query_set": f"eval {old} / {new}", "held_out": len(held),
                     "unseen": len(unseen), "trained": None, "rule": {
                         "SciFact": "a claim of the other 80% (--split dev-unseen)",
                         "BioASQ 7B": "another 7B-9B question (--split unseen --seen)",
                         "NFCorpus": "an NFCorpus train query, direct links (--split unseen --seen)"}[title]})
    later, total = later_year(DATA / "bioasq")
    rows.append({"source": "BioASQ 9B", "query_set": "by year", "held_out": total, "unseen": len(later),
                 "trained": None, "rule": "a 7B or 8B question (later_year)"})
    suite.record(args, SIZE_COLUMNS, rows, variant="sizes",
                 notes="SciFact's hash dev split is the 20% of claims by a SHA-256 of the id; held out whole: NFCorpus "
                       "dev, BioASQ 7B's fully covered questions (and a hash 20% of the others), PubMedQA's hash 20%")


def cell(report, system: str, measure: str) -> str:
    p = report.p_values[system][measure]
    return f"{report.table[system][measure]:.4f} (p {p:.2g})"


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("--collections", default="scifact,bioasq,nfcorpus")
    parser.add_argument("--indexes", default="scifact=scifact,bioasq=bioasq7b,nfcorpus=nfcorpus",
                        help="collection=index")
    parser.add_argument("--weights", default="scifact=0.7,bioasq=0.4,nfcorpus=0.2",
                        help="collection=w: the rerank weight tuned on the collection's dev split")
    parser.add_argument("--model", default=None, help="the cross-encoder (default: the index's, else the shipped)")
    parser.add_argument("--first-stage", choices=("hybrid", "bm25"), default="hybrid")
    parser.add_argument("--sets", default="", help="query sets to run, e.g. 'dev-unseen,unseen' (default: all)")
    parser.add_argument("--sizes", action="store_true", help="record the splits' sizes instead (no cluster)")
    parser.add_argument("--variant", default=None,
                        help="the record's variant (default: the first stage's name), e.g. for a collection run apart")
    args = parser.parse_args(argv)
    if args.sizes:
        sizes(args)
        return
    from biorank.models.cross_encoder import CrossEncoder
    from biorank.models.shipped import SHIPPED_RERANKER
    from biorank.retrieval.searcher import Searcher
    from biorank.stages.rerank import Reranker, reorder
    from biorank.types import Hit

    indexes = dict(item.split("=") for item in args.indexes.split(","))
    weights = {k: float(v) for k, v in (item.split("=") for item in args.weights.split(","))}
    client = suite.connect(args)
    first = args.first_stage
    suite.header(f"collections {args.collections}; {first} top {DEPTH} reranked; weights {weights}")
    known = collections()
    rows, settings = [], {"depth": DEPTH, "first_stage": first, "weights": weights,
                          "model": args.model or "the shipped v2"}
    cross_encoder = CrossEncoder(args.model or SHIPPED_RERANKER) if first == "bm25" else None
    for name in args.collections.split(","):
        title, queries, qrels, sets = known[name]
        sets = [(label, ids) for label, ids in sets if not args.sets or label in args.sets.split(",")]
        wanted = sorted({q for _, ids in sets for q in ids})
        hits, scores, first_ms, rerank_ms = {}, {}, {}, {}
        if first == "hybrid":
            searcher = Searcher.open(client, indexes[name])
            searcher.load()
            reranker = Reranker.for_index(searcher, args.model, depth=DEPTH, weight=weights[name])
            settings[f"{name}_cross_encoder"] = reranker.cross_encoder.source
        else:
            bm25 = Bm25(client, name)
        for n, qid in enumerate(wanted, 1):
            started = time.perf_counter()
            if first == "hybrid":
                hits[qid] = searcher.search_many({qid: queries[qid]}, DEPTH)[qid]
            else:
                found = bm25.top(queries[qid])
                hits[qid] = [Hit(id=d, title="", rank=r, score=s) for r, (d, s, _) in enumerate(found, 1)]
            first_ms[qid] = (time.perf_counter() - started) * 1000
            started = time.perf_counter()
            if first == "hybrid":
                scores[qid] = reranker.score_many({qid: queries[qid]}, {qid: hits[qid]})[qid]
            else:
                scores[qid] = [float(v) for v in cross_encoder.score(queries[qid], [t for _, _, t in found])]
            rerank_ms[qid] = (time.perf_counter() - started) * 1000
            if n % 25 == 0:
                print(f"{name}: {n}/{len(wanted)} queries", flush=True)
        if first == "bm25":
            bm25.close()
        runs = {"first": run_from_hits(hits),
                "mixed": run_from_hits({q: reorder(hits[q], scores[q], weights[name]) for q in wanted}),
                "alone": run_from_hits({q: reorder(hits[q], scores[q], 1.0) for q in wanted})}
        measures = ["ndcg@10", "map@10"] if name == "bioasq" else ["ndcg@10"]
        for label, ids in sets:
            report = evaluate_runs(runs, {q: qrels[q] for q in ids}, measures)
            for measure in measures:
                rows.append({"query_set": f"{title} {label}", "queries": len(ids),
                             "measure": "AP@10" if measure == "map@10" else "nDCG@10",
                             "first": report.table["first"][measure],
                             "mixed": f"{weights[name]}: " + cell(report, "mixed", measure),
                             "alone": cell(report, "alone", measure),
                             "first_ms": sum(first_ms[q] for q in ids) / len(ids),
                             "rerank_ms": sum(rerank_ms[q] for q in ids) / len(ids)})
        settings[f"{name}_weight"] = weights[name]
        # Written after each collection: a run cut short keeps what it measured.
        suite.record(args, table_columns(first), rows, variant=args.variant or first, settings=settings, client=client,
                     notes=f"{first} top {DEPTH}; AP@10 is ir-measures' (denominator: every gold document), not "
                           "BioASQ's official min(|gold|, 10); p: paired t-test against the first stage; w: the "
                           "weight tuned for the hybrid on each collection's (hash) dev split; ms are means, one "
                           f"query at a time; load (uptime) at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
