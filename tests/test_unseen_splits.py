"""Dev sets that measure generalisation (issue 44): the unseen splits never hold a query whose relevant document a
training query has, on every source of the shared data; the self-supervised pairs from a real corpus file."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from biorank.cli import cli
from biorank.evaluation.bioasq import read_golden
from biorank.evaluation.splits import seen_documents, split_judged, top_documents
from biorank.evaluation.topics import read_qrels
from biorank.training.supervision import Supervision, gather, later_year, relevant_documents
from biorank.training.synthetic import contains, corpus_documents, generators, make_pairs


@pytest.fixture(scope="module")
def everything(shared_data: Path) -> Supervision:
    return gather(shared_data, log=lambda _: None)


def test_no_unseen_dev_query_shares_a_relevant_document_with_training_on_any_source(everything: Supervision) -> None:
    top = {s: max(g for q in everything.queries if q.source == s for g in q.positives.values())
           for s in {q.source for q in everything.queries}}
    trained = {d for q in everything.queries if q.split == "train"
               for d in relevant_documents(everything, q, top[q.source])}
    every_grade = {d for q in everything.queries if q.split == "train"
                   for g in set(q.positives.values()) for d in relevant_documents(everything, q, g)}
    unseen = [q for q in everything.queries if q.unseen]
    assert {q.source for q in unseen} == {"scifact", "bioasq", "nfcorpus", "pubmedqa"}
    assert all(q.split == "dev" for q in unseen)
    for query in unseen:
        documents = relevant_documents(everything, query, top[query.source])
        assert documents and not documents & trained, (query.source, query.id)
        if query.source != "nfcorpus":  # binary judgements: every relevant document is a top-grade one
            assert not {d for g in set(query.positives.values())
                        for d in relevant_documents(everything, query, g)} & every_grade, (query.source, query.id)
    # SciFact's sibling claims: most dev claims cite an abstract a training claim cites too.
    scifact = [q for q in everything.queries if q.source == "scifact" and q.split == "dev"]
    assert 0 < sum(q.unseen for q in scifact) < len(scifact) / 2


def test_eval_splits_of_the_real_files_keep_dev_documents_out_of_training(shared_data: Path) -> None:
    for qrels_file in ("scifact/qrels/train.tsv", "scifact/claims_train.jsonl"):
        qrels = read_qrels(shared_data / qrels_file)
        dev, rest, unseen = (split_judged(qrels, s) for s in ("dev", "rest", "dev-unseen"))
        top = top_documents(qrels)
        trained = {d for q in rest for d in top[q]}
        assert unseen and set(unseen) < set(dev)
        assert not {d for q in unseen for d in qrels[q]} & trained
        # Every dev claim left out shares an abstract with training: the split is as large as it can be.
        assert all(top[q] & trained for q in set(dev) - set(unseen))
    nfcorpus = read_qrels(shared_data / "nfcorpus/dev.2-1-0.qrel")
    train = read_qrels(shared_data / "nfcorpus/train.2-1-0.qrel")
    unseen = split_judged(nfcorpus, "unseen", seen_documents([train]))
    direct = {d for docs in train.values() for d, grade in docs.items() if grade == 2}
    assert unseen and all(top_documents(nfcorpus)[q].isdisjoint(direct) for q in unseen)
    # Nothing seen: every query with a direct link (the others have no top-grade document to be unseen by).
    assert split_judged(nfcorpus, "unseen") == sorted(top_documents(nfcorpus))
    assert set(top_documents(nfcorpus)) < set(split_judged(nfcorpus, "all"))


def test_scifact_dev_unseen_is_the_same_claims_for_eval_and_training(everything: Supervision,
                                                                      shared_data: Path) -> None:
    qrels = read_qrels(shared_data / "scifact/qrels/train.tsv")
    gathered = sorted(q.id for q in everything.queries if q.source == "scifact" and q.unseen)
    assert gathered == split_judged(qrels, "dev-unseen")


def test_bioasq_later_year_cites_no_earlier_document(shared_data: Path) -> None:
    unseen, total = later_year(shared_data / "bioasq")
    earlier = {d for year in ("7B", "8B") for path in (shared_data / "bioasq").glob(f"Task{year}GoldenEnriched/*.json")
               for q in read_golden(path) for d in q.documents}
    later = {q.id: set(q.documents) for path in (shared_data / "bioasq").glob("Task9BGoldenEnriched/*_golden.json")
             for q in read_golden(path)}
    assert total == len(later) and 0 < len(unseen) < total
    assert all(later[q] and not later[q] & earlier for q in unseen)
    assert all(later[q] & earlier or not later[q] for q in set(later) - set(unseen))


def test_eval_scores_a_run_on_the_unseen_split(shared_data: Path, tmp_path: Path) -> None:
    nfcorpus = shared_data / "nfcorpus"
    qrels = read_qrels(nfcorpus / "dev.2-1-0.qrel")
    run = tmp_path / "judged.trec"
    # A run that returns each query's judged documents: real ids, scored without a cluster.
    run.write_text("".join(f"{q} Q0 {d} {r} {10 - r} judged\n" for q, docs in qrels.items()
                           for r, d in enumerate(sorted(docs)[:10], 1)))
    result = CliRunner().invoke(cli, ["eval", "--runs", str(run), "--qrels", str(nfcorpus / "dev.2-1-0.qrel"),
                                      "--split", "unseen", "--seen", str(nfcorpus / "train.2-1-0.qrel"),
                                      "--measures", "ndcg@10", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    unseen = split_judged(qrels, "unseen", seen_documents([read_qrels(nfcorpus / "train.2-1-0.qrel")]))
    assert f"unseen split: {len(unseen)} judged queries" in result.output
    assert json.loads((tmp_path / "out" / "table.json").read_text())["queries"] == len(unseen) > 0


def test_self_supervised_pairs_from_real_scifact_abstracts(shared_data: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    with (shared_data / "scifact/corpus.jsonl").open(encoding="utf-8") as f:
        lines = list(itertools.islice(f, 12))
    corpus.write_text("".join(lines), encoding="utf-8")
    records = {str(r["doc_id"]): r for r in map(json.loads, lines)}
    excluded = sorted(records)[:2]
    documents = list(corpus_documents(corpus, exclude=excluded))
    assert [d.id for d in documents] == [i for i in records if i not in excluded]
    # SciFact's own sentence split, as the reader tidies its white space.
    assert all(d.sentences == tuple(map(words, records[d.id]["abstract"])) for d in documents)
    pairs = list(make_pairs(documents, generators(["ict", "title"])))
    assert {p.kind for p in pairs} == {"ict", "title"} and len(pairs) >= len(documents) - 1
    for pair in pairs:
        record = records[pair.doc_id]
        assert not contains(pair.passage, pair.question)
        if pair.kind == "title":
            assert pair.question == words(record["title"]) and pair.passage == words(" ".join(record["abstract"]))
        else:  # the inverse cloze task: one sentence, its abstract without it
            assert pair.question in map(words, record["abstract"]) and pair.passage.startswith(words(record["title"]))
    assert pairs == list(make_pairs(corpus_documents(corpus, exclude=excluded), generators(["ict", "title"])))


def words(text: str) -> str:
    return " ".join(text.split())


def test_the_unseen_dev_figure_chooses_the_epoch_and_both_figures_are_kept(tmp_path: Path) -> None:
    import torch

    from biorank.training.loop import METRIC, UNSEEN_METRIC, Recipe, linear_schedule, run_epochs

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # The whole dev split prefers the first epoch, its unseen part the second: the unseen part decides.
    scores = iter([{METRIC: 0.9, UNSEEN_METRIC: 0.5}, {METRIC: 0.7, UNSEEN_METRIC: 0.6}])
    messages: list[str] = []
    result = run_epochs(
        model, optimizer, linear_schedule(optimizer, warmup=0, total=4), Recipe(epochs=2), tmp_path,
        save_model=lambda folder: folder.mkdir(parents=True, exist_ok=True), load_model=lambda folder: None,
        steps_per_epoch=2, total_steps=4, loss_at=lambda epoch, position: model(torch.ones(1, 2)).sum(),
        validate=lambda: next(scores), baseline=("BM25", 0.4), started=0.0, progress=None, log=messages.append)
    assert result.best_epoch == 2
    assert [(h[METRIC], h[UNSEEN_METRIC]) for h in result.history] == [(0.9, 0.5), (0.7, 0.6)]
    assert "epoch 1: dev nDCG@10 0.9000, unseen dev nDCG@10 0.5000 (BM25 0.4000)" in messages


def test_a_false_negative_is_the_positive_again_or_holds_the_question(shared_data: Path) -> None:
    from biorank.training.negatives import false_negative

    first, second = itertools.islice(corpus_documents(shared_data / "scifact/corpus.jsonl"), 2)
    pair = next(make_pairs([first], generators(["ict"])))
    source = " ".join([first.title, *first.sentences])
    assert false_negative(pair.question, pair.passage, source)  # the abstract the sentence was taken from
    assert false_negative(pair.question, pair.passage, pair.passage.upper())  # the positive, indexed twice
    assert not false_negative(pair.question, pair.passage, " ".join([second.title, *second.sentences]))
