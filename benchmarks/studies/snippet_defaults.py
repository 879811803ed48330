"""Which snippet weights an index that was never tuned should score with (``UNTUNED_WEIGHTS``).

Each query's candidates (hybrid + rerank with the shipped cross-encoder, the top 10 documents' sentences, every
perspective computed once) are ranked under each weighting; paired t-tests against equal weights over all four,
the default until 2026-11-26.

    python benchmarks/snippet_defaults.py bioasq7b --index bioasq7b       # the 240 fully covered 7B questions
    python benchmarks/snippet_defaults.py scifact --index scifact --limit 83   # SciFact dev and rest claims

Measured 2026-11-26 on 2 AVX2 cores (BioASQ: the 7B abstracts indexed with bge-small-en-v1.5, λ 0.01; SciFact:
all of corpus.jsonl with all-MiniLM-L6-v2, λ 0.03; ONNX Runtime fp32; 20 and 12 minutes):

    | weights | BioASQ 7B snippet MAP / F1 / GMAP (official) | SciFact dev MAP@10 | SciFact rest MAP@10 |
    | --- | --- | ---: | ---: |
    | equal, all four | 1.6602 / 0.4000 / 1.0324 | 0.6118 | 0.6112 |
    | SciFact-tuned, no relevance | 1.7545 (p 0.002) / 0.3885 (p 0.08) / 0.9825 | 0.6194 (p 0.72) | 0.5587 (p 0.01) |
    | equal, no relevance | 1.6104 (p 0.04) / 0.3911 (p 0.11) / 0.9043 | 0.5920 (p 0.36) | 0.5547 (p 0.007) |
    | relevance alone | 1.1291 / 0.3390 / 0.4242 | 0.4353 | 0.4768 |
    | similarity alone | 1.2374 / 0.3411 / 0.6346 | 0.4397 | 0.3840 |
    | lexical alone | 1.0417 / 0.3103 / 0.3850 | 0.4922 | 0.4263 |

BioASQ is the only set that neither the tuned weights nor the cross-encoder saw. SciFact dev is where the weights
were tuned (optimistic for them); SciFact's other claims are where the shipped cross-encoder trained on the
evidence sentences, so the relevance perspective is optimistic there. The tuned weights without relevance became
the default for untuned indices: better snippet MAP on the held-out set, and no cross-encoder over ~100
sentences a query (3.2 s of a 5.6 s query on 2 AVX2 cores).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from encoder_choice import DATA, bioasq7b
from scipy.stats import ttest_rel

from biorank import Searcher, connect
from biorank.evaluation.bioasq import read_golden
from biorank.evaluation.phase_a import bioasq_scores, read_evidence_sentences
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.pipeline import Pipeline
from biorank.stages.snippets import SNIPPETS_PER_QUERY, UNTUNED_WEIGHTS, SnippetWeights
from biorank.tuning.snippet_weights import TuningSet
from biorank.types import PERSPECTIVES

WEIGHTS = {
    "equal, all four": SnippetWeights(),
    "SciFact-tuned, no relevance": UNTUNED_WEIGHTS,
    "equal, no relevance": SnippetWeights(sentence=(0.0, 1.0, 1.0, 1.0)),
    **{f"{p} alone": SnippetWeights.single(p) for p in ("relevance", "similarity", "lexical")},
}
BASELINE = "equal, all four"


def table(title: str, per_query: dict[str, dict[str, float]]) -> None:
    queries = sorted(per_query[BASELINE])
    base = np.array([per_query[BASELINE][q] for q in queries])
    print(f"\n{title} ({len(queries)} queries)")
    for name, values in per_query.items():
        a = np.array([values[q] for q in queries])
        p = 1.0 if np.allclose(a, base) else ttest_rel(a, base).pvalue
        print(f"  {name:<30} {a.mean():.4f}  ({a.mean() - base.mean():+.4f} against {BASELINE}, p {p:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", choices=("scifact", "bioasq7b"))
    parser.add_argument("--index", required=True, help="SciFact's corpus.jsonl, or the 7B abstracts, indexed.")
    parser.add_argument("--limit", type=int, default=0, help="At most this many queries (per split).")
    args = parser.parse_args()
    searcher = Searcher(connect(), args.index)
    pipeline = Pipeline.build("hybrid+rerank", searcher, snippets="tuned", snippet_weights=SnippetWeights())
    started = time.time()
    if args.dataset == "scifact":
        qrels = read_qrels(DATA / "scifact/qrels/train.tsv")
        gold = read_evidence_sentences(DATA / "scifact/claims_train.jsonl")
        queries = read_queries(DATA / "scifact/claims_train.jsonl")
        for split in ("dev", "rest"):
            wanted = sorted(set(split_judged(qrels, split)) & gold.keys(), key=int)[: args.limit or None]
            candidates = pipeline.candidates({q: queries[q] for q in wanted}, 100, perspectives=PERSPECTIVES)
            tuning = TuningSet(candidates, {q: gold[q] for q in wanted})
            table(f"SciFact {split}, sentence MAP@10", {n: tuning.per_query(w) for n, w in WEIGHTS.items()})
    else:
        topics, _ = bioasq7b()
        golden = [q for path in sorted((DATA / "bioasq/Task7BGoldenEnriched").glob("7B*_golden.json"))
                  for q in read_golden(path) if q.id in topics][: args.limit or None]
        queries = {q.id: topics[q.id] for q in golden}
        candidates = pipeline.candidates(queries, 100, perspectives=PERSPECTIVES)
        measured = {}
        for name, weights in WEIGHTS.items():
            snippets = {q: c.ranked(weights)[:SNIPPETS_PER_QUERY] for q, c in candidates.items()}
            measured[name], overall = bioasq_scores(golden, {q: [] for q in queries}, snippets)
            print(f"{name}: snippet GMAP {overall.get('bioasq-snippet-gmap', 0.0):.4f}", flush=True)
        for measure in ("ap", "f1"):
            table(f"BioASQ 7B covered, official snippet {measure.upper()} (top 10)",
                  {n: m[f"bioasq-snippet-{measure}"] for n, m in measured.items()})
    print(f"\n{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
