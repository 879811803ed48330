"""How the first stage grows with the index: 10K, 100K and 1M blocks on one node, node-side only.

The encoder is out of every figure: the blocks are SciFact's 9,878, indexed once by biorank's own pipeline
(``--no-sentences``, all-MiniLM-L6-v2) with their bulk actions recorded, and the 809 train claims' vectors are
encoded once (both kept in ``--work``, shared with ``engine_versions.py``).

**How an index grows** (the same as ``engine_versions.py``): copy ``g`` of the real blocks takes ids
``g<g>:<id>`` and each vector perturbed by Gaussian noise and re-normalised (cosine ~0.9 to its original), so
the HNSW graph, the exact script and the candidate union work over N distinct vectors; BM25 sees each text N/9,878
times, which keeps the term statistics' shape while every posting list grows with N, as a larger collection of
similar text would. The copies are streamed to the node, never held in memory.

For each size: indexing rate (refresh slowed as ``biorank index`` does), warm p50/p95 of 150 claims one at a time
(k = 10, after a warm-up pass) for bm25 (``passage``), dense (HNSW kNN), the exact hybrid and hybrid-approx at
K = 100/300/1000; for hybrid-approx, overlap@10 with the exact hybrid's ids and nDCG@10 of both on SciFact's dev
claims (the real documents' judgements; a copy counts as not relevant, for both); heap after the queries and the
index's disk size.

    python benchmarks/scale.py --sizes 10k,100k          # the sizes to run (1m: ~30 min of indexing)
    python benchmarks/scale.py --sizes 1m --keep --avx2  # keep the index to measure it again; JVM held to AVX2

Result, 2026-11-25, AMD EPYC, 2 CPUs, AVX2 only, OpenSearch 2.19.1 on Java 17 (no vector SIMD), heap 2 GB, node
alone on the machine (``--sizes 10k,100k``, then ``--sizes 300k``; p50 / p95 ms):

    | blocks | blocks/s | bm25 | dense | exact hybrid | approx K=100 | K=300 | K=1000 | heap MB | disk MB |
    |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
    | 9,878 | 276 | 8.3/14.8 | 8.5/14.8 | 22.7/39.4 | 34.2/48.0 | 62.0/85.0 | 138.3/265.6 | 872 | 137 |
    | 98,780 | 309 | 10.7/15.5 | 10.7/15.8 | 120.4/176.3 | 40.0/51.6 | 63.9/92.2 | 214.0/345.4 | 452 | 1,367 |
    | 296,340 | 314 | 16.9/26.1 | 12.6/17.4 | 217.8/328.0 | 49.1/62.9 | 88.8/105.4 | 203.5/309.1 | 649 | 2,605 |

    | blocks | overlap@10 with the exact hybrid, K=100 / 300 / 1000 | SciFact dev nDCG@10, exact / K=100 / 300 / 1000 |
    |---:|---|---|
    | 9,878 | 0.999 / 1.000 / 1.000 | 0.7437 / 0.7437 / 0.7437 / 0.7437 |
    | 98,780 | 1.000 / 1.000 / 1.000 | 0.6221 / 0.6221 / 0.6221 / 0.6221 |
    | 296,340 | 0.987 / 1.000 / 1.000 | 0.6052 / 0.6052 / 0.6052 / 0.6052 |

nDCG@10 falls with size because a copy of a relevant abstract counts as not relevant.

Result, 2026-11-25, Intel Xeon, 2 CPUs, AVX-512 present, the node's JVM held to AVX2 (``--avx2``), otherwise as
above (``--sizes 10k,1m``, then ``--sizes 1m --keep`` for the 1M figures, after its merges had settled):

    | blocks | blocks/s | bm25 | dense | exact hybrid | approx K=100 | K=300 | K=1000 | heap MB | disk MB |
    |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
    | 9,878 | 548 | 3.8/9.8 | 4.9/11.7 | 14.3/27.3 | 22.9/30.1 | 35.7/50.2 | 98.6/183.9 | — | — |
    | 987,800 | 607 | 23.3/42.0 | 10.6/13.1 | 903.9/1103.3 | 34.0/53.2 | 53.1/72.3 | 131.6/210.7 | 1,339 | 7,414 |

    987,800 blocks: overlap@10 K=100/300/1000 0.946 / 0.982 / 1.000; nDCG@10 exact 0.5800, 0.5859 / 0.5800 / 0.5800
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from engine_versions import DATA, grown, latencies, node_figures, recorded, with_common_arguments
from machine import cpu_isa

from biorank.cluster.local import LocalNode, NodeSettings
from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.retrieval.searcher import Searcher, SearchSettings
from biorank.store.client import connect
from biorank.store.indices import refresh_paused
from biorank.store.server import bm25_similarity
from biorank.store.writer import BulkWriter

SIZES = {"10k": 1, "100k": 10, "300k": 30, "1m": 100}
CANDIDATES = (100, 300, 1000)


def hold_to_avx2(node: LocalNode, hold: bool) -> None:
    """Run the node's JVM with ``-XX:UseAVX=2`` (or take that back), so that a CPU with AVX-512 measures the code
    an AVX2-only CPU runs: the JIT's own vector instructions are all the node has on Java 17 (no Lucene SIMD)."""
    options = node.install_dir / "config" / "jvm.options.d" / "zz-avx2.options"
    if hold:
        options.write_text("-XX:UseAVX=2\n")
    else:
        options.unlink(missing_ok=True)


def measure(client, size: str, body: dict, actions: list[dict], vectors: dict, queries: dict, dev: dict,
            qrels: dict, keep: bool = False) -> dict:
    index = f"bench-scale-{size}"
    blocks = len(actions) * SIZES[size]
    figures: dict = {"size": size, "blocks": blocks}
    if keep and client.indices.exists(index=index) and client.count(index=index)["count"] == blocks:
        print(f"{size}: {index} kept by an earlier --keep run, not indexed again (no indexing rate)", flush=True)
        figures["blocks_per_s"] = float("nan")
    else:
        figures["blocks_per_s"] = built(client, index, body, actions, SIZES[size])
        print(f"{size}: {blocks:,} blocks at {figures['blocks_per_s']:.0f} blocks/s", flush=True)

    sample = dict(list(queries.items())[:150])
    # "hybrid" is the exact score over every block here, whatever the size: hybrid's default route above
    # --exact-limit is the union of approx-300.
    settings = {"bm25": SearchSettings(mode="bm25", fields="passage"), "dense": SearchSettings(mode="dense"),
                "hybrid": SearchSettings(mode="hybrid", exact_limit=sys.maxsize)}
    settings |= {f"approx-{k}": SearchSettings(mode="hybrid-approx", candidates=k) for k in CANDIDATES}
    exact = Searcher(client, index, settings["hybrid"]).search_many(sample, 10, vectors=vectors)
    exact_dev = Searcher(client, index, settings["hybrid"]).search_many(dev, 10, vectors=vectors)
    judged = {q: qrels[q] for q in dev}
    figures["hybrid_ndcg"] = evaluate(run_from_hits(exact_dev), judged, ["ndcg@10"])["ndcg@10"]
    for name, setting in settings.items():
        searcher = Searcher(client, index, setting)
        figures[f"{name}_p50"], figures[f"{name}_p95"] = latencies(searcher, sample, vectors)
        if name.startswith("approx"):
            hits = searcher.search_many(sample, 10, vectors=vectors)
            figures[f"{name}_overlap"] = float(np.mean([
                len({h.id for h in hits[q]} & {h.id for h in exact[q]}) / 10 for q in sample]))
            dev_hits = searcher.search_many(dev, 10, vectors=vectors)
            figures[f"{name}_ndcg"] = evaluate(run_from_hits(dev_hits), judged, ["ndcg@10"])["ndcg@10"]
        print(f"  {name}: " + ", ".join(f"{k.split('_', 1)[1]} {v:.3f}" for k, v in figures.items()
                                        if k.startswith(name + "_")), flush=True)
    figures |= node_figures(client, index)
    if not keep:
        client.indices.delete(index=index)
    return figures


def built(client, index: str, body: dict, actions: list[dict], copies: int) -> float:
    """Index ``copies`` of ``actions`` into a new ``index`` as `biorank index` leaves it; blocks per second."""
    body["settings"]["index"]["similarity"]["default"]["type"] = bm25_similarity(client)
    client.indices.delete(index=index, ignore_unavailable=True)  # left by an interrupted run
    client.indices.create(index=index, body=body)
    started = time.monotonic()
    with refresh_paused(client, [index]):
        failures = BulkWriter(client).write({**a, "_index": index} for a in grown(actions, copies))
    seconds = time.monotonic() - started
    assert not failures, failures[:3]
    client.indices.refresh(index=index)
    count = client.count(index=index)["count"]
    assert count == len(actions) * copies, count
    # Flushed, not force-merged (many segments, each with its own HNSW graph).
    client.indices.flush(index=index)
    return count / seconds


def main() -> None:
    parser = with_common_arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0]), SIZES)
    parser.add_argument("--avx2", action="store_true", help="hold the node's JVM to AVX2 (-XX:UseAVX=2)")
    parser.add_argument("--keep", action="store_true",
                        help="leave each index for a later run, and measure one left complete by an earlier one")
    args = parser.parse_args()

    body, actions, vectors = recorded(args.work, args.model)
    queries = read_queries(DATA / "queries_train.jsonl")
    qrels = read_qrels(DATA / "qrels" / "train.tsv")
    dev = {q: queries[q] for q in split_judged(qrels, "dev")}

    node = LocalNode(NodeSettings(home=args.work / "node", heap=args.heap, nodes=1))
    hold_to_avx2(node, args.avx2)
    client = connect(node.start())
    status = node.status()
    print(f"CPU: {cpu_isa()}{', node JVM held to AVX2' if args.avx2 else ''}; OpenSearch {status.engine_version}, "
          f"{status.java}, vector SIMD {status.vector_simd}; heap {args.heap}; {len(actions):,} recorded blocks of "
          f"{args.model}")
    results = [measure(client, size, body, actions, vectors, queries, dev, qrels, args.keep)
               for size in args.sizes.split(",")]
    node.stop()
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))

    names = ["bm25", "dense", "hybrid", *(f"approx-{k}" for k in CANDIDATES)]
    print("\n| blocks | blocks/s | " + " | ".join(f"{n} p50/p95 ms" for n in names) + " | heap MB | disk MB |")
    print("|---:|---:|" + "---:|" * len(names) + "---:|---:|")
    for r in results:
        print(f"| {r['blocks']:,} | {r['blocks_per_s']:.0f} | "
              + " | ".join(f"{r[f'{n}_p50']:.1f} / {r[f'{n}_p95']:.1f}" for n in names)
              + f" | {r['heap_mb']:.0f} | {r['disk_mb']:.0f} |")
    print("\nhybrid-approx against the exact hybrid (overlap@10 on 150 claims; nDCG@10 on the dev claims):")
    for r in results:
        print(f"  {r['blocks']:,} blocks: exact nDCG@10 {r['hybrid_ndcg']:.4f}; "
              + "; ".join(f"K={k}: overlap {r[f'approx-{k}_overlap']:.3f}, nDCG {r[f'approx-{k}_ndcg']:.4f}"
                          for k in CANDIDATES))


if __name__ == "__main__":
    main()
