"""What does a warm query cost per first-stage mode: p50/p95 over SciFact claims, one at a time?

Each query is timed end to end as a user's ``Searcher.search`` call sees it: encoding the query (for every
mode but bm25) plus the round trips to the cluster. The encoder's share is a row of its own; ``--reranker``
adds the stages of hybrid -> rerank 20 -> snippets as ``biorank query --rerank --snippets`` runs them.

    biorank index ../shared/data/scifact/corpus.jsonl --index scifact
    python -m benchmarks.query_latency --index scifact            # all 809 claims, k = 10
    python -m benchmarks.query_latency --index scifact --limit 150 --modes bm25,hybrid

Why the modes cost what they cost (records ``query_latency*.json``): the exact hybrid costs what exact dense
costs (one script over every block on the node) plus the query's encoding; BM25 needs no encoder. The
approximate modes pay for collecting and fetching K candidates per list, so at SciFact's size they are slower
than scoring every block; the exact mode's cost grows with the collection, the approximate ones' with K.
"""

from __future__ import annotations

from benchmarks import suite
from biorank import AskedPlacement, Pipeline, Searcher, SearchSettings
from biorank.evaluation.topics import read_queries
from biorank.retrieval.searcher import MODES

COLUMNS = suite.columns(("mode", "mode"), ("p50", "p50 ms", ".1f"), ("p95", "p95 ms", ".1f"),
                        ("mean", "mean ms", ".1f"))
STAGES = suite.columns(("precision", "cross-encoder"), ("stage", "stage"), ("p50", "p50 ms", ".1f"),
                       ("p95", "p95 ms", ".1f"))


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, index="scifact", queries="scifact-queries-train")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--precision", default="auto", help="the query encoder's backend (auto: ONNX Runtime)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--warm", type=int, default=20, help="unmeasured queries per mode first")
    parser.add_argument("--reranker", help="a cross-encoder folder: also time hybrid -> rerank 20 -> snippets")
    parser.add_argument("--rerank-precisions", default="auto", help="comma-separated, for --reranker")
    args = parser.parse_args(argv)
    client = suite.connect(args)
    queries = list(read_queries(args.queries).values())[: args.limit or None]
    base = Searcher.open(client, args.index, SearchSettings(mode="bm25", placement=AskedPlacement(args.precision)))
    encoder = base.load()  # the index's query encoder, loaded before anything is timed
    suite.header(f"{len(queries)} queries, k = {args.k}, query encoder {encoder.precision}")

    rows = [{"mode": "(query encoding alone)", **suite.summary(
        suite.timed(lambda text: encoder.encode([text]), queries, warm=args.warm))}]
    for mode in args.modes.split(","):
        searcher = base.with_settings(mode=mode)
        rows.append({"mode": mode, **suite.summary(
            suite.timed(lambda text, s=searcher: s.search(text, args.k), queries, warm=args.warm))})
    p50 = {row["mode"]: row["p50"] for row in rows}
    ratio = {"hybrid_over_bm25": round(p50["hybrid"] / p50["bm25"], 2)} if {"hybrid", "bm25"} <= p50.keys() else {}
    settings = {"index": args.index, "queries": len(queries), "k": args.k, "encoder": encoder.model_name,
                "encoder_precision": encoder.precision, "warm": args.warm, **ratio}
    suite.record(args, COLUMNS, rows, settings=settings, client=client)
    if args.reranker:
        stages = []
        for precision in args.rerank_precisions.split(","):
            stages += pipeline_stages(base, queries, args.k, args.reranker, precision)
        suite.record(args, STAGES, stages, variant="pipeline", client=client,
                     settings={**settings, "reranker": args.reranker, "system": "hybrid+rerank+snippets"})


def pipeline_stages(base: Searcher, queries: list[str], k: int, reranker: str, precision: str) -> list[dict]:
    """p50/p95 of each stage of hybrid -> rerank 20 -> snippets, as ``biorank query --rerank --snippets`` runs it."""
    pipeline = Pipeline.build("hybrid+rerank+snippets", base, reranker=reranker,
                              placement=AskedPlacement(precision))
    stages: dict[str, list[float]] = {}

    def search(text: str) -> None:
        for stage, ms in pipeline.search(text, k).ms.items():
            stages.setdefault(stage, []).append(ms)

    suite.timed(search, queries, warm=10)
    stages = {stage: ms[-len(queries):] for stage, ms in stages.items()}  # the warm-up's times left out
    return [{"precision": pipeline.cross_encoder.precision, "stage": stage, **suite.summary(ms)}
            for stage, ms in stages.items()]


if __name__ == "__main__":
    main()
