"""Snippets: the sentences of a query's top documents that best answer it, located by BioASQ offsets.

This is the lexical perspective on its own: BM25 of each sentence (the sentences index's ``text``), among
the sentences of the documents the first stage returned. It is what BioASQ Phase A asks for beside the
documents (at most 10 snippets, each with its section and character offsets), and the base that the
multi-perspective sentence scorer of Rawal & Baral builds on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from biorank.errors import BiorankError
from biorank.indexer.indices import check_index_meta
from biorank.indexer.records import Sentence

if TYPE_CHECKING:
    from opensearchpy import OpenSearch


@dataclass(frozen=True, slots=True)
class Snippet(Sentence):
    """A sentence found for a query: its section and offsets are BioASQ's ``beginSection`` (= ``endSection``,
    a sentence never spans sections), ``offsetInBeginSection`` and ``offsetInEndSection`` (exclusive)."""

    score: float = 0.0


class SnippetFinder:
    """Finds snippets in the sentences index that belongs to a biorank documents index."""

    def __init__(self, client: OpenSearch, index: str) -> None:
        self.client = client
        sentences = check_index_meta(client, index).get("sentences_index")
        if not sentences or not client.indices.exists(index=sentences):
            raise BiorankError(f"index {index!r} has no sentences index: re-index without --no-sentences")
        self.sentences_index = sentences

    def snippets_many(self, requests: Mapping[str, tuple[str, Sequence[str]]], k: int = 10,
                      batch: int = 32) -> dict[str, list[Snippet]]:
        """For each key, the ``k`` best sentences for ``query`` among the sentences of ``doc_ids``."""
        results: dict[str, list[Snippet]] = {}
        items = list(requests.items())
        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            lines: list[dict] = []
            for _, (query, doc_ids) in chunk:
                lines += [{"index": self.sentences_index}, self.request(query, doc_ids, k)]
            responses = self.client.msearch(body=lines)["responses"] if lines else []
            for (key, _), response in zip(chunk, responses, strict=True):
                if "error" in response:
                    raise BiorankError(f"OpenSearch refused the snippet query: {response['error']}")
                results[key] = [_snippet(h) for h in response["hits"]["hits"]]
        return results

    @staticmethod
    def request(query: str, doc_ids: Sequence[str], k: int = 10) -> dict:
        return {
            "size": k,
            "query": {"bool": {"must": [{"match": {"text": query}}],
                               "filter": [{"terms": {"doc_id": list(doc_ids)}}]}},
            "_source": ["doc_id", "section", "number", "begin", "end", "text"],
        }


def _snippet(hit: dict) -> Snippet:
    s = hit["_source"]
    return Snippet(s["doc_id"], s["section"], s["number"], s["begin"], s["end"], s["text"], float(hit["_score"]))
