"""The dense encoder's trainer and its synthetic pairs, on real SciFact data, a real node and the real model."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from biorank.indexer.blocks import block_budget
from biorank.indexer.readers import read_records
from biorank.models.encoder import PACKAGED_MODEL, Encoder
from biorank.models.prefixes import Prefixes
from biorank.training.encoder import EncoderTraining, _batch_loss, _embed, _Example
from biorank.training.loop import TrainingError
from biorank.training.synthetic import (
    InverseCloze,
    SourceDocument,
    TitleAbstract,
    contains,
    generators,
    make_pairs,
    sample_documents,
)
from biorank.types import Abstract

CLAIM = "Vitamin D deficiency is associated with an increased risk of tuberculosis."


@pytest.fixture(scope="module")
def scifact_documents(shared_data: Path) -> list[SourceDocument]:
    records = read_records(shared_data / "scifact" / "corpus.jsonl")
    return [SourceDocument(r.id, r.title, r.sentences or ()) for r in records if isinstance(r, Abstract)]


def test_trained_encoder_loads_encodes_and_has_a_card(tiny_encoder: Path, default_encoder: Encoder) -> None:
    encoder = Encoder(str(tiny_encoder))
    texts = [CLAIM, "Gene expression in yeast under heat shock."]
    vectors = encoder.encode(texts)
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    before = default_encoder.encode(texts)
    # Trained for three steps: moved, but still the same kind of encoder.
    cosines = (vectors * before).sum(axis=1)
    assert np.all(cosines < 0.99999) and np.all(cosines > 0.9), cosines
    assert encoder.model_name.startswith(f"{tiny_encoder.name}@") and encoder.max_seq_length == 256
    card = (tiny_encoder / "README.md").read_text()
    record = json.loads((tiny_encoder / "training.json").read_text())
    assert "## Data" in card and "in-batch negatives" in card and "synthetic pairs" in card
    assert record["recipe"]["max_steps"] == 3 and record["result"]["training steps"] == 3
    assert record["data"]["synthetic pairs"].endswith("2 of every batch of 8"), record["data"]
    assert len(record["history"]) == 1 and 0 <= record["history"][0]["nDCG@10"] <= 1
    assert not (tiny_encoder / "checkpoint").exists() and (tiny_encoder / "modules.json").is_file()


def test_inverse_cloze_never_leaves_the_question_in_its_passage(scifact_documents: list[SourceDocument],
                                                               default_encoder: Encoder) -> None:
    budget = block_budget(default_encoder.max_seq_length)
    windowed, whole = InverseCloze(default_encoder.count_tokens, budget), InverseCloze()
    pairs = {}
    for ict, seed in ((windowed, 0), (whole, 1)):
        made = [(d, ict(d, random.Random(f"{seed}:{d.id}"))) for d in scifact_documents]
        pairs[ict] = [(d, pair) for d, pair in made if pair is not None]
        assert len(pairs[ict]) > 0.95 * len(scifact_documents)
    for document, pair in pairs[windowed] + pairs[whole]:
        assert pair.question in document.sentences and not contains(pair.passage, pair.question)
        assert pair.passage.startswith(document.title.strip()) and pair.doc_id == document.id
    # The context is the neighbourhood that fits one block, as indexing cuts them.
    pieces = default_encoder.count_tokens([p.passage for _, p in pairs[windowed]])
    assert sum(n <= budget for n in pieces) > 0.99 * len(pieces)


def test_repeated_and_nested_sentences_do_not_leak_into_the_passage() -> None:
    repeated = "The treatment reduced mortality in older patients."
    other = "Other findings were reported in detail here."
    twice = SourceDocument("1", "A trial", (repeated, other, repeated))
    inside = "Mortality fell sharply in treated patients."
    nested = SourceDocument("2", "Cells die quickly under stress", (
        inside, f"As expected, {inside.lower()} Costs rose.", "Cells die quickly under stress in every line."))
    questions = set()
    for seed in range(30):
        for document in (twice, nested):
            pair = InverseCloze()(document, random.Random(seed))
            if pair is not None:
                questions.add(pair.question)
                assert not contains(pair.passage, pair.question), pair
                if pair.question == repeated:
                    assert pair.passage == f"A trial {other}"
    # Both copies of the repeated sentence went; the nested sentence never makes a pair (it stays inside).
    assert repeated in questions and inside not in questions
    # The title is inside the abstract: the title pair would give the answer away.
    assert TitleAbstract()(nested, random.Random(0)) is None


def test_pairs_take_turns_and_are_reproducible(scifact_documents: list[SourceDocument]) -> None:
    documents = scifact_documents[:200]
    first = list(make_pairs(documents, generators(("ict", "title")), seed=7))
    assert first == list(make_pairs(documents, generators(("ict", "title")), seed=7))
    kinds = [p.kind for p in first]
    assert 0.4 < kinds.count("ict") / len(kinds) < 0.6
    for pair in first:
        assert not contains(pair.passage, pair.question)
    with pytest.raises(ValueError, match="unknown synthetic"):
        generators(("ict", "qgen"))


def test_synthetic_documents_come_from_the_index(opensearch, sample_index: str) -> None:
    documents = sample_documents(opensearch, sample_index, 25, seed=3)
    assert len(documents) == 25 and len({d.id for d in documents}) == 25
    assert [d.id for d in documents] == [d.id for d in sample_documents(opensearch, sample_index, 25, seed=3)]
    assert [d.id for d in documents] != [d.id for d in sample_documents(opensearch, sample_index, 25, seed=4)]
    sentences = opensearch.search(index=f"{sample_index}-sentences", body={
        "size": 200, "query": {"bool": {"filter": [{"term": {"doc_id": documents[0].id}},
                                                   {"term": {"section": "abstract"}}]}},
        "sort": [{"number": "asc"}]})["hits"]["hits"]
    assert documents[0].sentences == tuple(h["_source"]["text"] for h in sentences)


@pytest.mark.parametrize("prefixes", [Prefixes(), Prefixes(query="query: ", passage="passage: ")])
def test_in_batch_loss_leaves_out_passages_that_answer_the_question(prefixes: Prefixes) -> None:
    """Its questions and passages get the encoder's prefixes, as at indexing and search time."""
    import torch

    # The trainer's model is a torch one, whichever backend `auto` picks for indexing on this CPU.
    model = Encoder(PACKAGED_MODEL, precision="fp32").model
    batch = [
        _Example(CLAIM, "Vitamin D and tuberculosis in a cohort.", "a", frozenset({"a", "b"})),
        _Example(CLAIM, "Low vitamin D levels in tuberculosis patients.", "b", frozenset({"a", "b"})),
        _Example("Yeast genes under heat shock.", "Gene expression in yeast.", "c", frozenset({"c"}),
                 negatives=(("d", "Heat tolerance of plants."),)),
    ]
    model.eval()  # no dropout, so the manual computation below sees the same vectors
    with torch.no_grad():
        loss = _batch_loss(model, "cpu", batch, 20.0, False, prefixes)
        q = _embed(model, "cpu", [prefixes.query + e.question for e in batch], False)
        passages = [e.passage for e in batch] + ["Heat tolerance of plants."]
        p = _embed(model, "cpu", [prefixes.passage + text for text in passages], False)
    scores = 20.0 * q @ p.T
    # Question 0's softmax is over passages 0, 2 and 3 (passage 1 answers it too), and so on.
    keep = [[0, 2, 3], [1, 2, 3], [2, 0, 1, 3]]
    expected = torch.stack([-torch.log_softmax(scores[i, cols], dim=0)[0] for i, cols in enumerate(keep)]).mean()
    assert torch.isclose(loss, expected, atol=1e-5), (loss, expected)


@pytest.mark.parametrize("changes", [{"synthetic_ratio": 1.0}, {"batch_size": 1},
                                     {"batch_size": 2, "synthetic_ratio": 0.9}, {"precision": "onnx"},
                                     {"synthetic_kinds": ("qgen",)}])
def test_recipes_that_cannot_train_are_refused(changes: dict) -> None:
    with pytest.raises((TrainingError, ValueError)):
        EncoderTraining(**changes)
