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

Members that need no training: an earlier shipped version from git history (``unpack``), and a "soup" (Wortsman
et al.), the mean of the weights of models fine-tuned from one base, which costs one model's time a query:

    python -m benchmarks.studies.ensembles unpack --revision 1475fcf^ --out v1     # the shipped v1
    python -m benchmarks.studies.ensembles soup biorank-reranker v1 --out soup
    python -m benchmarks.studies.ensembles report ensembles.json.gz v2.json v1.json --alone soup.json

``prepare`` takes each dev query's hybrid top 20 (SciFact's dev claims with BEIR qrels, the 240 fully covered
BioASQ 7B questions, NFCorpus's 324 dev queries; the indices as ``benchmarks/studies/reranker_depth.py`` names
them). ``score`` runs one member as ``--reranker`` loads it (any name it takes) and times its 20 pairs a query;
run it nice'd on an idle machine, and say the load (``uptime``) if it was not. ``report`` writes the record
``ensembles.json``: per query set and system the tuned weight, the measure and its p-value, and the milliseconds a
query of scoring 20 hits (an ensemble's: its members' sum, as it scores them one after the other). Each collection's
dev queries are reported whole and in their unseen part (issue 44: none of their relevant documents a training query
has), each with the weight tuned on that set itself (the best a weight can do there, not a held-out figure).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import time
from pathlib import Path

from benchmarks import suite
from benchmarks.studies.reranker_depth import MEASURE, SETS, candidates

FIRST_STAGE = "hybrid alone (no rerank)"


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
    model = CrossEncoder(args.reranker, precision=args.precision, max_length=args.length, device=args.device)
    model.score(evals[0]["q"], evals[0]["texts"])  # kernels and caches warm before the clock starts
    scores, ms = [], []
    for e in evals:
        started = time.perf_counter()
        scores.append([float(v) for v in model.score(e["q"], e["texts"])])
        ms.append((time.perf_counter() - started) * 1000)
    args.out.write_text(json.dumps({"reranker": args.reranker, "name": args.name or args.reranker,
                                    "identity": model.model_name,
                                    "precision": model.precision, "length": args.length,
                                    "scores": scores, "ms": ms}) + "\n", encoding="utf-8")
    print(f"{args.reranker}: {len(evals)} queries, {sum(ms) / len(ms):.0f} ms a query -> {args.out}")


def report(args: argparse.Namespace) -> None:
    """Each member alone and the ensemble by each rule, at its tuned weight, against the first member alone."""
    from biorank.evaluation.measures import evaluate, run_from_hits
    from biorank.evaluation.report import SIGNIFICANCE_LEVEL, evaluate_runs
    from biorank.models.ensemble import ENSEMBLE_RULES, combine
    from biorank.stages.rerank import reorder
    from biorank.tuning.grid import best_setting
    from biorank.tuning.rerank_weight import WEIGHT_GRID
    from biorank.types import Hit

    with gzip.open(args.data, "rt") as f:
        evals = json.load(f)["evals"]
    paths = [*args.members, *args.alone]
    scored = [json.loads(path.read_text(encoding="utf-8")) for path in paths]
    given = [m.get("name") or m["reranker"] for m in scored]
    # One model scored twice (at two lengths, say) is told apart by its file.
    names = [name if given.count(name) == 1 else f"{name} [{path.stem}]"
             for name, path in zip(given, paths, strict=True)]
    # Every system's scores of each query's candidates, and its ms a query: each scored model alone, then the
    # ensembles of the members (not of the --alone ones).
    systems = {name: (m["scores"], m["ms"]) for name, m in zip(names, scored, strict=True)}
    members = scored[: len(args.members)]
    summed = [sum(column) for column in zip(*(m["ms"] for m in members), strict=True)]
    for rule in ENSEMBLE_RULES if len(members) > 1 else ():
        systems[f"{'+'.join(names[: len(members)])} ({rule})"] = (
            [combine([m["scores"][i] for m in members], rule) for i in range(len(evals))], summed)
    # The first stage's own order, for reference: its scores reordered by themselves at any weight.
    systems[FIRST_STAGE] = ([e["first"] for e in evals], [0.0] * len(evals))
    baseline = names[0]
    rows = []
    for name_of_set, label, at in query_sets(evals):
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
        print(f"{label}, {measure} ({len(at)} queries), each at its tuned w, p against {baseline}:")
        for name, (_, ms) in systems.items():
            row = {"query_set": label, "queries": len(at), "measure": measure, "system": name, "w": tuned[name],
                   "value": round(result.table[name][measure], 4),
                   "p": round(result.p_values.get(name, {}).get(measure, 1.0), 4),
                   "ms": round(sum(ms[i] for i in at) / len(at), 1)}
            rows.append(row)
            print(f"  {name:<50} w {row['w']:<4g} {row['value']:.4f} p {row['p']:.4f}  {row['ms']:.0f} ms")
    cols = suite.columns(("query_set", "query set"), ("queries", "queries"), ("measure", "measure"),
                         ("system", "system"), ("w", "tuned w", "g"), ("value", "value", ".4f"),
                         ("p", f"p vs {baseline}", ".3f"), ("ms", "rerank ms / query", ",.0f"))
    suite.record(args, cols, rows,
                 settings={"scored": [{"name": name, **{k: m[k] for k in ("reranker", "identity", "precision",
                                                                           "length")}}
                                      for name, m in zip(names, scored, strict=True)],
                           "members": names[: len(members)], "grid": WEIGHT_GRID, "significance": SIGNIFICANCE_LEVEL,
                           "data": str(args.data)},
                 notes=args.notes or None)


def query_sets(evals: list[dict]) -> list[tuple[str, str, list[int]]]:
    """(collection, label, positions in ``evals``) of each query set: a collection's dev queries, then the part of
    them none of whose relevant documents a training query has (``benchmarks/studies/unseen_dev.py``'s sets)."""
    from benchmarks.studies.unseen_dev import collections

    known = collections()
    sets = []
    for name in SETS:
        at = [i for i, e in enumerate(evals) if e["set"] == name]
        title, _, _, labelled = known[name]
        old, (new, unseen) = labelled[0][0], labelled[1]
        wanted = set(unseen)
        sets += [(name, f"{title} {old}", at), (name, f"{title} {new}", [i for i in at if evals[i]["qid"] in wanted])]
    return sets


def unpack(args: argparse.Namespace) -> None:
    """The shipped cross-encoder of an earlier revision as an fp32 folder that ``--reranker`` takes."""
    from biorank.models.shipped import SHIPPED_FOLDER, WEIGHTS, unpack_weights

    args.out.mkdir(parents=True, exist_ok=True)
    relative = SHIPPED_FOLDER.relative_to(suite.ROOT).as_posix()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", WEIGHTS):
        blob = subprocess.run(["git", "-C", str(suite.ROOT), "show", f"{args.revision}:{relative}/{name}"],
                              capture_output=True, check=True).stdout
        if name == WEIGHTS:
            unpack_weights(blob, args.out / "model.safetensors")
        else:
            (args.out / name).write_bytes(blob)
    print(f"the shipped cross-encoder of {args.revision} -> {args.out}")


def soup(args: argparse.Namespace) -> None:
    """The mean of the members' weights (one architecture, fine-tuned from one base), saved as one model."""
    from biorank.models.cross_encoder import load_cross_encoder

    loaded = [load_cross_encoder(name) for name in args.members]
    model, tokenizer = loaded[0]
    states = [m.state_dict() for m, _ in loaded]
    if any(state.keys() != states[0].keys() for state in states):
        raise SystemExit("the members differ in architecture: a soup needs one")
    model.load_state_dict({k: sum(state[k] for state in states) / len(states) if v.is_floating_point() else v
                           for k, v in states[0].items()})
    if args.out.exists():
        shutil.rmtree(args.out)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"the mean of {', '.join(args.members)} -> {args.out}")


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
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: as --reranker decides)")
    p.add_argument("--name", default="", help="its name in the table (default: --reranker as given)")
    p.add_argument("--out", type=Path, required=True)
    p = steps.add_parser("report", help="the table: the members alone and the ensembles, each at its tuned w")
    p.add_argument("data", type=Path)
    p.add_argument("members", nargs="+", type=Path, help="score's files, the first member (the baseline) first")
    p.add_argument("--alone", nargs="*", type=Path, default=[],
                   help="score's files of models compared alone, not joined in the ensembles (a soup, say)")
    p.add_argument("--notes", default="", help="the load on the machine while scoring (uptime), any caveat")
    p = steps.add_parser("unpack", help="an earlier revision's shipped cross-encoder as a folder (no node)")
    p.add_argument("--revision", required=True, help="a git revision, e.g. 1475fcf^ (the shipped v1)")
    p.add_argument("--out", type=Path, required=True)
    p = steps.add_parser("soup", help="the mean of cross-encoders' weights as one model (no node)")
    p.add_argument("members", nargs="+", help="as --reranker takes one: biorank-reranker, a folder")
    p.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    {"prepare": prepare, "score": score, "report": report, "unpack": unpack, "soup": soup}[args.step](args)


if __name__ == "__main__":
    main()
