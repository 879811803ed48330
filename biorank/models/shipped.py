"""The cross-encoder that ships inside biorank, so that reranking and the snippets' relevance perspective work
on a fresh install, with no training step.

Its folder (``biorank/models/reranker/``) holds the card (``README.md``: data, recipe, figures, the command that
reproduces it), the tokenizer and config, and the weights as bf16 safetensors compressed with xz: 33 million
parameters are 134 MB in fp32 and 67 MB in bf16, over the 50 MB a model may take in the repository; xz brings
the bf16 file to 47 MB. bf16 keeps 8 bits of mantissa, which the model trained in (bf16 autocast) already
rounded its activations to. On first use the weights are unpacked once into the cache as an fp32
transformers folder, which every precision (torch, or the ONNX export made from it) and ``train-reranker``
load like any local model.
"""

from __future__ import annotations

import lzma
import shutil
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from biorank.models.extras import require_torch
from biorank.models.runtime import cache_folder, folder_digest

SHIPPED_RERANKER = "biorank-reranker"
"""The name that means the shipped cross-encoder (``--reranker biorank-reranker``); what an index without a
reranker of its own reranks with."""
SHIPPED_FOLDER = Path(__file__).parent / "reranker"
WEIGHTS = "model.bf16.safetensors.xz"
FOLDER_KIND = "torch-cross-encoder"


@cache
def shipped_identity() -> str:
    """The shipped model's name and the digest of its files (the card aside): a new version is a new name, so
    caches made from an older one are never taken for it."""
    return f"{SHIPPED_RERANKER}@{folder_digest(SHIPPED_FOLDER)}"


def shipped_reranker_folder() -> Path:
    """The shipped cross-encoder as an fp32 transformers folder, unpacked into the cache on first use."""
    from biorank.models.export import staging

    identity = shipped_identity()
    folder = cache_folder(identity, FOLDER_KIND)
    if (folder / "model.safetensors").is_file():
        return folder
    require_torch("the shipped cross-encoder in torch (fp32, bf16, training)")
    with staging(identity, FOLDER_KIND) as work:
        for path in SHIPPED_FOLDER.iterdir():
            if path.name != WEIGHTS and not path.name.startswith(("_", ".")):
                shutil.copy(path, work / path.name)
        unpack_weights((SHIPPED_FOLDER / WEIGHTS).read_bytes(), work / "model.safetensors")
    return folder


def pack_weights(weights: Mapping[str, Any], preset: int = 6) -> bytes:
    """Torch weights as the package keeps them: bf16 safetensors under xz (what :func:`unpack_weights` reads); the
    floating-point tensors are rounded to bf16, the rest kept. ``preset`` is xz's: a low one for weights that only
    travel, where time counts more than size."""
    import torch
    from safetensors.torch import save

    return lzma.compress(save({name: (tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor)
                               .contiguous().cpu() for name, tensor in weights.items()}), preset=preset)


def unpack_weights(packed: bytes, dest: Path) -> None:
    """Weights as the package keeps them (bf16 safetensors under xz) written to ``dest`` as fp32 safetensors, the
    form every precision and ``train-reranker`` load."""
    import torch
    from safetensors.torch import load, save_file

    weights = load(lzma.decompress(packed))
    save_file({name: tensor.to(torch.float32) for name, tensor in weights.items()}, dest)
