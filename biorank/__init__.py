"""biorank: hybrid BM25 + dense search, a cross-encoder reranker and snippets for biomedical abstracts, on
OpenSearch.

Three lines to search an index (the local node is started when no URL is given)::

    from biorank import Searcher, connect
    searcher = Searcher.open(connect(), "biorank-demo")
    hits = searcher.search("Does vitamin B12 deficiency raise homocysteine?", k=10)

and one more for the whole pipeline, as ``biorank query`` and ``biorank eval`` run it::

    from biorank import Pipeline
    answer = Pipeline.build("hybrid+snippets", searcher).search("vitamin B12 and homocysteine", k=10)
    answer.hits, answer.top_snippets(3), answer.ms

Names are imported when first used, so ``import biorank`` loads neither torch nor the OpenSearch client.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "connect": "biorank.store.client",
    "ConnectionSettings": "biorank.config",
    "BiorankError": "biorank.errors",
    "Abstract": "biorank.types",
    "AskedPlacement": "biorank.models.placement",
    "Answer": "biorank.types",
    "Hit": "biorank.types",
    "Snippet": "biorank.types",
    "Indexer": "biorank.indexer.indexer",
    "IndexOptions": "biorank.indexer.indexer",
    "encode_corpus": "biorank.indexer.shards",
    "ShardReader": "biorank.indexer.shards",
    "Encoder": "biorank.models.encoder",
    "CrossEncoder": "biorank.models.cross_encoder",
    "Filters": "biorank.retrieval.filters",
    "Searcher": "biorank.retrieval.searcher",
    "SearchSettings": "biorank.retrieval.searcher",
    "Reranker": "biorank.stages.rerank",
    "Ensemble": "biorank.models.ensemble",
    "SnippetScorer": "biorank.stages.snippets",
    "Pipeline": "biorank.pipeline",
    "PipelineSettings": "biorank.pipeline",
}

__all__ = [
    "Abstract", "Answer", "AskedPlacement", "BiorankError", "ConnectionSettings", "CrossEncoder", "Encoder",
    "Ensemble", "Filters", "Hit", "IndexOptions", "Indexer", "Pipeline", "PipelineSettings", "Reranker",
    "SearchSettings", "Searcher", "ShardReader", "Snippet", "SnippetScorer", "connect", "encode_corpus",
]

if TYPE_CHECKING:
    from biorank.config import ConnectionSettings
    from biorank.errors import BiorankError
    from biorank.indexer.indexer import Indexer, IndexOptions
    from biorank.indexer.shards import ShardReader, encode_corpus
    from biorank.models.cross_encoder import CrossEncoder
    from biorank.models.encoder import Encoder
    from biorank.models.ensemble import Ensemble
    from biorank.models.placement import AskedPlacement
    from biorank.pipeline import Pipeline, PipelineSettings
    from biorank.retrieval.filters import Filters
    from biorank.retrieval.searcher import Searcher, SearchSettings
    from biorank.stages.rerank import Reranker
    from biorank.stages.snippets import SnippetScorer
    from biorank.store.client import connect
    from biorank.types import Abstract, Answer, Hit, Snippet


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'biorank' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
