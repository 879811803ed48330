"""What do facets cost a query: the first stage's p50 with and without counting years, journals, MeSH and
publication types over its top 200?

Each query runs through a first-stage pipeline plain (its top k) and with every facet, alternately, each timed by
the pipeline's own clock (``first_stage``, encoding included). The facets are counted by the request that ranks
the hits (:mod:`biorank.stages.facets`: a ``diversified_sampler`` of the top 200 documents under the query's own
score). Two alternatives are timed beside it, end to end the same way: the first stage fetching its top 200 and one
aggregation request counting their first blocks (the route of ``rrf``, ``minmax`` and ``os-hybrid``), and the
same 200 fetched and their metadata read (``mget``) and counted in Python.

    biorank index ../shared/data/pubmed/medline16n0902.xml.gz --index medline --no-sentences
    python -m benchmarks.facets_cost --index medline                  # 200 SciFact claims, hybrid and bm25
    python -m benchmarks.facets_cost --index medline --limit 100 --modes hybrid

The budget is 20% of the first stage's p50 (the record's ``overhead_pct``); a machine shared with other work
disturbs every variant alike, since they alternate query by query.
"""

from __future__ import annotations

import os
import time
from collections import Counter

from benchmarks import suite
from biorank import Pipeline, Searcher, SearchSettings
from biorank.evaluation.topics import read_queries
from biorank.stages.facets import FACET_CANDIDATES, FACETS
from biorank.store.inspection import first_blocks
from biorank.types import Answer

COLUMNS = suite.columns(("mode", "mode"), ("plain_p50", "first stage p50 ms", ".1f"),
                        ("faceted_p50", "with facets p50 ms", ".1f"), ("overhead_pct", "overhead %", "+.1f"),
                        ("two_requests_p50", "top 200 + count request p50 ms", ".1f"),
                        ("python_p50", "top 200 + count in Python p50 ms", ".1f"))


def _python_count(client, index: str, ids: list[str]) -> dict[str, Counter]:
    """The alternative: the candidates' fields fetched and counted here."""
    stored = first_blocks(client, index, ids, list(FACETS.values()))
    counts: dict[str, Counter] = {name: Counter() for name in FACETS}
    for doc in stored.values():
        for name, field in FACETS.items():
            value = doc.get(field)
            counts[name].update(value if isinstance(value, list) else [] if value is None else [value])
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, index="medline", queries="scifact-claims-train")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--modes", default="hybrid,bm25")
    parser.add_argument("--warm", type=int, default=10, help="unmeasured queries per mode first")
    args = parser.parse_args(argv)
    client = suite.connect(args)
    queries = list(read_queries(args.queries).values())[: args.limit or 200]
    base = Searcher.open(client, args.index, SearchSettings(mode="bm25"))
    base.load()  # the query encoder, loaded before anything is timed
    suite.header(f"{len(queries)} queries, k = {args.k}, facets over the top {FACET_CANDIDATES}; "
                 f"load average {os.getloadavg()[0]:.1f} at the start")
    rows = []
    for mode in args.modes.split(","):
        searcher = base.with_settings(mode=mode)
        plain = Pipeline.build(mode, searcher)
        faceted = Pipeline.build(mode, searcher, facets=tuple(FACETS))
        for text in queries[: args.warm]:
            plain.search(text, args.k)
            faceted.search(text, args.k)
        times: dict[str, list[float]] = {"plain": [], "faceted": [], "two_requests": [], "python": []}
        counter = faceted.first.facets
        assert counter is not None and counter.in_request(faceted.searcher)
        for text in queries:
            times["plain"].append(plain.search(text, args.k).ms["first_stage"])
            times["faceted"].append(faceted.search(text, args.k).ms["first_stage"])
            started = time.perf_counter()
            counter.count([Answer("q", text, hits=searcher.search(text, FACET_CANDIDATES))], args.k)
            times["two_requests"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            _python_count(client, args.index, [h.id for h in searcher.search(text, FACET_CANDIDATES)])
            times["python"].append((time.perf_counter() - started) * 1000)
        p50 = {name: suite.percentile(values, 50) for name, values in times.items()}
        rows.append({"mode": mode, **{f"{name}_p50": round(value, 2) for name, value in p50.items()},
                     "overhead_pct": round(100 * (p50["faceted"] / p50["plain"] - 1), 1)})
    documents = client.count(index=args.index, body={"query": {"term": {"block": 0}}})["count"]
    suite.record(args, COLUMNS, rows, client=client,
                 settings={"queries": len(queries), "k": args.k, "candidates": FACET_CANDIDATES,
                           "facets": list(FACETS), "index": args.index, "documents": documents},
                 notes=f"{os.cpu_count()} cores shared with other work; load average "
                       f"{os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
