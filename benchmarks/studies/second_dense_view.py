"""Would a second dense view (e5-small-v2 beside the index's bge-small-en-v1.5) improve the first stage on questions
no training saw, and at what cost?

The fused score would be ``λ·BM25(q, p) + ⟨q, p⟩ + λ₂·⟨q₂, p₂⟩``, the second inner product from e5-small-v2 (the
other encoder in the Maven jars) over a second vector field. Before building that field into every index, this
study measures what it would give without it: the hybrid's top 100 of each query are scored again with e5-small-v2
vectors of their blocks (a document's best block, MaxP, as the index scores), encoded here; the top 10 of the fused
score is then what the engine would return unless a document outside the hybrid's top 100 rose into it. Each
λ₂ of the grid is reported with its paired p against the hybrid (the first stage's only figure that could move;
recall@100 cannot, by construction), and λ₂ chosen on one half of each unseen set is reported on the other half.

The cost is measured beside it: e5-small-v2's blocks per second here (what indexing would add to bge-small's own),
one query's encoding (what each search would add), and a vector field's bytes per block from the dimension.

Usage:
    python -m benchmarks.studies.second_dense_view --url http://127.0.0.1:9200
"""

from __future__ import annotations

import os
import time

import numpy as np

from benchmarks import suite
from benchmarks.studies.unseen_dev import collections
from biorank.evaluation.report import evaluate_runs

DEPTH = 100
SECOND = "e5-small-v2"
GRID = (0.25, 0.5, 1.0, 2.0)
COLUMNS = suite.columns(("query_set", "query set"), ("queries", "queries"), ("system", "system"),
                        ("measure", "measure"), ("value", "value", ".4f"), ("p", "p", ".3f"))
COST_COLUMNS = suite.columns(("encoder", "encoder"), ("blocks_per_s", "blocks/s", ".1f"),
                             ("query_ms", "query p50 ms", ".1f"), ("bytes_per_block", "vector bytes/block", ".0f"))


def blocks_of(client, index: str, ids: list[str]) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """Every block's passage of each document, by document id."""
    from biorank.store.indices import entries_in_order

    passages: dict[str, list[str]] = {}
    for page in entries_in_order(client, index, sort=("id", "block"), source=("id", "passage"),
                                 query={"terms": {"id": ids}}):
        for hit in page:
            passages.setdefault(hit["_source"]["id"], []).append(hit["_source"]["passage"])
    return passages


def timed_encode(encoder, texts: list[str], role: str) -> tuple[np.ndarray, float]:  # type: ignore[no-untyped-def]
    """The rows of ``texts`` and the seconds they took."""
    started = time.perf_counter()
    rows = encoder.encode(texts, role=role)
    return rows, time.perf_counter() - started


def query_ms(encoder, texts: list[str]) -> float:  # type: ignore[no-untyped-def]
    """p50 ms of encoding one query at a time, as a search does."""
    encoder.encode(texts[:1], role="query")
    times = []
    for text in texts[:50]:
        started = time.perf_counter()
        encoder.encode([text], role="query")
        times.append((time.perf_counter() - started) * 1000)
    return suite.percentile(times, 50)


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("--collections", default="scifact,bioasq,nfcorpus")
    parser.add_argument("--indexes", default="scifact=scifact,bioasq=bioasq,nfcorpus=nfcorpus",
                        help="collection=index")
    args = parser.parse_args(argv)
    from biorank.evaluation.splits import halves
    from biorank.models.encoder import Encoder
    from biorank.retrieval.searcher import Searcher

    indexes = dict(item.split("=") for item in args.indexes.split(","))
    client = suite.connect(args)
    suite.header(f"collections {args.collections}; second view {SECOND}; depth {DEPTH}")
    second = Encoder(SECOND, stage="documents")
    known = collections()
    rows: list[dict] = []
    encoded_blocks, encoded_seconds, asked_all = 0, 0.0, []
    first = None
    for name in args.collections.split(","):
        title, queries, qrels, sets = known[name]
        sets = [(label, ids) for label, ids in sets if label != "dev-seen"]
        asked = {q: queries[q] for q in sorted({q for _, ids in sets for q in ids})}
        asked_all += list(asked.values())
        searcher = Searcher.open(client, indexes[name])
        first = first or searcher.load()
        hits = searcher.search_many(asked, DEPTH)
        passages = blocks_of(client, indexes[name], sorted({h.id for found in hits.values() for h in found}))
        flat = [(doc, text) for doc, texts in passages.items() for text in texts]
        rows_p, seconds = timed_encode(second, [text for _, text in flat], "passage")
        encoded_blocks, encoded_seconds = encoded_blocks + len(flat), encoded_seconds + seconds
        rows_q, _ = timed_encode(second, list(asked.values()), "query")
        vectors_q = dict(zip(asked, rows_q, strict=True))
        best: dict[str, dict[str, float]] = {}
        for q in asked:
            scores = rows_p @ vectors_q[q]
            per_doc: dict[str, float] = {}
            for (doc, _), score in zip(flat, scores, strict=True):
                per_doc[doc] = max(per_doc.get(doc, -1.0), float(score))
            best[q] = per_doc
        runs = {"hybrid": {q: {h.id: h.score for h in found} for q, found in hits.items()},
                f"{SECOND} alone (the hybrid's top {DEPTH} reordered)": {
                    q: {h.id: best[q][h.id] for h in found} for q, found in hits.items()}}
        for weight in GRID:
            runs[f"hybrid + {weight:g}·⟨q₂, p₂⟩"] = {
                q: {h.id: h.score + weight * best[q][h.id] for h in found} for q, found in hits.items()}
        measures = ["ndcg@10", "map@10"] if name == "bioasq" else ["ndcg@10"]
        for label, ids in sets:
            report = evaluate_runs(runs, {q: qrels[q] for q in ids}, measures)
            for system in runs:
                for measure in measures:
                    rows.append({"query_set": f"{title} {label}", "queries": len(ids), "system": system,
                                 "measure": "AP@10" if measure == "map@10" else "nDCG@10",
                                 "value": report.table[system][measure],
                                 "p": report.p_values[system][measure] if system != "hybrid" else None})
        # λ₂ chosen on one half of the unseen set (nDCG@10), reported on the other.
        label, ids = sets[-1]
        choose, held = halves(ids)
        on_choose = evaluate_runs({w: runs[f"hybrid + {w:g}·⟨q₂, p₂⟩"] for w in GRID} | {0: runs["hybrid"]},
                                  {q: qrels[q] for q in choose}, ["ndcg@10"]).table
        weight = max(on_choose, key=lambda w: (on_choose[w]["ndcg@10"], -w))
        chosen = "hybrid" if weight == 0 else f"hybrid + {weight:g}·⟨q₂, p₂⟩"
        report = evaluate_runs({"hybrid": runs["hybrid"], f"chosen on the other {len(choose)}: λ₂ {weight:g}":
                                runs[chosen]}, {q: qrels[q] for q in held}, measures)
        for system in report.table:
            for measure in measures:
                rows.append({"query_set": f"{title} {label}, held-out half", "queries": len(held), "system": system,
                             "measure": "AP@10" if measure == "map@10" else "nDCG@10",
                             "value": report.table[system][measure],
                             "p": report.p_values[system][measure] if system != "hybrid" else None})
        print(f"{name}: done ({len(flat)} blocks encoded in {seconds:.0f} s)", flush=True)
    suite.record(args, COLUMNS, rows, client=client,
                 settings={"depth": DEPTH, "second": SECOND, "grid": list(GRID), "indexes": indexes},
                 notes="the hybrid's top 100 scored again with the second encoder's MaxP; p: paired t-test against "
                       "the hybrid; AP@10 is ir-measures' (denominator: every gold document); load (uptime) at the "
                       f"end: {os.getloadavg()[0]:.1f}")
    assert first is not None
    costs = [{"encoder": encoder.model_name, "blocks_per_s": rate, "query_ms": query_ms(encoder, asked_all),
              "bytes_per_block": 4 * encoder.dimension}
             for encoder, rate in ((second, encoded_blocks / encoded_seconds), (first, None))]
    suite.record(args, COST_COLUMNS, costs, variant="cost", settings={"blocks": encoded_blocks},
                 notes="blocks/s: the study's own encoding of the candidates' blocks (e5-small-v2 only; bge-small's "
                       "indexing rate is in indexing.md); query ms: one query at a time, 50 queries; bytes per "
                       f"block: float32 vector before HNSW links; load (uptime) at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
