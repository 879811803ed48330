"""Does the deep-metric sentence scorer (the `metric` perspective, DMLPR) improve the snippets, and at what cost?

Each query's candidates (the first stage's top 10 documents' sentences, every perspective but the cross-encoder's
computed once) are ranked under each weighting: the untuned default (UNTUNED_WEIGHTS), the default with the
metric perspective added at the similarity's weight, the metric alone, and weights tuned on SciFact dev with and
without it (tune-snippets' optimiser, the same rounds and trials). SciFact dev: evidence-sentence MAP@10 (the
tuned rows are tuned on these claims: in-sample); BioASQ 7B's 240 fully covered questions: official snippet AP
and F1, held out from the scorer's training and from every tuning. Paired t-tests against the default. The
cost: the metric scorer's ms for a query's sentences, and the snippet stage's ms with and without it.

    python -m benchmarks.studies.snippet_metric --scifact-index scifact --bioasq-index bioasq7b
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np
from scipy.stats import ttest_rel

from benchmarks import suite
from benchmarks.studies.snippet_defaults import bioasq7b_golden, bioasq_measured
from biorank import Pipeline, Searcher
from biorank.evaluation.phase_a import read_evidence_sentences
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.stages.snippets import UNTUNED_WEIGHTS, SnippetWeights
from biorank.tuning.snippet_weights import TuningSet, tune_weights
from biorank.types import PERSPECTIVES

BASELINE = "the default (untuned)"
COMPUTED = ("similarity", "lexical", "metric")
COLUMNS = suite.columns(("weights", "sentence weights"), ("scifact", "SciFact dev: MAP@10", ".4f"),
                        ("scifact_p", "p", ".3f"), ("bioasq_ap+bioasq_f1", "BioASQ 7B: snippet MAP / F1", ".4f"),
                        ("bioasq_p", "p (MAP)", ".3f"))


def with_metric(weights: SnippetWeights, metric: float) -> SnippetWeights:
    sentence = list(weights.sentence)
    sentence[PERSPECTIVES.index("metric")] = metric
    return weights.with_group("sentence", sentence)


def compare(per_query: dict[str, dict[str, float]]) -> dict[str, tuple[float, float]]:
    """Each weighting's mean over the queries and its paired t-test p against the baseline."""
    queries = sorted(per_query[BASELINE])
    base = np.array([per_query[BASELINE][q] for q in queries])
    out = {}
    for name, values in per_query.items():
        a = np.array([values[q] for q in queries])
        p = 1.0 if np.allclose(a, base) else float(ttest_rel(a, base).pvalue)
        out[name] = (round(float(a.mean()), 4), round(p, 4))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("--scifact-index", required=True, help="SciFact's corpus.jsonl indexed.")
    parser.add_argument("--bioasq-index", required=True, help="The 7B abstracts indexed.")
    parser.add_argument("--system", default="hybrid", help="The first stage whose top 10 documents' sentences count.")
    parser.add_argument("--trials", type=int, default=40, help="Trials per tuning phase.")
    parser.add_argument("--timed", type=int, default=40, help="BioASQ queries whose snippet stage is timed.")
    args = parser.parse_args(argv)
    client = suite.connect(args)
    started = time.time()

    scifact = Pipeline.build(f"{args.system}+snippets", Searcher.open(client, args.scifact_index),
                             snippet_weights=SnippetWeights())
    qrels = read_qrels(suite.data("scifact-qrels-train"))
    gold = read_evidence_sentences(suite.data("scifact-claims-train"))
    claims = read_queries(suite.data("scifact-claims-train"))
    dev = sorted(set(split_judged(qrels, "dev")) & gold.keys(), key=int)
    tuning = TuningSet(scifact.candidates({q: claims[q] for q in dev}, 100, perspectives=COMPUTED),
                       {q: gold[q] for q in dev})
    weights = {
        BASELINE: UNTUNED_WEIGHTS,
        "default + metric (at the similarity's weight)": with_metric(UNTUNED_WEIGHTS, UNTUNED_WEIGHTS.sentence[1]),
        "metric alone": SnippetWeights.single("metric"),
        "tuned on SciFact dev, without metric": tune_weights(
            tuning, rounds=3, trials=args.trials, perspectives=("similarity", "lexical", "document")).weights,
        "tuned on SciFact dev, with metric": tune_weights(
            tuning, rounds=3, trials=args.trials, perspectives=("similarity", "lexical", "metric", "document")).weights,
    }
    for name, w in weights.items():
        print(f"{name}: {w.describe()}", flush=True)
    scifact_figures = compare({n: tuning.per_query(w) for n, w in weights.items()})

    bioasq_searcher = Searcher.open(client, args.bioasq_index)
    bioasq = Pipeline.build(f"{args.system}+snippets", bioasq_searcher, snippet_weights=SnippetWeights())
    golden, queries = bioasq7b_golden()
    candidates = bioasq.candidates(queries, 100, perspectives=COMPUTED)
    measured = bioasq_measured(golden, candidates, weights)
    ap = compare({n: m["bioasq-snippet-ap"] for n, m in measured.items()})
    f1 = compare({n: m["bioasq-snippet-f1"] for n, m in measured.items()})

    # Cost: the scorer over each query's sentences alone, then the snippet stage whole with and without it.
    scorer = bioasq.snippets.metric
    sentences = [(queries[q], [s.text for s in c.sentences]) for q, c in candidates.items()]
    scorer_ms = suite.timed(lambda item: scorer.scores(*item), sentences, warm=5)
    # CPU time too: on a shared machine the wall clock measures the other processes as much as this one.
    scorer_cpu_ms = []
    for item in sentences:
        before = time.process_time()
        scorer.scores(*item)
        scorer_cpu_ms.append((time.process_time() - before) * 1000)
    timed = dict(list(queries.items())[: args.timed])
    stage_ms = {}
    for name in (BASELINE, "tuned on SciFact dev, with metric"):
        pipeline = Pipeline.build(f"{args.system}+snippets", bioasq_searcher, snippet_weights=weights[name])
        pipeline.run(dict(list(timed.items())[:5]))
        answers = [pipeline.search(text) for text in timed.values()]
        stage_ms[name] = round(statistics.median(a.ms["snippets"] for a in answers), 1)
    rows = [{"weights": name, "scifact": scifact_figures[name][0], "scifact_p": scifact_figures[name][1],
             "bioasq_ap": ap[name][0], "bioasq_f1": f1[name][0], "bioasq_p": ap[name][1]} for name in weights]
    load = os.getloadavg()
    suite.record(args, COLUMNS, rows, client=client, settings={
        "scifact_index": args.scifact_index, "bioasq_index": args.bioasq_index, "system": args.system,
        "scifact_dev_claims": len(dev), "bioasq_questions": len(queries), "trials": args.trials,
        "weights": {n: w.to_dict() for n, w in weights.items()},
        "metric_scorer_ms_per_query_p50": round(statistics.median(scorer_ms), 1),
        "metric_scorer_cpu_ms_per_query_p50": round(statistics.median(scorer_cpu_ms), 1),
        "sentences_per_query_mean": round(statistics.mean(len(s) for _, s in sentences), 1),
        "snippet_stage_ms_p50": stage_ms, "load_average_1_5_15": [round(x, 1) for x in load],
        "seconds": round(time.time() - started)},
        notes=f"{args.system} first stage, its top 10 documents' sentences, no cross-encoder. The metric scorer "
              f"took {statistics.median(scorer_ms):.1f} ms a query of wall time and "
              f"{statistics.median(scorer_cpu_ms):.1f} ms of CPU time, both threads together (p50, "
              f"{statistics.mean(len(s) for _, s in sentences):.0f} sentences on average); the snippet stage "
              f"{stage_ms[BASELINE]} ms without it and {stage_ms['tuned on SciFact dev, with metric']} ms with it "
              f"(p50 of {len(timed)} BioASQ queries), while the machine's load average was "
              f"{load[0]:.1f} on its 2 cores (shared: the figures are upper bounds).")


if __name__ == "__main__":
    main()
