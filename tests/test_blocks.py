"""Blocks of a document: whole sentences behind the title, within the encoder's window, nothing left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from biorank.indexer.blocks import block_budget, make_blocks
from biorank.models.encoder import PACKAGED_MODEL, Encoder


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder(PACKAGED_MODEL, precision="fp32")


def _scifact(shared_data: Path) -> list[dict]:
    with (shared_data / "scifact" / "corpus.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_budget_is_the_papers_300_capped_by_the_window() -> None:
    assert block_budget(512) == 300
    assert block_budget(256) == 254


def test_blocks_cover_every_sentence_once_in_order_within_budget(encoder: Encoder, shared_data: Path) -> None:
    budget = block_budget(encoder.max_seq_length)
    multi = 0
    for doc in _scifact(shared_data)[:400]:
        sentences = [s.strip() for s in doc["abstract"] if s.strip()]
        title_pieces = encoder.tokenize(doc["title"])
        pieces = encoder.tokenize_batch(sentences)
        blocks = make_blocks(doc["title"], title_pieces, sentences, pieces, budget)
        assert [b.number for b in blocks] == list(range(len(blocks)))
        body = " ".join(b.text.removeprefix(doc["title"]).strip() for b in blocks)
        assert body == " ".join(sentences)
        for b in blocks:
            assert b.text.startswith(doc["title"])
            assert list(b.wordpieces) == encoder.tokenize(b.text)
            one_sentence = len(b.wordpieces) - len(title_pieces) in {len(p) for p in pieces}
            assert len(b.wordpieces) <= budget or one_sentence, "only a lone long sentence may exceed the budget"
        multi += len(blocks) > 1
    # SciFact abstracts often run past MiniLM's 256 word pieces: the split must actually happen.
    assert multi > 50


def test_a_document_without_abstract_is_one_block_of_its_title(encoder: Encoder) -> None:
    title = "Prion protein in appendix tissue"
    blocks = make_blocks(title, encoder.tokenize(title), [], [], 254)
    assert len(blocks) == 1 and blocks[0].text == title
