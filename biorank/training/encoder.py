"""Training biorank's dense encoder offline: in-batch negatives over supervised and synthetic pairs (Ma et al.).

The encoder is Siamese: one sentence-transformers model encodes queries and passages alike. Each batch holds
``batch_size`` questions, each with its passage; every other passage of the batch is a negative for it, and
the loss is softmax cross-entropy over the question's scaled cosine with all of them (sentence-transformers'
multiple-negatives ranking loss, Ma et al.'s in-batch softmax). The pairs are

- supervised: a training query and a judged-relevant document, as the block of it that BM25 ranks highest
  for the query (the passage the index scores; a document that fits the window is one block, title +
  abstract);
- synthetic (``synthetic_ratio`` of every batch, Ma et al.'s 20%): made from the index's own documents by
  :mod:`biorank.training.synthetic` (inverse cloze task, title → abstract), no model to download;
- optionally ``hard_negatives`` more passages per supervised pair, drawn from the query's BM25 top
  ``negatives_from_top`` among documents never judged for it (:mod:`biorank.training.negatives`).

A passage of the batch that belongs to the question's own document or to a document judged relevant for it
is no negative, and is left out of the question's softmax.

Validation runs before training and after every epoch on the development split (never trained on): dense
retrieval over every block of the index, a document scored by its best block as ``dense`` search does,
nDCG@10. The best epoch is what lands in the output folder, a sentence-transformers folder that
:class:`biorank.models.encoder.Encoder` loads, with a model card.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.indexer.blocks import block_budget
from biorank.models.encoder import DEFAULT_MODEL
from biorank.models.extras import quiet_loading, require_torch
from biorank.store.indices import entries_in_order
from biorank.store.msearch import msearch
from biorank.training.card import write_model_card
from biorank.training.loop import (
    METRIC,
    Ranked,
    Recipe,
    TrainingError,
    TrainingReport,
    epoch_order,
    optimiser,
    remove_checkpoint,
    run_epochs,
    training_placement,
    training_split,
)
from biorank.training.negatives import bm25_candidates, sample_negatives
from biorank.training.supervision import Supervision, TrainingPair, trained_on, training_pairs
from biorank.training.synthetic import KINDS, SyntheticPair, generators, make_pairs, sample_documents
from biorank.types import Qrels, StageProgress, stage_counter

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

    from biorank.models.encoder import Encoder
    from biorank.models.prefixes import Prefixes
    from biorank.retrieval.searcher import Searcher

VALIDATION_DEPTH = 100
"""Documents per dev query in the validation run; nDCG@10 needs only the top 10."""


@dataclass(frozen=True)
class EncoderTraining(Recipe):
    """How the dense encoder is trained; the defaults are the recipe measured in docs/measurements/training.md."""

    epochs: int = 3
    learning_rate: float = 2e-5
    checkpoint_every: int = 50
    base_model: str = DEFAULT_MODEL
    synthetic_ratio: float = 0.2
    """Share of every batch that is synthetic pairs; 0 trains on the supervised pairs alone."""
    synthetic_kinds: tuple[str, ...] = KINDS
    hard_negatives: int = 0
    """BM25 negatives per supervised pair, on top of the in-batch ones."""
    negatives_from_top: int = 100
    positives_per_query: int = 2
    """With gathered supervision: relevant passages trained per query (of its best grade)."""
    batch_size: int = 32
    scale: float = 20.0
    """Cosines are multiplied by this before the softmax (sentence-transformers' default for this loss)."""
    max_seq_length: int | None = None
    """Word pieces read per text while training and validating (a quick try); None: the base model's window.
    The saved model keeps the base model's window, which the index's blocks are cut for."""

    def __post_init__(self) -> None:
        if not 0 <= self.synthetic_ratio < 1:
            raise TrainingError(f"the synthetic ratio must be at least 0 and below 1, not {self.synthetic_ratio}")
        if self.batch_size < 2:
            raise TrainingError("in-batch negatives need a batch size of at least 2")
        if self.batch_size - self.synthetic_per_batch < 1:
            raise TrainingError(f"a batch of {self.batch_size} with synthetic ratio {self.synthetic_ratio} has no "
                                "room for a supervised pair; lower the ratio or raise the batch size")
        if self.hard_negatives < 0 or self.epochs < 1 or self.checkpoint_every < 1:
            raise TrainingError("hard negatives must be at least 0, epochs and checkpoint interval at least 1")
        if self.precision not in ("auto", "fp32", "bf16"):
            raise TrainingError(f"training runs in auto, fp32 or bf16, not {self.precision!r}")
        generators(self.synthetic_kinds)

    @property
    def synthetic_per_batch(self) -> int:
        return round(self.synthetic_ratio * self.batch_size)


@dataclass
class EncoderTrainingReport(TrainingReport):
    pairs: int = 0
    """Supervised (query, relevant passage) pairs of the training queries."""
    synthetic: dict[str, int] = field(default_factory=dict)
    """Synthetic pairs made, by kind."""
    sources: dict[str, int] = field(default_factory=dict)
    """With gathered supervision: its pairs trained on, by source."""


@dataclass(frozen=True, slots=True)
class _Example:
    question: str
    passage: str
    doc: str
    relevant: frozenset[str]
    """Documents that answer the question: never its negatives."""
    negatives: tuple[tuple[str, str], ...] = ()
    """(document, passage) hard negatives."""


def train_encoder(searcher: Searcher, queries: Mapping[str, str], qrels: Qrels, out: Path,
                  config: EncoderTraining = EncoderTraining(), *, supervision: Supervision | None = None,
                  progress: StageProgress | None = None, log: Callable[[str], None] = print) -> EncoderTrainingReport:
    """Train on the queries outside the dev split and synthetic pairs, validate on the dev split, keep the
    best epoch in ``out``. ``progress(stage, done, total)`` is told about each stage's work.

    With ``supervision`` (:mod:`biorank.training.supervision`) the supervised pairs are its training pairs
    instead, hard negatives drawn from its pooled BM25 negatives; ``queries`` and ``qrels`` then only validate
    (their dev split, whose texts are never trained on)."""
    require_torch("training an encoder")
    import torch

    started = time.perf_counter()
    client, index = searcher.client, searcher.index
    rest, dev = training_split(queries, qrels, log)

    sources: dict[str, int] = {}
    trained = len(rest)
    if supervision is not None:
        pairs = training_pairs(supervision, positives_per_query=config.positives_per_query,
                               negatives=config.hard_negatives, seed=config.seed,
                               leave_out=[queries[q] for q in dev])
        examples = [_from_pair(pair) for pair in pairs]
        sources, trained = trained_on(pairs)
        log(f"training on the gathered supervision ({', '.join(f'{s} {n}' for s, n in sources.items())} pairs); "
            f"the given queries' dev split validates, and their other {len(rest)} are not trained on")
        if not examples:
            raise TrainingError("the supervision has no training pairs")
    else:
        pools: dict[str, list[str]] = {}
        if config.hard_negatives:
            pools = bm25_candidates(searcher, {q: queries[q] for q in rest}, config.negatives_from_top,
                                    progress=stage_counter(progress, "BM25 negatives", len(rest)))
        groups = sample_negatives(pools, qrels, rest, per_positive=config.hard_negatives, seed=config.seed)
        examples = _supervised(client, index, groups, queries, qrels)
        if len(examples) < len(groups):
            log(f"{len(groups) - len(examples)} judged documents are not in {index}; their pairs are left out")
        if not examples:
            raise TrainingError("no training pairs: are the qrels' documents in this index?")

    torch.manual_seed(config.seed)
    encoder = _load_base(config)
    model = encoder.model
    window = model.max_seq_length
    if config.max_seq_length is not None:
        model.max_seq_length = config.max_seq_length
    bf16 = encoder.precision == "bf16"
    supervised_per_batch = config.batch_size - config.synthetic_per_batch
    steps_per_epoch = math.ceil(len(examples) / supervised_per_batch)
    total_steps, optimizer, schedule = optimiser(model, config, steps_per_epoch)

    synthetic = _synthetic(client, index, encoder, config, total_steps * config.synthetic_per_batch)
    kinds = {kind: sum(p.kind == kind for p in synthetic) for kind in config.synthetic_kinds} if synthetic else {}
    log(f"{len(examples)} supervised pairs" + (f" with {config.hard_negatives} BM25 negatives each" if
        config.hard_negatives else "") + f"; {len(synthetic)} synthetic pairs ({kinds or 'none'}); "
        f"{steps_per_epoch} steps of {supervised_per_batch} supervised + {config.synthetic_per_batch} synthetic "
        f"per epoch")

    blocks = _blocks(client, index)
    dev_queries, dev_qrels = {q: queries[q] for q in dev}, {q: qrels[q] for q in dev}

    def validate() -> float:
        return _validate(encoder, dev_queries, dev_qrels, blocks, progress)

    baseline = validate()
    log(f"dev {METRIC} of the base encoder, dense over {len(blocks[0])} blocks: {baseline:.4f}")

    out.mkdir(parents=True, exist_ok=True)

    def loss_at(epoch: int, position: int) -> Any:
        order = epoch_order(len(examples), config.seed, epoch)
        batch = [examples[i] for i in order[position * supervised_per_batch : (position + 1) * supervised_per_batch]]
        if synthetic:
            # Each step has its own slice of the synthetic pairs, so a resumed run sees the same batches.
            first = (epoch * steps_per_epoch + position) * config.synthetic_per_batch
            batch += [_from_synthetic(synthetic[(first + i) % len(synthetic)])
                      for i in range(config.synthetic_per_batch)]
        return _batch_loss(model, encoder.device, batch, config.scale, bf16, encoder.prefixes)

    result = run_epochs(
        model, optimizer, schedule, config, out, save_model=lambda folder: _save(model, folder, window),
        load_model=lambda folder: _load_weights(model, folder), steps_per_epoch=steps_per_epoch,
        total_steps=total_steps, loss_at=loss_at, validate=validate, baseline=("base encoder", baseline),
        started=started, progress=progress, log=log)
    report = EncoderTrainingReport(out, time.perf_counter() - started, result.steps, trained, len(dev), baseline,
                                   result.history, result.best_epoch, pairs=len(examples), synthetic=kinds,
                                   sources=sources)
    _write_card(out, report, config, index, len(blocks[0]))
    remove_checkpoint(out)
    return report


def _load_base(config: EncoderTraining) -> Encoder:
    from biorank.models.encoder import Encoder

    try:
        # Training needs the torch model: "auto" means bf16 or fp32 here, never ONNX Runtime.
        return Encoder(config.base_model, precision=training_placement(config.precision, "cpu").name)
    except OSError as error:
        raise TrainingError(f"cannot load the base model {config.base_model!r}: {error}") from None


def _supervised(client: OpenSearch, index: str, groups: Sequence, queries: Mapping[str, str],
                qrels: Qrels) -> list[_Example]:
    """One example per judged-relevant pair whose document is in the index, with its hard negatives."""
    wanted = [(g.query_id, doc) for g in groups for doc in (g.positive, *g.negatives)]
    passages = _best_blocks(client, index, {key: queries[key[0]] for key in dict.fromkeys(wanted)})
    examples = []
    for g in groups:
        if (g.query_id, g.positive) not in passages:
            continue
        relevant = frozenset(doc for doc, grade in qrels[g.query_id].items() if grade > 0)
        negatives = tuple((doc, passages[g.query_id, doc]) for doc in g.negatives if (g.query_id, doc) in passages)
        examples.append(_Example(queries[g.query_id], passages[g.query_id, g.positive], g.positive, relevant,
                                 negatives))
    return examples


def _best_blocks(client: OpenSearch, index: str, wanted: Mapping[tuple[str, str], str],
                 batch: int = 100) -> dict[tuple[str, str], str]:
    """(query id, document) -> the passage of the document's block that BM25 ranks highest for the query.

    A block that does not match at all scores 0, so a document always has an answer: its first block.
    """
    found: dict[tuple[str, str], str] = {}
    keys = list(wanted)
    for start in range(0, len(keys), batch):
        chunk = keys[start : start + batch]
        lines: list[dict] = []
        for qid, doc in chunk:
            lines += [{"index": index}, {
                "size": 1, "_source": ["passage"], "sort": [{"_score": "desc"}, {"block": "asc"}],
                "query": {"bool": {"filter": [{"term": {"id": doc}}],
                                   "should": [{"match": {"passage": wanted[qid, doc]}}]}}}]
        responses = msearch(client, lines, refused=lambda _, error: TrainingError(
            f"OpenSearch refused a passage lookup on {index!r}: {error}"))
        for key, response in zip(chunk, responses, strict=True):
            hits = response["hits"]["hits"]
            if hits:
                found[key] = hits[0]["_source"]["passage"]
    return found


def _synthetic(client: OpenSearch, index: str, encoder: Encoder, config: EncoderTraining,
               needed: int) -> list[SyntheticPair]:
    if needed == 0:
        return []
    # A fifth more documents than pairs: some documents give none (no abstract, one sentence).
    documents = sample_documents(client, index, needed + needed // 5 + 10, seed=config.seed)
    makers = generators(config.synthetic_kinds, count=encoder.count_tokens,
                        budget=block_budget(encoder.max_seq_length))
    pairs = list(make_pairs(documents, makers, seed=config.seed))
    if not pairs:
        raise TrainingError(f"no synthetic pairs could be made from {index}; train with --synthetic-ratio 0")
    return pairs


def _from_pair(pair: TrainingPair) -> _Example:
    return _Example(pair.query.text, pair.positive.text, pair.positive.document, pair.query.judged,
                    tuple((n.document, n.text) for n in pair.negatives))


def _from_synthetic(pair: SyntheticPair) -> _Example:
    return _Example(pair.question, pair.passage, pair.doc_id, frozenset({pair.doc_id}))


def _blocks(client: OpenSearch, index: str) -> tuple[list[str], list[str]]:
    """Every block's document id and passage, grouped by document: what dense search scores."""
    ids, passages = [], []
    for hits in entries_in_order(client, index, sort=("id", "block"), source=("id", "passage"), size=2000):
        for h in hits:
            ids.append(h["_source"]["id"])
            passages.append(h["_source"].get("passage", ""))
    return ids, passages


def _embed(model: Any, device: str, texts: Sequence[str], bf16: bool) -> Any:
    import torch

    # sentence-transformers 6 renamed tokenize to preprocess; 5.x has only the old name.
    preprocess = getattr(model, "preprocess", None) or model.tokenize
    features = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                for k, v in preprocess(list(texts)).items()}
    with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
        vectors = model(features)["sentence_embedding"]
    return torch.nn.functional.normalize(vectors.float(), dim=-1)


def _batch_loss(model: Any, device: str, batch: Sequence[_Example], scale: float, bf16: bool,
                prefixes: Prefixes) -> Any:
    """Softmax cross-entropy of each question over every passage of the batch, its own being the answer."""
    import torch

    passages = [e.passage for e in batch] + [p for e in batch for _, p in e.negatives]
    owners = [e.doc for e in batch] + [d for e in batch for d, _ in e.negatives]
    questions = _embed(model, device, prefixes.apply([e.question for e in batch], "query"), bf16)
    scores = scale * questions @ _embed(model, device, prefixes.apply(passages, "passage"), bf16).T
    answers = torch.arange(len(batch), device=scores.device)
    # Another passage of the question's own document, or of a document that answers it, is not wrong.
    not_negative = torch.tensor([[j != i and (owner == e.doc or owner in e.relevant) for j, owner in enumerate(owners)]
                                 for i, e in enumerate(batch)], device=scores.device)
    return torch.nn.functional.cross_entropy(scores.masked_fill(not_negative, float("-inf")), answers)


def _validate(encoder: Encoder, queries: Mapping[str, str], qrels: Qrels, blocks: tuple[list[str], list[str]],
              progress: StageProgress | None, chunk: int = 512) -> float:
    """Dense nDCG@10 on the dev queries over every block, each document scored by its best block."""
    import numpy as np

    ids, passages = blocks
    # encode() does not leave training mode by itself, and dropout would blur the vectors.
    encoder.model.eval()
    parts = []
    for start in range(0, len(passages), chunk):
        parts.append(encoder.encode(passages[start : start + chunk]))
        if progress is not None:
            progress("validation", min(start + chunk, len(passages)), len(passages))
    matrix = np.concatenate(parts) if parts else np.empty((0, encoder.dimension), dtype=np.float32)
    # Blocks come grouped by document, so a document's best block is a maximum over one run of columns.
    starts = [i for i in range(len(ids)) if i == 0 or ids[i] != ids[i - 1]]
    documents = [ids[i] for i in starts]
    scores = np.maximum.reduceat(encoder.encode(list(queries.values()), role="query") @ matrix.T, starts, axis=1)
    depth = min(VALIDATION_DEPTH, len(documents))
    ranked = {}
    for qid, row in zip(queries, scores, strict=True):
        top = np.argpartition(-row, depth - 1)[:depth]
        ranked[qid] = [Ranked(documents[i]) for i in top[np.argsort(-row[top], kind="stable")]]
    return evaluate(run_from_hits(ranked), qrels, [METRIC])[METRIC]


def _save(model: Any, folder: Path, window: int) -> None:
    reading = model.max_seq_length
    model.max_seq_length = window
    try:
        with quiet_loading():
            # biorank writes its own model card (README.md) beside the weights.
            model.save(str(folder), create_model_card=False)
    finally:
        model.max_seq_length = reading


def _load_weights(model: Any, folder: Path) -> None:
    from sentence_transformers import SentenceTransformer

    with quiet_loading():
        trained = SentenceTransformer(str(folder), device=str(model.device), local_files_only=True)
    # The weights only: the window in use stays the one the recipe asked for.
    model.load_state_dict(trained.state_dict())


def _pairs_described(report: EncoderTrainingReport, config: EncoderTraining) -> str:
    if report.sources:
        sources = ", ".join(f"{source} {n}" for source, n in report.sources.items())
        return (f"{report.pairs} from `biorank gather-supervision` ({sources}): up to {config.positives_per_query} "
                "relevant passage(s) of each training query's best grade"
                + (f", each with up to {config.hard_negatives} negative(s) of its grain from the pooled corpus's "
                   "BM25 top, never a text of a judged document" if config.hard_negatives else ""))
    return (f"{report.pairs} (query, the relevant document's block BM25 ranks highest)"
            + (f", each with {config.hard_negatives} BM25 negatives from the top {config.negatives_from_top}, "
               "never a judged document" if config.hard_negatives else ""))


def _write_card(out: Path, report: EncoderTrainingReport, config: EncoderTraining, index: str, blocks: int) -> None:
    kinds = ", ".join(f"{n} {kind}" for kind, n in report.synthetic.items())
    write_model_card(
        out,
        title="biorank dense encoder",
        summary=("A Siamese sentence-transformers encoder (one model for queries and passages, unit vectors, "
                 f"inner product), fine-tuned from `{config.base_model}` by `biorank train-encoder` with softmax "
                 "cross-entropy over in-batch negatives (Ma et al.), on supervised pairs and synthetic pairs "
                 "made from the collection. Load it with `biorank reindex-vectors --model` or `biorank index "
                 "--model`."),
        data={"index": index, **report.split_facts(),
              "supervised pairs": _pairs_described(report, config),
              "synthetic pairs": (f"{sum(report.synthetic.values())} ({kinds}), {config.synthetic_per_batch} of "
                                  f"every batch of {config.batch_size}" if report.synthetic else "none"),
              "validation": f"dense retrieval over all {blocks} blocks, a document scored by its best block"},
        recipe=asdict(config),
        history=report.history,
        result={f"dev {METRIC}, dense, base encoder": report.baseline,
                f"dev {METRIC}, dense, trained (best epoch {report.best_epoch})": report.best,
                "training steps": report.steps, "training minutes": round(report.seconds / 60, 1)},
    )
