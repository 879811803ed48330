"""ONNX Runtime inference for the encoder and the cross-encoder: tokenizers + onnxruntime, never torch.

A model runs here from a folder that :mod:`biorank.models.export` writes once per model (keyed by the model's
identity, so changed weights get a folder of their own): ``model.onnx`` (fp32), ``model-int8.onnx`` (dynamic
int8, per-channel weights), each with its weights in a ``.data`` file beside it, ``tokenizer.json`` and
``manifest.json`` (what the graph returns and how to pool it). Loading that folder takes tokenizers and
onnxruntime only, which is what makes a single ``biorank query`` start quickly.

Texts are tokenised without padding, sorted by length and batched, so a batch is padded only to its own longest
text. In int8 the activations are quantised with one scale per batch (ONNX Runtime's dynamic quantisation), so a
text's vector or a pair's score also moves a little with its batch neighbours (1.4e-3 of a cross-encoder logit in
the tests); fp32 results depend on the batch only by float rounding. The earlier ONNX attempt (22 pairs/s against
torch fp32's 36) had two costs of its own: the ``tokenizer.json`` of all-MiniLM-L6-v2 pads every text to 128 word
pieces and cuts it there (its file says so; sentence-transformers overrides it to 256), and batches were padded to
the window whatever their length.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from biorank.config import default_cache
from biorank.errors import BiorankError

if TYPE_CHECKING:
    import numpy as np

OnnxPrecision = Literal["onnx", "int8", "openvino"]
"""The names of the placements that run an exported graph (:data:`~biorank.models.placement.GRAPHS`)."""
FILES = {"onnx": "model.onnx", "int8": "model-int8.onnx"}
OPENVINO_EXTRA = "pip install 'biorank[openvino]'"
WEIGHTS_SUFFIX = ".data"
"""Each graph's weights are in the file of its name and this suffix (``model.onnx.data``), beside it."""
MANIFEST = "manifest.json"
BERT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
"""What a BERT graph is fed; segment ids matter for pairs (a cross-encoder), not for single texts."""
FORMAT = 3
"""Bumped when the export changes what the files hold, so that older caches are made again (2: BERT graphs
fused by :func:`biorank.models.export.fuse`; 3: weights in a file beside each graph)."""
PAIR_TRUNCATION = "longest_first"
"""How a (query, text) pair is cut to the cross-encoder's window: from the longer of the two, so the text alone
while it is the longer (a usual query keeps every word piece, as ``only_second`` would keep it) and the query
too when a query is longer than its text, which ``only_second`` refuses with an error."""


class RuntimeUnavailable(BiorankError):
    """The ONNX backend cannot run this model (onnxruntime missing, or a model shape it does not export)."""


@dataclass(frozen=True)
class Manifest:
    """What :mod:`~biorank.models.export` recorded beside the graph: enough to run it without torch."""

    identity: str
    kind: Literal["encoder", "cross-encoder"]
    inputs: tuple[str, ...]
    max_length: int
    dimension: int
    pooling: Literal["mean", "cls", "none"]
    format: int = FORMAT

    def write(self, folder: Path) -> None:
        (folder / MANIFEST).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, folder: Path) -> Manifest | None:
        try:
            data = json.loads((folder / MANIFEST).read_text())
            manifest = cls(**{**data, "inputs": tuple(data["inputs"])})
        except (OSError, ValueError, TypeError, KeyError):
            return None
        return manifest if manifest.format == FORMAT else None


def cache_folder(identity: str, kind: str) -> Path:
    """The folder of one model's exported files: under the cache, named by a hash of identity and kind."""
    key = hashlib.sha256(f"{kind}\0{identity}".encode()).hexdigest()[:16]
    return default_cache() / "onnx" / key


def graph_file(precision: OnnxPrecision) -> str:
    """The file a precision runs: OpenVINO compiles the fp32 graph."""
    return FILES["int8" if precision == "int8" else "onnx"]


def cached(identity: str, kind: str, precision: OnnxPrecision) -> Path | None:
    """The export folder of this model if it holds a complete export of this precision, else None."""
    folder = cache_folder(identity, kind)
    manifest = Manifest.read(folder)
    complete = (folder / graph_file(precision)).is_file() and (folder / "tokenizer.json").is_file()
    return folder if manifest is not None and manifest.identity == identity and complete else None


def folder_digest(folder: Path) -> str:
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


@cache
def physical_cores() -> int:
    """Physical cores this process may run on: ONNX Runtime's default counts hyper-threads too, which on
    a 2-core machine with SMT doubles the threads without doubling the arithmetic units."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    cores: set[tuple[str, str]] = set()
    try:
        processor = physical = core = None
        for line in [*Path("/proc/cpuinfo").read_text().splitlines(), ""]:
            key, _, value = (part.strip() for part in line.partition(":"))
            if key == "processor":
                processor = int(value)
            elif key == "physical id":
                physical = value
            elif key == "core id":
                core = value
            elif not key and processor is not None:
                if processor in allowed:
                    cores.add((physical or "0", core or str(processor)))
                processor = physical = core = None
    except (OSError, ValueError):
        cores = set()
    return max(1, len(cores) or len(allowed))


def _session(path: Path) -> Any:
    try:
        import onnxruntime as ort
    except ImportError:
        raise RuntimeUnavailable("the ONNX backend needs onnxruntime: `pip install onnxruntime`") from None
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = physical_cores()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class _OpenVinoSession:
    """OpenVINO's CPU plugin behind ONNX Runtime's ``run(None, feed)``: the graph compiled once, one request
    reused. An ONNX Runtime session may be run from several threads at once (``serve`` does); an OpenVINO request
    may not, so runs take turns, and each returns a copy of the request's output, which the next run overwrites."""

    def __init__(self, path: Path) -> None:
        try:
            import openvino
        except ImportError:
            raise RuntimeUnavailable(f"precision openvino needs OpenVINO: {OPENVINO_EXTRA}") from None
        compiled = openvino.Core().compile_model(str(path), "CPU", {
            "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": physical_cores()})
        self._request = compiled.create_infer_request()
        self._output = compiled.output(0)
        self._turn = threading.Lock()

    def run(self, _outputs: Any, feed: dict[str, Any]) -> list[Any]:
        import numpy as np

        with self._turn:
            return [np.array(self._request.infer(feed)[self._output])]


class OnnxModel:
    """One exported model at one precision: tokenises, batches by length, runs the graph, pools.

    >>> OnnxModel(folder, "onnx").embed(["vitamin D"], batch_size=64)  # doctest: +SKIP
    """

    def __init__(self, folder: Path, precision: OnnxPrecision, *, session: Any = None) -> None:
        """``session`` runs the graph instead of ONNX Runtime's own session of ``folder``'s file: anything with
        its ``run(None, feed)`` (a benchmark compares another runtime through biorank's own batching so)."""
        from tokenizers import Tokenizer

        manifest = Manifest.read(folder)
        if manifest is None:
            raise RuntimeUnavailable(f"{folder} holds no biorank ONNX export")
        self.manifest = manifest
        self.precision = precision
        if session is None:
            path = folder / graph_file(precision)
            session = _OpenVinoSession(path) if precision == "openvino" else _session(path)
        self._session = session
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # The file's own padding and truncation (MiniLM's pads everything to 128) are replaced by ours.
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()

    def _run(self, encodings: Sequence[Any], batch_size: int) -> np.ndarray:
        """The graph's output for each encoding, pooled to one row each, in input order."""
        import numpy as np

        rows = np.empty((len(encodings), self.manifest.dimension), dtype=np.float32)
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            width = max(len(encodings[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            types = np.zeros_like(ids)
            mask = np.zeros_like(ids)
            for row, i in enumerate(chunk):
                n = len(encodings[i].ids)
                ids[row, :n], types[row, :n], mask[row, :n] = encodings[i].ids, encodings[i].type_ids, 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            output = self._session.run(None, {name: feed[name] for name in self.manifest.inputs})[0]
            if self.manifest.pooling == "mean":
                weights = mask[..., None].astype(np.float32)
                output = (output * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            elif self.manifest.pooling == "cls":
                output = output[:, 0]
            rows[chunk] = output
        return rows

    def embed(self, texts: Sequence[str], *, batch_size: int, max_length: int | None = None) -> np.ndarray:
        """One pooled (not yet normalised) row per text; texts are cut at ``max_length`` word pieces."""
        self.tokenizer.enable_truncation(max_length or self.manifest.max_length)
        try:
            return self._run(self.tokenizer.encode_batch(list(texts)), batch_size)
        finally:
            self.tokenizer.no_truncation()

    def score_pairs(self, pairs: Sequence[tuple[str, str]], *, batch_size: int, max_length: int) -> np.ndarray:
        """The cross-encoder's logit of each (query, text) pair, cut as :data:`PAIR_TRUNCATION` says."""
        self.tokenizer.enable_truncation(max_length, strategy=PAIR_TRUNCATION)
        try:
            return self._run(self.tokenizer.encode_batch(list(pairs)), batch_size)[:, 0]
        finally:
            self.tokenizer.no_truncation()
