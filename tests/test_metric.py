"""The deep-metric sentence scorer (DMLPR): its similarity tensor by hand, its training on real SciFact pairs, the
shipped scorer without torch and equal to torch, and the `metric` snippet perspective on the real sample index."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from biorank.models.metric import (
    QUERY_PIECES,
    SENTENCE_PIECES,
    SHIPPED_METRIC_FOLDER,
    MetricError,
    MetricScorer,
    Vocabulary,
    normal_pieces,
    similarity_tensors,
    tokenizer,
)

WITHOUT_TORCH = Path(__file__).parent / "without_torch.py"


def test_the_similarity_tensor_of_a_hand_made_pair_equals_the_hand_computed_one() -> None:
    tokens = tokenizer()
    vocab = tokens.get_vocab()
    rng = np.random.default_rng(3)
    embeddings = rng.normal(size=(len(vocab), 4)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    idf = np.zeros(len(vocab), dtype=np.float32)
    # "en" and "##en" are one normal piece: the IDF is read at the normal form.
    query = np.array([vocab["kin"], vocab["en"], vocab["levels"]])
    sentence = np.array([vocab["kin"], vocab["##en"], vocab["rose"]])
    idf[[vocab["kin"], vocab["en"], vocab["levels"], vocab["rose"]]] = [2.0, 4.0, 1.0, 3.0]
    vocabulary = Vocabulary(embeddings, idf, normal_pieces(tokens))
    got = similarity_tensors(vocabulary, query, [sentence])
    assert got.shape == (1, 3, QUERY_PIECES, SENTENCE_PIECES)
    weight = {vocab["kin"]: 2 / 4, vocab["en"]: 4 / 4, vocab["levels"]: 1 / 4}
    expected = np.zeros((3, QUERY_PIECES, SENTENCE_PIECES), dtype=np.float32)
    for i, q in enumerate(query):
        for j, s in enumerate(sentence):
            cosine = float(embeddings[q] @ embeddings[s])
            same = q == s or (q == vocab["en"] and s == vocab["##en"])
            expected[:, i, j] = cosine, weight[q] * same, weight[q] * cosine
    assert got[0] == pytest.approx(expected, abs=1e-6)
    # Padding is zero and a long text keeps its start.
    long = np.arange(1000, 1000 + SENTENCE_PIECES + 10)
    cropped = similarity_tensors(vocabulary, query, [long])[0, 0]
    assert cropped[0, -1] == pytest.approx(float(embeddings[query[0]] @ embeddings[1000 + SENTENCE_PIECES - 1]))
    assert not cropped[len(query):].any()


@pytest.fixture(scope="module")
def scifact_pairs(shared_data: Path) -> list[tuple[str, str, str]]:
    """40 real SciFact train claims: (claim, an evidence sentence, another sentence of the same abstract)."""
    corpus = {}
    with (shared_data / "scifact" / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            corpus[str(doc["doc_id"])] = doc["abstract"]
    triplets = []
    with (shared_data / "scifact" / "claims_train.jsonl").open(encoding="utf-8") as f:
        for line in f:
            claim = json.loads(line)
            for doc, sets in claim["evidence"].items():
                gold = {n for s in sets for n in s["sentences"]}
                other = [n for n in range(len(corpus[doc])) if n not in gold]
                if other:
                    triplets.append((claim["claim"], corpus[doc][min(gold)], corpus[doc][other[0]]))
                break
            if len(triplets) == 40:
                return triplets
    return triplets


def test_training_lowers_the_triplet_loss_on_real_pairs(scifact_pairs) -> None:
    import torch

    from biorank.training.metric import network, triplet_loss

    scorer = MetricScorer.load()
    positives = torch.from_numpy(np.concatenate([scorer.tensors(q, [p]) for q, p, _ in scifact_pairs]))
    negatives = torch.from_numpy(np.concatenate([scorer.tensors(q, [n]) for q, _, n in scifact_pairs]))
    torch.manual_seed(0)
    model = network(filters=16, hidden=16)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    with torch.no_grad():
        before = float(triplet_loss(model, positives, negatives, 0.3))
    for _ in range(30):
        loss = triplet_loss(model, positives, negatives, 0.3)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        after = float(triplet_loss(model, positives, negatives, 0.3))
    assert after < 0.8 * before, (before, after)


@pytest.fixture(scope="module")
def pair_supervision(scifact_pairs):
    """The 40 claims as judged queries (every fifth held out), each with its evidence sentence and another sentence
    of the same abstract in the pool."""
    from biorank.training.supervision import Passage, SupervisedQuery, Supervision

    supervision = Supervision()
    for i, (claim, evidence, other) in enumerate(scifact_pairs):
        document = f"scifact:{i}"
        positive = supervision.add(Passage(f"{document}:0", document, "sentence", evidence))
        supervision.add(Passage(f"{document}:1", document, "sentence", other))
        supervision.queries.append(SupervisedQuery("scifact", str(i), claim, "dev" if i % 5 == 0 else "train",
                                                   {positive: 1}, frozenset({document})))
    return supervision


def test_an_interrupted_training_resumes_to_the_scorer_of_an_unbroken_one(pair_supervision, tmp_path: Path) -> None:
    from biorank.models.catalogue import MAVEN_MODELS, materialise
    from biorank.training.metric import MetricTraining, train_snippet_scorer

    graph = materialise(MAVEN_MODELS["bge-small-en-v1.5"]) / "model.onnx"
    # 32 training triplets, 8 steps an epoch: the last checkpoint before epoch 2 ends is its step 15 of 16.
    config = MetricTraining(easy_epochs=1, hard_epochs=2, batch_size=4, filters=8, hidden=8, nearest=5,
                            random_negatives=3, checkpoint_every=5)
    whole = train_snippet_scorer(pair_supervision, graph, tmp_path / "whole", config, log=lambda _: None)

    class Killed(Exception):
        pass

    def killed_in_epoch_2(line: str) -> None:
        if line.startswith("epoch 2"):
            raise Killed

    with pytest.raises(Killed):
        train_snippet_scorer(pair_supervision, graph, tmp_path / "cut", config, log=killed_in_epoch_2)
    lines: list[str] = []
    resumed = train_snippet_scorer(pair_supervision, graph, tmp_path / "cut", config, log=lines.append)
    assert "resuming from the checkpoint at step 15" in lines
    assert [h["phase"] for h in whole.history] == ["-", "easy", "hard", "hard"]
    # The same epochs, figures and training loss (the resumed epoch's summed over both runs), and the same weights.
    assert [{**h, "minutes": 0} for h in resumed.history] == [{**h, "minutes": 0} for h in whole.history]
    assert (tmp_path / "cut" / "model.onnx").read_bytes() == (tmp_path / "whole" / "model.onnx").read_bytes()
    assert not (tmp_path / "cut" / "checkpoint").exists()


def test_the_shipped_scorer_runs_without_torch_and_equals_torch(scifact_pairs) -> None:
    import torch

    from biorank.training.metric import network_from_graph

    claim = scifact_pairs[0][0]
    sentences = [p for _, p, _ in scifact_pairs[:8]] + [n for _, _, n in scifact_pairs[:8]]
    code = ("import json, sys; from biorank.models.metric import MetricScorer; "
            f"print(json.dumps(MetricScorer.load().scores({claim!r}, {sentences!r}).tolist())); "
            "assert 'torch' not in sys.modules")
    done = subprocess.run([sys.executable, str(WITHOUT_TORCH), "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    light = np.array(json.loads(done.stdout.strip().splitlines()[-1]))
    scorer = MetricScorer.load()
    with torch.no_grad():
        torch_scores = 1.0 - network_from_graph(SHIPPED_METRIC_FOLDER / "model.onnx")(
            torch.from_numpy(scorer.tensors(claim, sentences))).numpy()
    assert light == pytest.approx(torch_scores, abs=1e-5)
    assert light.std() > 0


def test_a_folder_without_a_scorer_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(MetricError, match="train-snippet-scorer"):
        MetricScorer.load(tmp_path)

