"""What does reading PubMed's syntax cost a query: the first stage's p50 of PubMed-style queries parsed, against the
same text searched plain?

The queries are made from the index's own documents, so that they find something: for each of the first
``--docs`` documents with MeSH headings (by id), a heading and a title word (``"heading"[mh] AND word``), two
title words and the year (``word AND word AND 2014[dp]``) and an alternative without reviews (``(word OR word)
NOT review[pt]``). Each runs alternately under ``--syntax auto`` (parsed: its tree a filter, its free text ranked)
and ``plain`` (the whole text ranked as words, today's request). Times are the pipeline's ``first_stage`` clock,
encoding included; the parse itself is timed apart.

    biorank index ../shared/data/pubmed/medline16n0902.xml.gz --index medline --no-sentences
    python -m benchmarks.syntax_cost --index medline
"""

from __future__ import annotations

import os
import re
import time

from benchmarks import suite
from biorank import Pipeline, Searcher, SearchSettings
from biorank.retrieval.syntax import parse

COLUMNS = suite.columns(("mode", "mode"), ("plain_p50", "plain p50 ms", ".1f"), ("parsed_p50", "parsed p50 ms", ".1f"),
                        ("overhead_pct", "overhead %", "+.1f"), ("parse_p50", "of which the parse p50 ms", ".2f"),
                        ("parsed_hits", "hits parsed (mean)", ".1f"), ("plain_hits", "hits plain (mean)", ".1f"))


def _queries(client, index: str, docs: int) -> list[str]:
    """Three PubMed-style queries from each of the first ``docs`` documents with headings, a year and a title."""
    body = {"size": docs, "sort": [{"id": "asc"}], "_source": ["title", "mesh", "year"],
            "query": {"bool": {"filter": [{"term": {"block": 0}}, {"exists": {"field": "mesh"}},
                                          {"exists": {"field": "year"}}]}}}
    queries = []
    for hit in client.search(index=index, body=body)["hits"]["hits"]:
        doc = hit["_source"]
        words = sorted({w.lower() for w in re.findall(r"[A-Za-z]{5,}", doc["title"])}, key=lambda w: (-len(w), w))
        if len(words) < 2:
            continue
        first, second = words[:2]
        queries += [f'"{doc["mesh"][0]}"[mh] AND {first}', f"{first} AND {second} AND {doc['year']}[dp]",
                    f"({first} OR {second}) NOT review[pt]"]
    return queries


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, index="medline")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--modes", default="hybrid,bm25")
    parser.add_argument("--rounds", type=int, default=3, help="times each query runs per side")
    parser.add_argument("--docs", type=int, default=40, help="documents the queries are made from (3 each)")
    args = parser.parse_args(argv)
    client = suite.connect(args)
    base = Searcher.open(client, args.index, SearchSettings(mode="bm25"))
    base.load()
    usable = [text for text in _queries(client, args.index, args.docs) if base.parse(text)]
    suite.header(f"{len(usable)} PubMed-style queries from {args.index}'s documents x {args.rounds} rounds, "
                 f"k = {args.k}; load average {os.getloadavg()[0]:.1f} at the start")
    rows = []
    for mode in args.modes.split(","):
        parsed = Pipeline.build(mode, base, search=SearchSettings(mode=mode, syntax="auto"))
        plain = Pipeline.build(mode, base, search=SearchSettings(mode=mode, syntax="plain"))
        for text in usable:  # warm
            parsed.search(text, args.k)
            plain.search(text, args.k)
        times: dict[str, list[float]] = {"parsed": [], "plain": [], "parse": []}
        hits = {"parsed": [], "plain": []}
        for _ in range(args.rounds):
            for text in usable:
                answer = parsed.search(text, args.k)
                times["parsed"].append(answer.ms["first_stage"])
                hits["parsed"].append(len(answer.hits))
                answer = plain.search(text, args.k)
                times["plain"].append(answer.ms["first_stage"])
                hits["plain"].append(len(answer.hits))
                started = time.perf_counter()
                parse(text)
                times["parse"].append((time.perf_counter() - started) * 1000)
        p50 = {name: suite.percentile(values, 50) for name, values in times.items()}
        rows.append({"mode": mode, "plain_p50": round(p50["plain"], 2), "parsed_p50": round(p50["parsed"], 2),
                     "overhead_pct": round(100 * (p50["parsed"] / p50["plain"] - 1), 1),
                     "parse_p50": round(p50["parse"], 3),
                     "parsed_hits": round(sum(hits["parsed"]) / len(hits["parsed"]), 1),
                     "plain_hits": round(sum(hits["plain"]) / len(hits["plain"]), 1)})
    documents = client.count(index=args.index, body={"query": {"term": {"block": 0}}})["count"]
    # Text terms are matched per block: exact where a document is one block.
    longer = client.count(index=args.index, body={"query": {"bool": {"filter": [
        {"term": {"block": 0}}, {"range": {"n_blocks": {"gt": 1}}}]}}})["count"]
    suite.record(args, COLUMNS, rows, client=client,
                 settings={"queries": len(usable), "rounds": args.rounds, "k": args.k, "index": args.index,
                           "documents": documents, "documents_of_one_block": documents - longer},
                 notes=f"{os.cpu_count()} cores shared with other work; load average "
                       f"{os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
