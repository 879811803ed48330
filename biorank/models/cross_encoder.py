"""Second stage: a BERT cross-encoder (BERT_CAT) that reads ``[CLS] query [SEP] title + abstract [SEP]`` and
scores the pair; the rerank stage (:mod:`biorank.stages.rerank`) reorders the top of a first-stage ranking with
it (Ma et al. §5.1, Hofstätter et al. §2.2), the snippet stage scores sentences with it.

Scores are the model's single logit. They do not depend on which other pairs share a batch: every batch is
padded to the same shape (``batch_size`` rows of ``max_length`` word pieces), because measured on this
project's CPU a pair's bf16 logit moved by up to 3e-4 between a batch of 1 and one of 64 when shapes
followed the batch, and not at all (over random neighbours and positions) once the shape was fixed. The
fixed shape costs nothing on documents, which nearly all fill 256 word pieces, and was even faster than
padding to the longest pair (0.76 s against 0.89 s for 100 pairs, bf16).

torch and transformers are imported only when a :class:`CrossEncoder` is built.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from biorank.errors import BiorankError
from biorank.models.encoder import model_identity, native_bf16, quiet_loading, resolve_model

if TYPE_CHECKING:
    import numpy as np

Precision = Literal["auto", "fp32", "bf16", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "int8")
DEFAULT_MAX_LENGTH = 256
"""Word pieces of query and document together; the document is cut, never the query."""
DEFAULT_BATCH_SIZE = 10


class CrossEncoderError(BiorankError):
    """The cross-encoder cannot be found or loaded, or does not score pairs."""


class CrossEncoder:
    """A cross-encoder over (query, text) pairs: a local folder (our trained model) or a hub name.

    >>> CrossEncoder("models/reranker").score("vitamin D and fractures", ["...", "..."])  # doctest: +SKIP
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
            raise CrossEncoderError(
                f"the reranker {self._name!r} has {loaded.config.num_labels} outputs; a cross-encoder for "
                f"ranking has one (train one with `biorank train-reranker`)")
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self._setup(loaded.eval().to(device), tokenizer, precision, max_length, batch_size, device)

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, *, precision: Precision = "auto",
                   max_length: int = DEFAULT_MAX_LENGTH, batch_size: int = DEFAULT_BATCH_SIZE) -> CrossEncoder:
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

    def resized(self, *, max_length: int, batch_size: int) -> CrossEncoder:
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
        raise CrossEncoderError(f"cannot load the cross-encoder {name!r}: {error}") from None
    return model, tokenizer
