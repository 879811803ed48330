"""A bulk build ends merged, without the recovery copies of its vectors: the size `biorank stats` shows after
`biorank index` is the size the index keeps, and every document still answers as before."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli import cli
from biorank.demo import sample_path
from biorank.store import compaction
from biorank.store.indices import sentences_index_name


def _segments(client: OpenSearch, index: str) -> int:
    return len(client.cat.segments(index=index, format="json"))


def test_a_build_is_compacted_once_its_leases_pass_and_answers_as_before(
        opensearch: OpenSearch, opensearch_url: str, index_name: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Two runs of 30 abstracts, so that the index has two segments to merge (as a long build has many); the
    # threshold lowered so that 30 count as a run worth compacting.
    with gzip.open(sample_path(), "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(60)]
    halves = [tmp_path / "first.jsonl", tmp_path / "second.jsonl"]
    for half, part in zip(halves, (lines[:30], lines[30:]), strict=True):
        half.write_text("".join(part), encoding="utf-8")

    def build(index: str) -> str:
        outputs = [CliRunner().invoke(cli, ["--url", opensearch_url, "index", str(half), "--index", index])
                   for half in halves]
        assert all(o.exit_code == 0 for o in outputs), outputs[0].output + outputs[1].output
        return outputs[1].output

    monkeypatch.setattr(compaction, "COMPACT_FROM", 30)
    assert "compacted:" in build(index_name)
    names = [index_name, sentences_index_name(index_name)]
    assert all(_segments(opensearch, name) == 1 for name in names)

    # Built again without the compaction, for the size and answers it would have had.
    monkeypatch.setattr(compaction, "COMPACT_FROM", 10_000)
    plain = f"{index_name}-plain"  # deleted with index_name's pattern
    assert "compacted:" not in build(plain)
    opensearch.indices.refresh(index=f"{plain},{plain}-sentences")
    compacted = compaction.store_bytes(opensearch, names)
    uncompacted = compaction.store_bytes(opensearch, [plain, sentences_index_name(plain)])
    # The recovery copies hold every vector again as JSON text: well over a quarter of a fresh build.
    assert compacted < 0.75 * uncompacted, (compacted, uncompacted)
    for name, other in zip(names, (plain, sentences_index_name(plain)), strict=True):
        assert opensearch.count(index=name)["count"] == opensearch.count(index=other)["count"]
    runner = CliRunner()
    for query in ("vitamin D and bone fractures", "gene expression in cancer cells"):
        for mode in ("dense", "bm25", "hybrid"):
            answers = [runner.invoke(cli, ["--url", opensearch_url, "query", query, "--index", name, "--mode",
                                           mode, "--format", "pmids", "-k", "10"]) for name in (index_name, plain)]
            assert all(a.exit_code == 0 for a in answers), answers[0].output + answers[1].output
            assert answers[0].output == answers[1].output and answers[0].output.strip()
