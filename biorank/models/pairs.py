"""A cross-encoder checkpoint in torch: loading it, and scoring (query, text) pairs in batches of one fixed shape.

Below the cross-encoder (:mod:`.cross_encoder`) and the calibration of "auto" (:mod:`.calibration`), which times
torch the way the cross-encoder runs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biorank.errors import BiorankError
from biorank.models.extras import quiet_loading, require_torch
from biorank.models.names import resolve_model
from biorank.models.runtime import PAIR_TRUNCATION

if TYPE_CHECKING:
    import numpy as np

__all__ = ["CrossEncoderError", "load_cross_encoder", "torch_scores"]


class CrossEncoderError(BiorankError):
    """The cross-encoder cannot be found or loaded, or does not score pairs."""


def load_cross_encoder(name: str, *, fresh_head: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) of a sequence-classification checkpoint: a local folder or a hub name.

    Args:
        name: a local folder or a hub name.
        fresh_head: give it a new one-output head, for a checkpoint that has none (a sentence encoder about to be
            trained as a cross-encoder).

    Returns:
        The transformers model (in train mode, as loaded) and its tokenizer.

    Raises:
        CrossEncoderError: it cannot be loaded.
        TorchUnavailable: torch and transformers are not installed.

    Example:
        >>> model, tokenizer = load_cross_encoder("models/reranker")  # doctest: +SKIP
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


def torch_scores(model: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]], *, rows: int, max_length: int,
                 device: str, precision: str) -> np.ndarray:
    """The model's logit for each pair, in input order: batches of ``rows`` pairs padded to ``max_length``.

    Filler rows keep every batch the same shape, so a pair's score never depends on its batch (a bf16 logit moved
    with its neighbours when shapes followed the batch).

    Args:
        model: a one-output sequence-classification model in eval mode, on ``device``.
        tokenizer: its tokenizer.
        pairs: (query, text) pairs; the text is cut, never the query.
        rows: pairs a batch, fillers included.
        max_length: word pieces of every row.
        device: the torch device the model is on.
        precision: ``fp32``, or ``bf16``/``fp16`` under autocast.

    Returns:
        One float32 score per pair.

    Example:
        >>> torch_scores(model, tokenizer, [("q", "t")], rows=10, max_length=256,  # doctest: +SKIP
        ...              device="cpu", precision="bf16")
    """
    import numpy as np
    import torch

    scores = np.empty(len(pairs), dtype=np.float32)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    for start in range(0, len(pairs), rows):
        chunk = list(pairs[start : start + rows])
        filled = chunk + [("", "")] * (rows - len(chunk))
        inputs = tokenizer(
            [q for q, _ in filled], [t for _, t in filled], truncation=PAIR_TRUNCATION,
            max_length=max_length, padding="max_length", return_tensors="pt",
        ).to(device)
        with torch.inference_mode(), torch.autocast(device_type=torch.device(device).type,
                                                    dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            logits = model(**inputs).logits[:, 0]
        scores[start : start + len(chunk)] = logits[: len(chunk)].float().cpu().numpy()
    return scores
