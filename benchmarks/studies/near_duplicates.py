"""From which cosine of two documents' block-0 vectors should ``--dedupe`` take them for one: real duplicates against
distinct papers on the same subject?

NFCorpus (``dev.docs``) holds the same abstract under several ids, and papers of one study that differ in a few
words (the same trial's results for two outcomes). Pairs are found by the texts alone (TF-IDF cosine of at least
0.5 over every pair), then labelled by the words they share (Jaccard of their word sets):

- **duplicate**: the same text, or at least 0.9 of their words shared (a re-posted abstract);
- **sibling**: 0.5 to 0.9 shared: another paper of the same study or group, which a reader wants to see;
- **related**: less than 0.5 shared: the ``--related`` most similar such pairs by TF-IDF, papers on one subject.

The documents of those pairs are indexed by biorank's indexer (no sentences) with ``--model`` at ``--precision``,
their stored block-0 vectors read back as ``--dedupe`` reads them, and for each threshold the record counts the
duplicate pairs it catches and the sibling and related pairs it would wrongly merge.

    python -m benchmarks.studies.near_duplicates --model bge-small-en-v1.5 --precision int8
    python -m benchmarks.studies.near_duplicates --model all-MiniLM-L6-v2
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import suite
from biorank import Encoder, Indexer, IndexOptions
from biorank.store.indices import delete_indices
from biorank.store.inspection import block_vectors

THRESHOLDS = (0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 0.995)
TFIDF_FLOOR = 0.5
DUPLICATE, SIBLING = 0.9, 0.5


def labelled_pairs(path: Path, related: int) -> tuple[dict[str, str], list[tuple[str, str, str, float]]]:
    """The documents and their (a, b, label, word Jaccard) pairs, as the module's docstring says."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = dict(line.rstrip("\n").split("\t", 1) for line in path.open(encoding="utf-8") if "\t" in line)
    ids, texts = list(docs), list(docs.values())
    matrix = TfidfVectorizer().fit_transform(texts)
    cosine = (matrix @ matrix.T).toarray()
    words = [set(t.split()) for t in texts]
    pairs, loose = [], []
    for i, j in np.argwhere(np.triu(cosine, 1) >= TFIDF_FLOOR):
        shared = len(words[i] & words[j]) / max(1, len(words[i] | words[j]))
        if texts[i] == texts[j] or shared >= DUPLICATE:
            pairs.append((ids[i], ids[j], "duplicate", shared))
        elif shared >= SIBLING:
            pairs.append((ids[i], ids[j], "sibling", shared))
        else:
            loose.append((cosine[i, j], ids[i], ids[j], shared))
    pairs += [(a, b, "related", shared) for _, a, b, shared in sorted(loose, reverse=True)[:related]]
    return docs, pairs


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("--model", default="bge-small-en-v1.5", help="the encoder (default: biorank's)")
    parser.add_argument("--precision", default="auto", help="its backend for documents")
    parser.add_argument("--related", type=int, default=200, help="related pairs (the most similar texts)")
    args = parser.parse_args(argv)
    started, load = time.time(), os.getloadavg()
    client = suite.connect(args)
    docs, pairs = labelled_pairs(suite.DATA / "nfcorpus" / "dev.docs", args.related)
    wanted = sorted({i for a, b, _, _ in pairs for i in (a, b)})
    index = f"near-duplicates-{args.model.lower().replace('/', '-')}"
    with tempfile.TemporaryDirectory() as work:
        subset = Path(work) / "pairs.docs"
        subset.write_text("".join(f"{i}\t{docs[i]}\n" for i in wanted), encoding="utf-8")
        delete_indices(client, index)
        encoder = Encoder(args.model, precision=args.precision)
        Indexer(client, IndexOptions(index=index, sentences=False, rejects=Path(work) / "rejects.tsv"),
                encoder=encoder).run([subset])
    vectors = {i: np.asarray(v) for i, (_, v) in block_vectors(client, index, wanted).items() if v}
    cosines: dict[str, list[float]] = {"duplicate": [], "sibling": [], "related": []}
    for a, b, label, _ in pairs:
        cosines[label].append(float(vectors[a] @ vectors[b] / np.linalg.norm(vectors[a]) / np.linalg.norm(vectors[b])))
    rows = []
    for threshold in THRESHOLDS:
        row = {"threshold": threshold}
        for label, values in cosines.items():
            row[label] = sum(c >= threshold for c in values)
        rows.append(row)
    spread = {label: {"pairs": len(v), "min": round(min(v), 4), "median": round(float(np.median(v)), 4),
                      "max": round(max(v), 4)} for label, v in cosines.items() if v}
    cols = suite.columns(("threshold", "cosine ≥", ".3f"),
                         ("duplicate", f"duplicates caught (of {len(cosines['duplicate'])})", "d"),
                         ("sibling", f"siblings merged (of {len(cosines['sibling'])})", "d"),
                         ("related", f"related merged (of {len(cosines['related'])})", "d"))
    print(spread)
    suite.record(args, cols, rows, variant=args.model.lower(), client=client, settings={
        "model": args.model, "precision": encoder.precision if hasattr(encoder, "precision") else args.precision,
        "documents": len(wanted), "cosine": spread, "tfidf_floor": TFIDF_FLOOR,
        "minutes": round((time.time() - started) / 60, 1),
        "load_average": {"start": round(load[0], 1), "end": round(os.getloadavg()[0], 1)}})
    delete_indices(client, index)


if __name__ == "__main__":
    main()
