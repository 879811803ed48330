"""Evaluation: measures against hand-computed values, the real topic files, the dev split, and `biorank eval`."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli import cli
from biorank.evaluation.measures import evaluate
from biorank.evaluation.phase_a import sentence_scores
from biorank.evaluation.report import evaluate_runs
from biorank.evaluation.runs import read_trec
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries, relevance_notion
from biorank.indexer.indexer import Indexer, IndexOptions
from biorank.store.indices import delete_indices
from biorank.types import Snippet


def test_measures_match_hand_computation() -> None:
    # One query, two relevant documents, found at ranks 1 and 3 of four.
    qrels = {"q": {"d1": 1, "d3": 1, "d9": 0}}
    run = {"q": {"d1": 4.0, "d2": 3.0, "d3": 2.0, "d4": 1.0}}
    got = evaluate(run, qrels, ["ndcg@10", "map@10", "recall@100", "mrr@10", "p@10"])
    ideal = 1 + 1 / math.log2(3)
    assert got["ndcg@10"] == pytest.approx((1 + 1 / math.log2(4)) / ideal)
    assert got["map@10"] == pytest.approx((1 / 1 + 2 / 3) / 2)
    assert got["recall@100"] == 1.0 and got["mrr@10"] == 1.0 and got["p@10"] == pytest.approx(0.2)


def test_a_judged_query_missing_from_a_run_counts_zero() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    report = evaluate_runs({"only-q1": {"q1": {"a": 1.0}}}, qrels, ["ndcg@10"])
    assert report.queries == 2 and report.table["only-q1"]["ndcg@10"] == pytest.approx(0.5)


def test_paired_test_flags_a_consistent_gain_only() -> None:
    qrels = {f"q{i}": {"good": 1} for i in range(20)}
    late = {q: {"x": 3.0, "y": 2.0, "good": 1.0} for q in qrels}
    first = {q: {"good": 3.0, "x": 2.0} for q in qrels} | {"q0": {"x": 3.0, "good": 2.0}}
    report = evaluate_runs({"late": late, "first": first, "same": late}, qrels, ["ndcg@10"])
    assert report.p_values["first"]["ndcg@10"] < 1e-6
    assert report.p_values["same"]["ndcg@10"] == 1.0
    assert f"first | {(19 + 1 / math.log2(3)) / 20:.4f}†" in report.markdown()


def test_topic_files_of_the_development_data(shared_data: Path) -> None:
    scifact = shared_data / "scifact"
    qrels = read_qrels(scifact / "qrels" / "train.tsv")
    assert len(qrels) == 809 and sum(map(len, qrels.values())) == 919
    evidence = read_qrels(scifact / "claims_train.jsonl")
    assert relevance_notion(scifact / "claims_train.jsonl") == "evidence"
    assert len(evidence) == 505 and sum(map(len, evidence.values())) == 564
    assert all(evidence[q].keys() <= qrels[q].keys() for q in evidence), "evidence abstracts are cited ones"
    assert read_queries(scifact / "queries_train.jsonl") == read_queries(scifact / "claims_train.jsonl")

    nfcorpus = shared_data / "nfcorpus"
    graded = read_qrels(nfcorpus / "dev.2-1-0.qrel")
    assert len(graded) == 324 and sum(map(len, graded.values())) == 11385
    assert {g for docs in graded.values() for g in docs.values()} == {1, 2}
    assert len(read_queries(nfcorpus / "dev.titles.queries")) == 325


def test_the_dev_split_depends_on_each_id_alone() -> None:
    qrels = {str(i): {"d": 1} for i in range(2000)}
    dev, rest = split_judged(qrels, "dev"), split_judged(qrels, "rest")
    assert not set(rest) & set(dev) and set(rest) | set(dev) == set(qrels) == set(split_judged(qrels, "all"))
    assert 0.17 < len(dev) / len(qrels) < 0.23, "about a fifth"
    fewer = {q: qrels[q] for q in list(qrels)[::3]}
    assert split_judged(fewer, "dev") == [q for q in dev if q in fewer], "other ids never move a query"
    assert split_judged({**qrels, "x": {"d": 0}}, "dev") == dev, "an unjudged query is in no split"


def test_scifacts_two_notions_of_relevance_share_their_dev_claims(shared_data: Path) -> None:
    scifact = shared_data / "scifact"
    cited = split_judged(read_qrels(scifact / "qrels" / "train.tsv"), "dev")
    evidence = split_judged(read_qrels(scifact / "claims_train.jsonl"), "dev")
    assert (len(cited), len(evidence)) == (141, 83) and set(evidence) <= set(cited)


@pytest.fixture(scope="module")
def sample_topics(opensearch: OpenSearch, sample_index: str, shared_data: Path, tmp_path_factory) -> tuple[Path, Path]:
    """The train claims whose cited abstracts are all in the sample, as BEIR queries and qrels."""
    in_sample = {h["_id"] for h in opensearch.search(index=sample_index, body={
        "size": 1000, "query": {"term": {"block": 0}}, "_source": False})["hits"]["hits"]}
    claims = [json.loads(line) for line in (shared_data / "scifact" / "claims_train.jsonl").open()]
    chosen = [c for c in claims if c["cited_doc_ids"] and {str(d) for d in c["cited_doc_ids"]} <= in_sample][:60]
    folder = tmp_path_factory.mktemp("topics")
    queries, qrels = folder / "queries.jsonl", folder / "qrels.tsv"
    queries.write_text("".join(json.dumps({"_id": str(c["id"]), "text": c["claim"]}) + "\n" for c in chosen))
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{c['id']}\t{d}\t1\n" for c in chosen for d in c["cited_doc_ids"]))
    return queries, qrels


def test_eval_runs_systems_writes_everything_and_is_reproducible(
    opensearch_url: str, sample_index: str, sample_topics: tuple[Path, Path], tmp_path: Path
) -> None:
    queries, qrels = sample_topics
    runner = CliRunner()
    tables = []
    for attempt in ("first", "second"):
        out = tmp_path / attempt
        result = runner.invoke(cli, ["--url", opensearch_url, "eval", "--queries", str(queries), "--qrels",
                                     str(qrels), "--systems", "bm25,hybrid", "--index", sample_index, "-k", "100",
                                     "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert "| bm25 |" in result.output and "| hybrid |" in result.output
        for name in ("table.md", "table.json", "per-query-difference.png", "recall-depth.png", "bm25.trec",
                     "hybrid.trec"):
            assert (out / name).stat().st_size > 0, name
        report = json.loads((out / "table.json").read_text())
        # Time is the one thing a second run may not repeat.
        assert set(report.pop("cost_ms")) == {"bm25", "hybrid"}
        tables.append(report)
    assert tables[0] == tables[1], "the same command twice gives the same numbers"
    table = tables[0]["table"]
    assert table["hybrid"]["ndcg@10"] > table["bm25"]["ndcg@10"] > 0.5

    scored = runner.invoke(cli, ["eval", "--runs", str(tmp_path / "first" / "bm25.trec"),
                                 str(tmp_path / "first" / "hybrid.trec"), "--qrels", str(qrels), "--out",
                                 str(tmp_path / "rescored")])
    assert scored.exit_code == 0, scored.output
    rescored = json.loads((tmp_path / "rescored" / "table.json").read_text())["table"]
    # TREC files carry scores, not ranks: equal scores may be re-ordered by id, so allow a tie's worth.
    for system in ("bm25", "hybrid"):
        assert rescored[system] == pytest.approx(table[system], abs=0.01), system
    assert len(read_trec(tmp_path / "first" / "bm25.trec")) == tables[0]["queries"]


def test_eval_without_queries_or_runs_is_a_usage_error(tmp_path: Path, shared_data: Path) -> None:
    result = CliRunner().invoke(cli, ["eval", "--qrels", str(shared_data / "scifact" / "qrels" / "train.tsv")])
    assert result.exit_code == 2 and "--queries" in result.output


def test_sentence_measures_by_hand() -> None:
    def snippet(number: int, section: str = "abstract") -> Snippet:
        return Snippet("d", section, number, 0, 1, "x", 1.0)

    gold = {"c1": {("d", 1), ("d", 3)}, "c2": {("d", 0)}}
    found = {"c1": [snippet(0, "title"), snippet(3), snippet(2), snippet(1)]}
    scores = sentence_scores(gold, found)
    # c1: the title is never evidence; abstract sentences 3, 2, 1 → AP = (1/1 + 2/3) / 2. c2: nothing found.
    assert scores["sentence-map@10"] == pytest.approx({"c1": (1 + 2 / 3) / 2, "c2": 0.0})
    assert scores["sentence-recall@10"] == {"c1": 1.0, "c2": 0.0}


@pytest.fixture(scope="module")
def bioasq_topics(
    opensearch: OpenSearch, default_encoder, shared_data: Path, tmp_path_factory
) -> tuple[str, Path]:
    """Six fully covered 7B questions, their gold abstracts indexed, and a golden file of just them."""
    bioasq = shared_data / "bioasq"
    covered = json.loads((bioasq / "abstracts" / "fully_covered_questions.json").read_text())["7B1"][:6]
    golden = json.loads((bioasq / "Task7BGoldenEnriched" / "7B1_golden.json").read_text())
    questions = [q for q in golden["questions"] if q["id"] in covered]
    wanted = {d.rsplit("/", 1)[-1] for q in questions for d in q["documents"]}
    folder = tmp_path_factory.mktemp("bioasq")
    lines = [line for line in (bioasq / "abstracts" / "biobert_7b_full_abstract.jsonl").open(encoding="utf-8")
             if json.loads(line)["pmid"] in wanted]
    (folder / "abstracts.jsonl").write_text("".join(lines), encoding="utf-8")
    (folder / "golden.json").write_text(json.dumps({"questions": questions}), encoding="utf-8")
    name = f"biorank-test-bioasq-{uuid.uuid4().hex[:8]}"
    Indexer(opensearch, IndexOptions(index=name, rejects=folder / "r.tsv"), encoder=default_encoder).run(
        [folder / "abstracts.jsonl"])
    yield name, folder / "golden.json"
    delete_indices(opensearch, name)


def test_eval_on_bioasq_gold_reports_the_official_measures(
    opensearch_url: str, bioasq_topics: tuple[str, Path], tmp_path: Path
) -> None:
    index, golden = bioasq_topics
    result = CliRunner().invoke(cli, ["--url", opensearch_url, "eval", "--qrels", str(golden), "--systems",
                                      "bm25,hybrid+snippets", "--index", index, "-k", "100", "--out",
                                      str(tmp_path), "--measures", "ndcg@10"])
    assert result.exit_code == 0, result.output
    assert "BioASQ gold documents" in result.output
    table = json.loads((tmp_path / "table.json").read_text())["table"]
    for system in ("bm25", "hybrid+snippets"):
        assert 0 < table[system]["bioasq-doc-ap"] <= 1 and 0 < table[system]["bioasq-doc-gmap"] <= 1.00001
    # Every gold document is in this small index, so the snippets of the top documents overlap gold ones.
    assert table["hybrid+snippets"]["bioasq-snippet-f1"] > 0.1
    assert "bioasq-snippet-f1" not in table["bm25"]


def test_export_bioasq_writes_a_valid_submission(
    opensearch: OpenSearch, opensearch_url: str, bioasq_topics: tuple[str, Path], tmp_path: Path
) -> None:
    index, golden = bioasq_topics
    output = tmp_path / "submission.json"
    result = CliRunner().invoke(cli, ["--url", opensearch_url, "export-bioasq", "--questions", str(golden),
                                      "--output", str(output), "--index", index])
    assert result.exit_code == 0, result.output
    submitted = json.loads(output.read_text())["questions"]
    assert {q["id"] for q in submitted} == {q["id"] for q in json.loads(golden.read_text())["questions"]}
    for question in submitted:
        assert 0 < len(question["documents"]) <= 10 and 0 < len(question["snippets"]) <= 10
        for s in question["snippets"]:
            assert s["beginSection"] == s["endSection"] in ("title", "abstract")
            doc = opensearch.get(index=index, id=s["document"].rsplit("/", 1)[-1])["_source"]
            assert doc[s["beginSection"]][s["offsetInBeginSection"] : s["offsetInEndSection"]] == s["text"]

    # The submission scores, with its snippets, as the same system run by eval does.
    runner = CliRunner()
    scored = runner.invoke(cli, ["eval", "--runs", str(output), "--qrels", str(golden), "--out",
                                 str(tmp_path / "scored"), "--measures", "ndcg@10"])
    assert scored.exit_code == 0, scored.output
    ran = runner.invoke(cli, ["--url", opensearch_url, "eval", "--qrels", str(golden), "--systems",
                              "hybrid+snippets", "--index", index, "--out", str(tmp_path / "ran"), "--measures",
                              "ndcg@10"])
    assert ran.exit_code == 0, ran.output
    from_file = json.loads((tmp_path / "scored" / "table.json").read_text())["table"]["submission"]
    from_system = json.loads((tmp_path / "ran" / "table.json").read_text())["table"]["hybrid+snippets"]
    for measure in ("bioasq-doc-ap", "bioasq-doc-f1", "bioasq-snippet-f1", "bioasq-snippet-recall"):
        assert from_file[measure] == pytest.approx(from_system[measure]), measure
