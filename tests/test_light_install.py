"""The light install (``pip install biorank``, without the ``train`` extra) as a user meets it: processes in
which torch, transformers and sentence-transformers cannot be imported (``without_torch.py``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

from opensearchpy import OpenSearch

WITHOUT_TORCH = Path(__file__).parent / "without_torch.py"
LIBRARY_LINE = re.compile(r"^(WARNING|INFO|DEBUG|ERROR|CRITICAL)[: ]|\[status:\d+|Traceback|^\S+Warning: ",
                          re.MULTILINE)
"""What a library's log record or warning looks like on a terminal (``logging``'s default format,
opensearch-py's request lines, Python's warnings)."""


def biorank(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(WITHOUT_TORCH), "-m", "biorank.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=900)


def test_the_demo_reranks_and_finds_snippets_without_torch_and_without_library_log_lines(
        opensearch: OpenSearch, opensearch_url: str) -> None:
    """A query log that does not exist yet makes opensearch-py log a 404 (its mapping is probed first): the
    terminal must not show it, nor anything else a library logs."""
    log = f"biorank-queries-test-{uuid.uuid4().hex[:10]}"
    try:
        run = biorank("--url", opensearch_url, "demo", "-k", "3", "--rerank", "--snippets",
                      env={"BIORANK_QUERY_LOG_INDEX": log})
        assert run.returncode == 0, run.stdout + run.stderr
        assert "hybrid+rerank+snippets top 3" in run.stdout and "#1 " in run.stdout, run.stdout
        assert not LIBRARY_LINE.search(run.stdout + run.stderr), run.stdout + run.stderr
        opensearch.indices.refresh(index=log)
        assert opensearch.count(index=log)["count"] == 1  # the query was logged all the same
        # -v shows the same records on standard error, for whoever wants them.
        verbose = biorank("--url", opensearch_url, "-v", "query", "vitamin B12", "--index", "biorank-demo",
                          "-k", "2", "--no-log", "--rerank")
        assert verbose.returncode == 0, verbose.stderr
        assert re.search(r"INFO opensearch: (GET|POST) ", verbose.stderr), verbose.stderr
    finally:
        opensearch.indices.delete(index=log, ignore_unavailable=True)


def test_a_query_on_an_index_of_the_suite_reranks_with_snippets_without_torch(opensearch_url: str,
                                                                              sample_index: str) -> None:
    run = biorank("--url", opensearch_url, "query", "Vitamin B12 deficiency and homocysteine", "--index",
                  sample_index, "-k", "3", "--rerank", "--snippets", "--no-log", "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count('"rerank"') == 3 and '"snippets"' in run.stdout, run.stdout
    assert not LIBRARY_LINE.search(run.stderr), run.stderr


def test_training_without_torch_says_what_to_install_in_one_line(shared_data: Path, tmp_path: Path) -> None:
    scifact = shared_data / "scifact"
    run = biorank("train-reranker", "--queries", str(scifact / "claims_train.jsonl"), "--qrels",
                  str(scifact / "qrels" / "train.tsv"), "--index", "scifact", "--out", str(tmp_path / "out"))
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines() == [
        "Error: train-reranker needs torch, transformers, sentence_transformers, which this install leaves out: "
        "pip install 'biorank[train]'"]
