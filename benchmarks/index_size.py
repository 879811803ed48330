"""What does an index take on disk as a user measures it: `biorank stats` right after `biorank index`?

Indexes a corpus as a user would (`biorank index CORPUS --index NAME --recreate`, every default: the default
encoder, sentences with byte vectors), then reads `biorank stats --json` at once, with no force-merge of its own:
the size per abstract a user sees. `index` ends a build of a thousand documents or more by merging it once its
retention leases pass the last write (biorank/store/compaction.py), so the figure is the one the index keeps;
the record also keeps what `index` printed it merged from.

    python -m benchmarks.index_size                          # all of SciFact (5,183 abstracts)
    python -m benchmarks.index_size --corpus biorank/data/scifact-sample.jsonl.gz
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import suite

COLUMNS = suite.columns(("corpus", "corpus"), ("documents", "abstracts", ","), ("build_s", "index s", ",.0f"),
                        ("merged_from_mb", "before the merge MB", ",.1f"), ("documents_mb", "documents MB", ",.1f"),
                        ("sentences_mb", "sentences MB", ",.1f"), ("kb_per_abstract", "KB an abstract", ",.1f"))


def _biorank(*args: str) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, "-m", "biorank.cli", *args], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"biorank {' '.join(args)} failed:\n{run.stderr}")
    return run


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, index="biorank-bench-size")
    parser.add_argument("--corpus", type=Path, default=suite.data("scifact-corpus"), help="the abstracts to index")
    args = parser.parse_args(argv)
    client = suite.connect(args)
    url = ["--url", args.url] if args.url else []
    suite.header(f"{args.corpus.name} into {args.index}")
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    built = _biorank(*url, "index", str(args.corpus), "--index", args.index, "--recreate")
    seconds = time.monotonic() - started
    facts = json.loads(_biorank(*url, "stats", "--index", args.index, "--json").stdout)
    merged = re.search(r"compacted: ([\d,.]+) MB", built.stdout + built.stderr)
    sizes = facts["size_bytes"]
    documents = facts["documents"]
    rows = [{"corpus": f"{args.corpus.parent.name}/{args.corpus.name}", "documents": documents, "build_s": seconds,
             "merged_from_mb": float(merged.group(1).replace(",", "")) if merged else None,
             "documents_mb": sizes[facts["index"]] / 1e6,
             "sentences_mb": sizes.get(facts["sentences_index"] or "", 0) / 1e6,
             "kb_per_abstract": sum(sizes.values()) / documents / 1e3}]
    load = (round(load_before, 1), round(os.getloadavg()[0], 1))
    # shared data's SciFact is scifact/corpus.jsonl: the folder names it.
    named = args.corpus.parent.name if args.corpus.name.startswith("corpus.") else args.corpus.name.split(".")[0]
    suite.record(args, COLUMNS, rows, variant=named,
                 settings={"corpus": str(args.corpus), "defaults": True, "load_average": load},
                 notes=f"`biorank stats` read right after `biorank index` with every default; 1-minute load average "
                       f"{load[0]} at the start, {load[1]} at the end, on {os.cpu_count()} CPUs")
    client.indices.delete(index=f"{args.index},{args.index}-sentences", ignore_unavailable=True)


if __name__ == "__main__":
    main()
