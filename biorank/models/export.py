"""Exports a model once into the folder :mod:`biorank.models.runtime` runs: ONNX fp32, ONNX int8, the tokenizer
and a manifest. A BERT checkpoint in safetensors is written straight from its weights
(:func:`export_bert_checkpoint`, :mod:`.bert_graph`), without torch; any other model is traced from torch
(and needs it). What runs the files afterwards needs onnxruntime and tokenizers only.

The graph is the transformer alone (``last_hidden_state`` for an encoder, ``logits`` for a cross-encoder);
pooling is done in numpy, as the manifest says. int8 is ONNX Runtime's dynamic quantisation with one scale
per output channel of each weight (per-tensor scales moved the vectors much further from fp32's;
docs/concepts/precision.md). A BERT graph is exported from transformers' eager attention
and its attention, layer norms and GELU are fused into ONNX Runtime's own kernels (:func:`fuse`) before it is
quantised. Both graphs keep their weights in a file beside them (:func:`store_weights_apart`). Files are written
to a temporary folder and renamed into place, so an interrupted export never leaves a half-written cache that
looks complete.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from biorank.errors import BiorankError
from biorank.models.extras import require_torch
from biorank.models.runtime import (
    BERT_INPUTS,
    FILES,
    WEIGHTS_SUFFIX,
    Manifest,
    RuntimeUnavailable,
    cache_folder,
    cached,
)

__all__ = ["export_bert_checkpoint", "export_cross_encoder", "export_encoder"]


def _export_graph(module: Any, inputs: tuple[str, ...], output: str, path: Path) -> None:
    require_torch("exporting a model that is not a BERT checkpoint in safetensors")
    import torch

    class Graph(torch.nn.Module):
        """Keyword arguments by name: transformers' positional order differs between versions."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, *tensors: Any) -> Any:
            return getattr(self.inner(**dict(zip(inputs, tensors, strict=True))), output)

    example = torch.ones(2, 8, dtype=torch.long)
    axes = {name: {0: "batch", 1: "pieces"} for name in inputs}
    axes[output] = {0: "batch"} if output == "logits" else {0: "batch", 1: "pieces"}
    # ONNX Runtime recognises a BERT layer's attention, to fuse it into one kernel, only in the pattern of
    # transformers' eager attention; SDPA's exports as a dozen small operators (Where, IsNaN, Softmax, ...).
    attention = getattr(module.config, "_attn_implementation", None)
    eager = attention not in (None, "eager") and hasattr(module, "set_attn_implementation")
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        warnings.simplefilter("ignore")
        if eager:
            module.set_attn_implementation("eager")
        try:
            torch.onnx.export(Graph().eval(), tuple(torch.zeros_like(example) if n == "token_type_ids" else example
                                                   for n in inputs),
                              str(path), input_names=list(inputs), output_names=[output], dynamic_axes=axes,
                              opset_version=17, dynamo=False)
        finally:
            if eager:
                module.set_attn_implementation(attention)


def fuse(path: Path, config: Any) -> None:
    """Rewrites a BERT graph in place with ONNX Runtime's fused CPU kernels (one Attention, SkipLayerNorm and
    BiasGelu per layer, EmbedLayerNorm for the embeddings); the same outputs to float rounding, a fifth less time
    for the cross-encoder's 20 pairs on 2 AVX2 cores (docs/measurements/speed.md). Another model type stays as
    exported."""
    if getattr(config, "model_type", None) != "bert":
        return
    from onnxruntime.transformers.optimizer import optimize_model

    with _quiet_logging():
        # opt_level 0: the fusions alone, as portable operators, not the session's CPU-specific rewrites.
        fused = optimize_model(str(path), model_type="bert", num_heads=int(config.num_attention_heads),
                               hidden_size=int(config.hidden_size), opt_level=0)
        fused.save_model_to_file(str(path))


@contextlib.contextmanager
def _quiet_logging() -> Iterator[None]:
    """ONNX Runtime's tools log advice on every call (pre-processing for static quantisation, fusion counts)."""
    import logging

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def store_weights_apart(path: Path) -> None:
    """Rewrites a graph with its weights in one file beside it (``model.onnx.data``): ONNX Runtime then reads
    them straight into its tensors instead of parsing the weights as protobuf, which halves a session's start, the
    largest fixed cost of a fresh ``biorank query`` (``benchmarks/records/cold_query-external-weights.json``)."""
    import onnx

    model = onnx.load(str(path))  # the weights are in memory now: the old data file may go
    data = path.with_name(path.name + WEIGHTS_SUFFIX)
    data.unlink(missing_ok=True)  # onnx appends to an existing data file
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name, size_threshold=1024)
    data.chmod(0o644)  # onnx creates it 0600, which would hide it from other users of a shared cache


def quantise(source: Path, target: Path) -> None:
    """Dynamic int8 of an fp32 graph, one scale per output channel of each weight."""
    try:
        from onnx import TensorProto
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise RuntimeUnavailable("int8 needs onnxruntime and onnx: `pip install onnxruntime onnx`") from None
    with _quiet_logging():
        # Shape inference does not type the outputs of the fused operators (com.microsoft); they are floats.
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True,
                         extra_options={"DefaultTensorType": TensorProto.FLOAT})


def finish_graphs(folder: Path) -> None:
    """The int8 graph quantised from the fp32 one in ``folder``, and both graphs' weights stored apart."""
    quantise(folder / FILES["onnx"], folder / FILES["int8"])
    for name in FILES.values():
        store_weights_apart(folder / name)


@contextlib.contextmanager
def staging(identity: str, kind: str) -> Iterator[Path]:
    """A temporary folder beside the model's cache folder, renamed into place when the block completes; an
    interrupted export leaves nothing that looks complete."""
    folder = cache_folder(identity, kind)
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=folder.parent))
    try:
        yield work
        work.chmod(0o755)  # mkdtemp's 0700 would hide the export from other users of a shared cache
        if folder.exists():
            shutil.rmtree(folder)
        # Two processes exporting the same model at once: the second rename finds the first's folder, which
        # holds the same files, and keeps it.
        with contextlib.suppress(OSError):
            os.rename(work, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _inputs(model: Any) -> tuple[str, ...]:
    import inspect

    parameters = inspect.signature(model.forward).parameters
    return tuple(n for n in BERT_INPUTS if n in parameters)


def _write(identity: str, kind: str, module: Any, tokenizer: Any, output: str, max_length: int, dimension: int,
           pooling: str) -> Path:
    with staging(identity, kind) as work:
        inputs = _inputs(module)
        _export_graph(module, inputs, output, work / FILES["onnx"])
        fuse(work / FILES["onnx"], module.config)
        finish_graphs(work)
        tokenizer.backend_tokenizer.save(str(work / "tokenizer.json"))
        Manifest(identity=identity, kind=kind, inputs=inputs, max_length=max_length,  # type: ignore[arg-type]
                 dimension=dimension, pooling=pooling).write(work)  # type: ignore[arg-type]
    return cache_folder(identity, kind)


def export_encoder(model: Any, identity: str) -> Path:
    """Export a loaded sentence-transformers model (Transformer, Pooling and optionally Normalize modules).

    Returns the cache folder; an existing complete export of the same identity is kept as it is.
    """
    if (folder := cached(identity, "encoder", "int8")) is not None:
        return folder
    modules = list(model)
    kinds = [type(m).__name__ for m in modules]
    if not kinds or kinds[0] != "Transformer" or (len(kinds) > 1 and kinds[1] != "Pooling") or any(
            k not in ("Transformer", "Pooling", "Normalize") for k in kinds):
        raise RuntimeUnavailable(f"the ONNX backend runs Transformer + Pooling (+ Normalize) models, not "
                                 f"{' + '.join(kinds)}; use --precision fp32 or bf16")
    pooling = "cls"
    if len(modules) > 1:
        # sentence-transformers 6 keeps the mode as a string; 5.x answers through a method.
        pooling_module = modules[1]
        mode = getattr(pooling_module, "pooling_mode", None) or pooling_module.get_pooling_mode_str()
        if mode not in ("mean", "cls"):
            raise RuntimeUnavailable(f"the ONNX backend pools by mean or [CLS], not {mode!r}; use --precision fp32")
        pooling = mode
    transformer = modules[0].auto_model
    dimension = int(transformer.config.hidden_size)
    return _write(identity, "encoder", transformer, model.tokenizer, "last_hidden_state",
                  int(model.max_seq_length), dimension, pooling)


def export_cross_encoder(model: Any, tokenizer: Any, identity: str, max_length: int) -> Path:
    """Export a loaded one-output sequence-classification model with its tokenizer."""
    if (folder := cached(identity, "cross-encoder", "int8")) is not None:
        return folder
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise BiorankError("the ONNX backend needs a fast tokenizer (tokenizer.json); use --rerank-precision fp32")
    return _write(identity, "cross-encoder", model, tokenizer, "logits", max_length, 1, "none")


def export_bert_checkpoint(weights: Path, folder: Path, identity: str, max_length: int) -> Path:
    """Export a one-output BERT cross-encoder from its files, without torch (:mod:`.bert_graph`).

    Args:
        weights: its safetensors file (``.xz`` compressed or not).
        folder: where its ``config.json`` and ``tokenizer.json`` are.
        identity: the model's identity (:func:`~biorank.models.encoder.model_identity`), which keys the cache.
        max_length: word pieces of a pair, recorded in the manifest.

    Returns:
        The cache folder; an existing complete export of the same identity is kept as it is.

    Example:
        >>> export_bert_checkpoint(Path("run/model.safetensors"), Path("run"), "run@1a2b", 256)  # doctest: +SKIP
    """
    import json

    from biorank.models.bert_graph import BertShape, GraphUnavailable, read_safetensors, write_bert_graph

    if (cached_folder := cached(identity, "cross-encoder", "int8")) is not None:
        return cached_folder
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise GraphUnavailable(f"cannot read {folder / 'config.json'}: {error}") from None
    shape = BertShape.from_config(config)
    tensors = read_safetensors(weights)
    if tensors.get("classifier.weight", None) is None or tensors["classifier.weight"].shape[0] != 1:
        raise GraphUnavailable(f"{folder} has no one-output classifier: a cross-encoder for ranking has one "
                               "(train one with `biorank train-reranker`)")
    with staging(identity, "cross-encoder") as work:
        write_bert_graph(tensors, shape, "logits", work / FILES["onnx"])
        del tensors
        finish_graphs(work)
        shutil.copy(folder / "tokenizer.json", work / "tokenizer.json")
        Manifest(identity=identity, kind="cross-encoder", inputs=BERT_INPUTS, max_length=max_length,
                 dimension=1, pooling="none").write(work)
    return cache_folder(identity, "cross-encoder")
