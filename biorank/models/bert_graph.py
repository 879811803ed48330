"""A BERT graph for ONNX Runtime written from the weights themselves, without torch.

:mod:`biorank.models.export` gets a graph by tracing the torch model and then fusing it into ONNX Runtime's own
BERT kernels (:func:`~biorank.models.export.fuse`). For a BERT checkpoint in safetensors the fused graph can be
written directly: the same operators in the same order (``EmbedLayerNormalization``, then per layer one
``Attention``, ``SkipLayerNormalization`` twice and ``BiasGelu``, then the pooler and the classifier of a
cross-encoder), fed the same weights. This is what lets the light install (no torch) run the shipped
cross-encoder and any BERT model trained by biorank: the scores agree with the traced export to float rounding
(the tests compare both).

Weights are read from safetensors with numpy alone, bf16 included (numpy has no bf16: its 16 bits are the top
half of a float32).
"""

from __future__ import annotations

import json
import lzma
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from biorank.errors import BiorankError
from biorank.models.runtime import BERT_INPUTS

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BertShape", "GraphUnavailable", "read_safetensors", "write_bert_graph"]

_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8", "I64": "<i8"}


class GraphUnavailable(BiorankError):
    """The checkpoint is not a BERT this module writes a graph for (another architecture, or no safetensors)."""


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file (or one compressed with xz) as float32 numpy arrays.

    Args:
        path: the file; a name ending in ``.xz`` is decompressed on the fly.

    Returns:
        Tensor name → float32 array (integer tensors, such as ``position_ids``, are left out).

    Example:
        >>> weights = read_safetensors(Path("model.safetensors"))  # doctest: +SKIP
    """
    opener = lzma.open if path.suffix == ".xz" else open
    try:
        with opener(path, "rb") as handle:
            return _read(handle)
    except (OSError, lzma.LZMAError, ValueError, KeyError) as error:
        raise GraphUnavailable(f"cannot read the weights {path}: {error}") from None


def _read(handle: IO[bytes]) -> dict[str, np.ndarray]:
    import numpy as np

    (size,) = struct.unpack("<Q", handle.read(8))
    header = json.loads(handle.read(size))
    data = handle.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__" or entry["dtype"] not in _DTYPES or entry["dtype"] == "I64":
            continue
        start, end = entry["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=_DTYPES[entry["dtype"]])
        if entry["dtype"] == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = array.astype(np.float32).reshape(entry["shape"])
    return tensors


@dataclass(frozen=True)
class BertShape:
    """What a graph needs from the model's ``config.json`` that its tensors do not show."""

    heads: int
    layers: int
    epsilon: float

    @classmethod
    def from_config(cls, config: Mapping) -> BertShape:
        """The shape of a transformers BERT config; anything else is refused.

        Args:
            config: the parsed ``config.json``.

        Returns:
            Heads, layers and the layer norms' epsilon.
        """
        if config.get("model_type") != "bert" or config.get("hidden_act", "gelu") != "gelu" or \
                config.get("position_embedding_type", "absolute") != "absolute":
            raise GraphUnavailable(f"a graph is written here for BERT with GELU and absolute positions, not "
                                   f"{config.get('model_type')!r} ({config.get('hidden_act')!r})")
        return cls(heads=int(config["num_attention_heads"]), layers=int(config["num_hidden_layers"]),
                   epsilon=float(config.get("layer_norm_eps", 1e-12)))


def _strip(weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Names without the ``bert.`` of a sequence-classification checkpoint, so both kinds read alike."""
    return {name.removeprefix("bert."): array for name, array in weights.items()}


def write_bert_graph(weights: Mapping[str, np.ndarray], shape: BertShape,
                     output: Literal["logits", "last_hidden_state"], path: Path) -> None:
    """Write the fused fp32 BERT graph of ``weights`` to ``path``, as one file (``finish_graphs`` then quantises
    it and stores its weights apart, as for every export).

    Args:
        weights: Hugging Face parameter names (with or without ``bert.``) → float32 arrays, as
            :func:`read_safetensors` returns them.
        shape: heads, layers and epsilon from the model's config.
        output: ``logits`` for a one-output cross-encoder (pooler, tanh, classifier on [CLS]),
            ``last_hidden_state`` for an encoder (pooled in numpy afterwards, as every export is).
        path: where the graph goes.

    Example:
        >>> write_bert_graph(read_safetensors(folder / "model.safetensors"), BertShape(12, 12, 1e-12),
        ...                  "logits", work / "model.onnx")  # doctest: +SKIP
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = _strip(weights)
    initializers: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def tensor(name: str, array: np.ndarray, dtype: type = np.float32) -> str:
        initializers.append(numpy_helper.from_array(np.array(array, dtype=dtype, order="C"), name))
        return name

    def weight(name: str) -> np.ndarray:
        try:
            return w[name]
        except KeyError:
            raise GraphUnavailable(f"the checkpoint has no {name}: not a BERT this graph can be written for") \
                from None

    def node(op: str, inputs: list[str], out: str, **attributes: object) -> str:
        domain = "" if op in ("MatMul", "Cast", "Gather", "Gemm", "Tanh") else "com.microsoft"
        nodes.append(helper.make_node(op, inputs, [out], name=out, domain=domain, **attributes))
        return out

    for name in BERT_INPUTS:
        node("Cast", [name], f"{name}_int32", to=TensorProto.INT32)
    embeddings = "embeddings"
    nodes.append(helper.make_node(
        "EmbedLayerNormalization",
        ["input_ids_int32", "token_type_ids_int32",
         *(tensor(f"embeddings.{part}", weight(f"embeddings.{part}")) for part in (
             "word_embeddings.weight", "position_embeddings.weight", "token_type_embeddings.weight",
             "LayerNorm.weight", "LayerNorm.bias")),
         "attention_mask_int32"],
        [embeddings, "mask_index"], name=embeddings, domain="com.microsoft", epsilon=shape.epsilon))

    hidden = embeddings
    for i in range(shape.layers):
        p = f"encoder.layer.{i}."
        # nn.Linear keeps W as (out, in); MatMul and Attention take (in, out), Q, K and V side by side.
        qkv = np.concatenate([weight(f"{p}attention.self.{m}.weight").T for m in ("query", "key", "value")], axis=1)
        qkv_bias = np.concatenate([weight(f"{p}attention.self.{m}.bias") for m in ("query", "key", "value")])
        attended = node("Attention", [hidden, tensor(f"{p}qkv.weight", qkv), tensor(f"{p}qkv.bias", qkv_bias),
                                      "mask_index"], f"{p}attention", num_heads=shape.heads)
        projected = node("MatMul", [attended, tensor(f"{p}attention.output.dense.weight",
                                                     weight(f"{p}attention.output.dense.weight").T)],
                         f"{p}attention.output.dense")
        normed = node("SkipLayerNormalization", [
            projected, hidden, *(tensor(f"{p}attention.output.{t}", weight(f"{p}attention.output.{t}"))
                                 for t in ("LayerNorm.weight", "LayerNorm.bias", "dense.bias"))],
            f"{p}attention.output", epsilon=shape.epsilon)
        widened = node("MatMul", [normed, tensor(f"{p}intermediate.dense.weight",
                                                 weight(f"{p}intermediate.dense.weight").T)],
                       f"{p}intermediate.dense")
        activated = node("BiasGelu", [widened, tensor(f"{p}intermediate.dense.bias",
                                                      weight(f"{p}intermediate.dense.bias"))], f"{p}intermediate")
        narrowed = node("MatMul", [activated, tensor(f"{p}output.dense.weight", weight(f"{p}output.dense.weight").T)],
                        f"{p}output.dense")
        hidden = node("SkipLayerNormalization", [
            narrowed, normed, *(tensor(f"{p}output.{t}", weight(f"{p}output.{t}"))
                                for t in ("LayerNorm.weight", "LayerNorm.bias", "dense.bias"))],
            f"{p}output", epsilon=shape.epsilon)

    if output == "logits":
        first = node("Gather", [hidden, tensor("first", np.array(0), np.int64)], "cls", axis=1)
        pooled = node("Gemm", [first, tensor("pooler.dense.weight", weight("pooler.dense.weight")),
                               tensor("pooler.dense.bias", weight("pooler.dense.bias"))], "pooler.dense", transB=1)
        activated = node("Tanh", [pooled], "pooler")
        node("Gemm", [activated, tensor("classifier.weight", weight("classifier.weight")),
                      tensor("classifier.bias", weight("classifier.bias"))], "logits", transB=1)
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])
    else:
        nodes[-1].output[0] = "last_hidden_state"
        out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                            ["batch", "pieces", int(weight("embeddings.LayerNorm.weight").shape[0])])

    graph = helper.make_graph(
        nodes, "bert", [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "pieces"])
                        for n in BERT_INPUTS], [out], initializers)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="biorank")
    onnx.save_model(model, str(path))
