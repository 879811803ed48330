"""``biorank demo``: a real collection indexed and searched on the embedded node, end to end."""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from biorank.indexer.indexer import Indexer, IndexOptions, IndexReport
from biorank.store.record import IndexMismatch
from biorank.types import Advance

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

    from biorank.models.encoder import Encoder

DEMO_INDEX = "biorank-demo"
DEMO_QUERY = "Does a deficiency of vitamin B12 raise blood homocysteine levels?"
SAMPLE_SIZE = 300


def sample_path() -> str:
    return str(resources.files("biorank") / "data" / "scifact-sample.jsonl.gz")


def index_sample(
    client: OpenSearch,
    index: str = DEMO_INDEX,
    *,
    encoder: Encoder | None = None,
    progress: Advance | None = None,
) -> IndexReport:
    """Index the bundled SciFact sample into ``index``; a second run finds it in and is quick.

    The demo owns its index: one left by an older biorank (another mapping or encoder) is rebuilt.
    """
    options = IndexOptions(index=index, format="scifact")
    try:
        return Indexer(client, options, encoder=encoder).run([sample_path()], progress=progress)
    except IndexMismatch:
        options = IndexOptions(index=index, format="scifact", recreate=True)
        return Indexer(client, options, encoder=encoder).run([sample_path()], progress=progress)
