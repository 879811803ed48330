"""Re-encoding an existing index in place with another encoder (a trained one), resumably.

Every block of the documents index and every sentence of its sentences index gets the new encoder's vector of
exactly the text indexing encoded (a block's ``passage``: title + its sentences; a sentence's ``text``), by
partial updates: vectors are not in ``_source``, so an update sends the vector alone and keeps the rest.

Entries are visited in a stable order (documents by ``id, block``, sentences by ``doc_id, section, number``)
and the position reached is recorded in the documents index's ``_meta.biorank.reencoding`` every
``record_every`` seconds, so an interrupted run continues from there (entries updated since the last record are
encoded once more, which changes nothing). While that record is present the index holds vectors of two
encoders, and searches that need vectors are refused (see :func:`biorank.store.record.check_record`).
At the end the index records the new encoder (``model``, ``model_source``, ``dimension``), so queries are
encoded with it; a λ tuned for the old encoder is set aside under ``replaced_encoder``, to be tuned again.
When only the query prefix changes (bge's instruction on or off), the stored vectors are already the new
encoder's: nothing is re-encoded, and only the record switches.

Only the encoder's weights may change: the blocks were cut, and the ``wordpieces`` fields split, by the old
encoder's tokenizer, so an encoder that splits words differently is refused before anything is written.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from biorank.errors import BiorankError
from biorank.indexer.blocks import block_budget
from biorank.store.indices import entries_in_order, refresh_paused
from biorank.store.mappings.sentences import stored_vector
from biorank.store.record import (
    LEGACY_SENTENCE_VECTORS,
    REENCODING,
    TUNED_FOR_ENCODER,
    IndexRecord,
    check_record,
    update_record,
)
from biorank.store.writer import BulkWriter
from biorank.types import StageProgress

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

    from biorank.models.encoder import Encoder

BLOCKS, SENTENCES, RECORDING = "blocks", "sentences", "recording"
STAGES = (BLOCKS, SENTENCES, RECORDING)
"""In order; the last is the switch of the index's encoder record."""
ORDER = {BLOCKS: ("id", "block"), SENTENCES: ("doc_id", "section", "number")}
TEXT = {BLOCKS: "passage", SENTENCES: "text"}


class ReencodeError(BiorankError):
    """The index cannot take the new encoder's vectors, or the cluster refused them."""


@dataclass
class ReencodeReport:
    index: str
    model: str
    previous_model: str
    blocks: int = 0
    sentences: int = 0
    seconds: float = 0.0
    resumed: bool = False
    already: bool = False
    """The index was encoded with this model already; nothing was done."""
    queries_only: bool = False
    """Only the query prefix changed: no vector was re-encoded, the record was switched."""
    dropped_lambda: float | None = None


def reencode_index(client: OpenSearch, index: str, encoder: Encoder, *, batch_size: int = 256,
                   record_every: float = 10.0, progress: StageProgress | None = None,
                   log: Callable[[str], None] = print) -> ReencodeReport:
    """Give every block and sentence of ``index`` the vector of ``encoder``, continuing an interrupted run.

    ``progress(stage, done, total)`` is told about blocks and sentences.
    """
    started = time.monotonic()
    record = check_record(client, index)
    if record.kind != "documents":
        raise ReencodeError(f"{index!r} is a biorank {record.kind} index; name its documents index")
    if record.dimension != encoder.dimension:
        raise ReencodeError(
            f"{encoder.source!r} makes {encoder.dimension}-dimensional vectors, {index!r} holds "
            f"{record.dimension}; build a new index with it: `biorank index ... --model {encoder.source}`")
    model = encoder.model_name
    state = dict(record.reencoding) if record.reencoding else None
    previous = (state or {}).get("previous") or record.model or "?"
    report = ReencodeReport(index, model, previous)
    if state and state.get("model") != model:
        log(f"{index} was being re-encoded with {state.get('model')}; starting over with {model}")
        state = None
    if state:
        report.resumed = True
        log(f"resuming the re-encoding of {index} with {model}: {state['done']} {state['stage']} done")
    elif record.model == model:
        report.already = True
        return report
    elif _same_passage_vectors(record, encoder):
        report.queries_only = True
        report.dropped_lambda = _switch_record(client, index, record.sentences_index, encoder, previous)
        report.seconds = time.monotonic() - started
        return report
    else:
        _check_tokenizer(client, index, record, encoder)
        state = {"model": model, "model_source": encoder.source, "previous": previous, "stage": BLOCKS,
                 "after": None, "done": 0}
        update_record(client, index, **{REENCODING: state})

    sentences_index = record.sentences_index
    if sentences_index and not client.indices.exists(index=sentences_index):
        sentences_index = None
    # An index that stores no sentence vectors has none to re-encode: its snippets encode with the new encoder.
    targets = {BLOCKS: index, SENTENCES: sentences_index if record.sentence_vectors != "none" else None}
    names = [name for name in targets.values() if name]
    with refresh_paused(client, names):
        for stage, following in itertools.pairwise(STAGES):
            if STAGES.index(state["stage"]) > STAGES.index(stage):
                continue
            if targets[stage]:
                done = _reencode(client, index, targets[stage], stage, encoder, state, batch_size, record_every,
                                 progress, record.sentence_vectors)
                setattr(report, stage, done)
            state = {**state, "stage": following, "after": None, "done": 0}
            update_record(client, index, **{REENCODING: state})

    report.dropped_lambda = _switch_record(client, index, sentences_index, encoder, previous)
    report.seconds = time.monotonic() - started
    return report


def _same_passage_vectors(record: IndexRecord, encoder: Encoder) -> bool:
    """Whether the index's vectors are those ``encoder`` makes: the same weights and passage prefix."""
    from biorank.models.prefixes import Prefixes

    recorded = Prefixes.from_mapping(record.prefixes)
    return recorded.passage == encoder.prefixes.passage and \
        record.model == encoder.name_with(encoder.prefixes.but(query=recorded.query))


def _switch_record(client: OpenSearch, index: str, sentences_index: str | None, encoder: Encoder,
                   previous: str) -> float | None:
    """Make ``encoder`` the index's encoder; sets aside (and returns) the λ tuned for the one before."""
    model = encoder.model_name
    if sentences_index and client.indices.exists(index=sentences_index):
        update_record(client, sentences_index, model=model, dimension=encoder.dimension)
    raw = check_record(client, index).raw
    replaced = {"model": previous, **{key: raw[key] for key in TUNED_FOR_ENCODER if key in raw}}
    default = {"default_lambda": encoder.default_lambda} if encoder.default_lambda else {}
    update_record(client, index, remove=(REENCODING, *TUNED_FOR_ENCODER, "default_lambda"), model=model,
                  model_source=encoder.source, prefixes=encoder.prefixes.as_prompts(), dimension=encoder.dimension,
                  replaced_encoder=replaced, **default)
    return replaced.get("lambda")


def _reencode(client: OpenSearch, index: str, target: str, stage: str, encoder: Encoder, state: dict,
              batch_size: int, record_every: float, progress: StageProgress | None,
              sentence_vectors: str = LEGACY_SENTENCE_VECTORS) -> int:
    """Re-encode one index from ``state``'s position; returns how many entries this run encoded."""
    total = client.count(index=target)["count"]
    done, encoded = state["done"], 0
    recorded = time.monotonic()
    writer = BulkWriter(client)
    if progress is not None:
        progress(stage, done, total)
    for hits in entries_in_order(client, target, sort=ORDER[stage], source=(TEXT[stage],), size=batch_size,
                                 after=state["after"]):
        vectors = encoder.encode([h["_source"].get(TEXT[stage], "") for h in hits])
        updates = zip(hits, vectors, strict=True)
        failures = writer.write({"_op_type": "update", "_index": target, "_id": h["_id"],
                                 "doc": stored_vector(sentence_vectors, vector) if stage == SENTENCES else
                                 {"embedding": vector.tolist()}} for h, vector in updates)
        if failures:
            raise ReencodeError(f"{len(failures)} {stage} of {target} were refused ({failures[0].id}: "
                                f"{failures[0].reason}); run the same command again to retry")
        done += len(hits)
        encoded += len(hits)
        state.update(after=hits[-1]["sort"], done=done)
        if time.monotonic() - recorded >= record_every:
            update_record(client, index, **{REENCODING: state})
            recorded = time.monotonic()
        if progress is not None:
            progress(stage, done, total)
    return encoded


def _check_tokenizer(client: OpenSearch, index: str, record: IndexRecord, encoder: Encoder,
                     probe: int = 200) -> None:
    """Refuse an encoder whose window or word pieces differ from those the blocks were cut with."""
    budget = block_budget(encoder.max_seq_length)
    if record.block_tokens not in (None, budget):
        raise ReencodeError(
            f"{index!r} was cut into blocks of {record.block_tokens} word pieces, {encoder.source!r} reads "
            f"{budget}; build a new index with it: `biorank index ... --model {encoder.source}`")
    hits = next(entries_in_order(client, index, sort=ORDER[BLOCKS], source=("passage", "wordpieces"), size=probe),
                [])
    stored = [h["_source"].get("wordpieces", "").split() for h in hits]
    if stored != encoder.tokenize_batch([h["_source"].get("passage", "") for h in hits]):
        raise ReencodeError(
            f"{encoder.source!r} splits words differently from the encoder {index!r} was built with, so its "
            f"blocks and word-piece fields would not match; build a new index with it instead")


