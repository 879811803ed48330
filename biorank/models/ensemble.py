"""Several cross-encoders scoring as one (Hofstätter et al.'s ensemble of BERT_CAT models, Table 2, line 12):
``--reranker A,B`` wherever a reranker is named, and an index's record that names several."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from biorank.errors import BiorankError
from biorank.models.cross_encoder import DEFAULT_MAX_LENGTH, CrossEncoder
from biorank.models.shipped import SHIPPED_RERANKER
from biorank.scores import min_max

if TYPE_CHECKING:
    import numpy as np

    from biorank.models.placement import Precision

ENSEMBLE_SEPARATOR = ","
"""Between the members of an ensemble wherever a reranker is named: ``--reranker A,B`` and the index's record."""
ENSEMBLE_RULES = ("min-max", "mean-logit")
"""How an ensemble combines its members' scores of one query's texts: the mean of each member's scores min-max
normalised over those texts, or the mean of the raw scores (logits)."""
DEFAULT_RULE = "min-max"
"""The rule ``--reranker A,B`` uses (see ``benchmarks/studies/ensembles.py`` and docs/measurements/reranking.md):
min-max needs no two members to share a scale, which a model trained from another base (a fresh head) does not."""


class EnsembleError(BiorankError):
    """A member of an ensemble is missing or cannot be loaded."""


def combine(members: Sequence[Sequence[float]], rule: str = DEFAULT_RULE) -> list[float]:
    """An ensemble's score of each of one query's texts from its members' scores of them.

    Args:
        members: one row per member, each one score per text, the texts in the same order.
        rule: ``min-max`` (each row scaled to [0, 1] over the query's texts, then the mean; a member that cannot
            tell the texts apart counts 1 for each, so it moves none) or ``mean-logit`` (the mean of the raw
            scores), one of :data:`ENSEMBLE_RULES`.

    Returns:
        One score per text.

    Example:
        >>> combine([[2.0, 0.0, -1.0], [0.5, 1.5, 1.0]])
        [0.5, 0.6666666666666666, 0.25]
    """
    if rule not in ENSEMBLE_RULES:
        raise ValueError(f"an ensemble's rule must be one of {', '.join(ENSEMBLE_RULES)}, not {rule!r}")
    rows = [min_max(row) for row in members] if rule == "min-max" else [[float(v) for v in row] for row in members]
    return [sum(column) / len(column) for column in zip(*rows, strict=True)]


def ensemble_members(spec: str | Path) -> list[str]:
    """The models of a reranker as named: one, or an ensemble's members (``A,B``), blanks ignored."""
    return [name.strip() for name in str(spec).split(ENSEMBLE_SEPARATOR) if name.strip()]


class Ensemble:
    """Cross-encoders scoring the same (query, text) pairs as one (Hofstätter et al.'s ensemble of BERT_CAT models):
    each member scores every batch the rerank or snippet stage gives it, and :func:`combine` makes one score of
    theirs per text, grouped by query. It reads as a :class:`~biorank.models.cross_encoder.CrossEncoder` does
    (``score``, ``score_pairs``, ``resized``, ``model_name``), so every stage and command takes it where it takes
    one; :meth:`member_scores` gives each member's own.

    >>> Ensemble.load(["biorank-reranker", "models/reranker-minilm"]).score("vitamin D", texts)  # doctest: +SKIP
    """

    def __init__(self, members: Sequence[CrossEncoder], rule: str = DEFAULT_RULE) -> None:
        if len(members) < 2:
            raise ValueError("an ensemble has at least two members")
        if rule not in ENSEMBLE_RULES:
            raise ValueError(f"an ensemble's rule must be one of {', '.join(ENSEMBLE_RULES)}, not {rule!r}")
        self.members = list(members)
        self.rule = rule

    @classmethod
    def load(cls, names: Sequence[str], *, precision: Precision = "auto", max_length: int = DEFAULT_MAX_LENGTH,
             batch_size: int | None = None, rule: str = DEFAULT_RULE, device: str = "auto") -> Ensemble:
        """The ensemble of the cross-encoders ``names``, each loaded once (a name given twice is one model).

        Args:
            names: the members, each what ``--reranker`` takes alone (the shipped ``biorank-reranker``, a folder of
                ``train-reranker``, a hub name).
            precision: the backend of every member.
            max_length: the word pieces of each pair the members read.
            batch_size: pairs per batch; None takes each model's default.
            rule: how their scores are combined (:func:`combine`).
            device: where every member runs (``auto``, ``cpu``, ``cuda``, ``cuda:N``).

        Returns:
            The ensemble, every member loaded.

        Raises:
            EnsembleError: one line naming the first member that is missing or cannot be loaded; a folder that is
                not there is found before any member is loaded.

        Example:
            >>> Ensemble.load(["biorank-reranker", "models/reranker-minilm"], max_length=256)  # doctest: +SKIP
        """
        spec = ENSEMBLE_SEPARATOR.join(names)
        for name in names:
            folder = Path(name).expanduser()
            if name == SHIPPED_RERANKER or not looks_like_a_path(name):
                continue
            if not folder.exists():
                raise EnsembleError(f"reranker {name!r} of the ensemble {spec!r} does not exist")
            if not (folder / "config.json").is_file():
                raise EnsembleError(f"reranker {name!r} of the ensemble {spec!r} is not a model folder (it has no "
                                    f"config.json; train-reranker writes one)")
        shape = {"batch_size": batch_size} if batch_size is not None else {}
        loaded: dict[str, CrossEncoder] = {}
        for name in names:
            if name in loaded:
                continue
            try:
                # A folder by its absolute path: the index's record may store the ensemble (tune-rerank).
                loaded[name] = CrossEncoder(str(Path(name).expanduser().resolve()) if looks_like_a_path(name)
                                            else name, precision=precision, max_length=max_length, device=device,
                                            **shape)
            except (BiorankError, OSError, ValueError) as e:
                first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise EnsembleError(f"reranker {name!r} of the ensemble {spec!r} cannot be loaded: {first_line}"
                                    ) from None
        return cls([loaded[name] for name in names], rule)

    @property
    def max_length(self) -> int:
        """The word pieces of each pair every member reads."""
        return self.members[0].max_length

    @property
    def batch_size(self) -> int:
        """Pairs per batch, the first member's (members loaded together share it)."""
        return self.members[0].batch_size

    @property
    def precision(self) -> str:
        """The first member's precision (members loaded together share it)."""
        return self.members[0].precision

    @property
    def source(self) -> str:
        """What loads it again, as ``--reranker`` and the index's record name it: the members' sources."""
        return ENSEMBLE_SEPARATOR.join(m.source for m in self.members)

    @property
    def model_name(self) -> str:
        """A stable identifier: the rule and each member's (a weight tuned for it holds for it alone)."""
        return f"{self.rule}({ENSEMBLE_SEPARATOR.join(m.model_name for m in self.members)})"

    def resized(self, *, max_length: int, batch_size: int) -> Ensemble:
        """The same members in memory, read at another length (sentences): nothing is loaded again."""
        resized: dict[int, CrossEncoder] = {}
        for member in self.members:
            if id(member) not in resized:
                resized[id(member)] = member.resized(max_length=max_length, batch_size=batch_size)
        return Ensemble([resized[id(m)] for m in self.members], self.rule)

    def member_scores(self, pairs: Sequence[tuple[str, str]]) -> list[np.ndarray]:
        """Each member's score of each pair (one array per member, in pair order); a member named twice scores
        once."""
        scored: dict[int, np.ndarray] = {}
        for member in self.members:
            if id(member) not in scored:
                scored[id(member)] = member.score_pairs(pairs)
        return [scored[id(m)] for m in self.members]

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """One ensemble score per text for ``query``, in input order; higher is more relevant."""
        return self.score_pairs([(query, text) for text in texts])

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """One ensemble score per (query, text) pair, in input order, combined over the pairs of each query."""
        return self.combined(pairs, self.member_scores(pairs))

    def combined(self, pairs: Sequence[tuple[str, str]], members: Sequence[Sequence[float]]) -> np.ndarray:
        """The members' scores of ``pairs`` combined by :attr:`rule`, each query's pairs apart (min-max scales
        over one query's texts)."""
        import numpy as np

        by_query: dict[str, list[int]] = {}
        for i, (query, _) in enumerate(pairs):
            by_query.setdefault(query, []).append(i)
        out = np.empty(len(pairs), dtype=np.float64)
        for at in by_query.values():
            out[at] = combine([[row[i] for i in at] for row in members], self.rule)
        return out


def looks_like_a_path(name: str) -> bool:
    """Whether a reranker's name is a folder rather than a hub name (``owner/model``): a hub name never starts
    with ``/``, ``.`` or ``~`` nor has more than one ``/``."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or Path(name).exists()
