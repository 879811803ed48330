"""The first stage on a real node over the 300 bundled SciFact abstracts, indexed by biorank's own pipeline."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli import cli
from biorank.errors import BiorankError
from biorank.models.encoder import Encoder
from biorank.models.names import packaged_model_dir
from biorank.pipeline import BASE_SYSTEMS
from biorank.retrieval.clauses import KNN_SCORE
from biorank.retrieval.filters import Filters
from biorank.retrieval.fusion import min_max_fusion, rrf_fusion
from biorank.retrieval.modes import MODE_TABLE, Query
from biorank.retrieval.searcher import MODES, QueryError, Searcher, SearchSettings
from biorank.store.record import IndexMismatch, check_record
from biorank.types import Hit

QUERY = "Folic acid supplementation lowers homocysteine levels"
def _hybrid_parts(query: dict) -> tuple[dict, list[dict], float]:
    """The vector script, the BM25 clauses and λ of a hybrid query body."""
    (exact,) = query["bool"]["must"]
    text = query["bool"]["should"][-1]["bool"]
    return exact["script_score"]["script"], text["should"], text["boost"]


HOSTILE = 'homocysteine"); return 1e9; // \'} {"script": "Math.random()"} params.lam = 1000;'


def _searcher(opensearch: OpenSearch, index: str, encoder: Encoder, **settings) -> Searcher:
    return Searcher.open(opensearch, index, SearchSettings(**settings), encoder=encoder)


def _block_vector(opensearch: OpenSearch, index: str, entry_id: str) -> np.ndarray:
    body = {"query": {"ids": {"values": [entry_id]}}, "_source": False,
            "script_fields": {"v": {"script": {"source": "doc['embedding'].value"}}}}
    values = opensearch.search(index=index, body=body)["hits"]["hits"][0]["fields"]["v"]
    return np.array(values, dtype=np.float32).ravel()


def _entry_id(hit: Hit) -> str:
    return hit.id if hit.block == 0 else f"{hit.id}#{hit.block}"


def test_hybrid_is_lambda_bm25_plus_dot_product(opensearch, sample_index, default_encoder) -> None:
    lam = 0.07
    hits = _searcher(opensearch, sample_index, default_encoder, lam=lam).search(QUERY, k=10)
    q = default_encoder.encode([QUERY])[0]
    assert len({h.id for h in hits}) == len(hits) == 10
    for hit in hits:
        explained = opensearch.explain(index=sample_index, id=_entry_id(hit),
                                       body={"query": {"match": {"passage": QUERY}}})
        bm25 = explained["explanation"]["value"] if explained["matched"] else 0.0
        dense = float(q @ _block_vector(opensearch, sample_index, _entry_id(hit)))
        assert hit.bm25 == pytest.approx(bm25, abs=1e-3)
        assert hit.dense == pytest.approx(dense, abs=1e-3)
        assert hit.score == pytest.approx(lam * bm25 + dense, abs=1e-4)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_lambda_zero_orders_like_exact_dense(opensearch, sample_index, default_encoder) -> None:
    hybrid = _searcher(opensearch, sample_index, default_encoder, lam=0.0).search(QUERY, k=20)
    dense = _searcher(opensearch, sample_index, default_encoder, mode="dense-exact").search(QUERY, k=20)
    assert [h.id for h in hybrid] == [h.id for h in dense]
    assert [h.score for h in hybrid] == pytest.approx([h.dense for h in dense], abs=1e-5)


def test_a_huge_lambda_orders_like_bm25(opensearch, sample_index, default_encoder) -> None:
    hybrid = _searcher(opensearch, sample_index, default_encoder, lam=1e4).search(QUERY, k=10)
    bm25 = _searcher(opensearch, sample_index, default_encoder, mode="bm25", fields="passage").search(QUERY, k=10)
    assert [h.id for h in hybrid] == [h.id for h in bm25]


def test_approximate_equals_exact_when_k_covers_the_collection(opensearch, sample_index, default_encoder) -> None:
    exact = _searcher(opensearch, sample_index, default_encoder).search(QUERY, k=50)
    approx = _searcher(opensearch, sample_index, default_encoder, mode="hybrid-approx",
                       candidates=300).search(QUERY, k=50)
    assert [(h.id, h.block) for h in approx] == [(h.id, h.block) for h in exact]
    assert [h.score for h in approx] == pytest.approx([h.score for h in exact], abs=1e-6)
    # With few candidates it still scores them exactly: the top document is found by both lists.
    small = _searcher(opensearch, sample_index, default_encoder, mode="hybrid-approx", candidates=5).search(QUERY)
    assert small[0].id == exact[0].id and small[0].score == pytest.approx(exact[0].score, abs=1e-6)


def test_dense_knn_agrees_with_exact_dense_on_a_small_index(opensearch, sample_index, default_encoder) -> None:
    knn = _searcher(opensearch, sample_index, default_encoder, mode="dense").search(QUERY, k=10)
    exact = _searcher(opensearch, sample_index, default_encoder, mode="dense-exact").search(QUERY, k=10)
    assert [h.id for h in knn] == [h.id for h in exact]
    assert [h.dense for h in knn] == pytest.approx([h.dense for h in exact], abs=1e-4)


@pytest.mark.engines
def test_blocks_collapse_to_one_hit_per_document(opensearch, sample_index, default_encoder, neural_search) -> None:
    # A sentence that sits in the second block of a long abstract finds the document through that block.
    second = opensearch.search(index=sample_index, body={"size": 1, "query": {"term": {"block": 1}},
                                                         "_source": ["id", "passage", "title"]})["hits"]["hits"][0]
    passage = second["_source"]["passage"].removeprefix(second["_source"]["title"]).strip()
    text = passage[:300]
    modes = ("bm25", "dense", "dense-exact", "hybrid", "hybrid-approx", "rrf", "minmax")
    for mode in (*modes, "os-hybrid") if neural_search else modes:
        fields = "passage" if mode == "bm25" else None
        hits = _searcher(opensearch, sample_index, default_encoder, mode=mode, fields=fields).search(text, k=20)
        assert len({h.id for h in hits}) == len(hits), mode
        assert second["_source"]["id"] in [h.id for h in hits[:3]], mode
    hybrid = _searcher(opensearch, sample_index, default_encoder).search(text, k=1)[0]
    assert (hybrid.id, hybrid.block) == (second["_source"]["id"], 1)


def test_word_piece_fields_search(opensearch, sample_index, default_encoder) -> None:
    for fields in ("wordpieces", "wordpieces+bigrams", "title+abstract"):
        hits = _searcher(opensearch, sample_index, default_encoder, mode="bm25", fields=fields).search(QUERY, k=10)
        assert len(hits) == 10 and all(h.bm25 > 0 for h in hits), fields
    plain = _searcher(opensearch, sample_index, default_encoder, mode="bm25", fields="wordpieces").search(QUERY)
    bigrams = _searcher(opensearch, sample_index, default_encoder, mode="bm25",
                        fields="wordpieces+bigrams").search(QUERY)
    # Bigram matches add to the unigram score of documents that have the query's word-piece pairs.
    assert bigrams[0].bm25 > plain[0].bm25


def test_rrf_and_minmax_match_hand_computed_examples() -> None:
    bm25 = [Hit("a", "", 1, 9.0, bm25=9.0), Hit("b", "", 2, 6.0, bm25=6.0), Hit("c", "", 3, 3.0, bm25=3.0)]
    dense = [Hit("c", "", 1, 0.8, dense=0.8), Hit("a", "", 2, 0.6, dense=0.6), Hit("d", "", 3, 0.4, dense=0.4)]
    fused = rrf_fusion(bm25, dense, k=4, rrf_k=60)
    # a: 1/61 + 1/62; c: 1/63 + 1/61; b: 1/62; d: 1/63.
    assert [h.id for h in fused] == ["a", "c", "b", "d"]
    assert [h.score for h in fused] == pytest.approx([1 / 61 + 1 / 62, 1 / 63 + 1 / 61, 1 / 62, 1 / 63])
    assert fused[0].bm25 == 9.0 and fused[0].dense == 0.6 and fused[2].dense is None
    mm = min_max_fusion(bm25, dense, k=4)
    # bm25 → a 1, b .5, c 0; dense → c 1, a .5, d 0; mean with missing = 0.
    assert [(h.id, h.score) for h in mm] == [("a", pytest.approx(0.75)), ("c", pytest.approx(0.5)),
                                             ("b", pytest.approx(0.25)), ("d", pytest.approx(0.0))]


def test_user_text_never_changes_the_script(opensearch, sample_index, default_encoder) -> None:
    for mode in ("hybrid", "hybrid-approx"):
        searcher = _searcher(opensearch, sample_index, default_encoder, mode=mode)
        final = searcher.sent_requests(HOSTILE, k=5)[-1][1]
        script, text, lam = _hybrid_parts(final["query"])
        assert script["lang"] == "knn" and script["source"] == KNN_SCORE
        assert set(script["params"]) == {"field", "query_value", "space_type"} and HOSTILE not in json.dumps(script)
        assert text == [{"match": {"passage": HOSTILE}}] and isinstance(lam, float)
        hits = searcher.search(HOSTILE, k=5)
        assert hits and max(h.score for h in hits) < 10


def test_empty_and_overlong_queries_are_refused(opensearch, sample_index, default_encoder) -> None:
    searcher = _searcher(opensearch, sample_index, default_encoder, mode="bm25")
    with pytest.raises(QueryError, match="empty"):
        searcher.search("   ")
    with pytest.raises(QueryError, match="at most"):
        searcher.search("homocysteine " * 1000)
    with pytest.raises(QueryError, match="unknown mode"):
        SearchSettings(mode="magic")


def test_another_encoder_is_refused(opensearch, sample_index, tmp_path: Path) -> None:
    other = Encoder(str(shutil.copytree(packaged_model_dir()[0], tmp_path / "other-encoder")))
    with pytest.raises(IndexMismatch, match="built with the encoder"):
        Searcher.open(opensearch, sample_index, SearchSettings(mode="dense"), encoder=other)


def test_cli_query_json_and_show_query(opensearch_url: str, sample_index: str) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["--url", opensearch_url, "query", QUERY, "--index", sample_index, "-k", "3",
                                 "--json", "--show-query"])
    assert result.exit_code == 0, result.output
    request_text, _, hits_text = result.output.partition("\n\n{")
    # What Dev Tools needs to get the same answer: the global BM25 statistics of a sharded index, no partial results.
    assert request_text.startswith(
        f"GET {sample_index}/_search?allow_partial_search_results=false&search_type=dfs_query_then_fetch\n")
    body = json.loads(request_text.split("\n", 1)[1])
    assert _hybrid_parts(body["query"])[0]["source"] == KNN_SCORE
    hits = [json.loads(line) for line in ("{" + hits_text).splitlines() if line.strip()]
    assert [h["rank"] for h in hits] == [1, 2, 3] and {"bm25", "dense", "hybrid"} <= hits[0].keys()

    bad = runner.invoke(cli, ["--url", opensearch_url, "query", "", "--index", sample_index])
    assert bad.exit_code == 1 and bad.output.strip().startswith("Error:") and "Traceback" not in bad.output


def test_cli_search_writes_a_trec_run_and_tune_lambda_stores_lambda(
    opensearch: OpenSearch, opensearch_url: str, sample_index: str, sample_claims: tuple[Path, Path], tmp_path: Path
) -> None:
    queries, qrels = sample_claims
    chosen = queries.read_text().splitlines()
    runner = CliRunner()
    run = tmp_path / "run.trec"
    result = runner.invoke(cli, ["--url", opensearch_url, "search", "--queries", str(queries), "--output", str(run),
                                 "--index", sample_index, "--mode", "bm25", "-k", "20"])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in run.read_text().splitlines()]
    assert len({line[0] for line in lines}) == len(chosen) and all(len(line) == 6 for line in lines)
    assert all(int(line[3]) <= 20 for line in lines)

    plot = tmp_path / "lambda.png"
    result = runner.invoke(cli, ["--url", opensearch_url, "tune-lambda", "--queries", str(queries), "--qrels",
                                 str(qrels), "--index", sample_index, "--split", "all", "--grid", "0,0.05,1",
                                 "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert plot.read_bytes().startswith(b"\x89PNG")
    best = float(result.output.split("stored λ = ")[1].split()[0])
    assert "← best" in result.output and best in (0.0, 0.05, 1.0)
    record = check_record(opensearch, sample_index)
    assert record.tuned_lambda == best and record.lambda_tuning["metric"] == "ndcg@10"
    assert Searcher.open(opensearch, sample_index).lam == best


@pytest.mark.engines
def test_neural_search_hybrid_is_min_max_of_the_two_lists(opensearch, sample_index, default_encoder,
                                                          neural_search) -> None:
    """OpenSearch's own hybrid (neural-search plugin) on the same index: min-max normalised lists, averaged; on a
    cluster without the plugin (biorank's 3.x node), one line that says why and what to use instead."""
    K = 300
    if not neural_search:
        with pytest.raises(BiorankError) as refused:
            _searcher(opensearch, sample_index, default_encoder, mode="os-hybrid").search(QUERY, 10)
        message = str(refused.value)
        assert "\n" not in message and "neural-search plugin" in message and "--mode minmax" in message
        return
    os_hits = _searcher(opensearch, sample_index, default_encoder, mode="os-hybrid", candidates=K).search(QUERY, 10)
    bm25 = opensearch.search(index=sample_index, body={"size": K, "query": {"match": {"passage": QUERY}},
                                                      "_source": ["id"]})["hits"]["hits"]
    q = default_encoder.encode([QUERY])[0].tolist()
    knn = opensearch.search(index=sample_index, body={"size": K, "query": {"knn": {"embedding": {"vector": q, "k": K}}},
                                                     "_source": ["id"]})["hits"]["hits"]

    def normalised(hits: list[dict]) -> dict[str, float]:
        low, high = hits[-1]["_score"], hits[0]["_score"]
        # neural-search lifts a list's lowest score from 0 to 0.001 so that it is not dropped.
        return {h["_id"]: max((h["_score"] - low) / (high - low), 0.001) for h in hits}

    left, right = normalised(bm25), normalised(knn)
    by_entry = {e: 0.5 * left.get(e, 0) + 0.5 * right.get(e, 0) for e in left.keys() | right.keys()}
    expected: dict[str, float] = {}
    for entry, score in sorted(by_entry.items(), key=lambda item: -item[1]):
        expected.setdefault(entry.split("#")[0], score)
    top = sorted(expected, key=lambda d: -expected[d])[:10]
    assert [h.id for h in os_hits] == top
    assert [h.score for h in os_hits] == pytest.approx([expected[d] for d in top], abs=1e-5)


def test_an_index_built_with_a_local_model_is_searched_with_that_model(
    opensearch: OpenSearch, index_name: str, tmp_path: Path
) -> None:
    from biorank.demo import sample_path
    from biorank.indexer.indexer import Indexer, IndexOptions

    corpus = tmp_path / "few.jsonl"
    with gzip.open(sample_path(), "rt", encoding="utf-8") as f:
        corpus.write_text("".join(next(f) for _ in range(20)), encoding="utf-8")
    local = Encoder(str(shutil.copytree(packaged_model_dir()[0], tmp_path / "my-minilm")))
    Indexer(opensearch, IndexOptions(index=index_name, rejects=tmp_path / "r.tsv"), encoder=local).run([corpus])
    searcher = Searcher.open(opensearch, index_name, SearchSettings(mode="hybrid"))  # no encoder given
    hits = searcher.search(QUERY, k=5)
    assert searcher.encoder.model_name == local.model_name and len(hits) == 5


def test_request_bodies_are_built_offline_with_user_text_only_as_match_text_and_params() -> None:
    from biorank.retrieval.clauses import text_query

    text = 'statins"; return 1e9; //'
    query = Query("q", text, [0.5, 0.5])
    body = MODE_TABLE["hybrid"](fields="passage", lam=0.25).body(query, 10)
    script, clauses, lam = _hybrid_parts(body["query"])
    assert script["source"] == KNN_SCORE and text not in json.dumps(script)
    assert lam == 0.25 and script["params"]["query_value"] == [0.5, 0.5]
    assert clauses == [{"match": {"passage": text}}]
    assert body["collapse"] == {"field": "id"} and body["size"] == 10 and "explain" not in body
    assert MODE_TABLE["bm25"](fields="text", lam=0.0).body(query, 5, light=True)["_source"] == ["id"]
    assert MODE_TABLE["dense"](fields="passage", lam=0.0).body(query, 5)["query"]["knn"]["embedding"]["k"] == 100
    assert text_query("wordpieces+bigrams", text, "stat ##ins") == {"bool": {"should": [
        {"match": {"wordpieces": "stat ##ins"}}, {"match": {"wordpieces.bigrams": "stat ##ins"}}]}}
    assert text_query("title+abstract", text, None)["multi_match"]["fields"] == ["title", "abstract"]


def _answer(*ids: str, score: float = 1.5, dense: float | None = None) -> dict:
    """An OpenSearch answer as the cluster writes it, for the offline rounds."""
    fields = {"fields": {"dense": [dense]}} if dense is not None else {}
    return {"hits": {"hits": [{"_id": i, "_score": score - n / 10, "_source": {"id": i, "title": i, "block": 0},
                               **fields} for n, i in enumerate(ids)]}}


def test_every_mode_builds_its_requests_and_reads_its_answers_without_a_cluster() -> None:
    """Each mode of the table, round by round, on answers written out here: no cluster, no searcher."""
    queries = [Query("q1", "folic acid", [0.6, 0.8]), Query("q2", "statins", [1.0, 0.0])]
    filters = ({"range": {"year": {"gte": 2015}}},)
    seen = set()
    for name, cls in MODE_TABLE.items():
        mode = cls(fields=cls.default_fields, lam=0.5, filters=filters, candidates=7)
        answers = None
        for _ in range(mode.rounds):
            requests = mode.requests(queries, 3, answers, explain=True)
            for request in requests:
                text = json.dumps(request.body)
                assert '"gte": 2015' in text, name  # every request of every mode is filtered
                assert request.text_scored == ('"match"' in text), name  # BM25 scores exactly the text-scored ones
                seen.add(type(mode).__name__)
            answers = {r.key: _answer("d1", "d2", dense=0.25) for r in requests}
        hits = mode.hits(queries, 3, answers)
        assert set(hits) == {"q1", "q2"} and all(h.id in ("d1", "d2") for found in hits.values() for h in found)
    assert tuple(MODE_TABLE) == MODES and len(seen) == 8
    # The union's second round scores exactly the documents of the first round's two lists.
    union = MODE_TABLE["hybrid-approx"](fields="passage", lam=0.5, candidates=7)
    first = union.requests(queries[:1], 3)
    assert [r.key for r in first] == [("q1", "bm25"), ("q1", "dense")] and first[0].body["size"] == 7
    (second,) = union.requests(queries[:1], 3, {("q1", "bm25"): _answer("b", "a"), ("q1", "dense"): _answer("c", "a")},
                               explain=True)
    candidates = second.body["query"]["bool"]["must"][0]["script_score"]["query"]["bool"]["filter"][0]
    assert candidates == {"terms": {"id": ["a", "b", "c"]}} and second.body["explain"] is True
    # Parts read back: a hybrid hit's BM25 is what is left of its score after ⟨q, p⟩ and the shift of 1.
    (hit,) = MODE_TABLE["hybrid"](fields="passage", lam=0.5).hits(queries[:1], 1, {"q1": _answer("d", score=2.0,
                                                                                                   dense=0.5)})["q1"]
    assert (hit.hybrid, hit.dense, hit.bm25) == (1.0, 0.5, 1.0)
    assert MODE_TABLE["os-hybrid"](fields="passage", lam=0.5).requests(queries, 3)[0].alone
    fused = MODE_TABLE["rrf"](fields="passage", lam=0.5).hits(queries[:1], 2, {
        ("q1", "bm25"): _answer("a", "b"), ("q1", "dense"): _answer("b", "c")})["q1"]
    assert [h.id for h in fused] == ["b", "a"]


def test_searchers_and_snippet_scorers_are_built_without_a_cluster() -> None:
    """No client at all: the constructors read nothing and load nothing; the opener is named where it is missed."""
    from biorank.stages.snippets import SnippetScorer
    from biorank.store.record import MAPPING_VERSION, IndexRecord

    record = IndexRecord.from_meta("scifact", {"kind": "documents", "mapping_version": MAPPING_VERSION, "model": "m",
                                               "dimension": 2, "sentences_index": "scifact-sentences"})
    searcher = Searcher(None, record, SearchSettings(mode="dense", lam=0.5))  # type: ignore[arg-type]
    assert searcher.encoder is None and searcher.needs_encoder and searcher.lam == 0.5
    assert searcher.route == "dense" and searcher.with_settings(mode="bm25").settings.field_set == "text"
    (request,) = searcher.mode().requests([Query("q", "x", [1.0, 0.0])], 3)
    assert request.body["query"]["knn"]["embedding"]["k"] == 100 and not request.text_scored
    assert SnippetScorer(searcher).sentences_index == "scifact-sentences"
    with pytest.raises(TypeError, match=r"Searcher\.open\(client, 'scifact'\)"):
        Searcher(None, "scifact")  # type: ignore[arg-type]


REQUEST_CASES = {name: {**stage, **({"candidates": 15} if stage["mode"] in ("hybrid-approx", "rrf", "minmax",
                                                                          "os-hybrid") else {})}
                 for name, stage in BASE_SYSTEMS.items()} | {
    "bm25-title+abstract": {"mode": "bm25", "fields": "title+abstract"},
    "minmax": {"mode": "minmax", "candidates": 15, "fields": "title+abstract"},
    "hybrid-lam": {"mode": "hybrid", "lam": 0.25},
    "hybrid-routed": {"mode": "hybrid", "exact_limit": 100, "union_candidates": 15},
    "hybrid-filtered": {"mode": "hybrid", "filters": Filters(years=(2000, 2010), journals=("Nature",))},
    "dense-filtered": {"mode": "dense", "filters": Filters(mesh=("Humans",))},
    "bm25-filtered": {"mode": "bm25", "filters": Filters(years=(2005, None))},
    "hybrid-approx-filtered": {"mode": "hybrid-approx", "candidates": 15, "filters": Filters(years=(None, 2012))},
    "os-hybrid-filtered": {"mode": "os-hybrid", "candidates": 15, "filters": Filters(years=(None, 2012))},
}
"""The settings whose requests ``tests/data/first_stage_requests.json`` holds, as the searcher sent them before its
modes became classes (two queries each, over the sample index): every first stage of the pipeline, and more."""
REQUEST_QUERIES = ["Folic acid supplementation lowers homocysteine levels", "vitamin D deficiency and bone fractures"]


def _vectors_named(value: object, vectors: list[list[float]]) -> object:
    """``value`` with each query vector replaced by its name: the fixture keeps names, not another machine's floats
    (the vectors themselves are compared with the encoder's here)."""
    if isinstance(value, dict):
        return {k: _vectors_named(v, vectors) for k, v in value.items()}
    if isinstance(value, list):
        for i, vector in enumerate(vectors):
            if value == vector:
                return f"<vector of query {i}>"
        return [_vectors_named(v, vectors) for v in value]
    return value


def test_every_mode_sends_the_same_requests_as_before_its_class(opensearch, sample_index, default_encoder,
                                                                neural_search) -> None:
    """Byte for byte (keys in order), every request of every mode, as recorded before the refactoring."""
    expected = json.loads((Path(__file__).parent / "data" / "first_stage_requests.json").read_text(encoding="utf-8"))
    vectors = [default_encoder.encode([q], role="query")[0].tolist() for q in REQUEST_QUERIES]
    assert len(expected) == 2 * len(REQUEST_CASES)
    for name, settings in REQUEST_CASES.items():
        # λ given: other tests store a tuned λ for the sample index; the requests were recorded at MiniLM's 0.03.
        settings = {"lam": 0.03, **settings}
        searcher = Searcher.open(opensearch, sample_index, SearchSettings(**settings), encoder=default_encoder)
        for i, query in enumerate(REQUEST_QUERIES):
            if searcher.settings.mode == "os-hybrid" and not neural_search:
                # The cluster refuses the query; the request it refused is the one built offline.
                mode = searcher.mode()
                sent = [(f"GET {sample_index}/_search?allow_partial_search_results=false&search_type="
                         f"dfs_query_then_fetch", r.body) for r in mode.requests([Query("q", query, vectors[i])], 10)]
            else:
                sent = searcher.sent_requests(query, 10)
            got = [[path.replace(sample_index, "<index>"), _vectors_named(body, vectors)] for path, body in sent]
            assert json.dumps(got) == json.dumps(expected[f"{name} / {i}"]), f"{name} / {i}"


@pytest.mark.engines
def test_three_shards_rank_and_score_as_one(opensearch: OpenSearch, sample_index: str, default_encoder: Encoder,
                                             index_name: str, shared_data: Path) -> None:
    from biorank.demo import sample_path
    from biorank.evaluation.topics import read_queries
    from biorank.indexer.indexer import Indexer, IndexOptions
    from biorank.store.mappings.documents import IndexSettings

    options = IndexOptions(index=index_name, sentences=False, settings=IndexSettings(shards=3))
    Indexer(opensearch, options, encoder=default_encoder).run([sample_path()])
    assert opensearch.indices.get_settings(index=index_name)[index_name]["settings"]["index"]["number_of_shards"] == "3"
    queries = dict(list(read_queries(shared_data / "scifact" / "claims_train.jsonl").items())[:25])
    vectors = {q: row.tolist() for q, row in zip(queries, default_encoder.encode(list(queries.values()), role="query"),
                                                    strict=True)}
    # The modes that promise exact scores; dense, rrf and minmax walk each shard's own HNSW graph. λ is given:
    # other tests may have tuned one for the sample index.
    for mode in ("bm25", "hybrid", "hybrid-approx", "dense-exact"):
        one, three = (_searcher(opensearch, index, default_encoder, mode=mode, candidates=100, lam=0.05)
                      .search_many(queries, 10, vectors=vectors) for index in (sample_index, index_name))
        for q in queries:
            assert [h.id for h in one[q]] == [h.id for h in three[q]], (mode, q)
            assert [h.score for h in one[q]] == pytest.approx([h.score for h in three[q]], abs=1e-4), (mode, q)

    # Without the shards' global statistics BM25 differs by shard: the test above could fail.
    body = {"size": 10, "query": {"match": {"passage": queries[next(iter(queries))]}}}
    local = opensearch.search(index=index_name, body=body, params={"search_type": "query_then_fetch"})
    single = opensearch.search(index=sample_index, body=body)
    assert [h["_score"] for h in local["hits"]["hits"]] != pytest.approx([h["_score"] for h in single["hits"]["hits"]],
                                                                         abs=1e-4)


def test_hybrid_takes_the_candidate_union_over_an_index_larger_than_its_exact_limit(
        opensearch: OpenSearch, opensearch_url: str, sample_index: str, default_encoder: Encoder) -> None:
    exact = _searcher(opensearch, sample_index, default_encoder, mode="hybrid")
    assert exact.route == "hybrid" and exact.route_note is None and exact.blocks > 300
    routed = _searcher(opensearch, sample_index, default_encoder, mode="hybrid", exact_limit=300, union_candidates=20)
    approx = _searcher(opensearch, sample_index, default_encoder, mode="hybrid-approx", candidates=20)
    assert routed.route == "hybrid-approx" and f"{routed.blocks:,} blocks" in routed.route_note
    assert [(h.id, h.score) for h in routed.search(QUERY, 10)] == [(h.id, h.score) for h in approx.search(QUERY, 10)]
    # The BM25 list, the kNN list, then the union scored; the exact hybrid is one request over every block.
    assert len(routed.sent_requests(QUERY, 10)) == 3 and len(exact.sent_requests(QUERY, 10)) == 1

    runner = CliRunner()
    shown = runner.invoke(cli, ["--url", opensearch_url, "query", QUERY, "--index", sample_index, "--exact-limit",
                                "300", "--show-query", "--json", "--no-log"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith(f"# hybrid over {routed.blocks:,} blocks (more than --exact-limit 300)")
    assert shown.output.count(f"GET {sample_index}/_search") == 3
    assert shown.output.count(f"hybrid over {routed.blocks:,} blocks") == 1, "the route is said once, as a comment"
    plain = runner.invoke(cli, ["--url", opensearch_url, "query", QUERY, "--index", sample_index, "--exact-limit",
                                "300", "--no-log"])
    assert plain.exit_code == 0 and f"note: hybrid over {routed.blocks:,} blocks" in plain.output, plain.output
    stats = runner.invoke(cli, ["--url", opensearch_url, "stats", "--index", sample_index])
    assert stats.exit_code == 0 and "exact, every block" in stats.output, stats.output


def test_a_search_is_asked_again_only_while_a_node_goes_away() -> None:
    """``patiently`` (the searcher's and the snippets' transport): a shard failure from a node that went away is
    asked again, and answers as soon as live copies do; a shard with no copy left, or a wrong query, is not."""
    from opensearchpy.exceptions import TransportError

    from biorank.store.failures import patiently

    gone = {"root_cause": [{"type": "node_disconnected_exception", "reason": "[node-1] disconnected"}],
            "type": "search_phase_execution_exception", "reason": "Partial shards failure", "phase": "query"}
    missing = {"root_cause": [], "type": "search_phase_execution_exception", "reason": "",
               "caused_by": {"type": "no_shard_available_action_exception",
                             "reason": "Search rejected due to missing shards [[idx][1]]. Consider using "
                                       "`allow_partial_search_results` setting to bypass this error."}}
    wrong = {"root_cause": [{"type": "query_shard_exception", "reason": "failed to create query"}],
             "type": "search_phase_execution_exception", "reason": "all shards failed"}
    ok = {"hits": {"hits": []}}

    def asks(*answers: object) -> tuple[list[int], object]:
        calls: list[int] = []

        def ask() -> dict:
            answer = answers[len(calls)]
            calls.append(1)
            if isinstance(answer, Exception):
                raise answer
            return answer  # type: ignore[return-value]
        return calls, ask

    calls, ask = asks({"responses": [ok, {"error": gone}]}, {"responses": [{"error": gone}, ok]},
                      {"responses": [ok, ok]})
    assert patiently(ask, pauses=(0, 0, 0)) == {"responses": [ok, ok]} and len(calls) == 3
    calls, ask = asks(TransportError(500, "search_phase_execution_exception", {"error": gone}), ok)
    assert patiently(ask, pauses=(0,)) == ok and len(calls) == 2
    for error in (missing, wrong):
        calls, ask = asks({"responses": [{"error": error}]}, {"responses": [ok]})
        assert patiently(ask, pauses=(0,)) == {"responses": [{"error": error}]} and len(calls) == 1
        calls, ask = asks(TransportError(500, "search_phase_execution_exception", {"error": error}), ok)
        with pytest.raises(TransportError):
            patiently(ask, pauses=(0,))
        assert len(calls) == 1
    calls, ask = asks(*[{"responses": [{"error": gone}]}] * 3)
    assert patiently(ask, pauses=(0, 0)) == {"responses": [{"error": gone}]} and len(calls) == 3
