"""Should biorank run its graphs in OpenVINO: OpenVINO against ONNX Runtime on biorank's own exports?

Each graph biorank runs in ONNX Runtime (the default encoder bge-small-en-v1.5, the shipped cross-encoder) is
compiled by OpenVINO's CPU plugin from the same file and run through biorank's own tokenisation and
length-sorted batching (:class:`~biorank.models.runtime.OnnxModel` with OpenVINO's runner as its ``session``).
Reported: rates or p50 latency of both, OpenVINO's compile time (what a fresh ``biorank query`` would pay for it)
and how far its outputs are from ONNX Runtime's.

    pip install openvino    # not one of biorank's dependencies
    python -m benchmarks.studies.openvino_compare

Decision (record ``openvino_compare.json``, 2026-11-26, AVX2-only AMD EPYC): not a second backend on such a CPU.
OpenVINO does not read ONNX Runtime's int8 cross-encoder (its fused quantised operators do not convert); the
int8 encoder converts but drifts (cosine 0.973) at 0.4x ONNX Runtime's rate; in fp32 it gains 10-35% on
abstracts and nothing elsewhere, and starts three times slower.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import suite
from biorank import CrossEncoder, Encoder
from biorank.models.catalogue import MAVEN_MODELS, materialise
from biorank.models.runtime import FILES, OnnxModel, cached, physical_cores
from biorank.models.shipped import shipped_reranker_folder

ENCODER = "bge-small-en-v1.5"
COLUMNS = suite.columns(("what", "what"), ("ort", "ONNX Runtime"), ("openvino", "OpenVINO"),
                        ("agreement", "agreement"), ("compile_s", "OpenVINO compile s", ".2f"))


class OpenVinoRunner:
    """Runs a graph as ONNX Runtime's session does for biorank: ``run(None, feed)[0]`` is the first output."""

    def __init__(self, path: Path, hint: str) -> None:
        import time

        import openvino

        begun = time.perf_counter()
        self.compiled = openvino.Core().compile_model(str(path), "CPU", {
            "PERFORMANCE_HINT": hint, "INFERENCE_NUM_THREADS": physical_cores()})
        self.compile_seconds = time.perf_counter() - begun
        self.request = self.compiled.create_infer_request()

    def run(self, _outputs: Any, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [self.request.infer(feed)[self.compiled.output(0)]]


def both(folder: Path, precision: str, hint: str) -> tuple[OnnxModel, OnnxModel, OpenVinoRunner]:
    """The export in ``folder`` run by ONNX Runtime and by OpenVINO, each behind biorank's own batching."""
    runner = OpenVinoRunner(folder / FILES[precision], hint)
    return OnnxModel(folder, precision), OnnxModel(folder, precision, session=runner), runner


def rate(model: OnnxModel, texts: list[str], length: int) -> tuple[float, np.ndarray]:
    """Texts per second over all ``texts`` after one warm batch, and their vectors."""
    model.embed(texts[:64], batch_size=64, max_length=length)
    vectors: list[np.ndarray] = []
    ms = suite.timed(lambda chunk: vectors.append(model.embed(chunk, batch_size=64, max_length=length)), [texts])
    return len(texts) / (ms[0] / 1000), vectors[0]


def encoder_rows(corpus: list[dict], precision: str, hint: str) -> list[dict]:
    abstracts = [f"{d['title']} {' '.join(d['abstract'])}" for d in corpus]
    sentences = [s for d in corpus[:100] for s in d["abstract"]]
    encoder = Encoder(ENCODER, precision=precision)  # makes the export if the cache has none
    folder = cached(encoder.weights, "encoder", precision) or materialise(MAVEN_MODELS[ENCODER])
    ort, openvino, runner = both(folder, precision, hint)
    rows = []
    for label, texts, length in (("abstracts", abstracts, 300), ("sentences", sentences, 512)):
        ort_rate, reference = rate(ort, texts, length)
        ov_rate, vectors = rate(openvino, texts, length)
        cosines = (reference * vectors).sum(1) / np.linalg.norm(reference, axis=1) / np.linalg.norm(vectors, axis=1)
        rows.append({"what": f"bge {precision}, {len(texts)} {label}", "ort": f"{ort_rate:.1f} /s",
                     "openvino": f"{ov_rate:.1f} /s", "agreement": f"min cosine {cosines.min():.5f}",
                     "compile_s": round(runner.compile_seconds, 2)})
    return rows


def cross_encoder_row(corpus: list[dict], precision: str, hint: str) -> dict:
    texts = [f"{d['title']} {' '.join(d['abstract'])}" for d in corpus]
    claims = [json.loads(line)["claim"] for line in suite.data("scifact-claims-train").open()][:10]
    scorer = CrossEncoder(shipped_reranker_folder(), precision=precision)  # makes the export if need be
    folder = cached(scorer.model_name, "cross-encoder", precision)
    what = f"cross-encoder {precision}, 20 pairs of {scorer.max_length} pieces, p50"

    def pairs(i: int) -> list[tuple[str, str]]:
        return [(claims[i % 10], text) for text in texts[20 * (i % 10) : 20 * (i % 10) + 20]]

    def p50(model: OnnxModel) -> float:
        score = lambda i: model.score_pairs(pairs(i), batch_size=scorer.batch_size, max_length=scorer.max_length)  # noqa: E731
        return suite.summary(suite.timed(score, list(range(20)), warm=1))["p50"]

    ort = OnnxModel(folder, precision)
    try:
        _, openvino, runner = both(folder, precision, hint)
    except RuntimeError as error:  # OpenVINO names the operators it cannot convert
        return {"what": what, "ort": f"{p50(ort):,.0f} ms", "openvino": "does not convert",
                "agreement": [line for line in str(error).splitlines() if "conver" in line][-1][:90]}
    difference = max(float(np.abs(
        openvino.score_pairs(pairs(i), batch_size=scorer.batch_size, max_length=scorer.max_length)
        - ort.score_pairs(pairs(i), batch_size=scorer.batch_size, max_length=scorer.max_length)).max())
        for i in range(10))
    return {"what": what, "ort": f"{p50(ort):,.0f} ms", "openvino": f"{p50(openvino):,.0f} ms",
            "agreement": f"logits within {difference:.0e}", "compile_s": round(runner.compile_seconds, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, cluster=False)
    parser.add_argument("--hint", default="LATENCY", choices=["LATENCY", "THROUGHPUT"],
                        help="OpenVINO's performance hint (biorank runs one batch at a time).")
    options = parser.parse_args(argv)
    suite.header(f"{physical_cores()} threads, hint {options.hint}")
    corpus = [json.loads(line) for line in suite.data("scifact-corpus").open()][:200]
    rows = []
    for precision in ("onnx", "int8"):
        rows += encoder_rows(corpus, precision, options.hint)
        rows.append(cross_encoder_row(corpus, precision, options.hint))
    suite.record(options, COLUMNS, rows, settings={"hint": options.hint, "threads": physical_cores()},
                 extra_versions=("openvino",))


if __name__ == "__main__":
    main()
