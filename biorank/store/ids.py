"""Storage ids: the ``_id`` of every block and sentence, derived from its document's source id without collisions.

Block 0 is stored under the document's id and block ``n`` under ``ID#n``. Taken as they are, a source id that
itself ends in ``#1`` would be block 1 of another document, and one would overwrite the other. So ``%`` and
``#`` in a source id are percent-escaped first: a block-0 id then never holds ``#``, block ``n`` has exactly one
``#`` before its number, and two source ids never share a storage id. Ids without ``%`` or ``#`` (PMIDs, SciFact,
BEIR and NFCorpus ids) are stored as they are. Sentence ids end in ``:section:number``, which reads back from
the right whatever the source id holds, so they need no escaping.

OpenSearch refuses an ``_id`` over 512 bytes and fails the whole bulk request with it, so a source id whose
derived ids could pass that is refused in advance (:func:`id_problem`), with a reason.
"""

from __future__ import annotations

MAX_ID_BYTES = 512
"""OpenSearch's limit for ``_id``."""

SUFFIX_ROOM = 24
"""Bytes kept free for the longest suffix added to a source id (``:abstract:`` and a sentence number)."""


def storage_id(doc_id: str) -> str:
    """The ``_id`` of the document's block 0 (its whole record)."""
    return doc_id.replace("%", "%25").replace("#", "%23")


def block_id(doc_id: str, number: int) -> str:
    return storage_id(doc_id) if number == 0 else f"{storage_id(doc_id)}#{number}"


def sentence_id(doc_id: str, section: str, number: int) -> str:
    return f"{doc_id}:{section}:{number}"


def id_problem(doc_id: str) -> str | None:
    """Why ``doc_id`` cannot be stored, or None: its derived ids must fit OpenSearch's 512-byte ``_id``."""
    longest = max(len(storage_id(doc_id).encode()), len(doc_id.encode()))
    if longest + SUFFIX_ROOM > MAX_ID_BYTES:
        return (f"id too long: {len(doc_id.encode())} bytes, at most {MAX_ID_BYTES - SUFFIX_ROOM} "
                f"(its block and sentence ids must fit OpenSearch's {MAX_ID_BYTES}-byte _id)")
    return None
