"""Second stage: a BERT cross-encoder (BERT_CAT) that reads ``[CLS] query [SEP] title + abstract [SEP]`` and
scores the pair; the rerank stage (:mod:`biorank.stages.rerank`) reorders the top of a first-stage ranking with
it (Ma et al. §5.1, Hofstätter et al. §2.2), the snippet stage scores sentences with it.

Scores are the model's single logit. They do not depend on which other pairs share a batch: every batch is
padded to the same shape (``batch_size`` rows of ``max_length`` word pieces), because measured on this
project's CPU a pair's bf16 logit moved by up to 3e-4 between a batch of 1 and one of 64 when shapes
followed the batch, and not at all (over random neighbours and positions) once the shape was fixed. The
fixed shape costs nothing on documents, which nearly all fill 256 word pieces, and was even faster than
padding to the longest pair (0.76 s against 0.89 s for 100 pairs, bf16).

In ONNX Runtime (precisions onnx and int8, :mod:`biorank.models.runtime`) pairs are instead sorted by length and
each batch padded to its own longest pair: sentences are short, and padding them to the window was most of the
snippet stage's cost. There a pair's fp32 score depends on its batch only by float rounding (1e-5 at most in the
tests), since padded positions are masked out; int8 scores move with the batch (see runtime). torch and
transformers are imported only for the torch precisions, or once to export a model that has no export yet.

On a GPU (:mod:`.device`) the model runs in torch, bf16 where the GPU computes it natively, else fp16, in batches
of the same fixed shape with more rows: :data:`~biorank.models.device.GPU_PAIR_TOKENS` word pieces a batch.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biorank.errors import BiorankError
from biorank.models.device import GPU_PAIR_TOKENS, check_precision, resolve_device
from biorank.models.encoder import (
    PRECISIONS,
    Precision,
    auto_precision,
    model_identity,
    native_bf16,
    resolve_model,
)
from biorank.models.extras import quiet_loading, require_torch
from biorank.models.runtime import ONNX_PRECISIONS, PAIR_TRUNCATION, OnnxModel, cached
from biorank.models.shipped import SHIPPED_FOLDER, SHIPPED_RERANKER
from biorank.models.shipped import WEIGHTS as SHIPPED_WEIGHTS

if TYPE_CHECKING:
    import numpy as np

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
        check_precision(precision, device)
        self._name = str(model)
        self._onnx: OnnxModel | None = None
        if precision == "auto":
            precision = auto_precision("documents", device)
        if precision in ONNX_PRECISIONS:
            self._onnx = OnnxModel(self._export(precision, max_length), precision)  # type: ignore[arg-type]
            self._setup(None, None, precision, max_length, batch_size, "cpu")
            return

        device = resolve_device(device)
        loaded, tokenizer = self._load()
        self._setup(loaded.eval().to(device), tokenizer, precision, max_length, batch_size, device)

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
        reranker._setup(model, tokenizer, precision, max_length, batch_size, str(next(model.parameters()).device))
        return reranker

    def _setup(self, model: Any, tokenizer: Any, precision: Precision, max_length: int, batch_size: int,
               device: str) -> None:
        """``batch_size`` pairs a batch on the CPU; a GPU's batches hold at least :data:`GPU_PAIR_TOKENS` word
        pieces (:meth:`rows`)."""
        if precision == "auto":
            import torch

            precision = "bf16" if native_bf16(torch, torch.device(device)) else "fp32"
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
        """The precision in use (``auto`` resolved): ``onnx`` or ``int8`` in ONNX Runtime, ``openvino``, or ``fp32``,
        ``bf16`` or ``fp16`` in torch."""
        return self._precision

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
        import torch

        scores = np.empty(len(pairs), dtype=np.float32)
        rows = self.rows
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self._precision)
        for start in range(0, len(pairs), rows):
            chunk = list(pairs[start : start + rows])
            # Filler rows keep every batch the same shape, so a pair's score never depends on its batch.
            filled = chunk + [("", "")] * (rows - len(chunk))
            inputs = self._tokenizer(
                [q for q, _ in filled], [t for _, t in filled], truncation=PAIR_TRUNCATION,
                max_length=self.max_length, padding="max_length", return_tensors="pt",
            ).to(self._device)
            with torch.inference_mode(), torch.autocast(device_type=torch.device(self._device).type,
                                                        dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                logits = self._model(**inputs).logits[:, 0]
            scores[start : start + len(chunk)] = logits[: len(chunk)].float().cpu().numpy()
        return scores


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


def load_cross_encoder(name: str, *, fresh_head: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) of a sequence-classification checkpoint: a local folder or a hub name.

    ``fresh_head`` gives it a new one-output head, for a checkpoint that has none (a sentence encoder about
    to be trained as a cross-encoder).
    """
    require_torch("a cross-encoder in torch (fp32, bf16, training)")
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
