"""How fast are the neural stages on a GPU, beside its peak arithmetic, within the quality limits?

Pure model stages, no cluster: a GPU box with the repository and the model files runs it. Over the first N SciFact
abstracts (default 1,000; ``--limit 0`` all 5,183) it measures:
- encoder: abstracts/s with their sentences, and sentences/s (the blocks and sentences ``biorank index`` encodes,
  ``--batch`` abstracts a call), for each ``--batch-tokens`` value given (the fastest makes the row), beside the
  rate the device's peak dense bf16 arithmetic would allow (FLOPs per abstract from the model's parameters and the
  word pieces of its texts, attention included; the peak from a table of GPUs by name, none on a CPU), and the
  hours all of PubMed would take at the measured rate;
- rerank: the cross-encoder over 20 and over 100 hits of a claim (its nearest abstracts by the encoder), p50 ms;
- snippets: the ~100 sentences of a claim's 10 nearest abstracts, scored by the cross-encoder at sentence length
  (the relevance perspective), and encoded by the encoder (what a snippet stage without stored sentence vectors
  does), p50 ms each;
- quality against ONNX Runtime fp32 on the CPU: the vectors' cosine (min, mean) over ``--quality-limit`` abstracts'
  texts, the overlap of each claim's top 10 blocks, and the cross-encoder's largest logit difference and top-10
  overlap over the 20-hit rerank pairs. Limits: cosine >= 0.999, top-10 overlap >= 0.99.

    python -m benchmarks.gpu_stages                              # auto: the GPU where torch sees one
    python -m benchmarks.gpu_stages --device cuda --limit 0 --batch-tokens 8192,16384,32768   # all of SciFact
    python -m benchmarks.gpu_stages --device cpu --limit 50 --records-dir /tmp/records   # a smoke run

A GPU box that cannot fetch the ONNX graphs (the project's lent machine, see ``benchmarks/gpu_session.py``) runs
it with ``--outputs FILE``: the speeds, and the GPU's vectors and logits for the quality check, go into FILE; here,
``--compare FILE`` puts ONNX Runtime fp32 beside them and writes the record. The record is ``gpu_stages-<device>``
(``h100``, ``h200``, ... or ``cpu``) unless ``--variant`` names it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import suite
from benchmarks.index_throughput import pipeline_texts
from benchmarks.sentence_store import PUBMED_ABSTRACTS
from benchmarks.studies.encoder_precision import top_k
from biorank.evaluation.topics import read_queries
from biorank.indexer.readers import read_records
from biorank.indexer.sentences import sentences_of
from biorank.models.cross_encoder import CrossEncoder
from biorank.models.encoder import DEFAULT_MODEL, Encoder
from biorank.models.placement import PRECISIONS
from biorank.models.shipped import SHIPPED_RERANKER
from biorank.stages.rerank import DEFAULT_LENGTH, document_text
from biorank.stages.snippets import SENTENCE_BATCH, SENTENCE_MAX_LENGTH
from biorank.types import Abstract

PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("GH200", 989.0),
                    ("B200", 2250.0), ("A100", 312.0), ("L40S", 362.0), ("A10G", 70.0), ("L4", 121.0))
"""Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's data sheets, by a part of the name torch reports, the
more specific names first (an SXM H100 is "NVIDIA H100 80GB HBM3")."""
COLUMNS = suite.columns(
    ("device", "device"), ("precision", "precision"), ("abstracts_per_s", "abstracts/s with sentences", ",.1f"),
    ("sentences_per_s", "sentences/s", ",.0f"), ("peak_bound", "peak-arithmetic bound abstracts/s", ",.0f"),
    ("share_of_peak", "share of peak", ".3f"), ("pubmed_hours", "PubMed hours", ",.1f"),
    ("rerank_p50", "rerank 20 hits p50 ms", ".1f"), ("rerank100_p50", "rerank 100 hits p50 ms", ".1f"),
    ("relevance_p50", "~100 sentences relevance p50 ms", ".1f"),
    ("sentence_encode_p50", "~100 sentences encoded p50 ms", ".1f"), ("min_cos", "min cos", ".5f"),
    ("mean_cos", "mean cos", ".6f"), ("top10_overlap", "top-10 overlap", ".4f"),
    ("rerank_max_diff", "rerank max |Δ logit|", ".4f"), ("rerank_top10_overlap", "rerank top-10 overlap", ".4f"))


def peak_tflops(device: str) -> tuple[str, float | None]:
    """The device's name and its peak dense bf16 TFLOPS where the table knows it (None on a CPU or an unknown GPU)."""
    if device == "cpu":
        return "cpu", None
    import torch

    name = torch.cuda.get_device_name(torch.device(device))
    return name, next((peak for part, peak in PEAK_BF16_TFLOPS if part in name), None)


def flops_per_text(encoder: Encoder, lengths: list[int]) -> float:
    """Forward FLOPs of the encoder over texts of these word pieces: 2 per weight of the layers (embeddings are
    looked up, not multiplied) per word piece, and 4 x hidden x length per word piece and layer for attention."""
    model = encoder.model
    weights = sum(p.numel() for name, p in model.named_parameters() if "embeddings" not in name)
    config = next(m.config for m in model.modules() if hasattr(m, "config") and hasattr(m.config, "hidden_size"))
    tokens = np.asarray(lengths, dtype=np.float64)
    return float(2 * weights * tokens.sum() + 4 * config.num_hidden_layers * config.hidden_size * (tokens ** 2).sum())


def _sizes(text: str) -> list[int]:
    """``--batch-tokens 8192,16384``: the sizes to compare."""
    return [int(part) for part in text.split(",")]


def encode_time(encoder: Encoder, batches: list[tuple[list[str], list[str]]]) -> tuple[float, int]:
    """Seconds to encode ``batches`` (each batch's blocks, then its sentences: what indexing encodes), timed after
    one warm call (kernels, allocator, autotuning), and how many sentences they hold."""
    encoder.encode(batches[0][0][:64] + batches[0][1][:64])
    started = time.perf_counter()
    for blocks, sentences in batches:
        encoder.encode(blocks)
        encoder.encode(sentences)
    return time.perf_counter() - started, sum(len(s) for _, s in batches)


def measure(args: argparse.Namespace) -> tuple[dict, dict, dict]:
    """The speeds (the row and the settings as the record keeps them) and the outputs the quality check compares:
    the quality texts' vectors, the claims' vectors and the 20-hit rerank pairs' logits, with what produced them."""
    records = [r for r in read_records(args.corpus) if isinstance(r, Abstract)][: args.limit or None]
    sweep, batches = {}, None
    for tokens in args.batch_tokens or [None]:
        encoder = Encoder(args.model, device=args.device, precision=args.precision, batch_tokens=tokens)
        batches = batches or pipeline_texts(encoder, records, True, args.batch)  # the sizes cut the same texts
        elapsed, sentence_count = encode_time(encoder, batches)
        sweep[encoder.batch_tokens] = (encoder, len(records) / elapsed, sentence_count / elapsed)
    encoder, rate, sentence_rate = max(sweep.values(), key=lambda measured: measured[1])
    scorer = CrossEncoder(args.reranker, device=args.device, precision=args.precision, max_length=DEFAULT_LENGTH)
    name, peak = peak_tflops(encoder.device)
    suite.header(f"{len(records)} abstracts; encoder {encoder.model_name} {encoder.precision} on {encoder.device} "
                 f"({name}), batch tokens {encoder.batch_tokens}; cross-encoder {scorer.precision} on {scorer.device}")
    texts = [text for blocks, sentences in batches for text in blocks + sentences]
    bound = share = None
    if peak is not None:
        lengths = [min(n + 2, encoder.max_seq_length) for n in encoder.count_tokens(texts)]
        per_abstract = flops_per_text(encoder, lengths) / len(records)
        bound, share = peak * 1e12 / per_abstract, rate * per_abstract / (peak * 1e12)

    # Rerank and snippets: each claim's nearest abstracts by the encoder stand for the first stage's hits.
    claims = list(read_queries(args.claims).values())[: args.queries]
    documents = encoder.encode([document_text(r.title, r.abstract) for r in records])
    query_vectors = encoder.encode(claims, role="query")
    nearest = top_k(query_vectors, documents, min(100, len(records)))
    hits = [[document_text(records[i].title, records[i].abstract) for i in row] for row in nearest]
    sentences = [[s.text for i in row[:10] for s in sentences_of(records[i])][:100] for row in nearest]
    at_sentences = scorer.resized(max_length=SENTENCE_MAX_LENGTH, batch_size=SENTENCE_BATCH)
    warm = min(3, len(claims))
    rerank = suite.timed(lambda q: scorer.score(claims[q], hits[q][:20]), range(len(claims)), warm=warm)
    rerank100 = suite.timed(lambda q: scorer.score(claims[q], hits[q]), range(len(claims)), warm=warm)
    relevance = suite.timed(lambda q: at_sentences.score(claims[q], sentences[q]), range(len(claims)), warm=warm)
    encoded = suite.timed(lambda q: encoder.encode(sentences[q]), range(len(claims)), warm=warm)

    compared = pipeline_texts(encoder, records[: args.quality_limit or None], True, args.batch)
    quality_blocks = [text for blocks, _ in compared for text in blocks]
    quality = quality_blocks + [text for _, sentences in compared for text in sentences]
    pairs = [row[:20] for row in hits]
    outputs = {"texts": quality, "blocks": len(quality_blocks), "vectors": encoder.encode(quality),
               "claims": claims, "query_vectors": query_vectors, "pairs": pairs,
               "logits": [scorer.score(claim, pairs[q]).tolist() for q, claim in enumerate(claims)],
               "model": args.model, "reranker": args.reranker}
    row = {"device": name, "precision": f"{encoder.precision} / {scorer.precision}",
           "abstracts_per_s": round(rate, 1), "sentences_per_s": round(sentence_rate),
           "peak_bound": round(bound) if bound else float("nan"),
           "share_of_peak": round(share, 4) if share else float("nan"),
           "pubmed_hours": round(PUBMED_ABSTRACTS / rate / 3600, 1),
           "rerank_p50": suite.summary(rerank)["p50"], "rerank100_p50": suite.summary(rerank100)["p50"],
           "relevance_p50": suite.summary(relevance)["p50"], "sentence_encode_p50": suite.summary(encoded)["p50"]}
    settings = {
        "abstracts": len(records), "texts": len(texts), "claims": len(claims),
        "quality_abstracts": len(records[: args.quality_limit or None]), "quality_texts": len(quality),
        "model": encoder.model_name, "reranker": scorer.model_name, "device": encoder.device, "device_name": name,
        "peak_bf16_tflops": peak, "batch_abstracts": args.batch, "batch_tokens": encoder.batch_tokens,
        "batch_tokens_sweep": [{"batch_tokens": tokens, "abstracts_per_s": round(a, 1),
                                "sentences_per_s": round(s)} for tokens, (_, a, s) in sweep.items()],
        "pubmed_abstracts": PUBMED_ABSTRACTS, "rerank_rows": scorer.rows, "sentence_rows": at_sentences.rows,
        "sentences_per_claim": round(float(np.mean([len(s) for s in sentences])), 1),
        "rerank_p95": suite.summary(rerank)["p95"], "rerank100_p95": suite.summary(rerank100)["p95"],
        "relevance_p95": suite.summary(relevance)["p95"]}
    if encoder.placement.backend == "torch":
        settings.update(_torch_versions())
    if args.notes:
        settings["notes"] = args.notes
    return row, settings, outputs


def _torch_versions() -> dict:
    """The CUDA torch was built with and the GPU's compute capability, beside the versions every record lists."""
    import torch

    found = {"torch_cuda": torch.version.cuda}
    if torch.cuda.is_available():
        found["cuda_capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    return found


def compare(outputs: dict) -> dict:
    """The quality figures: the outputs beside ONNX Runtime fp32 on this CPU, over the same texts and pairs."""
    reference = Encoder(outputs["model"], precision="onnx")
    mine, onnx = np.asarray(outputs["vectors"]), reference.encode(list(outputs["texts"]))
    cosines = np.sum(mine * onnx, axis=1)
    blocks, claims = int(outputs["blocks"]), list(outputs["claims"])
    k = min(10, blocks)
    ours = top_k(np.asarray(outputs["query_vectors"]), mine[:blocks], k)
    theirs = top_k(reference.encode(claims, role="query"), onnx[:blocks], k)
    overlap = np.mean([len(set(a) & set(b)) / k for a, b in zip(ours, theirs, strict=True)])
    cpu_scorer = CrossEncoder(outputs["reranker"], precision="onnx", max_length=DEFAULT_LENGTH)
    diffs, agree = [], []
    for claim, pairs, logits in zip(claims, outputs["pairs"], outputs["logits"], strict=True):
        scores, reference_scores = np.asarray(logits), cpu_scorer.score(claim, list(pairs))
        diffs.append(float(np.abs(scores - reference_scores).max()))
        top = min(10, len(pairs))
        agree.append(len(set(np.argsort(-scores)[:top]) & set(np.argsort(-reference_scores)[:top])) / top)
    return {"min_cos": round(float(cosines.min()), 6), "mean_cos": round(float(cosines.mean()), 7),
            "top10_overlap": round(float(overlap), 4), "rerank_max_diff": round(max(diffs), 5),
            "rerank_top10_overlap": round(float(np.mean(agree)), 4)}


def save_outputs(path: Path, row: dict, settings: dict, outputs: dict, command: str) -> None:
    """Everything ``--compare`` needs, in one compressed file: the arrays as arrays, the rest as JSON."""
    arrays = {key: np.asarray(outputs[key], dtype=np.float32) for key in ("vectors", "query_vectors")}
    rest = {key: value for key, value in outputs.items() if key not in arrays}
    measured = {"row": row, "settings": settings, "command": command,
                "measured_on": {"machine": suite.machine(), "versions": suite.versions()}}
    np.savez_compressed(path, **arrays, rest=json.dumps(rest), measured=json.dumps(measured))


def load_outputs(path: Path) -> tuple[dict, dict, dict, dict]:
    """What :func:`save_outputs` kept: the row, the settings (with the command that measured), the outputs, and
    the machine and versions that measured."""
    with np.load(path) as saved:
        measured = json.loads(str(saved["measured"]))
        outputs = {**json.loads(str(saved["rest"])), **{key: saved[key] for key in ("vectors", "query_vectors")}}
    return (measured["row"], {**measured["settings"], "measured_by": measured["command"]}, outputs,
            measured["measured_on"])


def short_name(device_name: str) -> str:
    """A GPU's short name (``h200``) from the name torch reports (``NVIDIA H200``), or ``gpu``: records' variants."""
    return next((part.split()[0].lower() for part, _ in PEAK_BF16_TFLOPS if part in device_name), "gpu")


def variant_of(row: dict, settings: dict) -> str:
    """The record's variant: ``cpu``, or the GPU's short name."""
    return "cpu" if settings["device"] == "cpu" else short_name(row["device"])


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, cluster=False)
    parser.add_argument("--corpus", type=Path, default=suite.data("scifact-corpus"), help="a JSONL corpus")
    parser.add_argument("--claims", type=Path, default=suite.data("scifact-claims-train"), help="the claims")
    parser.add_argument("--limit", type=int, default=1000, help="abstracts to encode (0: all)")
    parser.add_argument("--queries", type=int, default=50, help="claims to time rerank and snippets with")
    parser.add_argument("--quality-limit", type=int, default=300,
                        help="abstracts whose texts are compared with ONNX Runtime fp32 on the CPU (0: all)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--precision", default="auto", choices=["auto", *PRECISIONS], help="the models' backend")
    parser.add_argument("--model", default=None,
                        help=f"the encoder (default {DEFAULT_MODEL}; with --compare, the one the outputs name)")
    parser.add_argument("--reranker", default=None, help="the cross-encoder (default the shipped one; with "
                        "--compare, the one the outputs name: give its folder here if it was trained there)")
    parser.add_argument("--batch", type=int, default=512, help="abstracts per encoder call")
    parser.add_argument("--batch-tokens", type=_sizes, default=None, metavar="N[,N...]",
                        help="word pieces per encoder batch, one or several to compare (default: the device's, "
                             "biorank.models.placement)")
    parser.add_argument("--variant", default=None, help="the record's variant (default: the device's short name)")
    parser.add_argument("--notes", default="", help="what a reader of the record needs (how the weights travelled)")
    steps = parser.add_mutually_exclusive_group()
    steps.add_argument("--outputs", type=Path, default=None,
                       help="measure without the ONNX reference: speeds and outputs into this .npz, no record")
    steps.add_argument("--compare", type=Path, default=None,
                       help="an --outputs file: compare it with ONNX Runtime fp32 here and write the record")
    args = parser.parse_args(argv)

    measured_on = None
    if args.compare:
        row, settings, outputs, measured_on = load_outputs(args.compare)
        outputs["model"], outputs["reranker"] = args.model or outputs["model"], args.reranker or outputs["reranker"]
    else:
        args.model, args.reranker = args.model or DEFAULT_MODEL, args.reranker or SHIPPED_RERANKER
        row, settings, outputs = measure(args)
    if args.outputs:
        command = shlex.join(["python", "-m", "benchmarks.gpu_stages", *(sys.argv[1:] if argv is None else argv)])
        save_outputs(args.outputs, row, settings, outputs, command)
        print(suite.markdown(COLUMNS, [row]), flush=True)
        print(f"outputs: {args.outputs} (here: python -m benchmarks.gpu_stages --compare {args.outputs.name})")
        return
    row.update(compare(outputs))
    suite.record(args, COLUMNS, [row], variant=args.variant or variant_of(row, settings), settings=settings,
                 notes=settings.get("notes"), measured_on=measured_on)


if __name__ == "__main__":
    main()
