"""Settings and mappings of the documents index: one entry per block of a document.

Ma et al. split a document longer than the encoder's window into blocks and give each its own vector, so a
document can be found through any of its parts. biorank stores one entry per block (``_id`` = the document
id for block 0, ``<id>#<n>`` for block ``n``); block 0 also carries the whole document (abstract, metadata,
the document-level BM25 field ``text``). Search keeps one hit per document by collapsing on ``id``, which
scores a document by its best block (MaxP).

Fields, and who reads them:
- ``text`` (block 0 only): title + abstract, the BM25 field of the published BEIR baselines (``bm25`` mode);
- ``passage`` (every block): title + the block's part of the abstract, BM25 at the grain the vectors have
  (the hybrid's ``λ·BM25(q, p)`` is over the same passage ``p`` as ``⟨q, p⟩``);
- ``wordpieces`` (every block): the passage as the encoder's word pieces, whitespace-separated, with a
  ``bigrams`` sub-field of word-piece shingles — the "bigram BM25" of Ma et al.; queries must be tokenised by
  the same encoder, which the index records;
- ``embedding`` (every block): the passage's unit vector, Lucene HNSW with inner product;
- ``year``, ``journal``, ``mesh`` (every block): what searches filter on (:mod:`biorank.retrieval.filters`), on
  every block because a filter selects blocks before they are scored; aggregations count ``block: 0``;
  ``mesh.text``, the headings' words, is what a MeSH boost scores with BM25 (:mod:`biorank.retrieval.boosts`;
  the record's ``searchable_mesh``);
- ``authors``, ``publication_types``, ``mesh_major``, ``journal_abbrev`` (every block, for the same reason) and
  ``doi`` (block 0): what MEDLINE carries beside the text (:data:`BIBLIOGRAPHIC`), for PubMed's field searches
  and for exports. An index built before them has none (its record has no ``bibliographic``), and the indexer
  writes them only into an index whose record says it has them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from biorank.store.mappings.fields import knn_vector
from biorank.store.record import new_record

BIBLIOGRAPHIC = ("authors", "publication_types", "mesh_major", "journal_abbrev")
"""The bibliographic keyword fields every block carries; ``doi`` is on block 0 only (nothing filters on it)."""
ENGLISH = "english"
STANDARD = "standard"
ANALYZERS = (ENGLISH, STANDARD)


@dataclass(frozen=True)
class IndexSettings:
    """What an index is built with. Defaults: one shard (exact BM25 statistics), no replica (a single node).

    ``k1``/``b`` default to 0.9/0.4, the values of the Anserini BEIR baselines that biorank is compared with.
    ``analyzer`` is the BM25 text analysis; ``english`` (stemming, stop words) won on SciFact train (see
    ``benchmarks/bm25_analyzers.py``).
    """

    shards: int = 1
    replicas: int = 0
    k1: float = 0.9
    b: float = 0.4
    analyzer: str = ENGLISH

    def __post_init__(self) -> None:
        if self.analyzer not in ANALYZERS:
            raise ValueError(f"analyzer must be one of {', '.join(ANALYZERS)}, not {self.analyzer!r}")
        if self.shards < 1 or self.replicas < 0:
            raise ValueError("shards must be at least 1 and replicas at least 0")
        if self.k1 < 0 or not 0 <= self.b <= 1:
            raise ValueError("BM25 needs k1 >= 0 and 0 <= b <= 1")


def index_settings(settings: IndexSettings, similarity: str = "BM25") -> dict:
    """The ``settings`` part shared by the documents and sentences indices; ``similarity`` is the type that gives
    BM25 with the (k1 + 1) factor on the cluster at hand (:func:`biorank.store.server.bm25_similarity`)."""
    return {
        "index": {
            "number_of_shards": settings.shards,
            "number_of_replicas": settings.replicas,
            "knn": True,
            # Every text field uses BM25 with the index's k1/b: "default" is the similarity Lucene applies.
            "similarity": {"default": {"type": similarity, "k1": settings.k1, "b": settings.b}},
        },
        "analysis": {
            "analyzer": {
                # Word pieces are produced by the encoder's tokenizer before indexing (lower-cased already).
                "wordpieces": {"type": "custom", "tokenizer": "whitespace"},
                "wordpiece_bigrams": {"type": "custom", "tokenizer": "whitespace", "filter": ["wordpiece_shingles"]},
            },
            "filter": {
                "wordpiece_shingles": {
                    "type": "shingle",
                    "min_shingle_size": 2,
                    "max_shingle_size": 2,
                    "output_unigrams": False,
                }
            },
        },
    }


def documents_index_body(
    settings: IndexSettings, *, model: str, dimension: int, block_tokens: int, sentences_index: str | None,
    model_source: str | None = None, prefixes: Mapping[str, str] | None = None, default_lambda: float | None = None,
    similarity: str = "BM25", sentence_vectors: str | None = None,
) -> dict:
    text = {"type": "text", "analyzer": settings.analyzer}
    return {
        "settings": index_settings(settings, similarity),
        "mappings": {
            "_meta": new_record(
                asdict(settings), kind="documents", model=model, dimension=dimension,
                block_tokens=block_tokens, filterable=True, bibliographic=True, searchable_mesh=True,
                sentences_index=sentences_index,
                model_source=model_source or model,
                prefixes=dict(prefixes or {}), **({"default_lambda": default_lambda} if default_lambda else {}),
                # The snippet stage reads how its sentences are stored from here, with the rest of the record.
                **({"sentence_vectors": sentence_vectors} if sentences_index and sentence_vectors else {}),
            ),
            # Vectors as JSON text would be most of the stored bytes; search reads them from the vector field.
            "_source": {"excludes": ["embedding"]},
            "dynamic": "strict",
            "properties": {
                "id": {"type": "keyword"},
                "block": {"type": "integer"},
                "n_blocks": {"type": "integer"},
                "title": text,
                "abstract": text,
                "text": text,
                "passage": text,
                "wordpieces": {
                    "type": "text",
                    "analyzer": "wordpieces",
                    "fields": {"bigrams": {"type": "text", "analyzer": "wordpiece_bigrams"}},
                },
                "embedding": knn_vector(dimension),
                "journal": {"type": "keyword"},
                "year": {"type": "short"},
                # The headings' words scored by BM25 beside the passage (a MeSH boost, biorank.retrieval.boosts);
                # filters and facets read the keyword.
                "mesh": {"type": "keyword", "fields": {"text": text}},
                **{name: {"type": "keyword"} for name in BIBLIOGRAPHIC},
                "doi": {"type": "keyword"},
                # Block 0 is written last: its presence with this hash says the whole document is in.
                "content_hash": {"type": "keyword", "index": False},
                "n_title_sentences": {"type": "integer", "index": False},
                "n_abstract_sentences": {"type": "integer", "index": False},
            },
        },
    }
