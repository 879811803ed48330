"""Query terms marked the way a reader wants them: whole terms, as the index's analyser matched them, and never a
stray letter.

OpenSearch's highlighter tags every token of a text that its analyser matched to a query term, each token whole
(a stemmed "vitamins" whole, not "vitamin" inside it). That is right for words and wrong for the one- and
two-character terms biomedical queries are full of: for "vitamin D" it tags each "d" of "microg/d" and of
"25(OH)D", for "IL-6" each lone "6". So a term of at most :data:`SHORT` characters is marked only inside a phrase
with the query word it stands beside in the query: "D" right after a marked "vitamin" (or "vitamins"), with
nothing but spaces or a hyphen between them; everywhere else it is left unmarked. Longer terms are marked
wherever the analyser matched them. The snippets' sentences and the page's titles go through the same rule
(:func:`readable`), so the CLI, the API and the page mark the same spans.

The tags are control characters (:data:`MARK`), which never occur in indexed text: a tagged text is split back
into the original text and its spans, and kept only when it gives the original back exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from biorank.store.msearch import msearch

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

    from biorank.errors import BiorankError

MARK = ("\x02", "\x03")
"""The highlighter's pre- and post-tags."""
SHORT = 2
"""Terms of at most this many characters are marked only in a phrase with their neighbour in the query."""
PREFIX = 5
"""A marked neighbour is the query's word when both start alike for this many characters (or the shorter one's
length): "vitamins" for "vitamin", as an English stemmer would match it; "calcium" is not "vitamin"."""
_WORD = re.compile(r"\w+")
_JOIN = re.compile(r"[\s\-\u2010\u2011]*")
"""What may stand between the two words of a phrase: spaces and hyphens (a "-" in "IL-6")."""

Spans = tuple[tuple[int, int], ...]


def highlight_request(field: str) -> dict:
    """The ``highlight`` part of a search body that tags the query's terms in the whole of ``field``.

    ``require_field_match`` is off so that a field the query does not search (a title, when the query matches the
    title-and-abstract field) is tagged by the same terms, analysed by the same analyser.

    Example:
        >>> highlight_request("title")["fields"]
        {'title': {'number_of_fragments': 0}}
    """
    return {"fields": {field: {"number_of_fragments": 0}}, "pre_tags": [MARK[0]], "post_tags": [MARK[1]],
            "require_field_match": False}


def tagged_spans(marked: str | None, text: str) -> Spans:
    """The (begin, end) spans of ``text`` that the highlighter tagged in ``marked``; none where ``marked`` is
    missing or is not ``text`` with tags (a field analysed from other text)."""
    if not marked:
        return ()
    plain: list[str] = []
    spans: list[tuple[int, int]] = []
    begin = 0
    for char in marked:
        if char == MARK[0]:
            begin = len(plain)
        elif char == MARK[1]:
            spans.append((begin, len(plain)))
        else:
            plain.append(char)
    return tuple(spans) if "".join(plain) == text else ()


def readable(spans: Iterable[tuple[int, int]], text: str, query: str) -> Spans:
    """The spans of ``spans`` a reader should see marked: every term longer than :data:`SHORT` characters, and a
    shorter one only where it stands in a phrase with its neighbour in ``query`` (see the module's docstring).

    Args:
        spans: tagged spans of ``text`` (:func:`tagged_spans`), in any order.
        text: the text they mark.
        query: the words the highlighter was given.

    Returns:
        The spans kept, in order of position.

    Example:
        >>> text = "Vitamin D 10 microg/d"
        >>> readable([(0, 7), (8, 9), (20, 21)], text, "vitamin D")
        ((0, 7), (8, 9))
    """
    ordered = sorted(set(spans))
    words = [w.lower() for w in _WORD.findall(query)]
    kept = []
    for i, (begin, end) in enumerate(ordered):
        if end - begin > SHORT:
            kept.append((begin, end))
            continue
        term = text[begin:end].lower()
        before = ordered[i - 1] if i > 0 else None
        after = ordered[i + 1] if i + 1 < len(ordered) else None
        for at, word in enumerate(words):
            if word != term:
                continue
            left = words[at - 1] if at > 0 else None
            right = words[at + 1] if at + 1 < len(words) else None
            if (left and before and _joined(text, before[1], begin) and _alike(text[slice(*before)], left)) or \
                    (right and after and _joined(text, end, after[0]) and _alike(text[slice(*after)], right)):
                kept.append((begin, end))
                break
    return tuple(kept)


def _joined(text: str, end: int, begin: int) -> bool:
    return end <= begin and _JOIN.fullmatch(text, end, begin) is not None


def _alike(marked: str, word: str) -> bool:
    marked = marked.lower()
    if len(marked) <= SHORT or len(word) <= SHORT:
        return marked == word
    n = min(len(marked), len(word), PREFIX)
    return marked[:n] == word[:n]


def titles_and_fields(client: OpenSearch, index: str, query: str, doc_ids: Sequence[str], fields: Sequence[str], *,
                      refused: type[BiorankError]) -> dict[str, tuple[dict[str, Any], Spans]]:
    """``fields`` of each document's first block and the readable spans of its title that ``query``'s terms match
    (none for an empty query), in one search of their first blocks (which hold the title and the metadata): what a
    results page shows and marks in its headings, in one round trip to the cluster.

    Args:
        client: the cluster's client.
        index: the documents index.
        query: the words to mark (a PubMed-syntax query's words, not its operators).
        doc_ids: the documents; ids not in the index are left out.
        fields: the stored fields wanted besides the title.
        refused: the error to raise, in one line, where OpenSearch refuses the search.

    Returns:
        Document id -> (its ``fields``, the spans of its title; empty where no term is marked).

    Example:
        >>> found = titles_and_fields(client, "scifact", "vitamin D", ["3701541"], ("year",),  # doctest: +SKIP
        ...                           refused=BiorankError)
        >>> found  # doctest: +SKIP
        {'3701541': ({'year': 2012}, ((25, 32), (33, 34)))}
    """
    from biorank.store.failures import reason

    ids = list(dict.fromkeys(doc_ids))
    if not ids:
        return {}
    marking = bool(query.strip())
    body: dict[str, Any] = {"size": len(ids), "_source": ["id", "title", *fields],
                            "query": {"bool": {"filter": [{"terms": {"id": ids}}, {"term": {"block": 0}}]}}}
    if marking:
        body["query"]["bool"]["should"] = [{"match": {"title": query}}]
        body["highlight"] = highlight_request("title")
    [response] = msearch(client, [{"index": index}, body],
                         refused=lambda _, error: refused(f"OpenSearch refused to read the titles: {reason(error)}"))
    found = {}
    for hit in response["hits"]["hits"]:
        source = hit["_source"]
        title = source.get("title", "")
        spans = readable(tagged_spans((hit.get("highlight", {}).get("title") or [None])[0], title), title,
                         query) if marking else ()
        found[source["id"]] = ({field: source[field] for field in fields if field in source}, spans)
    return found
