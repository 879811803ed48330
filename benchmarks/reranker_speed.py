"""Speed and quality of the cross-encoder reranker: precision, truncation length, reranking depth.

For every dev-split query (20% of SciFact train, the split tuning uses) the first stage (hybrid) returns its
top ``max(depths)``; each configuration scores those pairs once (scores do not depend on the batch, so the
top 10/20/... of one pass equal separate passes), giving nDCG@10 at every depth. Latency is measured per
query, one query at a time as ``biorank query --rerank`` runs: the first stage, reading the texts, and
reranking ``depth`` documents, on the 2 cores of this project's machine.

    python benchmarks/reranker_speed.py --index scifact --model models/reranker-scifact

Measured on 2026-11-22 with the reranker trained by ``biorank train-reranker`` on SciFact train (647 claims,
one epoch), 162 dev claims, hybrid first stage (nDCG@10 0.7439 alone). Other jobs shared the 2 cores during
this run, so every latency here is inflated (the first stage took 46 ms p50 against 18.7 ms on an idle
machine); ranks between configurations hold. Latency = first stage + reading texts + reranking, p50 over 10
queries; nDCG@10 with the reranker alone (w = 1) / mixed half and half with the first stage (w = 0.5):

    | prec | pieces | pairs/s | @10 ms | @10 nDCG | @20 ms | @20 nDCG | @30 ms | @30 nDCG | @50 ms | @50 nDCG |
    |------|-------:|--------:|-------:|-----------|-------:|-----------|-------:|-----------|-------:|-----------|
    | bf16 | 256 | 77.5 | 185 | .7301/.7505 | 293 | .7148/.7580 | 401 | .7081/.7595 | 641 | .7101/.7614 |
    | bf16 | 192 | 106.7 | 160 | .7242/.7453 | 247 | .7075/.7453 | 332 | .6992/.7469 | 517 | .6975/.7494 |
    | bf16 | 128 | 167.0 | 123 | .6841/.7379 | 187 | .6510/.7438 | 237 | .6407/.7407 | 349 | .6277/.7307 |
    | int8 | 256 | 50.3 | 268 | .7077/.7483 | 473 | .6832/.7569 | 704 | .6732/.7571 | 1129 | .6773/.7589 |
    | fp32 | 256 | 36.2 | 336 | .7088/.7497 | 598 | .6912/.7580 | 910 | .6806/.7594 | 1413 | .6828/.7614 |

- The int8 and onnx rows of this table were measured before biorank had its ONNX Runtime backend: int8 was
  torch's dynamic quantisation, and onnx (22 pairs/s) a one-off export padded to one fixed shape. Both
  precisions now run in ONNX Runtime (:mod:`biorank.models.runtime`), with batches padded to their own longest
  pair; their latency is in README's "Speed on your CPU" (``benchmarks/query_latency.py --reranker``). Their
  quality against a trained reranker is what this benchmark measures: run it with
  ``--configs fp32:256,onnx:256,int8:256``.
- Cutting documents to 192 or 128 word pieces costs more quality than the depth it buys.

Chosen defaults: bf16, 256 word pieces, depth 20, w = 0.5: nDCG@10 0.7580 (+0.0141 over the hybrid) within
the 300 ms budget even under this load; depth 30 adds 0.0015 for 110 ms more.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", default="scifact")
    parser.add_argument("--model", required=True, help="The reranker folder (biorank train-reranker --out).")
    parser.add_argument("--queries", default=str(SHARED / "claims_train.jsonl"))
    parser.add_argument("--qrels", default=str(SHARED / "qrels" / "train.tsv"))
    parser.add_argument("--configs", default="fp32:256,bf16:256,onnx:256,int8:256",
                        help="precision:max_length pairs, comma-separated.")
    parser.add_argument("--depths", default="10,20,30,50")
    parser.add_argument("--latency-queries", type=int, default=20)
    parser.add_argument("--budget-ms", type=float, default=300.0)
    parser.add_argument("--weights", default="1,0.5", help="Shares of the reranker in the final score.")
    args = parser.parse_args()

    import numpy as np
    from machine import cpu_isa

    from biorank.config import ConnectionSettings
    from biorank.evaluation.measures import evaluate, run_from_hits
    from biorank.evaluation.splits import split_judged
    from biorank.evaluation.topics import read_qrels, read_queries
    from biorank.models.cross_encoder import CrossEncoder
    from biorank.retrieval.searcher import Searcher
    from biorank.stages.rerank import fetch_texts, reorder
    from biorank.store.client import connect

    depths = [int(d) for d in args.depths.split(",")]
    weights = [float(w) for w in args.weights.split(",")]
    qrels = read_qrels(args.qrels)
    qrels = {q: qrels[q] for q in split_judged(qrels, "dev")}
    queries = {q: t for q, t in read_queries(args.queries).items() if q in qrels}
    client = connect(ConnectionSettings.from_env())
    searcher = Searcher(client, args.index)
    hits = searcher.search_many(queries, max(depths))
    texts = fetch_texts(client, args.index, [h.id for ranked in hits.values() for h in ranked])
    sample = list(queries)[: args.latency_queries]
    first_stage, fetching = [], []
    for qid in sample:
        start = time.perf_counter()
        found = searcher.search(queries[qid], max(depths))
        middle = time.perf_counter()
        fetch_texts(client, args.index, [h.id for h in found])
        first_stage.append((middle - start) * 1e3)
        fetching.append((time.perf_counter() - middle) * 1e3)
    base_ms = statistics.median(first_stage) + statistics.median(fetching)
    hybrid = evaluate(run_from_hits(hits), qrels, ["nDCG@10"])["nDCG@10"]
    print(f"CPU: {cpu_isa()}")
    print(f"{len(queries)} dev queries; hybrid nDCG@10 {hybrid:.4f}; first stage p50 "
          f"{statistics.median(first_stage):.1f} ms, reading texts p50 {statistics.median(fetching):.1f} ms")

    rows = []
    for config in args.configs.split(","):
        precision, length = config.split(":")
        length_ = int(length)
        reranker = CrossEncoder(args.model, precision=precision, max_length=length_)
        reranker.score(queries[sample[0]], [texts[h.id] for h in hits[sample[0]][:10]])  # warm-up
        latency = {}
        for depth in depths:
            times = []
            for qid in sample:
                start = time.perf_counter()
                reranker.score(queries[qid], [texts[h.id] for h in hits[qid][:depth]])
                times.append((time.perf_counter() - start) * 1e3)
            latency[depth] = statistics.median(times)
        start = time.perf_counter()
        scores = {q: reranker.score(queries[q], [texts[h.id] for h in hits[q]]) for q in queries}
        pairs_per_s = sum(len(s) for s in scores.values()) / (time.perf_counter() - start)
        quality = {}
        for depth in depths:
            for weight in weights:
                run = {q: reorder(hits[q][:depth], [float(s) for s in np.asarray(scores[q])[:depth]], weight)
                       + hits[q][depth:] for q in queries}
                quality[depth, weight] = evaluate(run_from_hits(run), qrels, ["nDCG@10"])["nDCG@10"]
        rows.append((precision, length_, pairs_per_s, latency, quality))
        print(f"{precision:>5} {length_:>4}  {pairs_per_s:6.1f} pairs/s  " + "  ".join(
            f"@{d}: {base_ms + latency[d]:6.1f} ms " + "/".join(f"{quality[d, w]:.4f}" for w in weights)
            for d in depths) + f"  (nDCG@10 at weights {'/'.join(map(str, weights))})", flush=True)

    within = [(q, p, n, d, w) for p, n, _, lat, qual in rows for (d, w), q in qual.items()
              if base_ms + lat[d] <= args.budget_ms]
    if within:
        best = max(within)
        print(f"best within {args.budget_ms:g} ms per query: {best[1]} at {best[2]} word pieces, depth {best[3]}, "
              f"weight {best[4]}: nDCG@10 {best[0]:.4f}")


if __name__ == "__main__":
    main()
