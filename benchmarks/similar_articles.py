"""How often are an abstract's similar articles (``biorank similar``) the other abstracts a SciFact claim cites with
it, per mode?

A claim that cites several abstracts ties them to one question, so each is a good "similar article" of the
others. For every train claim citing at least two abstracts of the index, each cited abstract in turn is the
document whose ``k`` similar articles are asked for (:func:`biorank.retrieval.similar.similar_articles`), and the
record counts how often another abstract cited by the same claim is among them (hit@k) and what share of those
others are (recall@k), with the milliseconds a call takes (p50/p95, one at a time, the client's wall time). The
index is SciFact's whole corpus, built once with ``biorank index`` (no sentences needed):

    biorank index ../shared/data/scifact/corpus.jsonl --index scifact --no-sentences
    python -m benchmarks.similar_articles --index scifact --lambdas 0.0005 0.001 0.003
"""

from __future__ import annotations

import json
import os
import time

from benchmarks import suite
from biorank import Searcher
from biorank.retrieval.searcher import SearchSettings
from biorank.retrieval.similar import SIMILAR_MODES, similar_articles
from biorank.store.inspection import first_blocks


def cited_groups(path: str, present: set[str]) -> list[list[str]]:
    """The abstracts each claim cites, of those in the index, for the claims citing at least two of them."""
    groups = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            cited = [str(d) for d in json.loads(line).get("cited_doc_ids", ())]
            cited = list(dict.fromkeys(d for d in cited if d in present))
            if len(cited) >= 2:
                groups.append(cited)
    return groups


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, index="scifact")
    parser.add_argument("-k", type=int, default=10, help="similar articles per abstract (default 10)")
    parser.add_argument("--lambdas", type=float, nargs="*", default=(),
                        help="hybrid rows with these λ too, beside the index's own (a document as the query has many "
                             "more terms than a typed one)")
    parser.add_argument("--claims", default=str(suite.DATA / "scifact" / "claims_train.jsonl"),
                        help="SciFact claims with cited_doc_ids (default: the train claims)")
    args = parser.parse_args(argv)
    started, load = time.time(), os.getloadavg()
    client = suite.connect(args)
    with open(args.claims, encoding="utf-8") as f:
        ids = {str(d) for line in f for d in json.loads(line).get("cited_doc_ids", ())}
    present = set(first_blocks(client, args.index, sorted(ids), ["id"]))
    groups = cited_groups(args.claims, present)
    asked = [(doc, [d for d in group if d != doc]) for group in groups for doc in group]
    base = Searcher.open(client, args.index)
    rows = []
    runs = [(mode, None) for mode in SIMILAR_MODES] + [("hybrid", lam) for lam in args.lambdas]
    for mode, lam in runs:
        searcher = base.with_search(SearchSettings(mode=mode, lam=lam))
        similar_articles(searcher, asked[0][0], args.k)  # warm: the first call pays for caches
        hits = recall = 0.0
        ms = []
        for doc, others in asked:
            t0 = time.perf_counter()
            found = {h.id for h in similar_articles(searcher, doc, args.k).hits}
            ms.append((time.perf_counter() - t0) * 1000)
            shared = len(found & set(others))
            hits += shared > 0
            recall += shared / len(others)
        rows.append({"mode": mode if lam is None else f"hybrid, λ = {lam:g}", "hit": hits / len(asked),
                     "recall": recall / len(asked), **suite.summary(ms)})
    cols = suite.columns(("mode", "mode"), ("hit", f"another cited abstract in the top {args.k}", ".3f"),
                         ("recall", f"recall@{args.k} of the others", ".3f"), ("p50", "p50 ms", ".1f"),
                         ("p95", "p95 ms", ".1f"))
    suite.record(args, cols, rows, client=client, settings={
        "index": args.index, "model": base.record.model, "k": args.k, "claims": len(groups),
        "abstracts_asked": len(asked), "lambda": base.lam,
        "minutes": round((time.time() - started) / 60, 1),
        "load_average": {"start": round(load[0], 1), "end": round(os.getloadavg()[0], 1)}})


if __name__ == "__main__":
    main()
