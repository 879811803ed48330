"""The cross-encoder reranker and its trainer, on real SciFact data, a real node and real (briefly trained) weights."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from biorank.errors import BiorankError
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.indexer.sentences import split_sentences
from biorank.models.cross_encoder import CrossEncoder, load_cross_encoder
from biorank.models.shipped import SHIPPED_RERANKER
from biorank.retrieval.searcher import Searcher
from biorank.stages.rerank import DEFAULT_WEIGHT, Reranker, fetch_texts, index_reranker, index_weight, reorder
from biorank.store.record import IndexRecord
from biorank.training.loop import training_placement
from biorank.training.negatives import bm25_candidates, sample_negatives
from biorank.training.reranker import (
    Group,
    PreparedTraining,
    RerankerTraining,
    TrainingError,
    dropped,
    epoch_groups,
    groups_loss,
    train_reranker,
    trimmed,
)
from biorank.types import Hit

CLAIM = "Vitamin D deficiency is associated with an increased risk of tuberculosis."


@pytest.fixture(scope="module")
def reranker(tiny_reranker: Path) -> CrossEncoder:
    return CrossEncoder(tiny_reranker, max_length=64, batch_size=8, precision="fp32")


@pytest.fixture(scope="module")
def scifact_topics(shared_data: Path) -> tuple[dict[str, str], dict]:
    return (read_queries(shared_data / "scifact" / "claims_train.jsonl"),
            read_qrels(shared_data / "scifact" / "qrels" / "train.tsv"))


def test_trained_model_has_a_card_and_loads(tiny_reranker: Path, reranker: CrossEncoder) -> None:
    card = (tiny_reranker / "README.md").read_text()
    record = json.loads((tiny_reranker / "training.json").read_text())
    assert "## Data" in card and "## Recipe" in card and "never a judged document" in card
    assert record["recipe"]["max_steps"] == 6 and record["result"]["training steps"] == 6
    assert not (tiny_reranker / "checkpoint").exists()
    scores = reranker.score(CLAIM, ["Vitamin D and tuberculosis in a cohort.", "Gene expression in yeast."])
    assert scores.shape == (2,) and all(abs(s) < 1e3 for s in scores)
    assert reranker.model_name.startswith(f"{tiny_reranker.name}@")


def test_a_pair_scores_the_same_in_any_batch(reranker: CrossEncoder, sample_index: str, opensearch) -> None:
    hits = Searcher.open(opensearch, sample_index).with_settings(mode="bm25", fields="text").search(CLAIM, 20)
    texts = fetch_texts(opensearch, sample_index, [h.id for h in hits])
    documents = [texts[h.id] for h in hits]
    alone = reranker.score(CLAIM, documents[:1])[0]
    among_others = reranker.score(CLAIM, documents[5:12] + documents[:1] + documents[12:])[7]
    reversed_order = reranker.score(CLAIM, documents[::-1])[-1]
    assert alone == among_others == reversed_order


@pytest.mark.parametrize("precision", ["onnx", "int8"])
def test_onnx_runtime_scores_as_torch_does(reranker: CrossEncoder, tiny_reranker: Path, sample_index: str,
                                           opensearch, precision: str) -> None:
    hits = Searcher.open(opensearch, sample_index).with_settings(mode="bm25", fields="text").search(CLAIM, 20)
    texts = fetch_texts(opensearch, sample_index, [h.id for h in hits])
    documents = [texts[h.id] for h in hits]
    other = CrossEncoder(tiny_reranker, max_length=64, batch_size=8, precision=precision)
    assert other.precision == precision and other._model is None
    expected, found = reranker.score(CLAIM, documents), other.score(CLAIM, documents)
    alone = other.score(CLAIM, documents[:1])[0]
    if precision == "onnx":
        np.testing.assert_allclose(found, expected, atol=1e-4)
        # Lengths differ, so batches differ in width: a pair scores the same alone (to float rounding).
        assert abs(alone - found[0]) < 1e-5
    else:
        # int8 moves scores a little; the order of what the fp32 model tells apart (by a fifth of its range)
        # stays. Not a correlation over all 20: this barely trained model's scores lie close together, and there
        # int8's noise (its kernels differ between AVX2, VNNI and AMX CPUs) decides the order of near-ties.
        apart = [(i, j) for i in range(len(expected)) for j in range(len(expected))
                 if expected[i] - expected[j] > 0.2 * np.ptp(expected)]
        assert apart and all(found[i] > found[j] for i, j in apart)
        # Activations are quantised with one scale per batch, so a pair's score moves with its neighbours.
        assert abs(alone - found[0]) < 0.2 * np.ptp(expected)


def test_a_query_longer_than_the_window_is_scored_not_refused(reranker: CrossEncoder, tiny_reranker: Path) -> None:
    # A pasted abstract as the question: cut to the window as a long text is, the same way on either backend.
    long_query = " ".join([CLAIM] * 12)
    texts = ["Vitamin D and tuberculosis in a cohort.", "Gene expression in yeast under heat shock. " * 10]
    in_torch = reranker.score(long_query, texts)
    in_onnx = CrossEncoder(tiny_reranker, max_length=64, batch_size=8, precision="onnx").score(long_query, texts)
    assert in_torch.shape == (2,) and np.all(np.isfinite(in_torch))
    np.testing.assert_allclose(in_onnx, in_torch, atol=1e-4)


def test_a_resized_reranker_shares_the_model_and_scores_as_a_fresh_load(reranker: CrossEncoder, tiny_reranker: Path,
                                                                        sample_index: str, opensearch) -> None:
    hits = Searcher.open(opensearch, sample_index).with_settings(mode="bm25", fields="text").search(CLAIM, 12)
    texts = list(fetch_texts(opensearch, sample_index, [h.id for h in hits]).values())
    shorter = reranker.resized(max_length=32, batch_size=5)
    assert shorter._model is reranker._model and (reranker.max_length, reranker.batch_size) == (64, 8)
    fresh = CrossEncoder(tiny_reranker, max_length=32, batch_size=5, precision=reranker.precision)
    assert (shorter.score(CLAIM, texts) == fresh.score(CLAIM, texts)).all()


def test_reranking_only_reorders_the_candidates(reranker: CrossEncoder, sample_index: str, opensearch) -> None:
    searcher = Searcher.open(opensearch, sample_index).with_settings(mode="bm25", fields="text")
    hits = searcher.search(CLAIM, 30)
    reranked = Reranker(reranker, opensearch, sample_index, depth=10).rerank(CLAIM, hits)
    assert sorted(h.id for h in reranked) == sorted(h.id for h in hits)
    assert [h.id for h in reranked[10:]] == [h.id for h in hits[10:]]
    assert {h.id for h in reranked[:10]} == {h.id for h in hits[:10]}
    assert [h.rank for h in reranked] == list(range(1, 31))
    scores = [h.score for h in reranked]
    assert scores == sorted(scores, reverse=True)
    assert all(h.rerank is not None and h.bm25 is not None for h in reranked[:10])
    assert all(h.rerank is None for h in reranked[10:])


def test_ties_keep_first_stage_order() -> None:
    hits = [Hit(id=f"d{i}", title="", rank=i, score=10.0 - i) for i in range(1, 6)]
    reordered = reorder(hits, [0.5, 2.0, 0.5, 2.0])
    assert [h.id for h in reordered] == ["d2", "d4", "d1", "d3", "d5"]
    assert reordered[-1].score < reordered[-2].score


def test_interpolation_weighs_normalised_scores() -> None:
    hits = [Hit(id=f"d{i}", title="", rank=i, score=s) for i, s in enumerate([9.0, 5.0, 1.0], 1)]
    # Normalised: first stage (1, 0.5, 0), reranker (0, 0.25, 1).
    assert [h.id for h in reorder(hits, [0.0, 1.0, 4.0], weight=0.6)] == ["d3", "d1", "d2"]
    assert [h.id for h in reorder(hits, [0.0, 1.0, 4.0], weight=0.5)] == ["d1", "d3", "d2"]  # a tie: d1 first
    assert [h.id for h in reorder(hits, [0.0, 1.0, 4.0], weight=0.3)] == ["d1", "d2", "d3"]
    assert [h.id for h in reorder(hits, [0.0, 1.0, 4.0], weight=0.0)] == ["d1", "d2", "d3"]
    assert [h.rerank for h in reorder(hits, [0.0, 1.0, 4.0], weight=0.6)] == [4.0, 0.0, 1.0]
    with pytest.raises(ValueError):
        reorder(hits, [0.0, 1.0, 4.0], weight=1.5)


def test_negatives_never_include_a_judged_document(sample_index: str, opensearch, scifact_topics) -> None:
    queries, qrels = scifact_topics
    ids = sorted(qrels)[:60]
    candidates = bm25_candidates(Searcher.open(opensearch, sample_index), {q: queries[q] for q in ids}, 50)
    groups = sample_negatives(candidates, qrels, ids, per_positive=20, seed=7)
    assert groups and sum(len(g.negatives) for g in groups) > 100
    for group in groups:
        assert not set(group.negatives) & set(qrels[group.query_id])
        assert len(set(group.negatives)) == len(group.negatives) <= 20
        assert set(group.negatives) <= set(candidates[group.query_id])
        assert qrels[group.query_id][group.positive] > 0
    assert sample_negatives(candidates, qrels, ids, per_positive=20, seed=7) == groups
    assert sample_negatives(candidates, qrels, ids, per_positive=20, seed=8) != groups


def test_an_interrupted_training_resumes_from_its_checkpoint(sample_index: str, opensearch, scifact_topics,
                                                             tmp_path: Path) -> None:
    queries, qrels = scifact_topics
    found = opensearch.search(index=sample_index, body={"size": 1000, "_source": False})["hits"]["hits"]
    judged = sorted(q for q, docs in qrels.items() if docs.keys() & {h["_id"] for h in found})[:30]
    config = RerankerTraining(negatives_per_positive=2, negatives_from_top=10, max_length=48, validation_depth=5,
                              max_steps=5, checkpoint_every=2, groups_per_step=2)
    searcher = Searcher.open(opensearch, sample_index)
    topics = ({q: queries[q] for q in judged}, {q: qrels[q] for q in judged})

    def interrupt(stage: str, done: int, total: int) -> None:
        if stage == "training" and done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_reranker(searcher, *topics, tmp_path, config, progress=interrupt, log=lambda _: None)
    state = json.loads((tmp_path / "checkpoint" / "state.json").read_text())
    assert state["step"] == 2
    messages: list[str] = []
    report = train_reranker(searcher, *topics, tmp_path, config, log=messages.append)
    assert "resuming from the checkpoint at step 2" in messages
    assert report.steps == 5 and (tmp_path / "model.safetensors").is_file()
    with pytest.raises(TrainingError, match="another recipe"):
        (tmp_path / "checkpoint").mkdir()
        (tmp_path / "checkpoint" / "state.json").write_text(json.dumps({**state, "config": {}}))
        train_reranker(searcher, *topics, tmp_path, config, log=lambda _: None)


def test_a_prepared_training_trains_apart_from_the_cluster_as_it_would_beside_it(
        sample_index: str, opensearch, opensearch_url: str, scifact_topics, tmp_path: Path) -> None:
    """train-reranker --prepare-only here, --prepared where no cluster is: the same model as training at once."""
    from click.testing import CliRunner
    from safetensors.numpy import load_file

    from biorank.cli import cli

    queries, qrels = scifact_topics
    found = opensearch.search(index=sample_index, body={"size": 1000, "_source": False})["hits"]["hits"]
    judged = sorted(q for q, docs in qrels.items() if docs.keys() & {h["_id"] for h in found})[:30]
    (tmp_path / "queries.tsv").write_text("".join(f"{q}\t{queries[q]}\n" for q in judged))
    (tmp_path / "qrels.tsv").write_text("".join(f"{q}\t{d}\t{g}\n" for q in judged for d, g in qrels[q].items()))
    recipe = ["--negatives-per-positive", "2", "--negatives-from-top", "10", "--max-length", "48",
              "--max-steps", "2", "--groups-per-step", "2"]
    prepared = tmp_path / "training.xz"
    result = CliRunner().invoke(cli, ["--url", opensearch_url, "train-reranker", "--queries",
                                      str(tmp_path / "queries.tsv"), "--qrels", str(tmp_path / "qrels.tsv"),
                                      "--index", sample_index, *recipe, "--prepare-only", str(prepared)])
    assert result.exit_code == 0, result.output
    assert f"train from it with `biorank train-reranker --prepared {prepared}" in result.output
    loaded = PreparedTraining.load(prepared)
    assert loaded.index == sample_index and loaded.settings["negatives_per_positive"] == 2
    assert len(loaded.groups) > 4 and all(2 <= len(g.texts) <= 3 for g in loaded.groups)
    assert set(loaded.dev_candidates) == set(loaded.dev_queries) and set(loaded.dev_qrels) <= set(judged)
    assert {d for ids in loaded.dev_candidates.values() for d in ids} == set(loaded.texts)

    # No --url: the cluster is never asked (a wrong one would fail).
    result = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:9", "train-reranker", "--prepared", str(prepared),
                                      "--out", str(tmp_path / "apart"), *recipe])
    assert result.exit_code == 0, result.output
    assert "trained apart from the cluster" in result.output
    config = RerankerTraining(negatives_per_positive=2, negatives_from_top=10, max_length=48, max_steps=2,
                              groups_per_step=2)
    report = train_reranker(Searcher.open(opensearch, sample_index), {q: queries[q] for q in judged},
                            {q: qrels[q] for q in judged}, tmp_path / "beside", config, log=lambda _: None)
    assert report.steps == 2
    apart, beside = (load_file(tmp_path / name / "model.safetensors") for name in ("apart", "beside"))
    assert apart.keys() == beside.keys()
    assert max(float(np.abs(apart[k] - beside[k]).max()) for k in apart) < 1e-6
    card = json.loads((tmp_path / "apart" / "training.json").read_text())
    assert card["recipe"]["negatives_per_positive"] == 2 and card["data"]["index"] == sample_index
    # Against memorising: fewer repeats of a relevant text, sentences left out; the card says so.
    result = CliRunner().invoke(cli, ["train-reranker", "--prepared", str(prepared), "--out", str(tmp_path / "less"),
                                      *recipe, "--positive-repeats", "1", "--sentence-dropout", "0.3"])
    assert result.exit_code == 0, result.output
    card = json.loads((tmp_path / "less" / "training.json").read_text())
    assert card["recipe"]["positive_repeats"] == 1 and card["recipe"]["sentence_dropout"] == 0.3
    less = load_file(tmp_path / "less" / "model.safetensors")
    assert max(float(np.abs(less[k] - apart[k]).max()) for k in apart) > 1e-4

    (tmp_path / "broken.xz").write_bytes(b"not a prepared training")
    with pytest.raises(TrainingError, match=r"broken\.xz is not a file `biorank train-reranker --prepare-only`"):
        PreparedTraining.load(tmp_path / "broken.xz")
    result = CliRunner().invoke(cli, ["train-reranker", "--prepared", str(prepared), "--out", str(tmp_path / "x"),
                                      "--queries", str(tmp_path / "queries.tsv")])
    assert result.exit_code == 2 and "--prepared brings its own groups and dev split: drop --queries" in result.output
    result = CliRunner().invoke(cli, ["train-reranker", "--prepared", str(prepared), "--out", str(tmp_path / "x"),
                                      "--negatives-per-positive", "5"])
    assert result.exit_code == 2 and "prepared with --negatives-per-positive 2, not 5" in result.output
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(("keep", "kept"), [("best", [1]), ("last", [1, 2, 3])])
def test_keep_decides_which_epochs_reach_the_output(keep: str, kept: list[int], tmp_path: Path) -> None:
    import torch

    from biorank.training.loop import Recipe, linear_schedule, run_epochs

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scores = iter([0.9, 0.5, 0.7])  # the first epoch validates best
    saved: list[Path] = []

    def save(folder: Path) -> None:  # the output folder, or the checkpoint's (which must exist)
        folder.mkdir(parents=True, exist_ok=True)
        saved.extend([folder] if folder == tmp_path else [])

    result = run_epochs(
        model, optimizer, linear_schedule(optimizer, warmup=0, total=6), Recipe(epochs=3, keep=keep), tmp_path,
        save_model=save,
        load_model=lambda folder: None, steps_per_epoch=2, total_steps=6,
        loss_at=lambda epoch, position: model(torch.ones(1, 2)).sum(), validate=lambda: next(scores),
        baseline=("none", 0.0), started=0.0, progress=None, log=lambda _: None)
    assert len(saved) == len(kept) and result.best_epoch == kept[-1]


def test_trimmed_groups_keep_the_positive_and_the_first_negatives() -> None:
    groups = [Group("q1", ("p1", "n1", "n2", "n3")), Group("q2", ("p2", "m1"))]
    assert trimmed(groups) == [Group("q1", ("p1", "n1")), Group("q2", ("p2", "m1"))]


def _cited_groups(shared_data: Path) -> list[Group]:
    """SciFact's training claims, each with the abstract it cites and the next claim's as a negative: claims and
    their negations cite the same abstract, the repeats ``positive_repeats`` is for."""
    scifact = shared_data / "scifact"
    claims = [json.loads(line) for line in (scifact / "claims_train.jsonl").read_text().splitlines()][:400]
    wanted = {str(d) for c in claims for d in c["cited_doc_ids"]}
    texts = {}
    with (scifact / "corpus.jsonl").open() as f:
        for line in f:
            doc = json.loads(line)
            if str(doc["doc_id"]) in wanted:
                texts[str(doc["doc_id"])] = f"{doc['title']} {' '.join(doc['abstract'])}"
    cited = [(c["claim"], texts[str(c["cited_doc_ids"][0])]) for c in claims if c["cited_doc_ids"]]
    return [Group(claim, (text, cited[(i + 1) % len(cited)][1])) for i, (claim, text) in enumerate(cited)]


def test_an_epoch_trains_a_relevant_abstract_in_at_most_positive_repeats_groups(shared_data: Path) -> None:
    groups = _cited_groups(shared_data)
    synthetic = 5  # the first five stand for self-supervised groups: they stay first
    counts = Counter(g.texts[0] for g in groups)
    assert max(counts.values()) >= 3  # the data has what the option is for
    everything = epoch_groups(groups, synthetic, 7, 0)
    assert sorted(everything) == list(range(len(groups))) and set(everything[:synthetic]) == set(range(synthetic))
    epochs = [epoch_groups(groups, synthetic, 7, epoch, positive_repeats=1) for epoch in range(3)]
    for order in epochs:
        assert len(order) == len(counts) and len({groups[i].texts[0] for i in order}) == len(counts)
        assert set(order[:synthetic]) <= set(range(synthetic))
    assert epochs[0] == epoch_groups(groups, synthetic, 7, 0, positive_repeats=1)  # a resumed run draws the same
    assert len({frozenset(order) for order in epochs}) == 3  # each epoch draws anew which groups
    twice = epoch_groups(groups, synthetic, 7, 0, positive_repeats=2)
    assert len(twice) == sum(min(n, 2) for n in counts.values())


def test_sentence_dropout_leaves_out_sentences_of_every_text_but_never_all(shared_data: Path) -> None:
    group = _cited_groups(shared_data)[0]
    assert min(len(split_sentences(text)) for text in group.texts) >= 4
    assert dropped(group, 0.0, random.Random(1)) == group
    half = dropped(group, 0.5, random.Random(1))
    assert half.query == group.query and half != dropped(group, 0.5, random.Random(2))
    for text, before in zip(half.texts, group.texts, strict=True):
        assert 0 < len(text) < len(before) and all(part in before for part in text.split(". "))
    for text, before in zip(dropped(group, 0.999, random.Random(3)).texts, group.texts, strict=True):
        assert text and text in before and len(split_sentences(text)) == 1  # one whole sentence of it


def test_groups_in_one_step_lose_what_they_lose_one_by_one(tiny_reranker: Path) -> None:
    import torch

    model, tokenizer = load_cross_encoder(str(tiny_reranker))
    model.eval()  # no dropout: the same pairs must give the same logits
    # The "positive" of each group is an unrelated text, so that the losses are far from 0 whatever the model
    # (it starts from the shipped cross-encoder, sure of the easy cases): a scored pad would move them.
    groups = [Group(CLAIM, ("Gene expression in yeast.", "Vitamin D and tuberculosis in a cohort.",
                            "A trial of statins.")),
              Group("Aspirin prevents heart attacks.", ("Soil bacteria.", "Aspirin in primary prevention."))]
    with torch.no_grad():
        alone = [groups_loss(model, tokenizer, [g], 64, bf16=False).item() for g in groups]
        together = groups_loss(model, tokenizer, groups, 64, bf16=False).item()
    # The shorter group is padded: were its padding scored, the mean would move.
    assert together == pytest.approx(sum(alone) / 2, abs=1e-5)
    assert alone[0] != pytest.approx(alone[1], abs=1e-3)


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "mps"])
def test_a_device_torch_cannot_train_on_is_refused_in_one_line(device: str) -> None:
    with pytest.raises(TrainingError, match="use auto, cpu, cuda or cuda:N"):
        training_placement("fp32", device)


def test_an_index_without_a_reranker_reranks_with_the_shipped_one() -> None:
    assert index_reranker(IndexRecord.from_meta("scifact", {"model": "x"})) == SHIPPED_RERANKER
    with pytest.raises(BiorankError, match="not on this machine"):
        index_reranker(IndexRecord.from_meta("scifact", {"reranker": {"model": "/nonexistent/reranker"}}))


def test_query_rerank_shows_the_reranker_score_beside_the_parts(opensearch_url: str, sample_index: str,
                                                               tiny_reranker: Path) -> None:
    from click.testing import CliRunner

    from biorank.cli import cli

    args = ["--url", opensearch_url, "query", CLAIM, "--index", sample_index, "-k", "5", "--no-log"]
    result = CliRunner().invoke(cli, [*args, "--rerank", "--reranker", str(tiny_reranker), "--rerank-depth", "8",
                                      "--rerank-weight", "1", "--json"])
    assert result.exit_code == 0, result.output
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(hits) == 5 and all({"rerank", "bm25", "dense", "hybrid"} <= hit.keys() for hit in hits)
    assert [h["score"] for h in hits] == sorted((h["rerank"] for h in hits), reverse=True)
    shipped = CliRunner().invoke(cli, [*args, "--rerank", "--json"])  # the index has no reranker of its own
    assert shipped.exit_code == 0, shipped.output
    assert all("rerank" in json.loads(line) for line in shipped.stdout.splitlines())


def test_a_tuned_weight_holds_for_its_cross_encoder_alone() -> None:
    record = IndexRecord.from_meta("scifact", {"rerank_weight": {"weight": 0.6, "reranker": "mine@abc"}})
    assert index_weight(record, "mine@abc") == 0.6
    assert index_weight(record, "mine@def") == index_weight(IndexRecord.from_meta("scifact", {}), "x") == DEFAULT_WEIGHT


def test_tune_rerank_stores_the_best_weight_and_reranking_uses_it(opensearch_url: str, opensearch, sample_index: str,
                                                                 tiny_reranker: Path, shared_data: Path,
                                                                 scifact_topics, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from biorank.cli import cli
    from biorank.evaluation.measures import evaluate, run_from_hits
    from biorank.pipeline import Pipeline
    from biorank.store.record import check_record, update_record

    queries, qrels = scifact_topics
    body = {"size": 1000, "_source": False, "query": {"term": {"block": 0}}}
    ids = {h["_id"] for h in opensearch.search(index=sample_index, body=body)["hits"]["hits"]}
    judged = sorted((q for q, docs in qrels.items() if docs.keys() & ids), key=int)[:8]
    qrels_file = tmp_path / "qrels.tsv"
    qrels_file.write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q in judged for d, g in qrels[q].items()), encoding="utf-8")
    args = ["--url", opensearch_url, "tune-rerank", "--queries", str(shared_data / "scifact" / "claims_train.jsonl"),
            "--qrels", str(qrels_file), "--index", sample_index, "--split", "all"]
    refused = CliRunner().invoke(cli, [*args, "--system", "hybrid+rerank"])
    assert refused.exit_code == 2 and "first stage alone" in refused.output
    try:
        result = CliRunner().invoke(cli, [*args, "--reranker", str(tiny_reranker), "--rerank-depth", "8",
                                          "--grid", "0,0.5,1", "--plot", str(tmp_path / "w.png")])
        assert result.exit_code == 0, result.output
        table = {float(line.split()[2]): float(line.split()[5]) for line in result.stdout.splitlines()
                 if line.startswith("w = ")}
        assert set(table) == {0.0, 0.5, 1.0} and (tmp_path / "w.png").stat().st_size > 0
        # Weight 0 is the first stage's own order.
        hybrid_pipeline = Pipeline.build("hybrid", Searcher.open(opensearch, sample_index))
        first = hybrid_pipeline.run({q: queries[q] for q in judged}, 100)
        hybrid = evaluate(run_from_hits({q: a.hits for q, a in first.items()}), {q: qrels[q] for q in judged},
                          ["ndcg@10"])["ndcg@10"]
        assert table[0.0] == pytest.approx(hybrid, abs=1e-4)
        best = max(table, key=lambda w: (table[w], -w))
        tuned = check_record(opensearch, sample_index).rerank_tuning
        mine = CrossEncoder(tiny_reranker, precision="fp32")
        assert tuned == {"weight": best, "reranker": mine.model_name, "metric": "ndcg@10",
                         "value": pytest.approx(table[best], abs=1e-4), "queries": 8, "split": "all",
                         "system": "hybrid", "depth": 8, "length": 256}
        searcher = Searcher.open(opensearch, sample_index)  # the record as it is now
        assert Pipeline.build("hybrid+rerank", searcher, cross_encoder=mine).reranker.weight == best
        assert Pipeline.build("hybrid+rerank", searcher, cross_encoder=mine, rerank_weight=0.9).reranker.weight == 0.9
        # Another reading length shares the loaded model.
        longer = Pipeline.build("hybrid+rerank", searcher, cross_encoder=mine, rerank_length=512).cross_encoder
        assert longer.max_length == 512 and longer._model is mine._model and mine.max_length == 256
    finally:
        update_record(opensearch, sample_index, remove=("rerank_weight",))
