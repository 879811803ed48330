"""Each way of storing sentence vectors (``--sentence-vectors``), on real abstracts and a real node: the same
sentences, the similarity they give against the float vectors in a graph, and the choice kept in the record."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli import cli
from biorank.demo import sample_path
from biorank.indexer.indexer import Indexer, IndexOptions
from biorank.retrieval.searcher import Searcher
from biorank.stages.snippets import SnippetScorer, SnippetWeights
from biorank.store.inspection import inspect_document
from biorank.store.mappings.sentences import DEFAULT_SENTENCE_VECTORS, SENTENCE_VECTORS
from biorank.store.record import IndexMismatch, IndexRecord, read_record, update_record
from biorank.types import Hit

CLAIM = "DNA methylation differs between cell types of the blood."
TOLERANCE = {"exact": 1e-6, "byte": 0.01, "none": 0.02}
"""How far each choice's cosine may be from the floats of ``hnsw``: ``exact`` reads the same floats; a byte a
component moves a cosine by ~0.001; ``none`` encodes at query time with the query encoder's backend, not the
indexing one's."""


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """The first 8 bundled SciFact abstracts."""
    with gzip.open(sample_path(), "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(8)]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def _similarity(opensearch: OpenSearch, name: str, encoder, hits: list[Hit]):
    searcher = Searcher.open(opensearch, name, encoder=encoder)
    scorer = SnippetScorer.open(searcher, weights=SnippetWeights.single("similarity"))
    found = scorer.candidates_many({"q": CLAIM}, {"q": hits}, perspectives=("similarity",))["q"]
    return scorer, found


@pytest.mark.engines
def test_every_choice_indexes_and_scores_the_same_sentences_as_the_graph(
    opensearch: OpenSearch, index_name: str, default_encoder, corpus: Path, tmp_path: Path
) -> None:
    found = {}
    for choice in SENTENCE_VECTORS:
        name = f"{index_name}-{choice}"
        options = IndexOptions(index=name, format="scifact", sentence_vectors=choice, rejects=tmp_path / "r.tsv")
        Indexer(opensearch, options, encoder=default_encoder).run([corpus])
        assert read_record(opensearch, name).sentence_vectors == choice
        assert read_record(opensearch, f"{name}-sentences").sentence_vectors == choice
        opensearch.indices.refresh(index=f"{name}*")
        hits = [Hit(h["_source"]["id"], "", rank, 1.0) for rank, h in enumerate(opensearch.search(
            index=name, body={"size": 10, "query": {"term": {"block": 0}}, "sort": ["id"]})["hits"]["hits"])]
        scorer, found[choice] = _similarity(opensearch, name, default_encoder, hits)
        assert scorer.sentence_vectors == choice
        # `biorank inspect` reads each choice's vectors back as what they stand for: unit vectors, or none.
        norms = [s["vector"] and s["vector"]["norm"] for s in inspect_document(opensearch, name, hits[0].id).sentences]
        if choice == "none":
            assert norms and all(n is None for n in norms)
        else:
            assert norms and norms == pytest.approx([1.0] * len(norms), abs=5e-3), choice
    graph = found["hnsw"]
    assert len(graph.sentences) > 40
    for choice in ("exact", "byte", "none"):
        assert found[choice].sentences == graph.sentences, choice
        np.testing.assert_allclose(found[choice].similarity, graph.similarity, atol=TOLERANCE[choice], err_msg=choice)

    # An index built before the choice (no key in its records) is read as what it is: floats in a graph.
    name = f"{index_name}-hnsw"
    for index in (name, f"{name}-sentences"):
        update_record(opensearch, index, remove=["sentence_vectors"])
        assert read_record(opensearch, index).sentence_vectors == "hnsw"
    _, old = _similarity(opensearch, name, default_encoder, hits)
    np.testing.assert_allclose(old.similarity, graph.similarity, atol=1e-6)

    # An existing index keeps its own choice; asking it for another is one line, before anything is written.
    with pytest.raises(IndexMismatch, match="stores its sentence vectors as 'byte', not 'exact'"):
        Indexer(opensearch, IndexOptions(index=f"{index_name}-byte", format="scifact", sentence_vectors="exact"),
                encoder=default_encoder).run([corpus])


def test_a_record_without_the_choice_reads_as_the_graph() -> None:
    assert IndexRecord.from_meta("old", {"kind": "sentences", "mapping_version": 2}).sentence_vectors == "hnsw"
    assert IndexRecord.from_meta("new", {"kind": "sentences", "sentence_vectors": "none"}).sentence_vectors == "none"


def test_mappings_show_what_each_choice_creates() -> None:
    for choice in SENTENCE_VECTORS:
        result = CliRunner().invoke(cli, ["mappings", "--kind", "sentences", "--sentence-vectors", choice])
        assert result.exit_code == 0, result.output
        body = json.loads(result.stdout)
        assert body["mappings"]["_meta"]["biorank"]["sentence_vectors"] == choice
        # Only the graph needs the k-NN codec; every other choice is doc values a script reads, or nothing.
        assert body["settings"]["index"]["knn"] is (choice == "hnsw")
        assert ("embedding" in body["mappings"]["properties"]) is (choice != "none")
    default = json.loads(CliRunner().invoke(cli, ["mappings", "--kind", "documents"]).stdout)
    assert default["mappings"]["_meta"]["biorank"]["sentence_vectors"] == DEFAULT_SENTENCE_VECTORS
