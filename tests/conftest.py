"""Shared fixtures: the real development data beside the repository, and a real OpenSearch node."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opensearchpy import OpenSearch
from running import SCIFACT_SLICE, node_of_its_own

from biorank.cluster.local import LocalNode, port_is_free
from biorank.config import ConnectionSettings
from biorank.store.client import connect

# The public data the tests read, laid out as `biorank datasets get` writes it: BIORANK_DATA, else shared/data beside
# the repository (CI clones the repository with shared/ beside it, exactly as the developers' machines have it).
SHARED_DATA = Path(os.environ.get("BIORANK_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")

# The commands the tests run log their queries into an index of their own, never into a cluster's real log.
TEST_QUERY_LOG = f"biorank-queries-test-{uuid.uuid4().hex[:8]}"
os.environ["BIORANK_QUERY_LOG_INDEX"] = TEST_QUERY_LOG


CLUSTER_FIXTURES = {"opensearch", "opensearch_url", "own_node", "node_home", "secure_node", "three_nodes"}
"""Fixtures that run a node (the shared one, or one a test starts and stops itself)."""
SLOW_FIXTURES = {"scifact_index", "tiny_reranker", "tiny_encoder"}


CONTAINER_SUBSET = (
    "test_indexing.py::test_cli_index_reports_and_lists_and_deletes",
    "test_searcher.py::test_every_mode_sends_the_same_requests_as_before_its_class",
    "test_searcher.py::test_hybrid_is_lambda_bm25_plus_dot_product",
    "test_searcher.py::test_approximate_equals_exact_when_k_covers_the_collection",
    "test_pipeline.py::test_query_and_eval_give_the_same_hits_and_snippets",
    "test_service.py::test_the_api_answers_as_the_pipeline_does_and_logs_the_query",
    "test_service.py::test_snippets_documents_and_health",
    "test_service.py::test_an_index_without_a_reranker_of_its_own_reranks_with_the_shipped_one",
    "test_pubmed_sync.py::test_baseline_and_updates_applied_in_order_once",
    "test_safety.py::test_delete_index_touches_only_the_index_it_names",
    "test_safety.py::test_an_alias_is_never_written_through_or_deleted_as_if_it_were_an_index",
)
"""The integration tests that also run against containers (``-m containers --cluster container``, and on three
nodes ``-m "containers and not docker" --cluster container-cluster``):
index with sentences, every first-stage mode, rerank and snippets, serve, sync and delete-index safety. Chosen
by what they prove, each cheap on the session's sample index."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cluster", choices=("local", "container", "container-cluster"),
                     default=os.environ.get("BIORANK_TEST_CLUSTER", "local"),
                     help="What the shared test cluster is: biorank's local node (default), a single-node "
                     "container of biorank's OpenSearch image, or three such containers as one cluster "
                     "[env: BIORANK_TEST_CLUSTER]. BIORANK_TEST_URL, when set, names a running cluster instead.")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks from what a test uses: ``cluster`` if it reaches a node (through any fixture), ``slow`` if it needs
    a slice of SciFact indexed or a model trained, ``unit`` otherwise (``pytest -m unit`` needs no cluster);
    ``containers`` for the subset that also runs against a container (tests that need Docker itself carry
    ``docker`` and ``containers``)."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        runs_a_node = used & CLUSTER_FIXTURES or item.get_closest_marker("docker")
        item.add_marker(pytest.mark.cluster if runs_a_node else pytest.mark.unit)
        if used & SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)
        if item.nodeid.split("[")[0].removeprefix("tests/") in CONTAINER_SUBSET:
            item.add_marker(pytest.mark.containers)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        raise RuntimeError(f"the development data is missing: expected {SHARED_DATA}; fetch it with `biorank datasets "
                           "get scifact nfcorpus pubmed pubmedqa --to DIR` (bioasq and bioasq-abstracts: `--from` a "
                           "mirror) and set BIORANK_DATA=DIR")
    return SHARED_DATA


def _test_node_port() -> int:
    # Stay off 9200 so a developer's own node keeps running beside the tests.
    for port in range(19200, 19300):
        if port_is_free(port):
            return port
    raise RuntimeError("no free port in 19200-19299 for the test node")


@pytest.fixture(scope="session")
def opensearch_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A real cluster: BIORANK_TEST_URL, else a container with ``--cluster container``, else biorank's local
    node."""
    if os.environ.get("BIORANK_TEST_URL"):
        yield os.environ["BIORANK_TEST_URL"]
    elif request.config.getoption("--cluster") == "container":
        from biorank.cluster.container import opensearch_container

        with opensearch_container() as container:
            yield f"http://127.0.0.1:{container.get_exposed_port(9200)}"
    elif request.config.getoption("--cluster") == "container-cluster":
        from biorank.cluster.container import ContainerCluster

        with ContainerCluster(3, heap="512m") as cluster:
            # Every node, as a user gives a cluster's nodes to --url: the client spreads and fails over.
            yield ",".join(cluster.urls)
    else:
        with node_of_its_own("biorank-test-node-", port=_test_node_port()) as node:
            yield node.status().url


@pytest.fixture(scope="session")
def secure_node() -> Iterator[LocalNode]:
    """A second local node, secured as production clusters are: security plugin, HTTPS, basic auth, users."""
    with node_of_its_own("biorank-test-secure-node-", port=_test_node_port(), heap="768m", secure=True) as node:
        yield node


@pytest.fixture(scope="session")
def opensearch(opensearch_url: str) -> Iterator[OpenSearch]:
    client = connect(ConnectionSettings.from_env().with_overrides(url=opensearch_url))
    yield client
    client.indices.delete(index=TEST_QUERY_LOG, ignore_unavailable=True)


@pytest.fixture(scope="session")
def neural_search(opensearch: OpenSearch) -> bool:
    """Whether the cluster has the neural-search plugin (biorank's 2.19.1 node does; no 3.x build exists on Maven
    Central, so its 3.4.0 node does not): tests of ``os-hybrid`` check its answer, or its one-line refusal."""
    plugins = opensearch.cat.plugins(format="json")
    return any(p["component"] == "opensearch-neural-search" for p in plugins)


@pytest.fixture
def index_name(opensearch: OpenSearch) -> Iterator[str]:
    """A fresh index name, deleted after the test whatever happens."""
    name = f"biorank-test-{uuid.uuid4().hex[:10]}"
    yield name
    opensearch.indices.delete(index=f"{name}*", ignore_unavailable=True, allow_no_indices=True)


@pytest.fixture
def query_log_index(opensearch: OpenSearch) -> Iterator[str]:
    """A fresh query-log index name (matched by the Dashboards pattern biorank-queries*), deleted after."""
    name = f"biorank-queries-test-{uuid.uuid4().hex[:10]}"
    yield name
    opensearch.indices.delete(index=name, ignore_unavailable=True)



@pytest.fixture(scope="session")
def default_encoder():
    """The encoder the suite indexes with, loaded once for every test that indexes: all-MiniLM-L6-v2, half the
    cost of biorank's default (bge-small-en-v1.5, tested in test_catalogue.py and by the demo), which keeps the
    suite's full SciFact index inside CI's time on an AVX2-only CPU."""
    from biorank.models.encoder import PACKAGED_MODEL, Encoder

    return Encoder(PACKAGED_MODEL)


@pytest.fixture(scope="session")
def scifact_index(
    opensearch: OpenSearch, shared_data: Path, default_encoder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, object, Path]]:
    """The first :data:`SCIFACT_SLICE` SciFact abstracts indexed by biorank's pipeline, once per session:
    (index name, report, the slice's corpus file)."""
    from biorank.indexer.indexer import Indexer, IndexOptions
    from biorank.store.indices import delete_indices

    name = f"biorank-test-scifact-{uuid.uuid4().hex[:8]}"
    folder = tmp_path_factory.mktemp("scifact")
    corpus = folder / "corpus.jsonl"
    with (shared_data / "scifact" / "corpus.jsonl").open(encoding="utf-8") as whole:
        corpus.write_text("".join(itertools.islice(whole, SCIFACT_SLICE)), encoding="utf-8")
    indexer = Indexer(opensearch, IndexOptions(index=name, rejects=folder / "rejects.tsv"), encoder=default_encoder)
    report = indexer.run([corpus])
    yield name, report, corpus
    delete_indices(opensearch, name)


@pytest.fixture(scope="session")
def sample_index(
    opensearch: OpenSearch, default_encoder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The 300 bundled SciFact abstracts indexed by biorank's pipeline, once per session."""
    from biorank.demo import sample_path
    from biorank.indexer.indexer import Indexer, IndexOptions
    from biorank.store.indices import delete_indices

    name = f"biorank-test-sample-{uuid.uuid4().hex[:8]}"
    rejects = tmp_path_factory.mktemp("sample") / "rejects.tsv"
    Indexer(opensearch, IndexOptions(index=name, rejects=rejects), encoder=default_encoder).run([sample_path()])
    yield name
    delete_indices(opensearch, name)


@pytest.fixture
def tune_sample(opensearch_url: str, sample_index: str, sample_claims: tuple[Path, Path],
                tmp_path: Path) -> Callable[..., Any]:
    """``biorank tune-lambda`` over ``sample_index`` on all of ``sample_claims``, with the test's own options."""
    from click.testing import CliRunner

    from biorank.cli import cli

    queries, qrels = sample_claims

    def run(*options: str) -> Any:
        return CliRunner().invoke(cli, ["--url", opensearch_url, "tune-lambda", "--queries", str(queries), "--qrels",
                                        str(qrels), "--index", sample_index, "--split", "all", "--plot",
                                        str(tmp_path / "lambda.png"), *options])

    return run


@pytest.fixture
def sample_claims(opensearch: OpenSearch, sample_index: str, shared_data: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The SciFact train claims whose cited abstracts are all in the sample (40 at most): a small real query set
    for ``sample_index``, as (queries.jsonl, qrels.tsv)."""
    import json

    in_sample = {h["_id"] for h in opensearch.search(index=sample_index, body={
        "size": 1000, "query": {"term": {"block": 0}}, "_source": False})["hits"]["hits"]}
    claims = [json.loads(line) for line in (shared_data / "scifact" / "claims_train.jsonl").open()]
    chosen = [c for c in claims if c["cited_doc_ids"] and {str(d) for d in c["cited_doc_ids"]} <= in_sample][:40]
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": str(c["id"]), "text": c["claim"]}) + "\n" for c in chosen))
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{c['id']}\t{d}\t1\n" for c in chosen for d in c["cited_doc_ids"]))
    return queries, qrels


@pytest.fixture(scope="session")
def medline_index(opensearch: OpenSearch, shared_data: Path, default_encoder,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """604 real MEDLINE citations of 2007-2016 (baseline file 902), without sentences."""
    from biorank.indexer.indexer import Indexer, IndexOptions
    from biorank.store.indices import delete_indices

    name = f"biorank-test-medline-{uuid.uuid4().hex[:8]}"
    rejects = tmp_path_factory.mktemp("medline") / "rejects.tsv"
    Indexer(opensearch, IndexOptions(index=name, sentences=False, rejects=rejects),
            encoder=default_encoder).run([shared_data / "pubmed" / "medline16n0902.xml.gz"])
    yield name
    delete_indices(opensearch, name)


@pytest.fixture(scope="session")
def tiny_reranker(opensearch: OpenSearch, sample_index: str, shared_data: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cross-encoder trained by biorank's trainer for a few steps on SciFact claims over the sample index.

    Real training code and real weights; short inputs and few steps keep it to seconds. Its scores mean little,
    which is all the tests need: they check behaviour, not quality.
    """
    from biorank.retrieval.searcher import Searcher
    from biorank.training.reranker import RerankerTraining, train_reranker

    queries, qrels = _sample_topics(opensearch, sample_index, shared_data)
    out = tmp_path_factory.mktemp("reranker")
    config = RerankerTraining(negatives_per_positive=3, negatives_from_top=20, max_length=64, validation_depth=5,
                              max_steps=6, checkpoint_every=4)
    train_reranker(Searcher.open(opensearch, sample_index), queries, qrels, out, config, log=lambda _: None)
    return out


def _sample_topics(opensearch: OpenSearch, sample_index: str, shared_data: Path) -> tuple[dict, dict]:
    """40 SciFact train claims with a judged document in the sample index, and their judgements."""
    from biorank.evaluation.topics import read_qrels, read_queries

    qrels = read_qrels(shared_data / "scifact" / "qrels" / "train.tsv")
    found = opensearch.search(index=sample_index, body={"size": 1000, "_source": False})["hits"]["hits"]
    ids = {h["_id"] for h in found}
    judged = sorted(q for q, docs in qrels.items() if docs.keys() & ids)[:40]
    queries = {q: t for q, t in read_queries(shared_data / "scifact" / "claims_train.jsonl").items() if q in judged}
    return queries, {q: qrels[q] for q in judged}


@pytest.fixture(scope="session")
def tiny_encoder(opensearch: OpenSearch, sample_index: str, shared_data: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dense encoder trained by biorank's trainer for a few steps on SciFact claims over the sample index,
    with synthetic pairs and BM25 negatives. Real training code and real weights; its quality means little,
    which is all the tests need: they check behaviour."""
    from biorank.models.encoder import PACKAGED_MODEL
    from biorank.retrieval.searcher import Searcher
    from biorank.training.encoder import EncoderTraining, train_encoder

    queries, qrels = _sample_topics(opensearch, sample_index, shared_data)
    out = tmp_path_factory.mktemp("encoder")
    config = EncoderTraining(base_model=PACKAGED_MODEL, batch_size=8, hard_negatives=1, negatives_from_top=20,
                             max_seq_length=64, max_steps=3, checkpoint_every=2)
    train_encoder(Searcher.open(opensearch, sample_index), queries, qrels, out, config, log=lambda _: None)
    return out
