"""Search results as a download: what ``POST /api/search`` answers for a ``format`` other than json, and what the
page's links (``GET /export``) fetch.

A download is the hits of the page asked for, each with the citation its first block holds
(:func:`biorank.export.cited_rows`), in one of :data:`biorank.export.FILE_FORMATS`, sent with its media type and
a ``Content-Disposition`` file name made of the query's letters and digits only (a header value never carries
user text as it is).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
from fastapi.responses import Response

from biorank.export import DOWNLOADS, FILE_FORMATS, SINGLE_QUERY, cited_rows, render

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

API_FORMATS = FILE_FORMATS
"""What ``format`` takes on ``POST /api/search``: json is the API's own answer, the rest are downloads."""
_NOT_NAME = re.compile(r"[^A-Za-z0-9]+")


def openapi_downloads() -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entry of a search that can answer with a file: JSON by default, each download's
    media type otherwise."""
    media = {d.media_type for name, d in DOWNLOADS.items() if name != "json"}
    content: dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
    content |= {m: {"schema": {"type": "string"}} for m in sorted(media)}
    return {200: {"description": "The hits as JSON (format json, the default), or as a download in the format "
                                 "asked for: RIS, BibTeX, CSV, TREC run lines or PMIDs, each with a "
                                 "Content-Disposition file name.", "content": content}}


def file_name(query: str, fmt: str) -> str:
    """``biorank-`` and the query's first words in letters, digits and ``-`` only, with the format's extension.

    Example:
        >>> file_name('BRCA1 "breast cancer"[ti]', "ris")
        'biorank-BRCA1-breast-cancer-ti.ris'
    """
    stem = _NOT_NAME.sub("-", query).strip("-")[:60].rstrip("-")
    return f"biorank-{stem or 'results'}.{DOWNLOADS[fmt].extension}"


async def download(client: OpenSearch, index: str, fmt: str, answer: Mapping[str, Any], tag: str) -> Response:
    """``answer`` (what :meth:`SearchService.search` returns) as a file in ``fmt``.

    Args:
        client: the cluster (the hits' citations are read from it, on a worker thread).
        index: the documents index searched.
        fmt: one of :data:`API_FORMATS`.
        answer: the search's answer: its ``query`` and ``hits``.
        tag: the run's name in TREC lines.

    Returns:
        The response: the file's text in UTF-8, its media type, and an attachment's file name.

    Example:
        >>> response = await download(client, "pubmed", "ris", answer, "biorank-hybrid")  # doctest: +SKIP
    """
    rows = await anyio.to_thread.run_sync(lambda: cited_rows(client, index, {SINGLE_QUERY: answer["hits"]}))
    text = render(fmt, rows, tag=tag)
    media = DOWNLOADS[fmt].media_type
    return Response(text.encode(), media_type=f"{media}; charset=utf-8", headers={
        "content-disposition": f'attachment; filename="{file_name(str(answer.get("query", "")), fmt)}"'})
