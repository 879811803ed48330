"""OpenVINO against ONNX Runtime on biorank's own exports (issue 15's one measured comparison).

Each graph biorank runs in ONNX Runtime (the default encoder bge-small-en-v1.5, the shipped cross-encoder) is
compiled by OpenVINO's CPU plugin from the same file and run through biorank's own tokenisation and
length-sorted batching; only the object that runs a batch is swapped. Reported: rates or p50 latency of both,
OpenVINO's compile time (what a fresh ``biorank query`` would pay for it) and how far its outputs are from ONNX
Runtime's.

    pip install openvino    # not one of biorank's dependencies
    python benchmarks/openvino_compare.py

2026-11-26, AMD EPYC, 2 CPUs, AVX2 (no AVX-512, VNNI or AMX), onnxruntime 1.32, openvino 2026.4.1, 2 threads,
``PERFORMANCE_HINT`` LATENCY (THROUGHPUT ran the encoder at 0.6x ONNX Runtime's rate, one batch at a time):

    | what | ONNX Runtime | OpenVINO | agreement |
    | --- | ---: | ---: | --- |
    | bge onnx, 200 abstracts | 6.1 /s | 7.3 /s | min cosine 1.00000 (compile 1.00 s) |
    | bge onnx, 884 sentences | 49.0 /s | 48.3 /s | min cosine 1.00000 (compile 0.83 s) |
    | cross-encoder onnx, 20 pairs of 256 pieces, p50 | 2,447 ms | 2,500 ms | logits within 9e-06 (compile 0.90 s) |
    | bge int8, 200 abstracts | 9.0 /s | 4.0 /s | min cosine 0.97370 (compile 2.91 s) |
    | bge int8, 884 sentences | 77.9 /s | 32.6 /s | min cosine 0.97341 (compile 2.55 s) |
    | cross-encoder int8, 20 pairs of 256 pieces, p50 | 1,681 ms | does not convert | QAttention, QEmbedLayerNorm... |

Four other runs of the fp32 rows gave OpenVINO/ONNX Runtime 1.09-1.35x on abstracts, 0.89-1.05x on
sentences, 0.79-1.10x on the cross-encoder; ONNX Runtime's fp32 session starts in 0.20-0.32 s.

OpenVINO does not read ONNX Runtime's int8 cross-encoder (its fused quantised operators do not convert); the
int8 encoder converts, but its vectors drift (cosine 0.973) and it runs at 0.4x ONNX Runtime's int8 rate.
In fp32 it gains 10-35% on abstracts (~7% of indexing with sentences, which the sentences halve) and nothing
elsewhere (within noise), and it starts three times slower: not worth a second backend on this CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from machine import cpu_isa

from biorank.models.cross_encoder import CrossEncoder
from biorank.models.encoder import Encoder
from biorank.models.runtime import physical_cores
from biorank.models.shipped import shipped_reranker_folder

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"


class OpenVinoRunner:
    """Runs a graph as ONNX Runtime's session does for biorank: ``run(None, feed)[0]`` is the first output."""

    def __init__(self, path: str, hint: str) -> None:
        import openvino

        begun = time.perf_counter()
        self.compiled = openvino.Core().compile_model(path, "CPU", {
            "PERFORMANCE_HINT": hint, "INFERENCE_NUM_THREADS": physical_cores()})
        self.compile_seconds = time.perf_counter() - begun
        self.request = self.compiled.create_infer_request()

    def run(self, _outputs: Any, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [self.request.infer(feed)[self.compiled.output(0)]]


def swap(model: Any, hint: str) -> tuple[Any, OpenVinoRunner]:
    """Puts an OpenVINO runner of the same file in place of an ONNX model's session; returns the session."""
    session = model._session  # the one attribute swapped: tokenisation and batching stay biorank's own
    runner = OpenVinoRunner(session._model_path, hint)
    model._session = runner
    return session, runner


def p50_ms(work: Any, runs: int) -> float:
    work(0)
    times = []
    for i in range(runs):
        begun = time.perf_counter()
        work(i)
        times.append(1000 * (time.perf_counter() - begun))
    return statistics.median(times)


def encoder_rows(corpus: list[dict], precision: str, hint: str) -> None:
    abstracts = [f"{d['title']} {' '.join(d['abstract'])}" for d in corpus]
    sentences = [s for d in corpus[:100] for s in d["abstract"]]
    model = Encoder("bge-small-en-v1.5", precision=precision)._onnx
    for label, texts, length in (("abstracts", abstracts, 300), ("sentences", sentences, 512)):
        model.embed(texts[:64], batch_size=64, max_length=length)  # both runners get one batch to warm up
        begun = time.perf_counter()
        reference = model.embed(texts, batch_size=64, max_length=length)
        ort_rate = len(texts) / (time.perf_counter() - begun)
        session, runner = swap(model, hint)
        model.embed(texts[:64], batch_size=64, max_length=length)
        begun = time.perf_counter()
        vectors = model.embed(texts, batch_size=64, max_length=length)
        ov_rate = len(texts) / (time.perf_counter() - begun)
        model._session = session
        cosines = (reference * vectors).sum(1) / np.linalg.norm(reference, axis=1) / np.linalg.norm(vectors, axis=1)
        print(f"| bge {precision}, {len(texts)} {label} | {ort_rate:.1f} /s | {ov_rate:.1f} /s | "
              f"min cosine {cosines.min():.5f} (compile {runner.compile_seconds:.2f} s) |", flush=True)


def cross_encoder_row(corpus: list[dict], precision: str, hint: str) -> None:
    texts = [f"{d['title']} {' '.join(d['abstract'])}" for d in corpus]
    claims = [json.loads(line)["claim"] for line in (SCIFACT / "claims_train.jsonl").open()][:10]
    scorer = CrossEncoder(shipped_reranker_folder(), precision=precision)

    def rerank(i: int) -> np.ndarray:
        return scorer.score(claims[i % 10], texts[20 * (i % 10) : 20 * (i % 10) + 20])

    reference = [rerank(i) for i in range(10)]
    ort_ms = p50_ms(rerank, 20)
    try:
        _, runner = swap(scorer._onnx, hint)
    except RuntimeError as error:  # OpenVINO names the operators it cannot convert
        print(f"| cross-encoder {precision}, 20 pairs of 256 pieces, p50 | {ort_ms:,.0f} ms | does not convert | "
              f"{[line for line in str(error).splitlines() if 'conver' in line][-1][:90]} |", flush=True)
        return
    difference = max(float(np.abs(rerank(i) - reference[i]).max()) for i in range(10))
    ov_ms = p50_ms(rerank, 20)
    print(f"| cross-encoder {precision}, 20 pairs of 256 pieces, p50 | {ort_ms:,.0f} ms | {ov_ms:,.0f} ms | "
          f"logits within {difference:.0e} (compile {runner.compile_seconds:.2f} s) |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hint", default="LATENCY", choices=["LATENCY", "THROUGHPUT"],
                        help="OpenVINO's performance hint (biorank runs one batch at a time).")
    options = parser.parse_args()
    print(f"{cpu_isa()}; {physical_cores()} threads\n| what | ONNX Runtime | OpenVINO | agreement |\n"
          "| --- | ---: | ---: | --- |")
    corpus = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open()][:200]
    for precision in ("onnx", "int8"):
        encoder_rows(corpus, precision, options.hint)
        cross_encoder_row(corpus, precision, options.hint)


if __name__ == "__main__":
    main()
