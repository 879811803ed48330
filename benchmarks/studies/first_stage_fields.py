"""Do the title's weight, MeSH headings and BM25's k1/b improve the first stage on questions no training saw?

The cross-encoder adds nothing measurable on such questions, so their quality is the first stage's. Beside the
hybrid (``λ·BM25(q, passage) + ⟨q, p⟩`` at the index's λ), each variant adds ``w·BM25(q, title)`` or
``w·BM25(q, MeSH)`` to the BM25 leg (:mod:`biorank.retrieval.boosts`), or sets the index's k1/b to Lucene's
defaults. Each runs every query of a collection once, one query at a time as ``biorank query`` runs (timed), to
depth 100, and each query set of :func:`benchmarks.studies.unseen_dev.collections` is scored on it; p: paired
t-test against the hybrid on the same queries. Then ``tune-lambda``'s choice over λ, the boosts and the k1/b
pairs, made on one half of the unseen set and measured on the other half (its rows say so).

SciFact, NFCorpus and BioASQ's abstracts carry no MeSH headings, so MeSH is measured on PubMedQA's 500 labelled
questions (each answered by its own abstract, whose MeSH headings PubMedQA gives; its questions are the articles'
titles, so there is no title to weigh): the index is ``biorank index pubmedqa.jsonl --format jsonl`` of the file
``--write-pubmedqa`` writes (id, abstract text without its conclusion, MeSH, year). Known-item tasks, easier than
the others: each question, and each abstract's conclusion (which the index does not hold), is to find its own
abstract among 500. They say whether MeSH words help find the right abstract, not how much on a real question.

Usage:
    python -m benchmarks.studies.first_stage_fields --write-pubmedqa /tmp/pubmedqa.jsonl
    python -m benchmarks.studies.first_stage_fields --url http://127.0.0.1:9200
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from benchmarks import suite
from benchmarks.studies.first_stage_feedback import index_size, set_rows, timed_run, tuned
from benchmarks.studies.unseen_dev import DATA, collections

DEPTH = 100
WEIGHTS = (0.25, 0.5, 1.0)
LUCENE_BM25 = (1.2, 0.75)
COLUMNS = suite.columns(("query_set", "query set"), ("queries", "queries"), ("system", "system"),
                        ("measure", "measure"), ("value", "value", ".4f"), ("p", "p", ".3f"),
                        ("recall100", "recall@100", ".4f"), ("p50", "p50 ms", ".0f"), ("p95", "p95 ms", ".0f"))


def pubmedqa() -> tuple[dict[str, str], dict[str, dict[str, int]], dict[str, dict]]:
    """PubMedQA's labelled questions (ids ``q<PMID>``) and their abstracts' conclusions (``c<PMID>``, a text the
    index does not hold), each relevant to its own abstract, and the abstracts by PMID."""
    labelled = json.loads((DATA / "pubmedqa/pqal_cv_set.json").read_text())
    queries = {f"q{pmid}": entry["QUESTION"] for pmid, entry in labelled.items()}
    queries |= {f"c{pmid}": entry["LONG_ANSWER"] for pmid, entry in labelled.items()}
    return queries, {q: {q[1:]: 1} for q in queries}, labelled


def write_pubmedqa(path: Path) -> None:
    """The abstracts as JSON Lines with their MeSH headings and year, for ``biorank index --format jsonl``."""
    _, _, labelled = pubmedqa()
    with path.open("w") as out:
        for pmid, entry in labelled.items():
            out.write(json.dumps({"id": pmid, "text": " ".join(entry["CONTEXTS"]), "mesh": entry["MESHES"],
                                  "year": entry["YEAR"]}) + "\n")
    print(f"wrote {len(labelled)} abstracts to {path}")


def variants(field: str) -> dict:  # type: ignore[type-arg]
    """The systems of one collection by label: the hybrid, ``field`` at each weight, Lucene's k1/b."""
    from biorank.retrieval.boosts import Boosts
    from biorank.tuning.lambda_grid import Variant

    return {"hybrid": Variant(),
            **{f"hybrid, {field} {w:g}": Variant(boosts=Boosts(**{field: w})) for w in WEIGHTS},
            f"hybrid, k1 {LUCENE_BM25[0]:g} b {LUCENE_BM25[1]:g}": Variant(bm25=LUCENE_BM25)}


def grid(field: str) -> list:  # type: ignore[type-arg]
    """The tuner's variants: each weight of ``field`` (and none) on the index's k1/b and on Lucene's."""
    from biorank.retrieval.boosts import Boosts
    from biorank.tuning.lambda_grid import Variant

    return [Variant(boosts=boosts, bm25=pair) for pair in (None, LUCENE_BM25)
            for boosts in (Boosts(), *(Boosts(**{field: w}) for w in WEIGHTS))]


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("--collections", default="scifact,bioasq,nfcorpus,pubmedqa")
    parser.add_argument("--indexes", default="scifact=scifact,bioasq=bioasq,nfcorpus=nfcorpus,pubmedqa=pubmedqa",
                        help="collection=index")
    parser.add_argument("--write-pubmedqa", type=Path, default=None,
                        help="write PubMedQA's abstracts as JSON Lines to this file and stop")
    args = parser.parse_args(argv)
    if args.write_pubmedqa:
        write_pubmedqa(args.write_pubmedqa)
        return
    from biorank.retrieval.searcher import Searcher
    from biorank.store.indices import set_bm25_parameters
    from biorank.tuning.lambda_grid import bm25_kept

    indexes = dict(item.split("=") for item in args.indexes.split(","))
    client = suite.connect(args)
    suite.header(f"collections {args.collections}; depth {DEPTH}")
    known = collections()
    pq, pr, _ = pubmedqa()
    known["pubmedqa"] = ("PubMedQA", pq, pr, [("questions", sorted(q for q in pq if q[0] == "q")),
                                              ("conclusions as queries", sorted(q for q in pq if q[0] == "c"))])
    for name in args.collections.split(","):
        rows: list[dict] = []
        title, queries, qrels, sets = known[name]
        sets = [(label, ids) for label, ids in sets if label != "dev-seen"]
        field = "mesh" if name == "pubmedqa" else "title"
        asked = {q: queries[q] for q in sorted({q for _, ids in sets for q in ids})}
        opened = Searcher.open(client, indexes[name])
        opened.load()
        systems = variants(field)
        runs, ms = {}, {}
        with bm25_kept(opened) as own:
            for label, variant in systems.items():
                if variant.bm25:
                    set_bm25_parameters(client, indexes[name], *variant.bm25)
                searcher = opened.with_settings(boosts=variant.boosts)
                runs[label], ms[label] = timed_run(searcher, asked)
                print(f"{name}: {label} done", flush=True)
        measures = ["ndcg@10", "map@10"] if name == "bioasq" else ["ndcg@10"]
        rows += set_rows(title, sets, runs, ms, qrels, measures)
        rows += tuned(opened, title, sets[-1], queries, qrels, measures, grid(field))
        suite.record(args, COLUMNS, rows, variant=name, client=client,
                     settings={"depth": DEPTH, "weights": list(WEIGHTS), "field": field, "index": indexes[name],
                               "own_bm25": list(own), "index_kb_per_abstract": index_size(client, indexes[name])},
                     notes="boosts add w·BM25(q, field) to the BM25 leg at the index's λ; k1/b set on the index "
                           "(closed and reopened) and restored; p: paired t-test against the hybrid; ms: one query "
                           f"at a time, first stage only; load (uptime) at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
