"""Is the light install (no torch) as fast as torch bf16 on a CPU that computes bf16 natively, and does
OpenVINO's bf16 close the gap?

On AVX512-BF16 and AMX CPUs, "auto" indexes and reranks in torch bf16 when torch is installed. The light install
(``pip install biorank``) runs everything in ONNX Runtime fp32 instead. This compares, on the machine it runs
on, the default encoder (bge-small-en-v1.5) over SciFact abstracts and sentences and the shipped cross-encoder
over 20 (claim, abstract) pairs of 256 word pieces: torch bf16 (the ``train`` extra), ONNX Runtime fp32 and
int8 (the light install), and OpenVINO's CPU plugin on the same fp32 graph, which infers in bf16 by itself on
such CPUs (``pip install openvino``; not one of biorank's dependencies). Agreement is against ONNX Runtime fp32.

    pip install openvino
    python -m benchmarks.studies.light_install
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks import suite
from benchmarks.studies.openvino_compare import OpenVinoRunner
from biorank import CrossEncoder, Encoder
from biorank.models.encoder import DEFAULT_MODEL
from biorank.models.runtime import FILES, OnnxModel, cached, physical_cores
from biorank.models.shipped import SHIPPED_RERANKER

COLUMNS = suite.columns(("what", "what"), ("backend", "backend"), ("rate", "rate", ",.1f"), ("unit", "unit"),
                        ("agreement", "against ONNX Runtime fp32"))


def _openvino(folder: Path, precision: str, hint: str) -> OnnxModel | None:
    try:
        return OnnxModel(folder, precision, session=OpenVinoRunner(folder / FILES[precision], hint))
    except (ImportError, RuntimeError):
        return None  # not installed, or a graph it does not convert


def _per_second(encode: Callable[[list[str]], np.ndarray], texts: list[str]) -> tuple[float, np.ndarray]:
    encode(texts[:64])  # warm: kernels, allocations, OpenVINO's first inference
    started = time.perf_counter()
    out = encode(texts)
    return len(texts) / (time.perf_counter() - started), out


def encoder_rows(corpus: list[dict], hint: str) -> list[dict]:
    abstracts = [f"{d['title']} {' '.join(d['abstract'])}" for d in corpus]
    sentences = [s for d in corpus[:50] for s in d["abstract"]]
    onnx = Encoder(DEFAULT_MODEL, precision="onnx")
    folder = cached(onnx.weights, "encoder", "onnx")

    def embedding(model: OnnxModel) -> Callable[[list[str]], np.ndarray]:
        return lambda texts: model.embed(texts, batch_size=64, max_length=onnx.max_seq_length)

    backends: dict[str, Callable[[list[str]], np.ndarray]] = {
        "torch bf16": Encoder(DEFAULT_MODEL, precision="bf16", batch_size=64).encode,
        "ONNX Runtime fp32": embedding(OnnxModel(folder, "onnx")),
        "ONNX Runtime int8": embedding(OnnxModel(folder, "int8")),
    }
    if (openvino := _openvino(folder, "onnx", hint)) is not None:
        backends["OpenVINO (bf16 where native)"] = embedding(openvino)
    rows = []
    for label, texts in (("abstracts", abstracts), ("sentences", sentences)):
        reference = None
        for backend, encode in backends.items():
            rate, vectors = _per_second(encode, texts)
            vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
            if backend == "ONNX Runtime fp32":
                reference = vectors
            rows.append({"what": f"bge-small, {len(texts)} SciFact {label}", "backend": backend, "rate": rate,
                         "unit": f"{label}/s", "vectors": vectors})
        for row in rows[-len(backends):]:
            row["agreement"] = f"min cosine {float((row.pop('vectors') * reference).sum(1).min()):.5f}"
    return rows


def cross_encoder_rows(corpus: list[dict], hint: str) -> list[dict]:
    texts = [f"{d['title']} {' '.join(d['abstract'])}" for d in corpus]
    claims = [json.loads(line)["claim"] for line in suite.data("scifact-claims-train").open()][:10]
    batches = [[(claims[i], text) for text in texts[20 * i: 20 * i + 20]] for i in range(10)]
    onnx = CrossEncoder(SHIPPED_RERANKER, precision="onnx")
    folder = cached(onnx.model_name, "cross-encoder", "onnx")
    length, size = onnx.max_length, onnx.batch_size
    backends: dict[str, Callable[[list[tuple[str, str]]], np.ndarray]] = {
        "torch bf16": CrossEncoder(SHIPPED_RERANKER, precision="bf16").score_pairs,
        "ONNX Runtime fp32": onnx.score_pairs,
        "ONNX Runtime int8": CrossEncoder(SHIPPED_RERANKER, precision="int8").score_pairs,
    }
    if (openvino := _openvino(folder, "onnx", hint)) is not None:
        backends["OpenVINO (bf16 where native)"] = lambda pairs: openvino.score_pairs(pairs, batch_size=size,
                                                                                     max_length=length)
    rows, scores = [], {}
    for backend, score in backends.items():
        found: list[np.ndarray] = []
        ms = suite.timed(lambda pairs, score=score, found=found: found.append(score(pairs)), batches, warm=1)
        scores[backend] = np.concatenate(found[1:])  # the warm-up's scores are not the measured ones
        rows.append({"what": f"shipped cross-encoder, 20 pairs of {length} pieces, p50", "backend": backend,
                     "rate": suite.summary(ms)["p50"], "unit": "ms"})
    for row in rows:
        difference = np.abs(scores[row["backend"]] - scores["ONNX Runtime fp32"]).max()
        row["agreement"] = f"logits within {float(difference):.1e}"
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, cluster=False)
    parser.add_argument("--hint", default="LATENCY", choices=["LATENCY", "THROUGHPUT"],
                        help="OpenVINO's performance hint (biorank runs one batch at a time).")
    parser.add_argument("--limit", type=int, default=200,
                        help="SciFact abstracts (the first N; sentences: those of the first 50).")
    options = parser.parse_args(argv)
    suite.header(f"{physical_cores()} threads")
    corpus = [json.loads(line) for line in suite.data("scifact-corpus").open()][: options.limit]
    rows = encoder_rows(corpus, options.hint) + cross_encoder_rows(corpus, options.hint)
    suite.record(options, COLUMNS, rows, settings={"limit": options.limit, "hint": options.hint,
                                                   "threads": physical_cores()}, extra_versions=("openvino",))


if __name__ == "__main__":
    main()
