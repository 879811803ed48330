"""Is the light install (no torch) as fast as torch bf16 on a CPU that computes bf16 natively, and does
OpenVINO's bf16 close the gap?

On AVX512-BF16 and AMX CPUs, "auto" indexes and reranks in torch bf16 when torch is installed; without torch it
has ONNX Runtime, and OpenVINO where the ``openvino`` extra is installed. This compares, on the machine it runs
on, the default encoder (bge-small-en-v1.5) over SciFact abstracts and sentences and the shipped cross-encoder
over 20 (claim, abstract) pairs of 256 word pieces, each through biorank's own precision: ``bf16`` (torch, the
``train`` extra), ``onnx`` and ``int8`` (ONNX Runtime), and ``openvino`` (the same fp32 graph in OpenVINO's CPU
plugin, which infers in bf16 by itself on such CPUs). Agreement is against ONNX Runtime fp32.

    pip install '.[train,openvino]'
    python -m benchmarks.studies.light_install
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np

from benchmarks import suite
from biorank import CrossEncoder, Encoder
from biorank.models.encoder import DEFAULT_MODEL
from biorank.models.extras import installed
from biorank.models.runtime import OnnxModel, cached, physical_cores
from biorank.models.shipped import SHIPPED_RERANKER

COLUMNS = suite.columns(("what", "what"), ("backend", "backend"), ("rate", "rate", ",.1f"), ("unit", "unit"),
                        ("agreement", "against ONNX Runtime fp32"))


def _per_second(encode: Callable[[list[str]], np.ndarray], texts: list[str]) -> tuple[float, np.ndarray]:
    encode(texts[:64])  # warm: kernels, allocations, OpenVINO's first inference
    started = time.perf_counter()
    out = encode(texts)
    return len(texts) / (time.perf_counter() - started), out


def encoder_rows(corpus: list[dict]) -> list[dict]:
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
    if installed("openvino"):  # biorank's own openvino precision, as "auto" runs it
        backends["OpenVINO (bf16 where native)"] = embedding(OnnxModel(folder, "openvino"))
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


def cross_encoder_rows(corpus: list[dict]) -> list[dict]:
    texts = [f"{d['title']} {' '.join(d['abstract'])}" for d in corpus]
    claims = [json.loads(line)["claim"] for line in suite.data("scifact-claims-train").open()][:10]
    batches = [[(claims[i], text) for text in texts[20 * i: 20 * i + 20]] for i in range(10)]
    onnx = CrossEncoder(SHIPPED_RERANKER, precision="onnx")
    length = onnx.max_length
    backends: dict[str, Callable[[list[tuple[str, str]]], np.ndarray]] = {
        "torch bf16": CrossEncoder(SHIPPED_RERANKER, precision="bf16").score_pairs,
        "ONNX Runtime fp32": onnx.score_pairs,
        "ONNX Runtime int8": CrossEncoder(SHIPPED_RERANKER, precision="int8").score_pairs,
    }
    if installed("openvino"):
        backends["OpenVINO (bf16 where native)"] = CrossEncoder(SHIPPED_RERANKER, precision="openvino").score_pairs
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
    parser.add_argument("--limit", type=int, default=200,
                        help="SciFact abstracts (the first N; sentences: those of the first 50).")
    parser.add_argument("--variant", default=None, help="names the record of one kind of CPU (e.g. no-amx).")
    options = parser.parse_args(argv)
    suite.header(f"{physical_cores()} threads")
    corpus = [json.loads(line) for line in suite.data("scifact-corpus").open()][: options.limit]
    rows = encoder_rows(corpus) + cross_encoder_rows(corpus)
    suite.record(options, COLUMNS, rows, settings={"limit": options.limit,
                                                   "threads": physical_cores()}, extra_versions=("openvino",),
                 variant=options.variant)


if __name__ == "__main__":
    main()
