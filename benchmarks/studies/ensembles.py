"""Does an ensemble of cross-encoders (``--reranker A,B``) rerank better than its first member alone, at what cost a
query, and should it average min-max normalised scores or logits?

Issue 43 (item 3) after Hofstätter et al. (Table 2, line 12): each member scores every candidate, the ensemble
combines their scores per query (:func:`biorank.stages.rerank.combine`). Each system is mixed with the first stage
at its own weight, tuned on the same grid ``tune-rerank`` uses, and tested against the first member alone at its
tuned weight (paired t-test, biorank's report). Three steps:

    python -m benchmarks.studies.ensembles prepare --out ensembles.json.gz   # the node and the three indices
    python -m benchmarks.studies.ensembles score ensembles.json.gz --reranker biorank-reranker --out v2.json
    python -m benchmarks.studies.ensembles score ensembles.json.gz --reranker models/reranker-minilm --out m.json
    python -m benchmarks.studies.ensembles report ensembles.json.gz v2.json m.json

``prepare`` takes each dev query's hybrid top 20 (SciFact's dev claims with BEIR qrels, the 240 fully covered
BioASQ 7B questions, NFCorpus's 324 dev queries; the indices as ``benchmarks/studies/reranker_depth.py`` names
them). ``score`` runs one member as ``--reranker`` loads it (any name it takes) and times its 20 pairs a query;
run it nice'd on an idle machine, and say the load (``uptime``) if it was not. ``report`` writes the record
``ensembles.json``: per set the tuned weight, the measure and its p-value, and the milliseconds a query of scoring
20 hits (an ensemble's: its members' sum, as it scores them one after the other).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import time
from pathlib import Path

from benchmarks import suite
from benchmarks.studies.reranker_depth import MEASURE, SETS, candidates


def prepare(args: argparse.Namespace) -> None:
    evals = candidates(args)
    with gzip.open(args.out, "wt", compresslevel=9) as f:
        json.dump({"evals": evals}, f)
    print(f"{len(evals)} queries -> {args.out}")


def score(args: argparse.Namespace) -> None:
    """One member's score of every candidate, and its milliseconds per query (20 pairs)."""
    from biorank.models.cross_encoder import CrossEncoder

    with gzip.open(args.data, "rt") as f:
        evals = json.load(f)["evals"]
    model = CrossEncoder(args.reranker, precision=args.precision, max_length=args.length)
    model.score(evals[0]["q"], evals[0]["texts"])  # kernels and caches warm before the clock starts
    scores, ms = [], []
    for e in evals:
        started = time.perf_counter()
        scores.append([float(v) for v in model.score(e["q"], e["texts"])])
        ms.append((time.perf_counter() - started) * 1000)
    args.out.write_text(json.dumps({"reranker": args.reranker, "identity": model.model_name,
                                    "precision": model.precision, "length": args.length,
                                    "scores": scores, "ms": ms}) + "\n", encoding="utf-8")
    print(f"{args.reranker}: {len(evals)} queries, {sum(ms) / len(ms):.0f} ms a query -> {args.out}")


def report(args: argparse.Namespace) -> None:
    """Each member alone and the ensemble by each rule, at its tuned weight, against the first member alone."""
    from biorank.evaluation.measures import evaluate, run_from_hits
    from biorank.evaluation.report import SIGNIFICANCE_LEVEL, evaluate_runs
    from biorank.stages.rerank import ENSEMBLE_RULES, combine, reorder
    from biorank.tuning.grid import best_setting
    from biorank.tuning.rerank_weight import WEIGHT_GRID
    from biorank.types import Hit

    with gzip.open(args.data, "rt") as f:
        evals = json.load(f)["evals"]
    members = [json.loads(path.read_text(encoding="utf-8")) for path in args.members]
    given = [m["reranker"] for m in members]
    # One model scored twice (at two lengths, say) is told apart by its file.
    names = [name if given.count(name) == 1 else f"{name} [{path.stem}]"
             for name, path in zip(given, args.members, strict=True)]
    # Every system's scores of each query's candidates, and its ms a query: the members alone, then the ensembles.
    systems = {name: (m["scores"], m["ms"]) for name, m in zip(names, members, strict=True)}
    summed = [sum(column) for column in zip(*(m["ms"] for m in members), strict=True)]
    for rule in ENSEMBLE_RULES:
        systems[f"{'+'.join(names)} ({rule})"] = (
            [combine([m["scores"][i] for m in members], rule) for i in range(len(evals))], summed)
    baseline = names[0]
    rows = {name: {"system": name} for name in systems}
    for name_of_set in SETS:
        at = [i for i, e in enumerate(evals) if e["set"] == name_of_set]
        qrels = {evals[i]["qid"]: evals[i]["qrels"] for i in at}
        measure = MEASURE[name_of_set]

        def run(scores: list[list[float]], weight: float, at: list[int] = at) -> dict[str, dict[str, float]]:
            hits = {}
            for i in at:
                e = evals[i]
                first = [Hit(id=d, title="", rank=r, score=s)
                         for r, (d, s) in enumerate(zip(e["ids"], e["first"], strict=True), 1)]
                hits[e["qid"]] = reorder(first, scores[i], weight)
            return run_from_hits(hits)

        tuned = {}
        for name, (scores, _) in systems.items():
            grid = {w: evaluate(run(scores, w), qrels, [measure])[measure] for w in WEIGHT_GRID}
            tuned[name] = best_setting(grid)
        result = evaluate_runs({name: run(systems[name][0], tuned[name]) for name in systems}, qrels, [measure])
        for name, (_, ms) in systems.items():
            p = result.p_values.get(name, {}).get(measure, 1.0)
            rows[name] |= {f"{name_of_set}_w": tuned[name], f"{name_of_set}": round(result.table[name][measure], 4),
                           f"{name_of_set}_p": round(p, 4),
                           f"{name_of_set}_ms": round(sum(ms[i] for i in at) / len(at), 1)}
        print(f"{name_of_set}, {measure} ({len(at)} queries), each at its tuned w, p against {baseline}:")
        for name in systems:
            r = rows[name]
            print(f"  {name:<50} w {r[f'{name_of_set}_w']:<4g} {r[name_of_set]:.4f} p {r[f'{name_of_set}_p']:.4f}"
                  f"  {r[f'{name_of_set}_ms']:.0f} ms")
    cols = [suite.Column("system", "system"), *itertools.chain.from_iterable(
        (suite.Column(s, f"{s} {MEASURE[s]}", ".4f"), suite.Column(f"{s}_w", "w", "g"),
         suite.Column(f"{s}_p", "p", ".3f"), suite.Column(f"{s}_ms", "ms / query", ",.0f")) for s in SETS)]
    suite.record(args, cols, list(rows.values()),
                 settings={"members": [{k: m[k] for k in ("reranker", "identity", "precision", "length")}
                                       for m in members], "grid": WEIGHT_GRID, "significance": SIGNIFICANCE_LEVEL,
                           "data": str(args.data)},
                 notes=args.notes or None)


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    steps = parser.add_subparsers(dest="step", required=True)
    p = steps.add_parser("prepare", help="each dev query's hybrid top 20 (needs the node and the indices)")
    p.add_argument("--scifact-index", default="scifact")
    p.add_argument("--bioasq-index", default="encoder-choice-bioasq7b-bge")
    p.add_argument("--nfcorpus-index", default="nfcorpus")
    p.add_argument("--out", type=Path, required=True)
    p = steps.add_parser("score", help="one member's scores of every candidate and its ms per query")
    p.add_argument("data", type=Path)
    p.add_argument("--reranker", required=True, help="as --reranker takes one: biorank-reranker, a folder, ...")
    p.add_argument("--precision", default="auto")
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--out", type=Path, required=True)
    p = steps.add_parser("report", help="the table: the members alone and the ensembles, each at its tuned w")
    p.add_argument("data", type=Path)
    p.add_argument("members", nargs="+", type=Path, help="score's files, the first member (the baseline) first")
    p.add_argument("--notes", default="", help="the load on the machine while scoring (uptime), any caveat")
    args = parser.parse_args(argv)
    {"prepare": prepare, "score": score, "report": report}[args.step](args)


if __name__ == "__main__":
    main()
