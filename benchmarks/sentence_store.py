"""What does each way of storing sentence vectors cost per abstract, and what does it do to snippet MAP?

For each ``--sentence-vectors`` choice (``hnsw``: float vectors in an HNSW graph, every index before the choice;
``exact``: floats without a graph; ``byte``: a byte a component; ``none``: the top documents' sentences encoded at
query time):

- **quality**: the abstracts cited by the SciFact dev claims with evidence (the hash dev split of the train claims)
  plus the 300 bundled ones (cited by other train claims), indexed once by biorank's pipeline with sentences
  (all-MiniLM-L6-v2) and their bulk actions recorded, are replayed into an index pair stored the choice's way;
  ``hybrid+snippets`` with the untuned weights (similarity, lexical, document; no cross-encoder) answers every dev
  claim, and the evidence sentences give sentence MAP@10 (as ``biorank eval`` computes it); the snippet stage's ms
  a query over the first 30 claims, one at a time (the encoder's share included where ``none`` encodes);
- **size**: the recorded documents and sentences replayed ``--abstracts`` abstracts' worth (copies as
  ``benchmarks/scale.py`` makes them: new ids, vectors perturbed and re-normalised, so no encoding), each index
  force-merged to one segment; ``store.size`` per abstract, and projected to PubMed's 26 M abstracts (linearly).

    python -m benchmarks.sentence_store --abstracts 700         # quality, then sizes at ~700 abstracts
"""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from benchmarks import suite
from benchmarks.scale import RecordingWriter
from biorank import Encoder, Indexer, IndexOptions, Pipeline, Searcher
from biorank.demo import sample_path
from biorank.evaluation.phase_a import read_evidence_sentences, sentence_scores
from biorank.evaluation.splits import split_judged
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.models.encoder import PACKAGED_MODEL
from biorank.store.indices import refresh_paused
from biorank.store.mappings.documents import IndexSettings
from biorank.store.mappings.sentences import SENTENCE_VECTORS, sentences_index_body, stored_vector
from biorank.store.record import read_record, update_record
from biorank.store.server import bm25_similarity
from biorank.store.writer import BulkWriter

TIMED = 30
"""Dev claims whose snippet stage is timed one at a time."""
PUBMED_ABSTRACTS = 26_000_000
"""PubMed's citations with an abstract, for the projection (NLM's 2025 baseline: ~36 M citations)."""


def dev_claims() -> tuple[dict[str, str], dict[str, set[tuple[str, int]]]]:
    """The SciFact dev claims with evidence sentences: their text and their evidence."""
    qrels = read_qrels(suite.data("scifact-qrels-train"))
    gold = read_evidence_sentences(suite.data("scifact-claims-train"))
    queries = read_queries(suite.data("scifact-claims-train"))
    wanted = sorted(set(split_judged(qrels, "dev")) & gold.keys(), key=int)
    return {q: queries[q] for q in wanted}, {q: gold[q] for q in wanted}


def prepare(client, work: Path) -> None:
    """Index the measured abstracts once with sentences (today's way), recording the bulk actions."""
    if (work / "actions.jsonl.gz").is_file():
        return
    work.mkdir(parents=True, exist_ok=True)
    _, gold = dev_claims()
    with gzip.open(sample_path(), "rt", encoding="utf-8") as f:
        wanted = {json.loads(line)["doc_id"] for line in f}
    wanted |= {int(d) for sentences in gold.values() for d, _ in sentences}
    corpus = work / "corpus.jsonl"
    with suite.data("scifact-corpus").open("rb") as f, corpus.open("wb") as out:
        out.writelines(line for line in f if json.loads(line)["doc_id"] in wanted)
    index = f"bench-sentences-{uuid.uuid4().hex[:8]}"
    actions: list[dict] = []
    options = IndexOptions(index=index, rejects=work / "rejects.tsv", sentence_vectors="hnsw")
    Indexer(client, options, encoder=Encoder(PACKAGED_MODEL), writer=RecordingWriter(client, actions)).run([corpus])
    record = read_record(client, index)
    (work / "record.json").write_text(json.dumps({"model": record.model, "dimension": record.dimension,
                                                  "documents": client.indices.get(index=index)[index]}))
    client.indices.delete(index=f"{index},{record.sentences_index}")
    with gzip.open(work / "actions.jsonl.gz", "wt", encoding="utf-8") as f:
        for action in actions:
            f.write(json.dumps(action) + "\n")


def copies_of(actions: list[dict], copies: int, choice: str, seed: int = 7):
    """``actions`` ``copies`` times, each copy past the first with new ids and perturbed unit vectors (as
    ``benchmarks/scale.py`` grows an index), sentence vectors stored as ``choice`` stores them."""
    rng = np.random.default_rng(seed)
    for g in range(copies):
        for a in actions:
            source = dict(a["_source"])
            v = np.asarray(source.pop("embedding"), dtype=np.float32)
            if g:
                v = v + rng.normal(0, 0.025, v.shape).astype(np.float32)
                v /= np.linalg.norm(v)
                key = "doc_id" if "doc_id" in source else "id"
                source[key] = f"g{g}:{source[key]}"
            sentence = "doc_id" in source
            source |= stored_vector(choice, v) if sentence else {"embedding": v.tolist()}
            yield {**a, "_id": f"g{g}:{a['_id']}" if g else a["_id"], "_source": source, "sentence": sentence}


def build(client, work: Path, name: str, choice: str, copies: int, *, documents: bool = True,
          sentences_too: bool = True) -> int:
    """An index pair ``name`` (documents, unless ``documents`` is False) and ``name-sentences`` stored as
    ``choice`` (unless ``sentences_too`` is False), from ``copies`` of the recorded actions; returns the abstracts
    in it."""
    built = json.loads((work / "record.json").read_text())
    sentences = f"{name}-sentences"
    similarity = bm25_similarity(client)
    body = built["documents"]
    settings = {k: v for k, v in body["settings"]["index"].items()
                if k in ("number_of_shards", "number_of_replicas", "knn", "similarity", "analysis")}
    settings["similarity"]["default"]["type"] = similarity
    client.indices.delete(index=f"{name},{sentences}", ignore_unavailable=True)
    if documents:
        client.indices.create(index=name, body={"settings": {"index": settings}, "mappings": body["mappings"]})
        update_record(client, name, sentences_index=sentences, sentence_vectors=choice)
    if sentences_too:
        client.indices.create(index=sentences, body=sentences_index_body(
            IndexSettings(), model=built["model"], dimension=built["dimension"], documents_index=name,
            similarity=similarity, vectors=choice))
    abstracts = 0
    with gzip.open(work / "actions.jsonl.gz", "rt", encoding="utf-8") as f:
        actions = [json.loads(line) for line in f]
    with refresh_paused(client, [*([name] if documents else []), *([sentences] if sentences_too else [])]):
        def stream():
            nonlocal abstracts
            for a in copies_of(actions, copies, choice):
                if a.pop("sentence"):
                    if sentences_too:
                        yield {**a, "_index": sentences}
                elif documents:
                    abstracts += a["_source"].get("block") == 0
                    yield {**a, "_index": name}
        failures = BulkWriter(client).write(stream())
    if failures:
        raise SystemExit(f"{len(failures)} entries refused: {failures[0].reason}")
    return abstracts


def merged_bytes(client, index: str, field: str) -> int:
    """``store.size`` of ``index`` force-merged into one segment once its retention lease has passed every write.

    Until the lease passes a write, a merge keeps the entry's ``_recovery_source`` (the JSON of the vectors
    ``_source`` leaves out: ~7.6 KB a 384-d float vector), as a background merge during the bulk writes does; once
    it has passed, every merge drops it. So, after the wait, one more entry (``field``, a keyword of the mapping,
    and nothing else: a few bytes) makes a second segment, and the force-merge rewrites every entry without it, as
    the later merges of a live index do."""
    client.indices.refresh(index=index)
    client.indices.flush(index=index)
    deadline = time.monotonic() + 300
    while True:
        shard = client.indices.stats(index=index, level="shards")["indices"][index]["shards"]["0"][0]
        leases = shard["retention_leases"]["leases"]
        if min(lease["retaining_seq_no"] for lease in leases) > shard["seq_no"]["max_seq_no"]:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{index}: the retention lease did not pass the last write in 5 minutes")
        time.sleep(5)
    client.index(index=index, id="bench-rewrite", body={field: "bench-rewrite"}, refresh=True)
    client.indices.forcemerge(index=index, max_num_segments=1, request_timeout=3600)
    # The merged segment is searchable, and the merged-away ones gone, only after a refresh (an idle shard skips
    # its scheduled ones).
    while client.indices.refresh(index=index) and (shard := client.indices.stats(
            index=index, level="shards")["indices"][index]["shards"]["0"][0])["segments"]["count"] > 1:
        time.sleep(5)
    return shard["store"]["size_in_bytes"]


def quality(client, work: Path, choice: str) -> dict:
    """Snippet MAP@10 on the dev claims and the snippet stage's ms a query, for an index pair stored as
    ``choice``."""
    name = f"bench-sv-{choice}"
    build(client, work, name, choice, 1)
    queries, gold = dev_claims()
    pipeline = Pipeline.build("hybrid+snippets", Searcher.open(client, name))
    answers = pipeline.run(queries, 10)
    scores = sentence_scores(gold, {q: a.snippets for q, a in answers.items()})
    timed = list(queries.values())[:TIMED]
    for text in timed[:3]:  # warm: the encoder's first batches, the node's caches
        pipeline.search(text)
    ms = [pipeline.search(text).ms["snippets"] for text in timed]
    client.indices.delete(index=f"{name},{name}-sentences")
    return {"map": float(np.mean(list(scores["sentence-map@10"].values()))), "snippets_p50": suite.percentile(ms, 50),
            "snippets_p95": suite.percentile(ms, 95), "claims": len(queries)}


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    parser.add_argument("--abstracts", type=int, default=5000, help="abstracts to measure the sizes at")
    parser.add_argument("--choices", default=",".join(SENTENCE_VECTORS), help="of " + ", ".join(SENTENCE_VECTORS))
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "biorank-bench-sentences")
    args = parser.parse_args(argv)
    client = suite.connect(args)
    prepare(client, args.work)
    with gzip.open(args.work / "actions.jsonl.gz", "rt", encoding="utf-8") as f:
        recorded = sum(json.loads(line)["_source"].get("block") == 0 for line in f)
    copies = max(1, math.ceil(args.abstracts / recorded))
    started, load = time.time(), os.getloadavg()
    documents_name = "bench-sv-size-documents"
    abstracts = build(client, args.work, documents_name, "hnsw", copies, sentences_too=False)
    documents = merged_bytes(client, documents_name, "id") / abstracts
    client.indices.delete(index=documents_name)
    rows = []
    for choice in args.choices.split(","):
        figures = quality(client, args.work, choice)
        name = f"bench-sv-size-{choice}"
        build(client, args.work, name, choice, copies, documents=False)
        sentences = merged_bytes(client, f"{name}-sentences", "doc_id") / abstracts
        client.indices.delete(index=f"{name}-sentences")
        total = documents + sentences
        rows.append({"choice": choice, "documents_kb": documents / 1e3, "sentences_kb": sentences / 1e3,
                     "total_kb": total / 1e3, "pubmed_tb": total * PUBMED_ABSTRACTS / 1e12, **figures})
        print(rows[-1], flush=True)
    base = next((r["map"] for r in rows if r["choice"] == "hnsw"), float("nan"))
    for row in rows:
        row["map_delta"] = row["map"] - base
    cols = suite.columns(
        ("choice", "--sentence-vectors"), ("documents_kb", "documents KB/abstract", ".2f"),
        ("sentences_kb", "sentences KB/abstract", ".2f"), ("total_kb", "total KB/abstract", ".2f"),
        ("pubmed_tb", "PubMed (26 M) TB", ".2f"), ("map", "snippet MAP@10", ".4f"),
        ("map_delta", "against hnsw", "+.4f"), ("snippets_p50", "snippet stage p50 ms", ".0f"))
    suite.record(args, cols, rows, client=client, settings={
        "abstracts": abstracts, "recorded_abstracts": recorded, "copies": copies, "encoder": PACKAGED_MODEL,
        "claims": rows[0]["claims"] if rows else 0, "minutes": round((time.time() - started) / 60, 1),
        "load_average": {"start": round(load[0], 1), "end": round(os.getloadavg()[0], 1)}},
        notes="Sizes force-merged at the settings' abstracts (copies of real ones) and projected linearly; MAP on "
              "the SciFact dev claims over their cited abstracts and the 300 bundled ones; ms on a shared machine "
              "(its 1-minute load average at start and end in the settings).")


if __name__ == "__main__":
    main()
