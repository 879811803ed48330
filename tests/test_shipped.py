"""The cross-encoder shipped in the package: it loads with no training step and scores as it did when shipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from biorank.demo import sample_path
from biorank.evaluation.topics import read_queries
from biorank.indexer.readers import read_records
from biorank.models.cross_encoder import CrossEncoder
from biorank.models.shipped import SHIPPED_FOLDER, SHIPPED_RERANKER, shipped_identity
from biorank.stages.rerank import document_text

WITHOUT_TORCH = Path(__file__).parent / "without_torch.py"

# Two SciFact train claims, each against its judged abstract (first) and three other abstracts of the bundled
# sample; the shipped model's logits in ONNX Runtime fp32 when it was committed. Claim 2 is of the training split,
# claim 4 of the dev split (never trained on).
PINNED = {
    "2": (("13734012", "10165258", "10300888", "1049501"), (6.85233, -6.81701, -6.39232, -6.41446)),
    "4": (("22942787", "10165258", "10300888", "1049501"), (2.75542, -6.94193, -6.77636, -6.69428)),
}


@pytest.mark.parametrize("precision", ["onnx", "fp32"])
def test_the_shipped_reranker_scores_as_pinned(precision: str, shared_data: Path) -> None:
    claims = read_queries(shared_data / "scifact" / "claims_train.jsonl")
    abstracts = {r.id: r for r in read_records(sample_path()) if hasattr(r, "id")}
    reranker = CrossEncoder(SHIPPED_RERANKER, precision=precision)  # type: ignore[arg-type]
    assert reranker.model_name == shipped_identity()
    for claim, (ids, pinned) in PINNED.items():
        scores = reranker.score(claims[claim], [document_text(abstracts[i].title, abstracts[i].abstract) for i in ids])
        assert scores.tolist() == pytest.approx(pinned, abs=1e-4), claim
        assert scores.argmax() == 0  # the judged abstract first


def test_the_light_install_writes_the_shipped_graph_without_torch_and_scores_as_pinned(
        shared_data: Path, tmp_path: Path) -> None:
    """No torch, an empty cache: the graph is written from the packed weights (:mod:`biorank.models.bert_graph`),
    and scores as the export traced from torch did when the model was committed."""
    claims = read_queries(shared_data / "scifact" / "claims_train.jsonl")
    abstracts = {r.id: r for r in read_records(sample_path()) if hasattr(r, "id")}
    pairs = [(claims[claim], document_text(abstracts[i].title, abstracts[i].abstract))
             for claim, (ids, _) in PINNED.items() for i in ids]
    code = ("import json, sys; from biorank.models.cross_encoder import CrossEncoder; "
            "reranker = CrossEncoder('biorank-reranker', precision='onnx'); "
            "print(json.dumps([reranker.precision, reranker.score_pairs(json.load(sys.stdin)).tolist(), "
            "sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules)]))")
    run = subprocess.run([sys.executable, str(WITHOUT_TORCH), "-c", code], input=json.dumps(pairs), text=True,
                         capture_output=True, env={**os.environ, "BIORANK_CACHE": str(tmp_path)}, timeout=300)
    assert run.returncode == 0, run.stderr
    precision, scores, imported = json.loads(run.stdout)
    assert (precision, imported) == ("onnx", [])
    assert scores == pytest.approx([s for _, pinned in PINNED.values() for s in pinned], abs=1e-4)


def test_the_shipped_reranker_fits_the_repository_and_has_a_card() -> None:
    files = [p for p in SHIPPED_FOLDER.iterdir() if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 50_000_000  # the limit for a model kept in git
    card = (SHIPPED_FOLDER / "README.md").read_text()
    assert "biorank train-reranker" in card and "--keep last" in card
