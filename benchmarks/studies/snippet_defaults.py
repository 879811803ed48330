"""Which snippet weights should an index that was never tuned score with (``UNTUNED_WEIGHTS``)?

Each query's candidates (hybrid + rerank with the shipped cross-encoder, the top 10 documents' sentences, every
perspective computed once) are ranked under each weighting; paired t-tests against equal weights over all four,
the default until 2026-11-26.

    python -m benchmarks.studies.snippet_defaults bioasq7b --index bioasq7b      # the 240 fully covered 7B questions
    python -m benchmarks.studies.snippet_defaults scifact --index scifact --limit 83  # SciFact dev and rest claims

Decision (records ``snippet_defaults-*.json``, 2026-11-26): the SciFact-tuned weights without the relevance
perspective became the default for untuned indices: better snippet MAP on BioASQ, the one set neither they nor
the cross-encoder saw, and no cross-encoder over ~100 sentences a query.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.stats import ttest_rel

from benchmarks import suite
from benchmarks.studies.encoder_choice import DATA, bioasq7b
from biorank import Pipeline, Searcher
from biorank.evaluation.bioasq import GoldQuestion, read_golden
from biorank.evaluation.phase_a import bioasq_scores, read_evidence_sentences
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.stages.snippets import SNIPPETS_PER_QUERY, UNTUNED_WEIGHTS, SentenceCandidates, SnippetWeights
from biorank.tuning.snippet_weights import TuningSet
from biorank.types import PERSPECTIVES

WEIGHTS = {
    "equal, all four": SnippetWeights(sentence=(1.0, 1.0, 1.0, 0.0, 1.0)),
    "SciFact-tuned, no relevance": UNTUNED_WEIGHTS,
    "equal, no relevance": SnippetWeights(sentence=(0.0, 1.0, 1.0, 0.0, 1.0)),
    **{f"{p} alone": SnippetWeights.single(p) for p in ("relevance", "similarity", "lexical")},
}
BASELINE = "equal, all four"


COLUMNS = suite.columns(("weights", "weights"), ("mean", "mean", ".4f"), ("delta", f"against {BASELINE}", "+.4f"),
                        ("p", "p (paired t-test)", ".3f"))


def table(title: str, per_query: dict[str, dict[str, float]]) -> list[dict]:
    """Each weighting's mean over the queries, and its paired t-test against the baseline."""
    queries = sorted(per_query[BASELINE])
    base = np.array([per_query[BASELINE][q] for q in queries])
    print(f"\n{title} ({len(queries)} queries)")
    rows = []
    for name, values in per_query.items():
        a = np.array([values[q] for q in queries])
        p = 1.0 if np.allclose(a, base) else float(ttest_rel(a, base).pvalue)
        rows.append({"measure": title, "queries": len(queries), "weights": name, "mean": round(float(a.mean()), 4),
                     "delta": round(float(a.mean() - base.mean()), 4), "p": round(p, 4)})
    return rows


def bioasq7b_golden(limit: int = 0) -> tuple[list[GoldQuestion], dict[str, str]]:
    """The golden answers of the fully covered 7B questions (the first ``limit``, if given) and their texts."""
    topics, _ = bioasq7b()
    golden = [q for path in sorted((DATA / "bioasq/Task7BGoldenEnriched").glob("7B*_golden.json"))
              for q in read_golden(path) if q.id in topics][: limit or None]
    return golden, {q.id: topics[q.id] for q in golden}


def bioasq_measured(golden: list[GoldQuestion], candidates: dict[str, SentenceCandidates],
                    weights: dict[str, SnippetWeights]) -> dict[str, dict[str, dict[str, float]]]:
    """Each weighting's official BioASQ measures per question, its top 10 sentences as the snippets."""
    measured = {}
    for name, w in weights.items():
        snippets = {q: c.ranked(w)[:SNIPPETS_PER_QUERY] for q, c in candidates.items()}
        measured[name], overall = bioasq_scores(golden, {q: [] for q in candidates}, snippets)
        print(f"{name}: snippet GMAP {overall.get('bioasq-snippet-gmap', 0.0):.4f}", flush=True)
    return measured


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("dataset", choices=("scifact", "bioasq7b"))
    parser.add_argument("--index", required=True, help="SciFact's corpus.jsonl, or the 7B abstracts, indexed.")
    parser.add_argument("--limit", type=int, default=0, help="At most this many queries (per split).")
    args = parser.parse_args(argv)
    client = suite.connect(args)
    searcher = Searcher.open(client, args.index)
    pipeline = Pipeline.build("hybrid+rerank", searcher, snippets="tuned", snippet_weights=SnippetWeights())
    started = time.time()
    rows: list[dict] = []
    if args.dataset == "scifact":
        qrels = read_qrels(suite.data("scifact-qrels-train"))
        gold = read_evidence_sentences(suite.data("scifact-claims-train"))
        queries = read_queries(suite.data("scifact-claims-train"))
        for split in ("dev", "rest"):
            wanted = sorted(set(split_judged(qrels, split)) & gold.keys(), key=int)[: args.limit or None]
            candidates = pipeline.candidates({q: queries[q] for q in wanted}, 100, perspectives=PERSPECTIVES)
            tuning = TuningSet(candidates, {q: gold[q] for q in wanted})
            rows += table(f"SciFact {split}, sentence MAP@10", {n: tuning.per_query(w) for n, w in WEIGHTS.items()})
    else:
        golden, queries = bioasq7b_golden(args.limit)
        candidates = pipeline.candidates(queries, 100, perspectives=PERSPECTIVES)
        measured = bioasq_measured(golden, candidates, WEIGHTS)
        for measure in ("ap", "f1"):
            rows += table(f"BioASQ 7B covered, official snippet {measure.upper()} (top 10)",
                          {n: m[f"bioasq-snippet-{measure}"] for n, m in measured.items()})
    suite.record(args, [suite.Column("measure", "measure"), *COLUMNS], rows, variant=args.dataset, client=client,
                 settings={"index": args.index, "limit": args.limit, "seconds": round(time.time() - started)})


if __name__ == "__main__":
    main()
