"""What biorank's trainers share: the epoch loop with dev validation, checkpoints that resume, the schedule.

A trainer supplies the loss of one step (``loss_at(epoch, position)``), how to validate on the development
split and how to save the model; :func:`run_epochs` does the rest the same way for every model. A
checkpoint every ``checkpoint_every`` steps (weights, optimiser, schedule, position and random state) lets an
interrupted run continue where it was, and it is refused when the recipe changed since. What differs between
trainers is an argument of :func:`run_epochs` rather than another loop: the transformers' gradient clipping and
linear schedule, the sentence scorer's plain Adam, its running training loss and its easy/hard phases.
"""

from __future__ import annotations

import functools
import json
import math
import random
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from biorank.config import SEED
from biorank.errors import BiorankError
from biorank.evaluation.splits import split_judged
from biorank.models.placement import DeviceError, Placement
from biorank.types import Qrels, StageProgress

CHECKPOINT = "checkpoint"
TRAIN_LOSS = "train loss"
RUNNING = "running train loss"
"""The checkpoint's record of the epoch so far: summed ``loss x weight`` and summed weight."""
METRIC = "nDCG@10"
UNSEEN_METRIC = "nDCG@10 dev-unseen"
"""The figure on the dev queries none of whose documents a training query has (``--split dev-unseen``): where a
validation gives it, it chooses the best epoch, as it measures what generalises rather than what was memorised."""


def chosen(entry: Mapping[str, float]) -> float:
    """The figure that chooses among epochs: the unseen dev's where measured, else the dev split's."""
    return entry.get(UNSEEN_METRIC, entry[METRIC])



class TrainingError(BiorankError):
    """Training cannot start: no judged queries, no texts, or a checkpoint of another recipe."""


@dataclass(frozen=True)
class Recipe:
    """What every trainer's recipe has: the optimiser's schedule, checkpoints, the seed and the precision."""

    epochs: int = 1
    learning_rate: float = 5e-5
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    checkpoint_every: int = 100
    max_steps: int | None = None
    """Stop after this many steps in all (a smoke test); None trains every epoch to the end."""
    seed: int = SEED
    precision: str = "auto"
    keep: str = "best"
    """Which epoch ``out`` holds: ``best`` by the dev figure, or ``last``, where the dev split is too small to
    choose by (the shipped reranker's few validation questions barely told its epochs apart while SciFact dev
    rose: its card, biorank/models/reranker/README.md)."""


KEEP = ("best", "last")


@dataclass
class TrainingReport:
    """What a training run gave: time, steps, the split, the dev figure before training and after each epoch."""

    out: Path
    seconds: float = 0.0
    steps: int = 0
    train_queries: int = 0
    dev_queries: int = 0
    baseline: float = float("nan")
    """The dev figure before training (the first stage's, or the base model's)."""
    history: list[dict] = field(default_factory=list)
    best_epoch: int = 0

    @property
    def best(self) -> float:
        """The dev figure of the epoch kept in ``out``."""
        if self.best_epoch:
            return self.history[self.best_epoch - 1][METRIC]
        return max((h[METRIC] for h in self.history), default=float("nan"))

    @property
    def best_unseen(self) -> float:
        """The unseen dev's figure of the epoch kept in ``out`` (NaN where it was not measured)."""
        if not self.history:
            return float("nan")
        entry = self.history[self.best_epoch - 1] if self.best_epoch else max(self.history, key=chosen)
        return entry.get(UNSEEN_METRIC, float("nan"))

    def split_facts(self) -> dict[str, int | str]:
        """The model card's lines on which queries trained and which validated."""
        return {"training queries": self.train_queries,
                "development queries": f"{self.dev_queries} (the dev split, by a hash of each id; never trained on)"}


class Ranked:
    """The one attribute :func:`biorank.evaluation.measures.run_from_hits` reads of a hit."""

    __slots__ = ("id",)

    def __init__(self, doc_id: str) -> None:
        self.id = doc_id


def training_split(queries: Mapping[str, str], qrels: Qrels,
                   log: Callable[[str], None]) -> tuple[list[str], list[str]]:
    """(training, development) ids of the queries with a relevant document and a text: outside and inside the
    dev split that evaluation and tuning use too."""
    rest, dev = ([q for q in split_judged(qrels, split) if q in queries] for split in ("rest", "dev"))
    if len(rest) + len(dev) < 5:
        raise TrainingError(f"only {len(rest) + len(dev)} queries have a relevant document; training needs more")
    log(f"{len(rest)} training queries, {len(dev)} development queries (by a hash of each id)")
    return rest, dev


def optimiser(model: Any, config: Any, steps_per_epoch: int) -> tuple[int, Any, Any]:
    """The total steps of a recipe (``epochs``, ``max_steps``), its AdamW optimiser and linear schedule."""
    import torch

    total_steps = steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    schedule = linear_schedule(optimizer, warmup=int(config.warmup_fraction * total_steps), total=total_steps)
    return total_steps, optimizer, schedule


def training_placement(precision: str, device: str) -> Placement:
    """Where and how a model trains: in torch on ``device`` as every other command resolves ``--device``
    (``auto``: a GPU where torch sees one, else the CPU), under bf16 autocast where asked for, or where "auto"
    meets a device that computes bf16 natively (:meth:`~biorank.models.placement.Placement.choose`); its refusals
    raised as this stage's error."""
    try:
        return Placement.choose(precision, device, in_torch=True)
    except DeviceError as e:
        raise TrainingError(str(e)) from None


def linear_schedule(optimizer: Any, *, warmup: int, total: int) -> Any:
    """Linear warm-up to the full learning rate over ``warmup`` steps, then linear decay to 0 at ``total``."""
    import torch

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@dataclass
class Checkpoint:
    """A training run's checkpoint folder; ``save_model``/``load_model`` write and read the weights in it."""

    folder: Path
    config: Any
    """The recipe (a dataclass); a checkpoint of another recipe is refused."""
    save_model: Callable[[Path], None]
    load_model: Callable[[Path], None]

    def save(self, optimizer: Any, schedule: Any, step: int, history: list[dict],
             extra: Mapping[str, Any] | None = None) -> None:
        """Weights, optimiser, schedule (None: a constant rate), torch's random state, the step, the history and
        ``extra`` (what else a resumed run needs: the epoch's running training loss)."""
        import torch

        partial = self.folder.with_name(self.folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        self.save_model(partial)
        torch.save({"optimizer": optimizer.state_dict(),
                    "schedule": None if schedule is None else schedule.state_dict(),
                    "rng": torch.get_rng_state()}, partial / "trainer.pt")
        (partial / "state.json").write_text(json.dumps({"step": step, "history": history, **(extra or {}),
                                                        "config": asdict(self.config)}, indent=2))
        # Swapped in whole, so a kill while saving leaves the previous checkpoint intact.
        shutil.rmtree(self.folder, ignore_errors=True)
        partial.rename(self.folder)

    def resume(self, optimizer: Any, schedule: Any, log: Callable[[str], None]) -> dict:
        """The step and history to continue from, with weights, optimiser and schedule restored; step 0 if none."""
        import torch

        state_file = self.folder / "state.json"
        if not state_file.is_file():
            return {"step": 0, "history": []}
        state = json.loads(state_file.read_text())
        if state["config"] != json.loads(json.dumps(asdict(self.config))):
            raise TrainingError(
                f"{self.folder} is a checkpoint of another recipe; remove it or train into another --out")
        self.load_model(self.folder)
        saved = torch.load(self.folder / "trainer.pt", weights_only=False)
        optimizer.load_state_dict(saved["optimizer"])
        if schedule is not None:
            schedule.load_state_dict(saved["schedule"])
        torch.set_rng_state(saved["rng"])
        log(f"resuming from the checkpoint at step {state['step']}")
        return state


def remove_checkpoint(out: Path) -> None:
    """Once the model and its card are written, the checkpoint of the run that made them is not needed."""
    shutil.rmtree(out / CHECKPOINT, ignore_errors=True)


@functools.lru_cache(maxsize=4)
def epoch_order(size: int, seed: int, epoch: int) -> tuple[int, ...]:
    """The order an epoch visits ``size`` training items in: shuffled, the same again for the same epoch."""
    order = list(range(size))
    random.Random(f"{seed}:epoch{epoch}").shuffle(order)
    return tuple(order)


@dataclass
class EpochsResult:
    steps: int
    history: list[dict]
    best_epoch: int


def run_epochs(model: Any, optimizer: Any, schedule: Any, config: Any, out: Path, *,
               save_model: Callable[[Path], None], load_model: Callable[[Path], None], steps_per_epoch: int,
               total_steps: int, loss_at: Callable[[int, int], Any],
               validate: Callable[[], float | Mapping[str, float]],
               baseline: tuple[str, float], started: float, progress: StageProgress | None,
               log: Callable[[str], None], clip_norm: float | None = 1.0,
               weight_at: Callable[[int, int], float] | None = None,
               facts: Callable[[int], Mapping[str, str]] | None = None) -> EpochsResult:
    """Train from the checkpoint's step (or 0) to ``total_steps``, validating after every complete epoch.

    ``config`` is the recipe (``epochs``, ``checkpoint_every``, ``keep``); ``loss_at(epoch, position)`` is the
    loss of step ``position`` of ``epoch`` (both from 0). ``save_model(folder)`` writes the weights: into ``out``
    whenever an epoch's dev score beats every earlier one's (every epoch with ``config.keep == "last"``), and into
    the checkpoint (``out/checkpoint``), which ``load_model(folder)`` reads back on resuming. ``baseline`` (name,
    score) is what the log compares with. ``validate`` gives the dev figure, or figures by name (:data:`METRIC`
    and :data:`UNSEEN_METRIC`, which then chooses the best epoch: :func:`chosen`; other names only with
    ``keep == "last"``, as nothing says which way they are better).

    The rest is what one trainer does differently, each default the transformers' way. ``clip_norm``: the
    gradient norm clipped to before each step, None for none. ``schedule``: None keeps the optimiser's rate.
    ``weight_at(epoch, position)``: how many items step ``position``'s mean loss is over; given, each epoch's
    history has its ``train loss``, their weighted mean (kept in the checkpoint, so a resumed epoch's is whole).
    ``facts(epoch)`` (from 1): what an epoch is, put after its number in the history and the log.
    """
    import torch

    if config.keep not in KEEP:
        raise TrainingError(f"keep must be one of {', '.join(KEEP)}, not {config.keep!r}")
    keep_last = config.keep == "last"
    checkpoint = Checkpoint(out / CHECKPOINT, config, save_model, load_model)
    epochs, checkpoint_every = config.epochs, config.checkpoint_every
    state = checkpoint.resume(optimizer, schedule, log)
    step, history = state["step"], state["history"]
    running = state.get(RUNNING, [0.0, 0.0])  # the epoch's summed loss x weight and weight (with weight_at)
    best = -1.0 if keep_last else max((chosen(h) for h in history), default=-1.0)
    best_epoch = 0
    # From the first epoch not validated: a checkpoint can fall on an epoch's last step, before its validation.
    for epoch in range(len(history), min(epochs, math.ceil(total_steps / steps_per_epoch))):
        model.train()
        for position in range(step - epoch * steps_per_epoch, steps_per_epoch):
            if step >= total_steps:
                break
            loss = loss_at(epoch, position)
            loss.backward()
            if clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            optimizer.step()
            if schedule is not None:
                schedule.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if weight_at is not None:
                weight = weight_at(epoch, position)
                running = [running[0] + loss.item() * weight, running[1] + weight]
            if progress is not None:
                progress("training", step, total_steps)
            if step % checkpoint_every == 0:
                checkpoint.save(optimizer, schedule, step, history, _extra(weight_at, running))
        validated = validate()
        scores = dict(validated) if isinstance(validated, Mapping) else {METRIC: validated}
        described = dict(facts(epoch + 1)) if facts is not None else {}
        trained = {TRAIN_LOSS: round(running[0] / max(1, running[1]), 4)} if weight_at is not None else {}
        running = [0.0, 0.0]
        history.append({"epoch": epoch + 1, **described, "steps": step, **trained, **scores,
                        "minutes": round((time.perf_counter() - started) / 60, 1)})
        log(f"epoch {epoch + 1}" + (f" ({', '.join(described.values())})" if described else "") + ": "
            + figures({**trained, **scores}) + f" ({baseline[0]} {baseline[1]:.4f})")
        if keep_last or chosen(scores) > best:
            best_epoch = epoch + 1
            best = best if keep_last else chosen(scores)
            save_model(out)
        checkpoint.save(optimizer, schedule, step, history, _extra(weight_at, running))
    if not best_epoch:  # every epoch was done before a resume
        best_epoch = len(history) if keep_last else max(
            range(len(history)), key=lambda i: chosen(history[i])) + 1
    return EpochsResult(step, history, best_epoch)


def figures(scores: Mapping[str, float]) -> str:
    """A log's words for figures by name: nDCG@10 as "dev" and "unseen dev", any other by its name."""
    names = {METRIC: f"dev {METRIC}", UNSEEN_METRIC: f"unseen dev {METRIC}"}
    return ", ".join(f"{names.get(name, name)} {value:.4f}" for name, value in scores.items())


def _extra(weight_at: Callable[[int, int], float] | None, running: list[float]) -> dict[str, list[float]]:
    return {} if weight_at is None else {RUNNING: running}
