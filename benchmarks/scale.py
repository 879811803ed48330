"""How does the first stage grow with the index: 10K, 100K and 1M blocks on one node, node-side only?

The encoder is out of every figure: the blocks are SciFact's 9,878, indexed once by biorank's own pipeline
(``--no-sentences``, all-MiniLM-L6-v2) with their bulk actions recorded, and the 809 train claims' vectors are
encoded once (both kept in ``--work``, shared with ``studies/engine_versions.py``).

**How an index grows** (also for ``studies/engine_versions.py``): copy ``g`` of the real blocks takes ids
``g<g>:<id>`` and each vector perturbed by Gaussian noise and re-normalised (cosine ~0.9 to its original), so
the HNSW graph, the exact script and the candidate union work over N distinct vectors; BM25 sees each text N/9,878
times, which keeps the term statistics' shape while every posting list grows with N, as a larger collection of
similar text would. The copies are streamed to the node, never held in memory.

For each size: indexing rate (refresh slowed as ``biorank index`` does), warm p50/p95 of 150 claims one at a time
(k = 10, after a warm-up pass) for bm25 (``passage``), dense (HNSW kNN), the exact hybrid and hybrid-approx at
K = 100/300/1000; for hybrid-approx, overlap@10 with the exact hybrid's ids and nDCG@10 of both on SciFact's dev
claims (the real documents' judgements; a copy counts as not relevant, for both); heap after the queries and the
index's disk size.

    python -m benchmarks.scale --sizes 10k,100k          # the sizes to run (1m: ~30 min of indexing)
    python -m benchmarks.scale --sizes 1m --keep --avx2  # keep the index to measure it again; JVM held to AVX2

What it showed (records ``scale-*.json``): the exact hybrid grows with the collection (every block scored),
hybrid-approx with K; past ~100K blocks the union of approx-300 is the faster route at the same top 10.
nDCG@10 falls with size because a copy of a relevant abstract counts as not relevant.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from benchmarks import suite
from biorank import Encoder, Indexer, IndexOptions, Searcher, SearchSettings, connect
from biorank.cluster.local import LocalNode, NodeSettings
from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.models.encoder import PACKAGED_MODEL
from biorank.retrieval.searcher import encode_queries
from biorank.store.indices import refresh_paused
from biorank.store.server import bm25_similarity
from biorank.store.writer import BulkWriter

SIZES = {"10k": 1, "100k": 10, "300k": 30, "1m": 100}
CANDIDATES = (100, 300, 1000)
SETTING_KEYS = ("number_of_shards", "number_of_replicas", "knn", "similarity", "analysis")


class RecordingWriter(BulkWriter):
    """Biorank's bulk writer that also keeps every action it sends, to replay them elsewhere."""

    def __init__(self, client, out: list[dict]) -> None:
        super().__init__(client)
        self._out = out

    def write(self, actions):
        actions = list(actions)
        self._out.extend(actions)
        return super().write(actions)


def prepare(work: Path, model: str) -> None:
    """Index SciFact once (recording its bulk actions) and encode the train claims, unless ``work`` has both."""
    if (work / "actions.jsonl.gz").is_file():
        return
    work.mkdir(parents=True, exist_ok=True)
    node = LocalNode(NodeSettings(home=work / "node"))
    client = connect(node.start())
    encoder = Encoder(model)
    index = f"bench-engines-{uuid.uuid4().hex[:8]}"
    actions: list[dict] = []
    options = IndexOptions(index=index, sentences=False, rejects=work / "rejects.tsv")
    Indexer(client, options, encoder=encoder, writer=RecordingWriter(client, actions)).run(
        [suite.data("scifact-corpus")])
    body = client.indices.get(index=index)[index]
    settings = {k: v for k, v in body["settings"]["index"].items() if k in SETTING_KEYS}
    (work / "index.json").write_text(json.dumps({"settings": {"index": settings}, "mappings": body["mappings"]}))
    client.indices.delete(index=index)
    node.stop()
    queries = read_queries(suite.data("scifact-queries-train"))
    (work / "query_vectors.json").write_text(json.dumps(encode_queries(encoder, queries)))
    with gzip.open(work / "actions.jsonl.gz", "wt", encoding="utf-8") as f:
        for action in actions:
            f.write(json.dumps(action) + "\n")


def with_common_arguments(parser: argparse.ArgumentParser, sizes: dict) -> argparse.ArgumentParser:
    """The arguments of every benchmark over the recorded blocks."""
    parser.add_argument("--sizes", default="10k,100k", help=f"of {', '.join(sizes)}")
    parser.add_argument("--model", default=PACKAGED_MODEL, help="encoder of the recorded vectors")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "biorank-bench-engines")
    parser.add_argument("--heap", default="2g")
    return parser


def recorded(work: Path, model: str) -> tuple[dict, list[dict], dict[str, list[float]]]:
    """The index body, the recorded bulk actions and the claims' vectors in ``work`` (made first if missing)."""
    prepare(work, model)
    body = json.loads((work / "index.json").read_text())
    with gzip.open(work / "actions.jsonl.gz", "rt", encoding="utf-8") as f:
        actions = [json.loads(line) for line in f]
    return body, actions, json.loads((work / "query_vectors.json").read_text())


def node_figures(client, index: str) -> dict[str, float]:
    """The node's heap in use and the index's size on disk, in MB."""
    jvm = client.nodes.stats(metric="jvm")["nodes"]
    store = client.indices.stats(index=index, metric="store")["indices"][index]["primaries"]["store"]
    return {"heap_mb": sum(n["jvm"]["mem"]["heap_used_in_bytes"] for n in jvm.values()) / 1e6,
            "disk_mb": store["size_in_bytes"] / 1e6}


def grown(actions: list[dict], copies: int, seed: int = 7) -> Iterator[dict]:
    """``actions`` ``copies`` times, one at a time, each copy past the first with new ids and perturbed unit
    vectors."""
    rng = np.random.default_rng(seed)
    yield from actions
    for g in range(1, copies):
        for a in actions:
            source = dict(a["_source"])
            v = np.asarray(source["embedding"], dtype=np.float32)
            v = v + rng.normal(0, 0.025, v.shape).astype(np.float32)
            source["embedding"] = (v / np.linalg.norm(v)).tolist()
            source["id"] = f"g{g}:{source['id']}"
            yield {**a, "_id": f"g{g}:{a['_id']}", "_source": source}


def latencies(searcher: Searcher, queries: dict[str, str], vectors: dict) -> tuple[float, float]:
    """p50 and p95 ms of ``queries`` asked one at a time (k = 10), after a warm-up pass."""
    times = suite.timed(lambda q: searcher.search_many({q: queries[q]}, 10, vectors=vectors), list(queries),
                        warm=len(queries))
    return suite.percentile(times, 50), suite.percentile(times, 95)


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
    exact = Searcher.open(client, index, settings["hybrid"]).search_many(sample, 10, vectors=vectors)
    exact_dev = Searcher.open(client, index, settings["hybrid"]).search_many(dev, 10, vectors=vectors)
    judged = {q: qrels[q] for q in dev}
    figures["hybrid_ndcg"] = evaluate(run_from_hits(exact_dev), judged, ["ndcg@10"])["ndcg@10"]
    for name, setting in settings.items():
        searcher = Searcher.open(client, index, setting)
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


SPEED = suite.columns(
    ("blocks", "blocks", ","), ("blocks_per_s", "blocks/s", ",.0f"),
    *((f"{n}_p50+{n}_p95", f"{n} p50 / p95 ms", ".1f") for n in ("bm25", "dense", "hybrid",
                                                                   *(f"approx-{k}" for k in CANDIDATES))),
    ("heap_mb", "heap MB", ",.0f"), ("disk_mb", "disk MB", ",.0f"))
QUALITY = suite.columns(("blocks", "blocks", ","), ("hybrid_ndcg", "exact nDCG@10", ".4f"),
                        *((f"approx-{k}_overlap", f"overlap@10 K={k}", ".3f") for k in CANDIDATES),
                        *((f"approx-{k}_ndcg", f"nDCG@10 K={k}", ".4f") for k in CANDIDATES))


def main(argv: list[str] | None = None) -> None:
    parser = with_common_arguments(suite.parser(__doc__, __file__, cluster=False), SIZES)
    parser.add_argument("--avx2", action="store_true", help="hold the node's JVM to AVX2 (-XX:UseAVX=2)")
    parser.add_argument("--keep", action="store_true",
                        help="leave each index for a later run, and measure one left complete by an earlier one")
    args = parser.parse_args(argv)

    body, actions, vectors = recorded(args.work, args.model)
    queries = read_queries(suite.data("scifact-queries-train"))
    qrels = read_qrels(suite.data("scifact-qrels-train"))
    dev = {q: queries[q] for q in split_judged(qrels, "dev")}

    node = LocalNode(NodeSettings(home=args.work / "node", heap=args.heap, nodes=1))
    hold_to_avx2(node, args.avx2)
    client = connect(node.start())
    status = node.status()
    suite.header(f"{', node JVM held to AVX2' if args.avx2 else ''}OpenSearch {status.engine_version}, "
                 f"{status.java}, vector SIMD {status.vector_simd}; heap {args.heap}; {len(actions):,} recorded "
                 f"blocks of {args.model}")
    results = [measure(client, size, body, actions, vectors, queries, dev, qrels, args.keep)
               for size in args.sizes.split(",")]
    settings = {"sizes": args.sizes, "model": args.model, "heap": args.heap, "node_jvm_avx2": args.avx2,
                "java": status.java, "vector_simd": status.vector_simd, "queries": 150, "k": 10}
    speed = [{k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()
              if not ("ndcg" in k or "overlap" in k)} for r in results]
    variant = args.sizes.replace(",", "-") + ("-avx2" if args.avx2 else "")
    suite.record(args, SPEED, speed, variant=f"speed-{variant}", settings=settings, client=client)
    suite.record(args, QUALITY, [{k: v for k, v in r.items() if k == "blocks" or "ndcg" in k or "overlap" in k}
                                 for r in results], variant=f"quality-{variant}", settings=settings, client=client)
    node.stop()


if __name__ == "__main__":
    main()
