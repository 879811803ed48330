"""How fast, and how good, is the cross-encoder per precision, truncation length and reranking depth?

For every dev-split query (the split tuning uses) the first stage (hybrid) returns its top ``max(depths)``;
each configuration scores those pairs once (scores do not depend on the batch, so the top 10/20/... of one
pass equal separate passes), giving nDCG@10 at every depth and weight. Latency is measured per query, one query
at a time as ``biorank query --rerank`` runs: the first stage and reading the texts (once), and reranking
``depth`` documents per configuration.

    python -m benchmarks.reranker_speed --index scifact --model models/reranker-scifact
    python -m benchmarks.reranker_speed --index scifact --model biorank/models/reranker --configs onnx:256,int8:256

Why the defaults (record ``reranker_speed.json``, 2026-11-22): bf16 at 256 word pieces, depth 20, mixed half and
half with the first stage, stayed within 300 ms; cutting documents to 192 or 128 word pieces costs more quality
than the depth it buys.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from benchmarks import suite
from biorank import CrossEncoder, Searcher
from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.stages.rerank import fetch_texts, reorder

COLUMNS = suite.columns(("precision", "prec"), ("pieces", "pieces"), ("pairs_per_s", "pairs/s", ".1f"),
                        ("depth", "depth"), ("ms", "latency ms", ",.0f"), ("ndcg_w1", "nDCG@10 w 1", ".4f"),
                        ("ndcg_w05", "nDCG@10 w 0.5", ".4f"))


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, index="scifact", queries="scifact-claims-train")
    parser.add_argument("--model", required=True, help="The reranker folder (biorank train-reranker --out).")
    parser.add_argument("--qrels", default=str(suite.data("scifact-qrels-train")))
    parser.add_argument("--configs", default="fp32:256,bf16:256,onnx:256,int8:256",
                        help="precision:max_length pairs, comma-separated.")
    parser.add_argument("--depths", default="10,20,30,50")
    parser.add_argument("--latency-queries", type=int, default=20)
    parser.add_argument("--budget-ms", type=float, default=300.0)
    parser.add_argument("--weights", default="1,0.5", help="Shares of the reranker in the final score.")
    args = parser.parse_args(argv)

    depths = [int(d) for d in args.depths.split(",")]
    weights = [float(w) for w in args.weights.split(",")]
    qrels = read_qrels(args.qrels)
    qrels = {q: qrels[q] for q in split_judged(qrels, "dev")}
    queries = {q: t for q, t in read_queries(args.queries).items() if q in qrels}
    queries = dict(list(queries.items())[: args.limit or None])
    client = suite.connect(args)
    searcher = Searcher.open(client, args.index)
    hits = searcher.search_many(queries, max(depths))
    texts = fetch_texts(client, args.index, [h.id for ranked in hits.values() for h in ranked])
    sample = list(queries)[: args.latency_queries]
    first_stage = suite.timed(lambda q: searcher.search(queries[q], max(depths)), sample, warm=1)
    fetching = suite.timed(lambda q: fetch_texts(client, args.index, [h.id for h in hits[q]]), sample, warm=1)
    base_ms = statistics.median(first_stage) + statistics.median(fetching)
    hybrid = evaluate(run_from_hits(hits), qrels, ["nDCG@10"])["nDCG@10"]
    suite.header(f"{len(queries)} dev queries; hybrid nDCG@10 {hybrid:.4f}; first stage p50 "
                 f"{statistics.median(first_stage):.1f} ms, reading texts p50 {statistics.median(fetching):.1f} ms")

    rows = []
    for config in args.configs.split(","):
        precision, length = config.split(":")
        reranker = CrossEncoder(args.model, precision=precision, max_length=int(length))
        latency = {depth: statistics.median(suite.timed(
            lambda q, d=depth, r=reranker: r.score(queries[q], [texts[h.id] for h in hits[q][:d]]), sample, warm=1))
            for depth in depths}
        started = time.perf_counter()  # the throughput of one pass over every query's candidates
        scores = {q: reranker.score(queries[q], [texts[h.id] for h in hits[q]]) for q in queries}
        pairs_per_s = sum(len(s) for s in scores.values()) / (time.perf_counter() - started)
        for depth in depths:
            row = {"precision": reranker.precision, "pieces": int(length), "pairs_per_s": round(pairs_per_s, 1),
                   "depth": depth, "ms": round(base_ms + latency[depth], 1)}
            for weight in weights:
                run = {q: reorder(hits[q][:depth], [float(s) for s in np.asarray(scores[q])[:depth]], weight)
                       + hits[q][depth:] for q in queries}
                row[f"ndcg_w{weight:g}".replace(".", "")] = round(
                    evaluate(run_from_hits(run), qrels, ["nDCG@10"])["nDCG@10"], 4)
            rows.append(row)
    cols = [*COLUMNS[:5], *(suite.Column(f"ndcg_w{w:g}".replace(".", ""), f"nDCG@10 w {w:g}", ".4f") for w in weights)]
    suite.record(args, cols, rows, client=client, settings={
        "index": args.index, "model": args.model, "queries": len(queries), "latency_queries": len(sample),
        "hybrid_ndcg10": round(hybrid, 4), "first_stage_and_texts_ms": round(base_ms, 1)})
    within = [r for r in rows if r["ms"] <= args.budget_ms]
    if within:
        key = f"ndcg_w{weights[-1]:g}".replace(".", "")
        best = max(within, key=lambda r: r[key])
        print(f"best within {args.budget_ms:g} ms per query at weight {weights[-1]:g}: {best['precision']} at "
              f"{best['pieces']} word pieces, depth {best['depth']}: nDCG@10 {best[key]:.4f}")


if __name__ == "__main__":
    main()
