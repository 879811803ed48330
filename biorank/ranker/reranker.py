"""Second stage: a BERT cross-encoder (BERT_CAT) that reads ``[CLS] query [SEP] title + abstract [SEP]`` and
scores the pair, reordering the top of a first-stage ranking (Ma et al. §5.1, Hofstätter et al. §2.2).

Scores are the model's single logit. They do not depend on which other pairs share a batch: every batch is
padded to the same shape (``batch_size`` rows of ``max_length`` word pieces), because measured on this
project's CPU a pair's bf16 logit moved by up to 3e-4 between a batch of 1 and one of 64 when shapes
followed the batch, and not at all (over random neighbours and positions) once the shape was fixed. The
fixed shape costs nothing on documents, which nearly all fill 256 word pieces, and was even faster than
padding to the longest pair (0.76 s against 0.89 s for 100 pairs, bf16).

torch and transformers are imported only when a :class:`Reranker` is built.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from biorank.errors import BiorankError
from biorank.indexer.encoder import model_identity, native_bf16, quiet_loading, resolve_model
from biorank.ranker.fusion import min_max

if TYPE_CHECKING:
    import numpy as np

    from biorank.ranker.searcher import Hit

Precision = Literal["auto", "fp32", "bf16", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "int8")
DEFAULT_MAX_LENGTH = 256
"""Word pieces of query and document together; the document is cut, never the query."""
DEFAULT_DEPTH = 20
"""How many first-stage hits are reranked by default (see ``benchmarks/reranker_speed.py``)."""
DEFAULT_BATCH_SIZE = 10
DEFAULT_WEIGHT = 0.5
"""The reranker's share of the final score, the first stage's being the rest (see :func:`reorder`)."""


class RerankerError(BiorankError):
    """The reranker model cannot be found or loaded, or does not score pairs."""


def document_text(title: str, abstract: str) -> str:
    """What the reranker reads of a document: title and abstract, as Ma et al. and BEIR give them."""
    return f"{title} {abstract}".strip()


class Reranker:
    """A cross-encoder over (query, text) pairs: a local folder (our trained model) or a hub name.

    >>> Reranker("models/reranker").score("vitamin D and fractures", ["...", "..."])  # doctest: +SKIP
    """

    def __init__(self, model: str | Path, *, precision: Precision = "auto", max_length: int = DEFAULT_MAX_LENGTH,
                 batch_size: int = DEFAULT_BATCH_SIZE, device: str | None = None) -> None:
        if precision != "auto" and precision not in PRECISIONS:
            raise ValueError(f"precision must be auto or one of {', '.join(PRECISIONS)}, not {precision!r}")
        if batch_size < 1 or max_length < 8:
            raise ValueError("batch_size must be at least 1 and max_length at least 8")
        import torch

        self._name = str(model)
        loaded, tokenizer = load_cross_encoder(self._name)
        if loaded.config.num_labels != 1:
            raise RerankerError(
                f"the reranker {self._name!r} has {loaded.config.num_labels} outputs; a cross-encoder for "
                f"ranking has one (train one with `biorank train-reranker`)")
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self._setup(loaded.eval().to(device), tokenizer, precision, max_length, batch_size, device)

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, *, precision: Precision = "auto",
                   max_length: int = DEFAULT_MAX_LENGTH, batch_size: int = DEFAULT_BATCH_SIZE) -> Reranker:
        """A reranker over a model already in memory (validation during training); the caller sets eval mode."""
        reranker = cls.__new__(cls)
        reranker._name = "(in memory)"
        reranker._setup(model, tokenizer, precision, max_length, batch_size, str(next(model.parameters()).device))
        return reranker

    def _setup(self, model: Any, tokenizer: Any, precision: Precision, max_length: int, batch_size: int,
               device: str) -> None:
        import torch

        if precision == "auto":
            precision = "bf16" if native_bf16(torch, torch.device(device)) else "fp32"
        if precision == "int8":
            if torch.device(device).type != "cpu":
                raise ValueError("int8 (dynamic quantisation) runs on the CPU only")
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        self._device = device
        self._precision: Precision = precision
        self._model = model
        self._tokenizer = tokenizer
        self.max_length = max_length
        self.batch_size = batch_size

    def resized(self, *, max_length: int, batch_size: int) -> Reranker:
        """The same model in memory, scoring batches of another fixed shape (sentences are shorter than
        abstracts): nothing is loaded or quantised again."""
        other = copy.copy(self)
        other.max_length, other.batch_size = max_length, batch_size
        return other

    @property
    def source(self) -> str:
        """The model as it was named: a folder or a hub name; what loads it again."""
        return self._name

    @property
    def precision(self) -> Precision:
        return self._precision

    @property
    def model_name(self) -> str:
        """A stable identifier of the weights (folder name and content digest, or the hub name)."""
        return model_identity(self._name)

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """One score per text for ``query``, in input order; higher is more relevant."""
        return self.score_pairs([(query, text) for text in texts])

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """One score per (query, text) pair, in input order."""
        import numpy as np
        import torch

        scores = np.empty(len(pairs), dtype=np.float32)
        for start in range(0, len(pairs), self.batch_size):
            chunk = list(pairs[start : start + self.batch_size])
            # Filler rows keep every batch the same shape, so a pair's score never depends on its batch.
            filled = chunk + [("", "")] * (self.batch_size - len(chunk))
            inputs = self._tokenizer(
                [q for q, _ in filled], [t for _, t in filled], truncation="only_second",
                max_length=self.max_length, padding="max_length", return_tensors="pt",
            ).to(self._device)
            with torch.inference_mode(), torch.autocast(device_type=torch.device(self._device).type,
                                                        dtype=torch.bfloat16, enabled=self._precision == "bf16"):
                logits = self._model(**inputs).logits[:, 0]
            scores[start : start + len(chunk)] = logits[: len(chunk)].float().cpu().numpy()
        return scores

    def rerank(self, query: str, hits: Sequence[Hit], texts: Mapping[str, str], depth: int,
               weight: float = DEFAULT_WEIGHT) -> list[Hit]:
        """The same hits, the top ``depth`` reordered by the reranker; see :func:`reorder`."""
        top = list(hits[:depth])
        missing = [h.id for h in top if h.id not in texts]
        if missing:
            raise RerankerError(f"no text to rerank for documents {', '.join(missing[:5])}")
        scores = self.score(query, [texts[h.id] for h in top])
        return reorder(hits, [float(s) for s in scores], weight)


def reorder(hits: Sequence[Hit], scores: Sequence[float], weight: float = 1.0) -> list[Hit]:
    """Hits with the first ``len(scores)`` reordered by the reranker, the rest after them unchanged.

    With ``weight`` 1 the order is the reranker's alone (Ma et al., Hofstätter et al.); below 1 it is
    ``weight · r + (1 - weight) · f`` of the reranker's and the first stage's scores, each min-max normalised
    over the reranked hits, so that neither scale dominates. Equal scores keep their first-stage order, so
    ties never depend on anything else. The hits below the reranked depth keep their order and get scores
    under the lowest reranked one, so a run file written from the scores sorts exactly as the list does.
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"the reranker's weight must be between 0 and 1, not {weight}")
    depth = len(scores)
    final = list(scores)
    if weight < 1.0:
        first = min_max([h.score for h in hits[:depth]])
        final = [weight * r + (1.0 - weight) * f for r, f in zip(min_max(scores), first, strict=True)]
    return place(hits, final, rerank=list(scores))


def place(hits: Sequence[Hit], final: Sequence[float], **parts: Sequence[float]) -> list[Hit]:
    """The hits with the first ``len(final)`` ordered and scored by ``final`` (equal scores keep their order)
    and the rest after them in their order, scored below the lowest, so a run file written from the scores
    sorts exactly as the list does. ``parts`` are score parts to set on the top hits, one value per hit."""
    depth = len(final)
    top = [replace(hits[i], rank=rank, score=float(final[i]), **{name: values[i] for name, values in parts.items()})
           for rank, i in enumerate(rerank_order(final), 1)]
    floor = min((float(f) for f in final), default=0.0) - 1.0
    tail = [replace(hit, rank=rank, score=floor - offset)
            for offset, (rank, hit) in enumerate(enumerate(hits[depth:], depth + 1))]
    return top + tail


def rerank_order(scores: Sequence[float]) -> list[int]:
    """Positions by descending score; equal scores keep their first-stage order."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def rerank_many(reranker: Reranker, client: Any, index: str, queries: Mapping[str, str],
                hits: Mapping[str, Sequence[Hit]], depth: int, weight: float = DEFAULT_WEIGHT,
                progress: Callable[[int], None] | None = None) -> dict[str, list[Hit]]:
    """Every query's hits with its top ``depth`` reranked; ``progress`` gets queries done."""
    texts = fetch_texts(client, index, [h.id for ranked in hits.values() for h in ranked[:depth]])
    reranked = {}
    for qid, ranked in hits.items():
        reranked[qid] = reranker.rerank(queries[qid], ranked, texts, depth, weight)
        if progress is not None:
            progress(1)
    return reranked


def load_cross_encoder(name: str, *, fresh_head: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) of a sequence-classification checkpoint: a local folder or a hub name.

    ``fresh_head`` gives it a new one-output head, for a checkpoint that has none (a sentence encoder about
    to be trained as a cross-encoder).
    """
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    source = resolve_model(name)
    local = Path(source).is_dir()
    head = {"num_labels": 1} if fresh_head else {}
    try:
        with quiet_loading(fresh_head=fresh_head):
            tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local)
            model = AutoModelForSequenceClassification.from_pretrained(source, local_files_only=local, **head)
    except OSError as error:
        raise RerankerError(f"cannot load the cross-encoder {name!r}: {error}") from None
    return model, tokenizer


def index_reranker(meta: Mapping[str, Any], index: str) -> str:
    """The reranker an index was given by ``biorank train-reranker``, or a clear error saying how to get one."""
    model = (meta.get("reranker") or {}).get("model")
    if not model:
        raise RerankerError(
            f"index {index!r} has no reranker yet: train one with `biorank train-reranker --index {index} ...`, "
            "or name a cross-encoder with --reranker (a local folder or a hub name)")
    if not Path(model).is_dir():
        raise RerankerError(f"the reranker of index {index!r} is not on this machine: {model} does not exist; "
                            "train it again or name one with --reranker")
    return model


def fetch_texts(client: Any, index: str, ids: Sequence[str]) -> dict[str, str]:
    """Title + abstract of each document, read from its first block (which holds the whole document)."""
    unique = list(dict.fromkeys(ids))
    texts: dict[str, str] = {}
    for start in range(0, len(unique), 1000):
        response = client.mget(index=index, body={"ids": unique[start : start + 1000]},
                               _source_includes=["title", "abstract"])
        for doc in response["docs"]:
            if doc.get("found"):
                source = doc["_source"]
                texts[doc["_id"]] = document_text(source.get("title", ""), source.get("abstract", ""))
    return texts
