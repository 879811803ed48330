"""What do MEDLINE's bibliographic fields cost the PubMed reader, and what does writing hits as RIS, BibTeX, CSV,
TREC, PMIDs or JSON Lines cost beside a query?

The reader's side: full passes over a real MEDLINE file (``medline16n0902.xml.gz``, 604 citations) as biorank
reads it (authors, DOI, publication types, major MeSH, the journal's abbreviation included), alternated with
passes that skip that extraction (its helpers stubbed for the pass), so both see the same load. The export's side:
each format rendered from rows as an index returns them (the file's citations with every stored field and
abstract), for a page of the API (100 hits) and a batch query (1,000 hits). No cluster: fetching the rows is one
``mget`` of block 0s (``first_blocks``), which the API pays per page already for journal, year and MeSH.

    python -m benchmarks.export_cost
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks import suite
from biorank.export import FILE_FORMATS, render
from biorank.indexer import pubmed_xml
from biorank.types import Abstract

MEDLINE = suite.DATA / "pubmed" / "medline16n0902.xml.gz"
COLUMNS = suite.columns(("what", "what"), ("size", "size"), ("p50", "p50 ms", ".2f"), ("p95", "p95 ms", ".2f"),
                        ("per_item_us", "µs per citation or hit", ".1f"))
_HELPERS = {"_authors": lambda article: (), "_doi": lambda article, ids: None, "_texts": lambda elements: ()}


def _read(file: Path) -> list[Abstract]:
    return [r for r in pubmed_xml.read_pubmed(file, file.name, 1 << 20) if isinstance(r, Abstract)]


def _read_without_fields(file: Path) -> list[Abstract]:
    saved = {name: getattr(pubmed_xml, name) for name in _HELPERS}
    for name, stub in _HELPERS.items():
        setattr(pubmed_xml, name, stub)
    try:
        return _read(file)
    finally:
        for name, helper in saved.items():
            setattr(pubmed_xml, name, helper)


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, cluster=False)
    parser.add_argument("--rounds", type=int, default=7, help="passes over the file per side, and renders per size")
    args = parser.parse_args(argv)
    records = _read(MEDLINE)
    suite.header(f"{len(records)} citations; {args.rounds} rounds; {os.cpu_count()} cores, load average "
                 f"{os.getloadavg()[0]:.1f} at the start")
    passes: dict[str, list[float]] = {"with": [], "without": []}
    _read(MEDLINE), _read_without_fields(MEDLINE)  # warm: the file in the page cache, lxml loaded
    for _ in range(args.rounds):
        for side, read in (("with", _read), ("without", _read_without_fields)):
            started = time.perf_counter()
            read(MEDLINE)
            passes[side].append((time.perf_counter() - started) * 1000)
    rows = []
    for side, label in (("without", "read the file, without the bibliographic fields"),
                        ("with", "read the file, with them (biorank)")):
        p50 = suite.percentile(passes[side], 50)
        rows.append({"what": label, "size": len(records), "p50": round(p50, 2),
                     "p95": round(suite.percentile(passes[side], 95), 2),
                     "per_item_us": round(1000 * p50 / len(records), 1)})
    stored = [{k: v for k, v in asdict(r).items() if k not in ("source", "line", "sentences") and v not in (
        None, "", ())} for r in records]
    for size in (100, 1000):
        made = [{"query_id": "1", "rank": i + 1, "score": 1.0 / (i + 1), **stored[i % len(stored)]}
                for i in range(size)]
        for fmt in FILE_FORMATS:
            times = suite.timed(lambda rows, fmt=fmt: render(fmt, rows, tag="biorank-hybrid"), [made], warm=1,
                                repeat=args.rounds)
            p50 = statistics.median(times)
            rows.append({"what": f"render {fmt}", "size": size, "p50": round(p50, 2),
                         "p95": round(suite.percentile(times, 95), 2), "per_item_us": round(1000 * p50 / size, 1)})
    suite.record(args, COLUMNS, rows, settings={"file": MEDLINE.name, "citations": len(records),
                                               "rounds": args.rounds},
                 notes=f"{os.cpu_count()} cores shared with other work; load average {os.getloadavg()[0]:.1f} at "
                       "the end. Rendered rows repeat the file's citations (a 1,000-hit query holds each document "
                       "once; RIS, BibTeX and PMIDs write each document once, so at 1,000 they write 604)")


if __name__ == "__main__":
    main()
