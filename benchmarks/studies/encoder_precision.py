"""Which precisions may the encoder run at: the speed of each, and how far it moves SciFact rankings from fp32?

For each precision: passages/s and claims/s, the cosine between its vectors and the fp32 ones, the overlap of
each claim's top 10 passages with the fp32 top 10, and nDCG@10 against the train qrels. Every precision
encodes both sides, as an index built and queried at that precision would.

    python -m benchmarks.studies.encoder_precision                 # 1,000 abstracts, the 809 train claims
    python -m benchmarks.studies.encoder_precision --limit 0 --precisions fp32,bf16    # all 5,183 abstracts

onnx and int8 run in ONNX Runtime from biorank's own export (made once, in the cache); "load" is the load from
that cache. Where a backend is missing, its row says so and the others still run.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import suite
from biorank import Encoder
from biorank.models.encoder import PACKAGED_MODEL
from biorank.models.placement import PRECISIONS

COLUMNS = suite.columns(("precision", "precision"), ("passages_per_s", "passages/s", ".1f"),
                        ("claims_per_s", "claims/s", ".1f"), ("load_s", "load s", ".1f"),
                        ("mean_cos_passages", "mean cos (passages)", ".6f"),
                        ("min_cos_passages", "min cos (passages)", ".6f"),
                        ("mean_cos_claims", "mean cos (claims)", ".6f"), ("top10_overlap", "top-10 overlap", ".4f"),
                        ("ndcg10", "nDCG@10", ".4f"))


@dataclass
class Run:
    precision: str
    load_s: float
    passages_per_s: float
    queries_per_s: float
    passages: np.ndarray
    queries: np.ndarray


def read_passages(corpus: Path, limit: int, cited: set[str]) -> tuple[list[str], list[str]]:
    """The abstracts to encode: all of them, or ``limit`` of them with the cited ones first.

    Putting the cited abstracts first lets every claim be scored against a small sample; the sample is
    easier than the whole corpus, so its nDCG is higher, but the precisions are compared on equal terms.
    """
    docs = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    if limit:
        docs.sort(key=lambda doc: str(doc["doc_id"]) not in cited)  # stable: file order within each group
        docs = docs[:limit]
    return [str(doc["doc_id"]) for doc in docs], [doc["title"] + " " + " ".join(doc["abstract"]) for doc in docs]


def read_queries(path: Path) -> tuple[list[str], list[str]]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [str(r["_id"]) for r in records], [r["text"] for r in records]


def read_qrels(path: Path) -> dict[str, set[str]]:
    relevant: dict[str, set[str]] = defaultdict(set)
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        query_id, doc_id, score = line.split("\t")
        if int(score) > 0:
            relevant[query_id].add(doc_id)
    return relevant


def measure(model: str, precision: str, passages: list[str], queries: list[str], batch_size: int) -> Run:
    started = time.perf_counter()
    encoder = Encoder(model, precision=precision, batch_size=batch_size)  # type: ignore[arg-type]
    load_s = time.perf_counter() - started
    # The first batches pay for kernel selection (and oneDNN's bf16 set-up); keep that out of the rates.
    encoder.encode(passages[:batch_size])
    started = time.perf_counter()
    passage_vectors = encoder.encode(passages)
    passages_per_s = len(passages) / (time.perf_counter() - started)
    started = time.perf_counter()
    query_vectors = encoder.encode(queries)
    queries_per_s = len(queries) / (time.perf_counter() - started)
    return Run(precision, load_s, passages_per_s, queries_per_s, passage_vectors, query_vectors)


def top_k(queries: np.ndarray, passages: np.ndarray, k: int) -> np.ndarray:
    scores = queries @ passages.T
    best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, best, axis=1), axis=1)
    return np.take_along_axis(best, order, axis=1)


def ndcg_at_10(ranked: np.ndarray, query_ids: list[str], doc_ids: list[str], qrels: dict[str, set[str]]) -> float:
    """Mean nDCG@10 over the claims with at least one cited abstract among the encoded passages."""
    present = set(doc_ids)
    values = []
    for row, query_id in zip(ranked, query_ids, strict=True):
        relevant = qrels.get(query_id, set()) & present
        if not relevant:
            continue
        dcg = sum(1 / math.log2(rank + 2) for rank, doc in enumerate(row[:10]) if doc_ids[doc] in relevant)
        ideal = sum(1 / math.log2(rank + 2) for rank in range(min(len(relevant), 10)))
        values.append(dcg / ideal)
    return float(np.mean(values)) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = suite.parser(__doc__, __file__, cluster=False)
    parser.add_argument("--corpus", type=Path, default=suite.data("scifact-corpus"),
                        help="SciFact corpus.jsonl; queries_train.jsonl and qrels/train.tsv are read beside it")
    parser.add_argument("--limit", type=int, default=1000,
                        help="encode N abstracts, those the train claims cite first; 0 for all (default: 1000)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--model", default=PACKAGED_MODEL, help="the encoder (the table above is all-MiniLM-L6-v2's)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS),
                        help="comma-separated; fp32 is always run, as the reference")
    args = parser.parse_args(argv)

    precisions = ["fp32"] + [p for p in args.precisions.split(",") if p and p != "fp32"]
    query_ids, queries = read_queries(args.corpus.parent / "queries_train.jsonl")
    qrels = read_qrels(args.corpus.parent / "qrels" / "train.tsv")
    doc_ids, passages = read_passages(args.corpus, args.limit, set().union(*qrels.values()))

    suite.header(f"{len(passages)} abstracts, {len(queries)} claims, batch size {args.batch_size}")

    runs: list[Run] = []
    for precision in precisions:
        try:
            runs.append(measure(args.model, precision, passages, queries, args.batch_size))
        except Exception as error:  # a missing optional backend is a result to report, not a crash
            if precision == "fp32":
                raise
            print(f"{precision}: unavailable: {type(error).__name__}: {error}".splitlines()[0], file=sys.stderr)
            continue
        run = runs[-1]
        print(f"{precision}: load {run.load_s:.1f} s, {run.passages_per_s:.1f} passages/s", file=sys.stderr)

    reference = runs[0]
    reference_top = top_k(reference.queries, reference.passages, 10)
    rows = []
    for run in runs:
        passage_cos = np.sum(run.passages * reference.passages, axis=1)
        query_cos = np.sum(run.queries * reference.queries, axis=1)
        top = top_k(run.queries, run.passages, 10)
        overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top, reference_top, strict=True)])
        rows.append({"precision": run.precision, "passages_per_s": round(run.passages_per_s, 2),
                     "claims_per_s": round(run.queries_per_s, 2), "load_s": round(run.load_s, 2),
                     "mean_cos_passages": round(float(passage_cos.mean()), 6),
                     "min_cos_passages": round(float(passage_cos.min()), 6),
                     "mean_cos_claims": round(float(query_cos.mean()), 6), "top10_overlap": round(float(overlap), 4),
                     "ndcg10": round(ndcg_at_10(top, query_ids, doc_ids, qrels), 4)})
    suite.record(args, COLUMNS, rows, variant=None if args.limit == 1000 else f"limit{args.limit}",
                 settings={"model": args.model, "abstracts": len(passages), "claims": len(queries),
                           "batch_size": args.batch_size})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
