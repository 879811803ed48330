"""The command line as a user meets it: real cluster, real sample, one-line errors."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from biorank.cli import cli


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_demo_indexes_the_sample_and_finds_the_vitamin_b12_abstracts(opensearch_url: str) -> None:
    result = CliRunner().invoke(cli, ["--url", opensearch_url, "demo", "-k", "3"])
    assert result.exit_code == 0, result.output
    assert "biorank-demo: 300 SciFact abstracts ready" in result.output
    top = [m[2] for m in re.finditer(r"^\W*(\d+)\W+(\d+)\b", result.output, re.MULTILINE)]
    assert len(top) == 3, result.output
    # SciFact claims 35/37 (vitamin B12, homocysteine) cite abstracts 5152028 and 11705328.
    assert {"5152028", "11705328"} & set(top), result.output


def test_the_demo_reranks_and_finds_snippets_with_no_training_step(opensearch_url: str) -> None:
    result = CliRunner().invoke(cli, ["--url", opensearch_url, "demo", "-k", "3", "--rerank", "--snippets", "--no-log"])
    assert result.exit_code == 0, result.output
    assert "hybrid+rerank+snippets top 3" in result.output and "rerank" in result.output.split("top 3", 1)[1]
    top = [m[2] for m in re.finditer(r"^\W*(\d+)\W+(\d+)\b", result.output, re.MULTILINE)]
    assert {"5152028", "11705328"} & set(top), result.output
    assert "#1 " in result.output  # the first hit's best sentences follow the table


def test_down_cluster_is_one_clear_line() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(cli, ["--url", url, "demo"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith(f"Error: cannot reach OpenSearch at {url}")
    assert "Traceback" not in result.output


def test_status_of_a_node_never_installed(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["cluster", "status"], env={"BIORANK_HOME": str(tmp_path)})
    assert result.exit_code == 3
    assert "installed: no" in result.output and "running:   no" in result.output


def test_cli_start_up_stays_light() -> None:
    code = "import sys, biorank.cli; print(sorted(m for m in ('torch', 'opensearchpy', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_missing_index_is_one_clear_line(opensearch_url: str) -> None:
    result = CliRunner().invoke(cli, ["--url", opensearch_url, "query", "statins", "--index",
                                      "biorank-test-no-such-index", "--mode", "bm25", "--no-log"])
    assert result.exit_code == 1
    assert result.output.strip() == ("Error: no such index: biorank-test-no-such-index; "
                                     "`biorank indices` lists them")


def test_piped_progress_gives_the_rate_or_for_slow_work_the_time_each(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture) -> None:
    from biorank.cli import render

    now = [0.0]
    monkeypatch.setattr(render.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(render, "HEARTBEAT_S", 3600.0)  # only the calls below speak
    with render.stage_progress() as progress:
        progress("encoding", 0, 1000)
        now[0] = 10.0
        progress("encoding", 500, 1000)
        progress("training", 0, 90)
        now[0] = 60.0
        progress("training", 2, 90)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "encoding: 500/1000 done, 50.0/s, 10 s left"
    # The training stage began at 10 s: 2 steps in 50 s.
    assert lines[1] == "training: 2/90 done, 25.0 s each, 2200 s left"
    # A stage run again (validation after every epoch) is timed from its new start.
    with render.stage_progress() as progress:
        progress("validation", 0, 100)
        now[0] = 100.0
        progress("validation", 100, 100)
        progress("validation", 0, 100)
        now[0] = 110.0
        progress("validation", 50, 100)
    assert capsys.readouterr().err.splitlines() == ["validation: 100/100 done, 2.5/s",
                                                    "validation: 50/100 done, 5.0/s, 10 s left"]


def test_piped_progress_speaks_while_a_slow_batch_gives_it_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture) -> None:
    import time

    from biorank.cli import render

    monkeypatch.setattr(render, "PLAIN_EVERY_S", 0.05)
    monkeypatch.setattr(render, "HEARTBEAT_S", 0.01)
    with render.record_progress("indexing", 10) as advance:
        time.sleep(0.5)  # the first batch, not done yet
        advance(10)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3 and set(lines[:-1]) == {"indexing: 0/10 records, 0.0/s"}, lines
    assert lines[-1].startswith("indexing: 10/10 records, ")
    time.sleep(0.1)
    assert capsys.readouterr().err == "", "nothing is said once the work is over"
