"""The deep-metric sentence scorer (DMLPR: Rosso-Mateus et al., BioASQ 11): a small CNN over the similarity
tensor of a (question, sentence) pair, run in ONNX Runtime, never torch.

A pair becomes three channels over its word pieces (question rows, sentence columns), padded with zeros or
cropped to :data:`QUERY_PIECES` x :data:`SENTENCE_PIECES` (a cropped text keeps its start):

1. ``cosine``: cosine of the pieces' input embeddings — bge-small-en-v1.5's word-piece table, centred and reduced
   to :data:`DIMENSION` dimensions by PCA so that it ships in a few MB (see the card);
2. ``match``: exact match of normalised pieces (``##`` dropped, so ``##en`` meets ``en``), weighted by the
   question piece's IDF over the training pool (not the index's: an index's statistics are over its words, not
   word pieces, and would cost a request per query), scaled by the largest IDF;
3. ``weighted``: the cosine of 1 weighted the same way, so a near match of a rare question piece counts more than
   one of a common piece.

Why input embeddings and not the encoder's contextual token vectors (the issue's first channel): the
question's would come from its one encoder pass, but every sentence's would need a pass of the 12-layer encoder
over the top documents' ~100 sentences a query (the cost that keeps the cross-encoder out of the default),
and storing them per sentence would multiply the sentences index by the sentence's length. A lookup costs
nothing; the CNN learns which matches matter.

The network (Figure 5 of the paper, with one addition) maps the tensor to a distance in (0, 1): 3x3
convolutions with ReLU, then a global max pool (the paper) beside the mean over question rows of each row's
best match (ours: a global max alone cannot count how many question pieces a sentence matches), a 128-unit
ReLU layer and a sigmoid. Training: :mod:`biorank.training.metric`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from biorank.errors import BiorankError
from biorank.models.shipped import SHIPPED_FOLDER

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

SHIPPED_METRIC_FOLDER = Path(__file__).parent / "metric"
"""The trained scorer that ships in the package: ``model.onnx``, ``vocabulary.npz`` and its card."""
GRAPH = "model.onnx"
VOCABULARY = "vocabulary.npz"
SETTINGS = "settings.json"
TOKENIZER = SHIPPED_FOLDER / "tokenizer.json"
"""bge-small-en-v1.5's word pieces (BERT's uncased vocabulary), which the shipped cross-encoder ships already."""
QUERY_PIECES = 24
"""Question rows: a BioASQ question or SciFact claim has 19 word pieces at the median, 35 at the 95th percentile."""
SENTENCE_PIECES = 64
"""Sentence columns: most abstract sentences fit; a longer one keeps its first 64 pieces."""
DIMENSION = 64
CHANNELS = ("cosine", "match", "weighted")


class MetricError(BiorankError):
    """The sentence scorer's files are missing or are not a scorer's."""


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """What the similarity channels read per word piece: a unit embedding and an IDF.

    ``embeddings`` is (pieces, :data:`DIMENSION`) of unit rows; ``idf`` is per piece, indexed by the normalised
    piece (:attr:`normal`), and 0 for the special pieces.
    """

    embeddings: np.ndarray
    idf: np.ndarray
    normal: np.ndarray

    @classmethod
    def load(cls, folder: Path) -> Vocabulary:
        """The vocabulary saved in ``folder`` (``vocabulary.npz``), with the normal forms from the tokenizer."""
        import numpy as np

        try:
            with np.load(folder / VOCABULARY) as saved:
                embeddings, idf = saved["embeddings"].astype(np.float32), saved["idf"].astype(np.float32)
        except (OSError, KeyError, ValueError) as e:
            raise MetricError(f"{folder} holds no sentence scorer's vocabulary ({e})") from None
        return cls(embeddings, idf, normal_pieces(tokenizer()))

    def save(self, folder: Path) -> None:
        """``vocabulary.npz`` in float16: the table is most of what ships."""
        import numpy as np

        np.savez_compressed(folder / VOCABULARY, embeddings=self.embeddings.astype(np.float16),
                            idf=self.idf.astype(np.float16))

    @cached_property
    def weight(self) -> np.ndarray:
        """Each piece's IDF (by its normal form) over the largest: the weight of channels 2 and 3."""
        import numpy as np

        top = float(self.idf.max(initial=0.0)) or 1.0
        return (self.idf[self.normal] / top).astype(np.float32)


def tokenizer():
    """The word-piece tokenizer, without special pieces, truncation or padding."""
    from tokenizers import Tokenizer

    tokens = Tokenizer.from_file(str(TOKENIZER))
    tokens.no_truncation()
    tokens.no_padding()
    return tokens


def normal_pieces(tokens) -> np.ndarray:
    """Per piece id, the id of its normal form: ``##en`` → ``en`` where the vocabulary has it."""
    import numpy as np

    vocab = tokens.get_vocab()
    normal = np.arange(max(vocab.values()) + 1, dtype=np.int64)
    for piece, i in vocab.items():
        if piece.startswith("##") and piece[2:] in vocab:
            normal[i] = vocab[piece[2:]]
    return normal


def piece_ids(tokens, texts: Sequence[str], limit: int) -> list[np.ndarray]:
    """Each text's word-piece ids, without [CLS]/[SEP], its first ``limit``."""
    import numpy as np

    return [np.asarray(e.ids[:limit], dtype=np.int64) for e in tokens.encode_batch(list(texts),
                                                                                   add_special_tokens=False)]


def similarity_tensors(vocabulary: Vocabulary, query: np.ndarray, sentences: Sequence[np.ndarray]) -> np.ndarray:
    """(sentences, 3, :data:`QUERY_PIECES`, :data:`SENTENCE_PIECES`) float32: the channels of each (query,
    sentence) pair, zero where either side is padding.

    Args:
        vocabulary: the embeddings and IDF.
        query: the query's piece ids (cropped here to :data:`QUERY_PIECES`).
        sentences: each sentence's piece ids (cropped to :data:`SENTENCE_PIECES`).

    Returns:
        The tensors, in the order of ``sentences``.

    Example:
        >>> similarity_tensors(vocabulary, np.array([2054]), [np.array([2054, 2003])])[0, 1, 0, :2]  # doctest: +SKIP
        array([0.41, 0.  ], dtype=float32)
    """
    import numpy as np

    q = query[:QUERY_PIECES]
    n = len(sentences)
    ids = np.zeros((n, SENTENCE_PIECES), dtype=np.int64)
    present = np.zeros((n, SENTENCE_PIECES), dtype=bool)
    for i, s in enumerate(sentences):
        s = s[:SENTENCE_PIECES]
        ids[i, : len(s)] = s
        present[i, : len(s)] = True
    out = np.zeros((n, 3, QUERY_PIECES, SENTENCE_PIECES), dtype=np.float32)
    if not len(q) or not n:
        return out
    cosine = np.einsum("qd,nsd->nqs", vocabulary.embeddings[q], vocabulary.embeddings[ids]) * present[:, None, :]
    weight = vocabulary.weight[q][None, :, None]
    match = vocabulary.normal[q][None, :, None] == vocabulary.normal[ids][:, None, :]
    out[:, 0, : len(q)] = cosine
    out[:, 1, : len(q)] = (match & present[:, None, :]) * weight
    out[:, 2, : len(q)] = cosine * weight
    return out


class MetricScorer:
    """The trained sentence scorer: distances of (query, sentence) pairs in ONNX Runtime.

    >>> scorer = MetricScorer.load()  # the shipped one
    >>> scorer.scores("vitamin D and fractures", ["Vitamin D lowered the risk of hip fracture."]).shape
    (1,)
    """

    def __init__(self, folder: Path, vocabulary: Vocabulary, session: object) -> None:
        self.folder = folder
        self.vocabulary = vocabulary
        self.session = session
        self.tokens = tokenizer()

    @classmethod
    def load(cls, folder: str | Path | None = None) -> MetricScorer:
        """The scorer saved in ``folder`` (``train-snippet-scorer``'s output), else the shipped one.

        Args:
            folder: a folder with ``model.onnx`` and ``vocabulary.npz``; None takes the shipped scorer.

        Returns:
            The scorer, its graph in an ONNX Runtime session on the CPU.

        Example:
            >>> MetricScorer.load().folder.name
            'metric'
        """
        import onnxruntime

        folder = Path(folder) if folder is not None else SHIPPED_METRIC_FOLDER
        if not (folder / GRAPH).is_file():
            raise MetricError(f"{folder} holds no sentence scorer (no {GRAPH}); make one with "
                              "biorank train-snippet-scorer")
        settings = _settings(folder)
        if settings.get("query_pieces", QUERY_PIECES) != QUERY_PIECES or \
                settings.get("sentence_pieces", SENTENCE_PIECES) != SENTENCE_PIECES:
            raise MetricError(f"the scorer in {folder} was made for other tensor sizes ({settings})")
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(str(folder / GRAPH), options, providers=["CPUExecutionProvider"])
        return cls(folder, Vocabulary.load(folder), session)

    def tensors(self, query: str, sentences: Sequence[str]) -> np.ndarray:
        """The similarity tensors of ``query`` against each of ``sentences``."""
        q = piece_ids(self.tokens, [query], QUERY_PIECES)[0]
        return similarity_tensors(self.vocabulary, q, piece_ids(self.tokens, sentences, SENTENCE_PIECES))

    def distances(self, tensors: np.ndarray) -> np.ndarray:
        """The network's distance in (0, 1) for each tensor: small is related."""
        import numpy as np

        if not len(tensors):
            return np.zeros(0, dtype=np.float32)
        return self.session.run(None, {"tensors": tensors})[0].reshape(-1)  # type: ignore[attr-defined]

    def scores(self, query: str, sentences: Sequence[str]) -> np.ndarray:
        """1 - distance for each (query, sentence): higher is more related.

        Args:
            query: the question.
            sentences: the candidate sentences.

        Returns:
            float32 scores in (0, 1), in the order of ``sentences``.

        Example:
            >>> MetricScorer.load().scores("vitamin D", ["Vitamin D levels.", "Heart rate."])  # doctest: +SKIP
            array([0.83, 0.12], dtype=float32)
        """
        return 1.0 - self.distances(self.tensors(query, sentences))


@cache
def shipped_metric_scorer() -> MetricScorer:
    """The shipped scorer, loaded once per process: every pipeline of ``serve`` shares it (its session is safe to
    run from several threads)."""
    return MetricScorer.load()


def _settings(folder: Path) -> dict:
    try:
        return json.loads((folder / SETTINGS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
