"""Second stage: a BERT cross-encoder (BERT_CAT) that reads ``[CLS] query [SEP] title + abstract [SEP]`` and
scores the pair; the rerank stage (:mod:`biorank.stages.rerank`) reorders the top of a first-stage ranking with
it (Ma et al. §5.1, Hofstätter et al. §2.2), the snippet stage scores sentences with it.

Scores are the model's single logit. They do not depend on which other pairs share a batch: every batch is
padded to the same shape (``batch_size`` rows of ``max_length`` word pieces), because a pair's bf16 logit
moved with its batch neighbours when shapes followed the batch, and not at all once the shape was fixed; the
fixed shape costs nothing on documents, which nearly all fill the window (docs/guides/rerank-snippets.md).

In ONNX Runtime (precisions onnx and int8, :mod:`biorank.models.runtime`) pairs are instead sorted by length and
each batch padded to its own longest pair: sentences are short, and padding them to the window was most of the
snippet stage's cost. There a pair's fp32 score depends on its batch only by float rounding (1e-5 at most in the
tests), since padded positions are masked out; int8 scores move with the batch (see runtime). torch and
transformers are imported only for the torch precisions, or once to export a model that has no export yet.

On a GPU (:mod:`.placement`) the model runs in torch, bf16 where the GPU computes it natively, else fp16, in batches
of the same fixed shape with more rows: :data:`~biorank.models.placement.GPU_PAIR_TOKENS` word pieces a batch.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biorank.models.calibration import measured
from biorank.models.names import model_identity
from biorank.models.pairs import CrossEncoderError, load_cross_encoder, torch_scores
from biorank.models.placement import GPU_PAIR_TOKENS, Placement, Precision
from biorank.models.runtime import OnnxModel, cached
from biorank.models.shipped import SHIPPED_FOLDER, SHIPPED_RERANKER
from biorank.models.shipped import WEIGHTS as SHIPPED_WEIGHTS

if TYPE_CHECKING:
    import numpy as np

DEFAULT_MAX_LENGTH = 256
"""Word pieces of query and document together; the document is cut, never the query."""
LENGTHS = (8, 512)
"""The word pieces a pair may be read at: a few beyond [CLS] and two [SEP], up to BERT's 512 positions."""
DEFAULT_BATCH_SIZE = 10


class CrossEncoder:
    """A cross-encoder over (query, text) pairs: a local folder (our trained model) or a hub name.

    >>> CrossEncoder("models/reranker").score("vitamin D and fractures", ["...", "..."])  # doctest: +SKIP
    """

    def __init__(self, model: str | Path, *, precision: Precision = "auto", max_length: int = DEFAULT_MAX_LENGTH,
                 batch_size: int = DEFAULT_BATCH_SIZE, device: str | None = None) -> None:
        if batch_size < 1 or max_length < LENGTHS[0]:
            raise ValueError(f"batch_size must be at least 1 and max_length at least {LENGTHS[0]}")
        placement = Placement.choose(precision, device, "pairs", measured=measured(precision, device, "pairs"))
        self._name = str(model)
        self._onnx: OnnxModel | None = None
        if placement.graph:
            self._onnx = OnnxModel(self._export(placement.name, max_length), placement.name)  # type: ignore[arg-type]
            self._setup(None, None, placement, max_length, batch_size)
            return

        loaded, tokenizer = self._load()
        self._setup(loaded.eval().to(placement.device), tokenizer, placement, max_length, batch_size)

    def _load(self) -> tuple[Any, Any]:
        loaded, tokenizer = load_cross_encoder(self._name)
        if loaded.config.num_labels != 1:
            raise CrossEncoderError(
                f"the reranker {self._name!r} has {loaded.config.num_labels} outputs; a cross-encoder for "
                f"ranking has one (train one with `biorank train-reranker`)")
        return loaded, tokenizer

    def _export(self, precision: str, max_length: int) -> Path:
        folder = cached(self.model_name, "cross-encoder", precision)  # type: ignore[arg-type]
        if folder is not None:
            return folder
        from biorank.models.export import export_bert_checkpoint, export_cross_encoder

        if (checkpoint := bert_checkpoint(self._name)) is not None:
            return export_bert_checkpoint(*checkpoint, self.model_name, max_length)
        loaded, tokenizer = self._load()
        return export_cross_encoder(loaded.eval(), tokenizer, self.model_name, max_length)

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, *, precision: Precision = "auto",
                   max_length: int = DEFAULT_MAX_LENGTH, batch_size: int = DEFAULT_BATCH_SIZE) -> CrossEncoder:
        """A reranker over a model already in memory (validation during training); the caller sets eval mode."""
        reranker = cls.__new__(cls)
        reranker._name = "(in memory)"
        reranker._onnx = None
        placement = Placement.choose(precision, str(next(model.parameters()).device), in_torch=True)
        reranker._setup(model, tokenizer, placement, max_length, batch_size)
        return reranker

    def _setup(self, model: Any, tokenizer: Any, placement: Placement, max_length: int, batch_size: int) -> None:
        """``batch_size`` pairs a batch on the CPU; a GPU's batches hold at least :data:`GPU_PAIR_TOKENS` word
        pieces (:meth:`rows`)."""
        self._placement = placement
        self._device = placement.device
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
    def device(self) -> str:
        """Where the model runs: ``cpu`` for ONNX Runtime and OpenVINO, else the torch device."""
        return self._device

    @property
    def rows(self) -> int:
        """Pairs in each torch batch, fillers included: :attr:`batch_size` on the CPU; on a GPU as many as
        :data:`GPU_PAIR_TOKENS` word pieces hold at :attr:`max_length`, if that is more (a GPU is no slower on a
        batch of 32 pairs than on 10, and a rerank depth of 20 then goes in one batch)."""
        if self._device == "cpu":
            return self.batch_size
        return max(self.batch_size, GPU_PAIR_TOKENS // self.max_length)

    @property
    def source(self) -> str:
        """The model as it was named: a folder or a hub name; what loads it again."""
        return self._name

    @property
    def precision(self) -> Precision:
        """The name of the placement in use (``auto`` resolved): ``onnx`` or ``int8`` in ONNX Runtime,
        ``openvino``, or ``fp32``, ``bf16`` or ``fp16`` in torch."""
        return self._placement.name

    @property
    def placement(self) -> Placement:
        """Where and how the model runs: backend, precision and device."""
        return self._placement

    @cached_property
    def model_name(self) -> str:
        """A stable identifier of the weights (folder name and content digest, or the hub name)."""
        return model_identity(self._name)

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """One score per text for ``query``, in input order; higher is more relevant."""
        return self.score_pairs([(query, text) for text in texts])

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """One score per (query, text) pair, in input order."""
        import numpy as np

        if self._onnx is not None:
            if not pairs:
                return np.empty(0, dtype=np.float32)
            return self._onnx.score_pairs(pairs, batch_size=self.batch_size, max_length=self.max_length)
        return torch_scores(self._model, self._tokenizer, pairs, rows=self.rows, max_length=self.max_length,
                            device=self._device, precision=self._placement.precision)


def bert_checkpoint(name: str) -> tuple[Path, Path] | None:
    """(weights, folder) of a BERT cross-encoder whose graph can be written without torch: the shipped model, or
    a local folder with ``model.safetensors``, ``config.json`` and ``tokenizer.json`` of model type bert (what
    ``train-reranker`` writes). None for anything else, which is traced from torch instead."""
    if name == SHIPPED_RERANKER:
        return SHIPPED_FOLDER / SHIPPED_WEIGHTS, SHIPPED_FOLDER
    folder = Path(name)
    files = [folder / f for f in ("model.safetensors", "config.json", "tokenizer.json")]
    if not all(f.is_file() for f in files):
        return None
    try:
        bert = json.loads(files[1].read_text(encoding="utf-8")).get("model_type") == "bert"
    except (OSError, ValueError):
        return None
    return (files[0], folder) if bert else None
