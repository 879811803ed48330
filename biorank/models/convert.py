"""An ONNX BERT encoder back into torch: a sentence-transformers folder that training and the torch precisions use.

The Maven jars carry only the graph. Its named initializers are the BERT parameters under their Hugging Face
names (``encoder.layer.0.attention.self.query.bias``, ...); the weight matrices of the linear layers are
anonymous ``MatMul`` inputs (``onnx::MatMul_1234``). Each is named by the bias of the ``Add`` that consumes the
``MatMul``'s output, and transposed: ``MatMul`` computes ``x · W``, ``nn.Linear`` stores ``W`` as
``out by in``. Sizes come from the tensors; the head count, which no tensor shows, from the caller.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from biorank.errors import BiorankError
from biorank.models.extras import quiet_loading, require_torch
from biorank.models.runtime import BERT_INPUTS

_LAYER = re.compile(r"encoder\.layer\.(\d+)\.")


class ConversionError(BiorankError):
    """The graph is not a BERT encoder this converter can map onto torch weights."""


def bert_weights(graph_path: Path) -> dict:
    """The graph's BERT parameters as numpy arrays under their Hugging Face names."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(graph_path)).graph
    tensors = {t.name: t for t in graph.initializer}
    weights = {name: numpy_helper.to_array(t) for name, t in tensors.items() if not name.startswith("onnx::")}
    consumers = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    for node in graph.node:
        if node.op_type != "MatMul" or node.input[1] not in tensors or node.input[1] in weights:
            continue
        adds = [n for n in consumers[node.output[0]] if n.op_type == "Add"]
        biases = [name for n in adds for name in n.input if name.endswith(".bias") and name in weights]
        if len(biases) != 1:
            raise ConversionError(f"cannot name the weight {node.input[1]} of MatMul {node.name!r}: no single "
                                  "bias is added to its output")
        weights[biases[0].removesuffix(".bias") + ".weight"] = numpy_helper.to_array(tensors[node.input[1]]).T
    return weights


def onnx_to_sentence_transformers(graph_path: Path, tokenizer_path: Path, target: Path, *, heads: int,
                                  max_length: int, pooling: Literal["cls", "mean"],
                                  prompts: Mapping[str, str] | None = None) -> Path:
    """Write ``target``: a sentence-transformers folder (BERT, pooling, normalisation) with the graph's weights,
    and the model's query/passage ``prompts`` (:mod:`.prefixes`)."""
    require_torch("converting an ONNX encoder into torch weights (for bf16, a GPU or training)")
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    weights = bert_weights(graph_path)
    try:
        vocab, hidden = weights["embeddings.word_embeddings.weight"].shape
        config = BertConfig(
            vocab_size=vocab, hidden_size=hidden, num_attention_heads=heads,
            num_hidden_layers=1 + max(int(m.group(1)) for name in weights if (m := _LAYER.match(name))),
            intermediate_size=weights["encoder.layer.0.intermediate.dense.weight"].shape[0],
            max_position_embeddings=weights["embeddings.position_embeddings.weight"].shape[0],
            type_vocab_size=weights["embeddings.token_type_embeddings.weight"].shape[0],
        )
    except (KeyError, ValueError) as e:
        raise ConversionError(f"{graph_path} is not a BERT encoder graph ({e})") from None
    bert = BertModel(config, add_pooling_layer=False)
    # position_ids is a buffer that the model fills itself, not a weight; some graphs (e5) carry it as a constant.
    state = {name: torch.from_numpy(array.copy()) for name, array in weights.items()
             if not name.endswith("position_ids")}
    missing, unexpected = bert.load_state_dict(state, strict=False)
    missing = [name for name in missing if not name.endswith("position_ids")]
    if missing or unexpected:
        raise ConversionError(f"{graph_path}: weights missing {missing[:3]} or left over {unexpected[:3]}")
    transformer_dir = target / "0_Transformer"
    # Without token_type_ids among its inputs the tokenizer gives torch no segments, so a cross-encoder trained
    # from this folder would see the document as segment A, and its ONNX export (fed tokenizer.json's segments)
    # would score other inputs than it was trained on.
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_path), model_max_length=max_length,
                                        unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]",
                                        mask_token="[MASK]",
                                        model_input_names=list(BERT_INPUTS))
    # Quiet: the saves' progress bars, and the load report of the graph's missing pooler (newly initialised).
    with quiet_loading(fresh_head=True):
        bert.save_pretrained(transformer_dir)
        tokenizer.save_pretrained(transformer_dir)
        transformer = models.Transformer(str(transformer_dir), max_seq_length=max_length)
        pooled = models.Pooling(hidden, pooling_mode="cls" if pooling == "cls" else "mean")
        SentenceTransformer(modules=[transformer, pooled, models.Normalize()], device="cpu",
                            prompts=dict(prompts or {})).save(str(target))
    return target
