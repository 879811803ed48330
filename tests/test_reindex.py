"""Re-encoding an index in place with a trained encoder: on a real node, real SciFact abstracts, real weights."""

from __future__ import annotations

import gzip
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from biorank.cli import cli
from biorank.demo import sample_path
from biorank.indexer.indexer import Indexer, IndexOptions
from biorank.indexer.reindex import reencode_index
from biorank.models.encoder import Encoder
from biorank.retrieval.searcher import Searcher, SearchSettings
from biorank.store.record import IndexMismatch, check_record, store_lambda

CLAIM = "Vitamin D deficiency is associated with an increased risk of tuberculosis."


class Interrupted(Exception):
    """Stands for Ctrl-C: raised from inside the run, the way KeyboardInterrupt arrives."""


def _agreement(opensearch, index: str, text: str, encoder: Encoder) -> dict[str, tuple[str, float]]:
    """_id -> (the text that was encoded, ⟨stored vector, the encoder's vector of that text⟩): 1 where it is the
    encoder's vector. Read by exact scoring: a script field returns the last fetched hit's vector for all hits."""
    opensearch.indices.refresh(index=index)
    hits = opensearch.search(index=index, body={"size": 10_000, "_source": [text]})["hits"]["hits"]
    vectors = encoder.encode([h["_source"][text] for h in hits])
    lines = []
    for h, vector in zip(hits, vectors, strict=True):
        lines += [{"index": index}, {"size": 1, "_source": False, "query": {"script_score": {
            "query": {"ids": {"values": [h["_id"]]}},
            "script": {"source": "innerProduct(params.v, doc['embedding']) + 1", "params": {"v": vector.tolist()}}}}}]
    responses = opensearch.msearch(body=lines)["responses"]
    return {h["_id"]: (h["_source"][text], r["hits"]["hits"][0]["_score"] - 1)
            for h, r in zip(hits, responses, strict=True)}


@pytest.fixture
def small_index(opensearch, index_name: str, default_encoder: Encoder, tmp_path: Path) -> str:
    """30 SciFact abstracts of the bundled sample, indexed with the default encoder (sentence vectors as floats), λ
    tuned to 0.05."""
    with gzip.open(sample_path(), "rt", encoding="utf-8") as sample:
        lines = [next(sample) for _ in range(30)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(lines), encoding="utf-8")
    # Float sentence vectors, so that each can be checked against the encoder's to the fourth decimal.
    Indexer(opensearch, IndexOptions(index=index_name, rejects=tmp_path / "rejects.tsv", sentence_vectors="exact"),
            encoder=default_encoder).run([corpus])
    store_lambda(opensearch, index_name, 0.05, split="dev")
    return index_name


def test_reencoding_changes_vectors_and_record_and_resumes(opensearch, opensearch_url: str, small_index: str,
                                                           tiny_encoder: Path, default_encoder: Encoder) -> None:
    sentences_index = f"{small_index}-sentences"
    old_blocks = _agreement(opensearch, small_index, "passage", default_encoder)
    old_sentences = _agreement(opensearch, sentences_index, "text", default_encoder)
    assert min(ip for _, ip in [*old_blocks.values(), *old_sentences.values()]) > 0.9999
    new = Encoder(str(tiny_encoder))

    def stop_after_first_page(stage: str, done: int, total: int) -> None:
        if stage == "blocks" and done > 0:
            raise Interrupted

    with pytest.raises(Interrupted):
        reencode_index(opensearch, small_index, new, batch_size=16, record_every=0, progress=stop_after_first_page,
                       log=lambda _: None)
    state = check_record(opensearch, small_index).reencoding
    assert state["model"] == new.model_name and state["stage"] == "blocks" and state["done"] == 16
    # Half old vectors, half new: searches with vectors refuse the index, BM25 still answers.
    with pytest.raises(IndexMismatch, match=r"half re-encoded.*reindex-vectors"):
        Searcher.open(opensearch, small_index, SearchSettings(mode="dense")).search(CLAIM)
    assert Searcher.open(opensearch, small_index, SearchSettings(mode="bm25")).search(CLAIM)

    result = CliRunner().invoke(cli, ["--url", opensearch_url, "reindex-vectors", "--index", small_index,
                                      "--model", str(tiny_encoder), "--batch-size", "16"])
    assert result.exit_code == 0, result.output
    assert f"{len(old_blocks) - 16} blocks and {len(old_sentences)} sentences re-encoded" in result.output
    assert "(resumed)" in result.output and "λ tuned for the old encoder (0.05) was set aside" in result.output

    for index, old, text in ((small_index, old_blocks, "passage"), (sentences_index, old_sentences, "text")):
        now = _agreement(opensearch, index, text, new)
        assert {i: t for i, (t, _) in now.items()} == {i: t for i, (t, _) in old.items()}  # only vectors changed
        assert min(ip for _, ip in now.values()) > 0.9999
        # A few steps of training move most vectors, not every one: the typical vector must have moved.
        assert statistics.median(ip for _, ip in _agreement(opensearch, index, text, default_encoder).values()) < 0.9999

    record = check_record(opensearch, small_index)
    assert record.model == new.model_name and record.model_source == str(tiny_encoder)
    assert record.dimension == 384 and record.reencoding is None and record.tuned_lambda is None
    assert record.raw["replaced_encoder"]["model"] == default_encoder.model_name
    assert record.raw["replaced_encoder"]["lambda"] == 0.05
    assert check_record(opensearch, sentences_index).model == new.model_name
    # Queries now go through the encoder the index records: the trained one, loaded from its folder.
    searcher = Searcher.open(opensearch, small_index, SearchSettings(mode="dense"))
    assert searcher.search(CLAIM, k=3) and searcher.encoder.model_name == new.model_name
    assert reencode_index(opensearch, small_index, new, log=lambda _: None).already
