"""Do vectors encoded elsewhere (``biorank encode`` on a GPU, loaded with ``index --vectors``) rank as those encoded
here do?

Issue 52, item 1: SciFact's abstracts encoded without sentences on another machine or in another precision,
loaded into an index here, beside an index of the same file encoded on this CPU. Per mode (dense, hybrid), over
SciFact's dev claims (BEIR qrels): the share of claims whose top 10 are the same ids in the same order, and as
sets, the mean overlap of the top 10, and nDCG@10 on each index with the difference (the limit: within 0.001).

    biorank index ../shared/data/scifact/corpus.jsonl --index carried-here --no-sentences
    biorank index ../shared/data/scifact/corpus.jsonl --index carried-h200 --no-sentences \\
        --vectors gpu-back/results/vectors
    python -m benchmarks.studies.carried_vectors --here carried-here --there carried-h200 --variant h200 \\
        --notes "encoded on one H200 in torch bf16 (benchmarks/gpu_session.py)"

The record is ``carried_vectors-<variant>``.
"""

from __future__ import annotations

from benchmarks import suite
from biorank import Searcher, SearchSettings
from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries

MODES = ("dense", "hybrid")
COLUMNS = suite.columns(
    ("mode", "mode"), ("same_top10", "claims with the same top 10, in order", ".4f"),
    ("same_top10_set", "claims with the same top-10 set", ".4f"), ("top10_overlap", "top-10 overlap", ".4f"),
    ("ndcg_here", "nDCG@10 here", ".4f"), ("ndcg_there", "nDCG@10 carried", ".4f"),
    ("ndcg_diff", "difference", "+.4f"))


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("--here", required=True, help="the index encoded on this machine")
    parser.add_argument("--there", required=True, help="the index loaded with --vectors from elsewhere")
    parser.add_argument("--variant", required=True, help="names the record: where the vectors were encoded")
    parser.add_argument("--notes", default="", help="how and where the carried vectors were encoded")
    args = parser.parse_args(argv)

    client = suite.connect(args)
    qrels = read_qrels(suite.data("scifact-qrels-train"))
    queries = read_queries(suite.data("scifact-queries-train"))
    dev = {q: queries[q] for q in split_judged(qrels, "dev") if q in queries}
    suite.header(f"{len(dev)} SciFact dev claims; {args.here} against {args.there}")
    rows = []
    for mode in MODES:
        here, there = (Searcher.open(client, index, SearchSettings(mode=mode)).search_many(dev, 10)
                       for index in (args.here, args.there))
        ids = {q: ([h.id for h in here[q]], [h.id for h in there[q]]) for q in dev}
        ndcg = [evaluate(run_from_hits(hits), {q: qrels[q] for q in dev}, ["nDCG@10"])["nDCG@10"]
                for hits in (here, there)]
        rows.append({"mode": mode,
                     "same_top10": sum(a == b for a, b in ids.values()) / len(dev),
                     "same_top10_set": sum(set(a) == set(b) for a, b in ids.values()) / len(dev),
                     "top10_overlap": sum(len(set(a) & set(b)) / max(len(a), 1) for a, b in ids.values()) / len(dev),
                     "ndcg_here": ndcg[0], "ndcg_there": ndcg[1], "ndcg_diff": ndcg[1] - ndcg[0]})
    suite.record(args, COLUMNS, rows, variant=args.variant, client=client, notes=args.notes or None,
                 settings={"claims": len(dev), "here": args.here, "there": args.there})


if __name__ == "__main__":
    main()
