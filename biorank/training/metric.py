"""Training the deep-metric sentence scorer (DMLPR, Rosso-Mateus et al. §2.2) on every snippet judgement gathered.

Triplets (question, relevant sentence, irrelevant sentence) from the ``train`` queries of
:func:`~biorank.training.supervision.gather` whose positives are sentences or snippets (SciFact evidence
sentences, BioASQ 7B-9B gold snippets; PubMedQA and NFCorpus judge whole abstracts only, so they add texts to the
sentence pool, not triplets). The dev queries (the same hash splits as every trainer: SciFact's dev claims, the
BioASQ 7B evaluation questions and a hash of the others) are never trained on; their triplets give the loss
reported each epoch.

**Negatives.** Each query's candidates are the other sentences of its relevant documents (what the snippet stage
must tell apart), the pool sentences closest to it by an embedding cosine (never of a document judged for it,
nor a text equal to a positive), and random pool sentences. The pool is every sentence of every text gathered,
split as the indexer splits. **Easy, then hard** (§2.2.4): with the cosine of IDF-weighted mean word-piece
embeddings (the paper's BioSentVec stands in), one density is estimated over the positives' cosines and one
over the candidates'; a candidate is hard where the positives' density is the larger, easy elsewhere. The first
``easy_epochs`` draw from the easy ones, the rest from the hard ones (easy where a query has none).

**Loss.** The triplet margin loss ``mean(max(0, d(q, p+) - d(q, p-) + alpha))`` (Equation 1, with the hinge).

**Loop.** :func:`~biorank.training.loop.run_epochs`, as every trainer: checkpoints that a re-run resumes, the dev
figures after each epoch. Unlike the transformers it keeps the optimiser's rate (plain Adam, no schedule), clips
no gradient and keeps the last epoch (the dev loss of a fixed easy-then-hard schedule does not choose one).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from biorank.config import SEED
from biorank.indexer.sentences import split_sentences
from biorank.models.extras import require_torch
from biorank.models.metric import (
    CHANNELS,
    DIMENSION,
    GRAPH,
    QUERY_PIECES,
    SENTENCE_PIECES,
    SETTINGS,
    Vocabulary,
    normal_pieces,
    piece_ids,
    similarity_tensors,
    tokenizer,
)
from biorank.training.card import write_model_card
from biorank.training.loop import TRAIN_LOSS, TrainingError, figures, remove_checkpoint, run_epochs
from biorank.training.supervision import Supervision, normal_text

if TYPE_CHECKING:
    import numpy as np

SHORT = ("sentence", "snippet")


@dataclass(frozen=True)
class MetricTraining:
    """The recipe: the network's size, the schedule and the negatives."""

    easy_epochs: int = 2
    hard_epochs: int = 4
    batch_size: int = 64
    learning_rate: float = 1e-3
    margin: float = 0.3
    filters: int = 64
    """3x3 filters: the paper's 256 would make a query's ~100 sentences cost 4x these 64 (the feature maps,
    not the arithmetic, are what costs)."""
    hidden: int = 128
    nearest: int = 30
    """Pool sentences closest to each query taken as candidates."""
    random_negatives: int = 10
    positives_per_query: int = 4
    """Relevant sentences trained per query, drawn once (a BioASQ question has up to dozens of gold snippets,
    which would outweigh the SciFact claims' one or two)."""
    negatives_per_positive: int = 1
    """Triplets a positive gives each epoch, each with its own negative."""
    max_queries: int | None = None
    """Train on at most this many queries (a smoke test); None takes all."""
    seed: int = SEED
    checkpoint_every: int = 100
    """Steps between checkpoints (``out/checkpoint``, besides one after each epoch), which a re-run resumes."""
    keep: ClassVar[str] = "last"
    """The epoch ``out`` holds: the schedule's last, as nothing in the dev loss says an earlier one is better."""

    @property
    def epochs(self) -> int:
        return self.easy_epochs + self.hard_epochs

    def phase(self, epoch: int) -> str:
        """The negatives epoch ``epoch`` (from 1) trains on."""
        return "easy" if epoch <= self.easy_epochs else "hard"


@dataclass
class MetricTrainingReport:
    queries: dict[str, int]
    positives: int
    candidates: dict[str, int]
    dev_triplets: int
    pool_sentences: int
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class _Query:
    text: str
    ids: np.ndarray
    positives: tuple[int, ...]
    easy: tuple[int, ...]
    hard: tuple[int, ...]


def build_vocabulary(encoder_graph: Path, texts: Sequence[np.ndarray]) -> Vocabulary:
    """The scorer's vocabulary: the encoder's word-piece table centred, reduced to :data:`DIMENSION` by PCA and
    normalised, and each normalised piece's IDF over ``texts`` (piece ids): ``log(1 + (N - df + 0.5)/(df + 0.5))``.

    Centring first: the raw table shares one large common direction, which would make every cosine high.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(encoder_graph))
    table = next((numpy_helper.to_array(t) for t in graph.graph.initializer
                  if t.name.endswith("word_embeddings.weight")), None)
    if table is None:
        raise TrainingError(f"{encoder_graph} has no word_embeddings.weight")
    table = table.astype(np.float64)
    table -= table.mean(axis=0)
    _, _, vt = np.linalg.svd(table, full_matrices=False)
    reduced = table @ vt[:DIMENSION].T
    reduced /= np.linalg.norm(reduced, axis=1, keepdims=True).clip(1e-9)
    normal = normal_pieces(tokenizer())
    df = np.zeros(len(normal), dtype=np.float64)
    for ids in texts:
        df[np.unique(normal[ids])] += 1
    n = len(texts)
    idf = np.log1p((n - df + 0.5) / (df + 0.5))
    return Vocabulary(reduced.astype(np.float32), idf.astype(np.float32), normal)


def network(filters: int = 64, hidden: int = 128) -> Any:
    """The torch CNN (Figure 5, with the row-wise pooling beside the global max; see :mod:`biorank.models.metric`)."""
    require_torch("training the sentence scorer")
    import torch
    from torch import nn

    class MetricNetwork(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(len(CHANNELS), filters, 3, padding=1)
            self.hidden = nn.Linear(2 * filters, hidden)
            self.out = nn.Linear(hidden, 1)

        def forward(self, tensors: torch.Tensor) -> torch.Tensor:
            maps = torch.relu(self.conv(tensors))  # (n, filters, query rows, sentence columns)
            overall = maps.amax(dim=(2, 3))
            rows = maps.amax(dim=3).mean(dim=2)
            features = torch.relu(self.hidden(torch.cat([overall, rows], dim=1)))
            return torch.sigmoid(self.out(features)).squeeze(1)

    return MetricNetwork()


def network_from_graph(path: Path) -> Any:
    """The torch network with the weights of a saved graph (``model.onnx``): to compare the two, or go on training."""
    settings = json.loads((path.parent / SETTINGS).read_text(encoding="utf-8"))
    model = network(settings["filters"], settings["hidden"])
    model.load_state_dict(_graph_weights(path, model))
    return model.eval()


def _graph_weights(path: Path, model: Any) -> dict[str, Any]:
    """``model``'s state dict as the graph at ``path`` holds it (the export keeps each parameter's name)."""
    import onnx
    import torch
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    weights = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in graph.initializer}
    return {name: weights[name] for name in model.state_dict()}


def triplet_loss(model: Any, positives: Any, negatives: Any, margin: float) -> Any:
    """Equation 1: the mean hinge of ``d(q, p+) - d(q, p-) + margin`` over a batch of tensor pairs (the question,
    the triplet's anchor, is in both tensors: their rows)."""
    import torch

    return torch.relu(model(positives) - model(negatives) + margin).mean()


def train_snippet_scorer(supervision: Supervision, encoder_graph: Path, out: Path,
                         config: MetricTraining = MetricTraining(), *,
                         log: Callable[[str], None] = print) -> MetricTrainingReport:
    """Train the scorer on ``supervision``'s sentence and snippet judgements and save it in ``out``.

    Args:
        supervision: :func:`~biorank.training.supervision.gather`'s queries and pool (no BM25 negatives needed).
        encoder_graph: the ONNX graph whose word-piece table the channels read (bge-small-en-v1.5's).
        out: the folder written: ``model.onnx``, ``vocabulary.npz``, ``settings.json``, the card.
        config: the recipe.
        log: where progress lines go.

    Returns:
        What was trained on and the dev loss per epoch.

    Example:
        >>> graph = materialise(MAVEN_MODELS["bge-small-en-v1.5"]) / "model.onnx"  # doctest: +SKIP
        >>> train_snippet_scorer(gather("data"), graph, Path("scorer"))  # doctest: +SKIP
    """
    require_torch("training the sentence scorer")
    import numpy as np
    import torch

    started = time.perf_counter()
    torch.manual_seed(config.seed)
    tokens = tokenizer()
    pool, documents = _sentence_pool(supervision)
    if not pool:
        raise TrainingError("the supervision holds no sentences")
    log(f"{len(pool):,} pool sentences; word pieces …")
    texts = list(pool)
    pool_ids = piece_ids(tokens, texts, 512)
    vocabulary = build_vocabulary(encoder_graph, pool_ids)
    pool_ids = [ids[:SENTENCE_PIECES] for ids in pool_ids]
    vectors = _mean_vectors(vocabulary, pool_ids)
    position = {text: i for i, text in enumerate(texts)}
    queries = {"train": [], "dev": []}
    for query in supervision.queries:
        positives = sorted({position[supervision.passages[p].text] for p in query.positives
                            if supervision.passages[p].kind in SHORT and supervision.passages[p].text in position})
        if query.split == "train" and len(positives) > config.positives_per_query:
            positives = sorted(random.Random(f"{config.seed}:{query.source}:{query.id}").sample(
                positives, config.positives_per_query))
        if positives and query.split in queries:
            own = {supervision.passages[p].document for p in query.positives}
            queries[query.split].append((query, positives, own))
    if config.max_queries is not None:
        queries = {split: found[: config.max_queries] for split, found in queries.items()}
    if not queries["train"]:
        raise TrainingError("no training query has a relevant sentence or snippet")
    log(f"{len(queries['train'])} training and {len(queries['dev'])} dev queries; negatives …")
    rng = np.random.default_rng(config.seed)
    prepared = {split: _candidates(found, vocabulary, tokens, vectors, documents, texts, config, rng)
                for split, found in queries.items()}
    hardness = _hardness([c for split in prepared.values() for c in split])
    split_queries = {split: [_split(c, hardness) for c in found] for split, found in prepared.items()}
    train, dev = split_queries["train"], split_queries["dev"]
    report = MetricTrainingReport(
        queries={s: len(q) for s, q in split_queries.items()}, positives=sum(len(q.positives) for q in train),
        candidates={"easy": sum(len(q.easy) for q in train), "hard": sum(len(q.hard) for q in train)},
        dev_triplets=0, pool_sentences=len(pool))
    # One fixed negative per dev positive (hard where the query has any), the same every epoch.
    dev_triplets = [(q, p, (q.hard or q.easy)[k % len(q.hard or q.easy)]) for q in dev if q.hard or q.easy
                    for k, p in enumerate(q.positives)]
    report.dev_triplets = len(dev_triplets)
    drawn = _epoch_triplets(train, config, rng)
    per_epoch = sum(len(q.positives) for q in train if q.easy or q.hard) * config.negatives_per_positive
    if not per_epoch and config.epochs:
        raise TrainingError("no training query has a negative candidate")

    def tensors(triplets: Sequence[tuple[_Query, int, int]]) -> tuple[Any, Any]:
        """The (positive, negative) similarity tensors of a batch of triplets."""
        return tuple(torch.from_numpy(np.concatenate([similarity_tensors(vocabulary, q.ids, [pool_ids[t[side]]])
                                                      for q, *t in triplets])) for side in (0, 1))

    def batches(triplets: Sequence[tuple[_Query, int, int]]) -> Any:
        for start in range(0, len(triplets), config.batch_size):
            yield tensors(triplets[start : start + config.batch_size])

    def dev_figures(model: Any) -> dict[str, float]:
        losses, right = [], 0
        with torch.no_grad():
            for positive, negative in batches(dev_triplets):
                d_pos, d_neg = model(positive), model(negative)
                losses.append(float(torch.relu(d_pos - d_neg + config.margin).sum()))
                right += int((d_pos < d_neg).sum())
        n = max(1, len(dev_triplets))
        return {"dev loss": round(sum(losses) / n, 4), "dev triplets ordered": round(right / n, 4)}

    model = network(config.filters, config.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    untrained = dev_figures(model.eval())
    report.history.append({"epoch": 0, "phase": "-", "steps": 0, TRAIN_LOSS: None, **untrained,
                           "minutes": round((time.perf_counter() - started) / 60, 1)})
    log(f"epoch 0 (untrained): {figures(untrained)}")

    def chunk(epoch: int, position: int) -> Sequence[tuple[_Query, int, int]]:
        return drawn[epoch][position * config.batch_size : (position + 1) * config.batch_size]

    def loss_at(epoch: int, position: int) -> Any:
        return triplet_loss(model, *tensors(chunk(epoch, position)), config.margin)

    steps_per_epoch = max(1, math.ceil(per_epoch / config.batch_size))
    out.mkdir(parents=True, exist_ok=True)
    vocabulary.save(out)  # once: the epochs change the weights only
    result = run_epochs(
        model, optimizer, None, config, out, save_model=lambda folder: save(model, None, folder, config),
        load_model=lambda folder: model.load_state_dict(_graph_weights(folder / GRAPH, model)),
        steps_per_epoch=steps_per_epoch, total_steps=steps_per_epoch * config.epochs, loss_at=loss_at,
        validate=lambda: dev_figures(model.eval()), baseline=("untrained dev loss", untrained["dev loss"]),
        started=started, progress=None, log=log, clip_norm=None,
        weight_at=lambda epoch, position: len(chunk(epoch, position)),
        facts=lambda epoch: {"phase": config.phase(epoch)})
    report.history += result.history
    report.seconds = round(time.perf_counter() - started, 1)
    if not result.history:  # no epoch to train: the untrained network, as asked for
        save(model, None, out, config)
    _card(out, report, config)
    remove_checkpoint(out)
    return report


def _epoch_triplets(train: Sequence[_Query], config: MetricTraining,
                    rng: np.random.Generator) -> list[list[tuple[_Query, int, int]]]:
    """Each epoch's (query, positive, negative) triplets in the order it trains them: the negatives of its phase,
    drawn from ``rng`` epoch after epoch, so that a resumed run trains on the same ones as an unbroken run."""
    out = []
    for epoch in range(1, config.epochs + 1):
        hard = config.phase(epoch) == "hard"
        triplets = [(q, p, int(rng.choice(q.hard if hard and q.hard else q.easy or q.hard)))
                    for q in train for p in q.positives for _ in range(config.negatives_per_positive)
                    if q.easy or q.hard]
        random.Random(f"{config.seed}:{epoch}").shuffle(triplets)
        out.append(triplets)
    return out


def save(model: Any, vocabulary: Vocabulary | None, out: Path, config: MetricTraining) -> None:
    """``model.onnx`` (fp32, any batch), ``vocabulary.npz`` and ``settings.json`` in ``out``; no vocabulary where
    it is None (a checkpoint, or an epoch's weights where the vocabulary is written already)."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    example = torch.zeros(2, len(CHANNELS), QUERY_PIECES, SENTENCE_PIECES)
    torch.onnx.export(model.eval(), (example,), str(out / GRAPH), input_names=["tensors"], output_names=["distances"],
                      dynamic_axes={"tensors": {0: "pairs"}, "distances": {0: "pairs"}}, opset_version=17,
                      dynamo=False)
    if vocabulary is not None:
        vocabulary.save(out)
    (out / SETTINGS).write_text(json.dumps({"query_pieces": QUERY_PIECES, "sentence_pieces": SENTENCE_PIECES,
                                            "dimension": DIMENSION, "channels": list(CHANNELS),
                                            "filters": config.filters, "hidden": config.hidden}, indent=2) + "\n",
                                encoding="utf-8")


def _sentence_pool(supervision: Supervision) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Every distinct sentence of the pool (short passages whole, longer texts split as the indexer splits), each
    with its position, and each document's sentence positions."""
    pool: dict[str, int] = {}
    documents: dict[str, list[int]] = {}
    for passage in supervision.passages.values():
        pieces = [passage.text] if passage.kind in SHORT else \
            [passage.text[b:e] for b, e in split_sentences(passage.text)]
        for text in pieces:
            text = text.strip()
            if text:
                i = pool.setdefault(text, len(pool))
                documents.setdefault(passage.document, []).append(i)
    return pool, documents


def _mean_vectors(vocabulary: Vocabulary, ids: Sequence[np.ndarray]) -> np.ndarray:
    """IDF-weighted mean embeddings, normalised: the sentence vectors whose cosine says how hard a negative is."""
    import numpy as np

    out = np.zeros((len(ids), vocabulary.embeddings.shape[1]), dtype=np.float32)
    for i, piece in enumerate(ids):
        if len(piece):
            out[i] = vocabulary.weight[piece] @ vocabulary.embeddings[piece]
    return out / np.linalg.norm(out, axis=1, keepdims=True).clip(1e-9)


@dataclass
class _Candidates:
    text: str
    ids: np.ndarray
    positives: list[int]
    negatives: list[int]
    positive_cosines: np.ndarray
    negative_cosines: np.ndarray


def _candidates(found: Sequence[tuple[Any, list[int], set[str]]], vocabulary: Vocabulary, tokens: Any,
                vectors: np.ndarray, documents: Mapping[str, list[int]], texts: Sequence[str], config: MetricTraining,
                rng: np.random.Generator) -> list[_Candidates]:
    import numpy as np

    query_ids = piece_ids(tokens, [q.text for q, _, _ in found], QUERY_PIECES)
    query_vectors = _mean_vectors(vocabulary, query_ids)
    cosines = query_vectors @ vectors.T
    out = []
    for (query, positives, own_documents), ids, row in zip(found, query_ids, cosines, strict=True):
        shut = {i for d in query.judged for i in documents.get(d, ())}
        same = {normal_text(texts[p]) for p in positives}
        # The other sentences of its relevant documents: what the snippet stage must tell apart.
        own = {i for d in own_documents for i in documents.get(d, ())}
        nearest = [int(i) for i in np.argsort(-row)[: config.nearest * 4] if int(i) not in shut][: config.nearest]
        drawn = [int(i) for i in rng.choice(len(texts), config.random_negatives, replace=False) if int(i) not in shut]
        negatives = [i for i in dict.fromkeys([*sorted(own), *nearest, *drawn])
                     if i not in positives and normal_text(texts[i]) not in same]
        out.append(_Candidates(query.text, ids, positives, negatives, row[positives], row[negatives]))
    return out


def _hardness(candidates: Sequence[_Candidates]) -> Callable[[np.ndarray], np.ndarray]:
    """Whether each cosine is hard: the positives' density over it exceeds the negatives' (§2.2.4, Figure 6).

    The densities are histograms over [-1, 1] (50 bins): a kernel estimate over every candidate would cost
    positives x candidates evaluations.
    """
    import numpy as np

    bins = np.linspace(-1.0, 1.0, 51)
    positive, _ = np.histogram(np.concatenate([c.positive_cosines for c in candidates]), bins, density=True)
    negative, _ = np.histogram(np.concatenate([c.negative_cosines for c in candidates]), bins, density=True)
    return lambda x: (positive > negative)[np.clip(np.digitize(x, bins) - 1, 0, len(positive) - 1)]


def _split(c: _Candidates, hard: Callable[[np.ndarray], np.ndarray]) -> _Query:
    flags = hard(c.negative_cosines)
    return _Query(c.text, c.ids, tuple(c.positives), tuple(n for n, h in zip(c.negatives, flags, strict=True) if not h),
                  tuple(n for n, h in zip(c.negatives, flags, strict=True) if h))


def _card(out: Path, report: MetricTrainingReport, config: MetricTraining) -> None:
    write_model_card(
        out, title="biorank sentence scorer (deep metric learning, DMLPR)",
        summary="A CNN over (question x sentence) word-piece similarity tensors, trained with the triplet margin "
                "loss on easy then hard negatives (Rosso-Mateus et al.): the `metric` snippet perspective.",
        data={"queries": report.queries, "positives (train)": report.positives,
              "negative candidates (train)": report.candidates, "dev triplets": report.dev_triplets,
              "pool sentences": report.pool_sentences},
        recipe=asdict(config), history=report.history, result={"seconds": report.seconds})
