"""Does pseudo-relevance feedback (RM3 on the BM25 leg, Rocchio on the dense leg) improve the first stage on
questions over abstracts no training saw?

The cross-encoder adds nothing measurable on such questions, so their quality is the first stage's. Each
system runs every query of a collection once, one query at a time as ``biorank query`` runs (timed), to depth
100; each query set of :func:`benchmarks.studies.unseen_dev.collections` is scored on it: SciFact's hash dev
split and its unseen part, BioASQ 7B's fully covered questions and their unseen part, NFCorpus dev and its
unseen part. The feedback parameters are the published defaults (:mod:`biorank.retrieval.feedback`), not tuned
on these sets, so every figure here is of data that chose nothing. p: paired t-test against the first system
on the same queries. Then ``tune-lambda``'s choice: λ and the feedback chosen on one half of the unseen set
and measured on the other half (its rows say so), beside the hybrid at the index's λ. Feedback reads the first
pass only, so the index (its size) is the same for every system.

The indexes are those of ``biorank index FILE --index NAME --no-sentences`` (see ``unseen_dev``); each
collection writes its own record (``first_stage_feedback-<collection>.json``).

Usage:
    python -m benchmarks.studies.first_stage_feedback --url http://127.0.0.1:9200
    python -m benchmarks.studies.first_stage_feedback --collections nfcorpus --systems hybrid,hybrid+rm3
"""

from __future__ import annotations

import os
import time

from benchmarks import suite
from benchmarks.studies.unseen_dev import collections
from biorank.evaluation.measures import run_from_hits
from biorank.evaluation.report import evaluate_runs

DEPTH = 100
SYSTEMS = "hybrid,hybrid+rm3,hybrid+rocchio,hybrid+rm3+rocchio,bm25,bm25+rm3"
COLUMNS = suite.columns(("query_set", "query set"), ("queries", "queries"), ("system", "system"),
                        ("measure", "measure"), ("value", "value", ".4f"), ("p", "p", ".3f"),
                        ("recall100", "recall@100", ".4f"), ("p50", "p50 ms", ".0f"), ("p95", "p95 ms", ".0f"))


def timed_run(searcher, queries: dict[str, str]) -> tuple[dict, dict[str, float]]:  # type: ignore[no-untyped-def]
    """The run of ``searcher`` over ``queries``, one query at a time, and each query's time (ms), after one warm-up."""
    first = next(iter(queries))
    searcher.search_many({first: queries[first]}, DEPTH)
    hits, ms = {}, {}
    for qid, text in queries.items():
        started = time.perf_counter()
        hits[qid] = searcher.search_many({qid: text}, DEPTH)[qid]
        ms[qid] = (time.perf_counter() - started) * 1000
    return run_from_hits(hits), ms


def index_size(client, index: str) -> float:  # type: ignore[no-untyped-def]
    """KB the documents index keeps per abstract (what feedback leaves as it is)."""
    stats = client.indices.stats(index=index, metric="store")["indices"][index]["total"]["store"]["size_in_bytes"]
    abstracts = client.count(index=index, body={"query": {"term": {"block": 0}}})["count"]
    return stats / abstracts / 1000


def set_rows(title: str, sets: list[tuple[str, list[str]]], runs: dict, ms: dict, qrels,  # type: ignore[no-untyped-def]
             measures: list[str]) -> list[dict]:
    """Each query set's rows: every run's measures, p against the first run, recall@100 and p50/p95 ms."""
    rows = []
    for label, ids in sets:
        report = evaluate_runs(runs, {q: qrels[q] for q in ids}, measures)
        for system in runs:
            times = [ms[system][q] for q in ids]
            for measure in measures:
                rows.append({"query_set": f"{title} {label}", "queries": len(ids), "system": system,
                             "measure": "AP@10" if measure == "map@10" else "nDCG@10",
                             "value": report.table[system][measure],
                             "p": report.p_values[system][measure] if system != next(iter(runs)) else None,
                             "recall100": report.recall_at_depth[system][100],
                             "p50": suite.percentile(times, 50), "p95": suite.percentile(times, 95)})
    return rows


def tuned(searcher, title: str, query_set: tuple[str, list[str]], queries: dict[str, str], qrels,  # type: ignore[no-untyped-def]
          measures: list[str], grid: list | None = None) -> list[dict]:
    """``tune-lambda``'s choice on the unseen set: λ and a variant of ``grid`` (default: each feedback) chosen on
    one half (nDCG@10, the whole λ grid of each), then measured on the other half beside the hybrid at the index's
    λ."""
    from biorank.evaluation.splits import halves
    from biorank.retrieval.feedback import NAMES, Feedback
    from biorank.tuning.lambda_grid import LAMBDA_GRID, Variant, best_first_stage, held_out, tune_first_stage

    label, ids = query_set
    choose, report = halves(ids)
    grid = grid or [Variant(Feedback.named(name)) for name in NAMES]
    tables = tune_first_stage(searcher, {q: queries[q] for q in choose}, qrels, LAMBDA_GRID, "ndcg@10", grid,
                              depth=DEPTH)
    name, lam = best_first_stage(tables)
    chosen = f"chosen on the other {len(choose)}: {name}, λ {lam:g}"
    variant = next(v for v in grid if v.name == name)
    rows = []
    for measure in measures:
        result = held_out(searcher, {q: queries[q] for q in report}, qrels, measure,
                          {"hybrid": (Variant(), searcher.lam), chosen: (variant, lam)}, depth=DEPTH)
        for system in ("hybrid", chosen):
            rows.append({"query_set": f"{title} {label}, held-out half", "queries": len(report), "system": system,
                         "measure": "AP@10" if measure == "map@10" else "nDCG@10",
                         "value": result.table[system][measure],
                         "p": result.p_values[system][measure] if system != "hybrid" else None,
                         "recall100": result.recall_at_depth[system][100], "p50": None, "p95": None})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("--collections", default="scifact,bioasq,nfcorpus")
    parser.add_argument("--indexes", default="scifact=scifact,bioasq=bioasq,nfcorpus=nfcorpus",
                        help="collection=index")
    parser.add_argument("--bm25", default="", help="K1:B pairs, comma-separated: each also runs hybrid and bm25 with "
                        "the index's BM25 set to them (closed and reopened; its own restored afterwards)")
    parser.add_argument("--systems", default=SYSTEMS, help="first stage[+rm3][+rocchio], comma-separated; the "
                        "first is the baseline of p")
    args = parser.parse_args(argv)
    from biorank.pipeline import PipelineSettings
    from biorank.retrieval.searcher import Searcher
    from biorank.store.indices import set_bm25_parameters
    from biorank.tuning.lambda_grid import bm25_kept

    indexes = dict(item.split("=") for item in args.indexes.split(","))
    systems = args.systems.split(",")
    client = suite.connect(args)
    suite.header(f"collections {args.collections}; systems {systems}; depth {DEPTH}")
    known = collections()
    for name in args.collections.split(","):
        rows: list[dict] = []
        title, queries, qrels, sets = known[name]
        sets = [(label, ids) for label, ids in sets if label != "dev-seen"]
        wanted = sorted({q for _, ids in sets for q in ids})
        opened = Searcher.open(client, indexes[name])
        opened.load()
        asked = {q: queries[q] for q in wanted}
        runs, ms = {}, {}
        for system in systems:
            runs[system], ms[system] = timed_run(opened.with_search(PipelineSettings.parse(system).search), asked)
            print(f"{name}: {system} done", flush=True)
        if args.bm25:
            with bm25_kept(opened):
                for pair in args.bm25.split(","):
                    k1, b = (float(x) for x in pair.split(":"))
                    set_bm25_parameters(client, indexes[name], k1, b)
                    for base in ("hybrid", "bm25"):
                        label = f"{base}, k1 {k1:g} b {b:g}"
                        runs[label], ms[label] = timed_run(opened.with_search(PipelineSettings.parse(base).search),
                                                           asked)
                        print(f"{name}: {label} done", flush=True)
        measures = ["ndcg@10", "map@10"] if name == "bioasq" else ["ndcg@10"]
        rows += set_rows(title, sets, runs, ms, qrels, measures)
        rows += tuned(opened, title, sets[1], queries, qrels, measures)
        suite.record(args, COLUMNS, rows, variant=name, client=client,
                     settings={"depth": DEPTH, "systems": systems, "bm25": args.bm25, "index": indexes[name],
                               "index_kb_per_abstract": index_size(client, indexes[name])},
                     notes="feedback at the published defaults (RM3: 10 documents, 10 terms, weight 0.5; Rocchio: "
                           "5 blocks, alpha 0.4, beta 0.6); AP@10 is ir-measures' (denominator: every gold "
                           "document); p: paired t-test against the first system; ms: one query at a time, "
                           f"first stage only; load (uptime) at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
