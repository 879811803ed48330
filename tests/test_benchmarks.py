"""The benchmark suite: every script starts, the docs' tables match the committed records, and the repeatable
measurements run end to end on a real node (2 queries, the session's sample index) and write well-formed records."""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import pytest

from benchmarks import render, suite

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts)
                 for p in [*ROOT.glob("benchmarks/*.py"), *ROOT.glob("benchmarks/studies/*.py")]
                 if p.stem not in {"__init__", "suite", "machine", "render"})
RECORD_KEYS = {"benchmark", "variant", "question", "command", "date", "commit", "machine", "versions", "settings",
               "columns", "results"}


def check_record(path: Path, benchmark: str) -> dict:
    """A record as the docs need it: what, how, where, when, and rows holding every column's figures."""
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record.keys() >= RECORD_KEYS, RECORD_KEYS - record.keys()
    assert record["benchmark"] == benchmark and record["question"].endswith("?")
    assert record["command"].startswith(f"python -m benchmarks.{benchmark}")
    assert {"cpu", "isa", "flags", "cores", "memory_gb"} <= record["machine"].keys()
    assert record["machine"]["cores"] >= 1 and "avx2" in record["machine"]["flags"]
    assert record["commit"] != "unknown" and record["date"][:2] == "20"
    assert {"python", "biorank"} <= record["versions"].keys()
    assert record["results"], "a record without rows"
    keys = {key for column in record["columns"] for key in column["key"].split("+")}
    for row in record["results"]:
        assert keys <= row.keys(), keys - row.keys()
    return record


@pytest.mark.parametrize("module", SCRIPTS)
def test_every_benchmark_starts_and_explains_itself(module: str, capsys: pytest.CaptureFixture[str]) -> None:
    script = importlib.import_module(module)
    with pytest.raises(SystemExit) as exited:
        script.main(["--help"])
    assert exited.value.code == 0
    question = capsys.readouterr().out.split("\n\n")[1]  # after argparse's usage: the docstring's first paragraph
    assert question.rstrip().endswith("?"), f"{module}: its docstring should open with the question it answers"


def test_the_docs_tables_are_the_committed_records() -> None:
    assert render.main(["--check"]) == 0, "run: python benchmarks/render.py"


def test_a_changed_figure_is_a_stale_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = tmp_path / "records"
    shutil.copytree(suite.RECORDS, records)
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text("Intro.\n\n<!-- table: serve-load -->\nwhatever was here\n<!-- /table: serve-load -->\nEnd.\n")
    assert render.main(["--root", str(tmp_path), "--records", str(records), "--check"]) == 1
    assert render.main(["--root", str(tmp_path), "--records", str(records)]) == 0
    assert render.main(["--root", str(tmp_path), "--records", str(records), "--check"]) == 0
    text = page.read_text()
    assert text.startswith("Intro.\n\n<!-- table: serve-load -->\n\n| system |")
    assert text.endswith("<!-- /table: serve-load -->\nEnd.\n")
    assert text.endswith("<!-- /table: serve-load -->\nEnd.\n")
    assert "| first stage (hybrid) | 1 | 884 | 44.2 |" in text and "`benchmarks/records/serve_load.json`" in text

    record = json.loads((records / "serve_load.json").read_text())
    record["results"][0]["requests"] = 885
    (records / "serve_load.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert render.main(["--root", str(tmp_path), "--records", str(records), "--check"]) == 1
    assert "docs/page.md: table serve-load differs" in capsys.readouterr().err

    page.write_text("<!-- table: no-such-table -->\n<!-- /table: no-such-table -->\n")
    assert render.main(["--root", str(tmp_path), "--records", str(records), "--check"]) == 2


def test_every_committed_record_renders_with_its_machine_and_origin() -> None:
    for path in sorted(suite.RECORDS.glob("*.json")):
        record = suite.read_record(path)
        assert record.keys() >= RECORD_KEYS, path.name
        assert record.get("transcribed_from") or record["machine"]["cpu"] != "not recorded", path.name
    for name, table in render.TABLES.items():
        assert ("`benchmarks/records/" in render.render(name)) == table.sourced, name


def test_the_benchmark_index_names_every_script_and_every_study_decision() -> None:
    measurements, studies = render.render("benchmark-index"), render.render("study-index")
    for module in SCRIPTS:
        script = module.removeprefix("benchmarks.").replace(".", "/") + ".py"
        assert f"`{script}`" in measurements + studies, script
    assert "| — |" not in studies, "a study without a decision in its records"


def test_the_repeatable_benchmarks_run_on_two_queries(opensearch_url: str, sample_index: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Each repeatable measurement but ``scale`` (which starts its own node over all of SciFact), on 2 queries."""
    from benchmarks import cold_query, index_throughput, query_latency, query_log_overhead, reranker_speed, serve_load
    from biorank.models.encoder import PACKAGED_MODEL
    from biorank.models.shipped import shipped_reranker_folder

    records = tmp_path / "records"
    cluster = ["--url", opensearch_url, "--records-dir", str(records)]
    query_latency.main([*cluster, "--index", sample_index, "--limit", "2", "--warm", "1", "--modes", "bm25,hybrid"])
    query_log_overhead.main([*cluster, "--index", sample_index, "--limit", "2", "--rounds", "1", "--commands", "1"])
    reranker_speed.main([*cluster, "--index", sample_index, "--limit", "2", "--model", str(shipped_reranker_folder()),
                         "--configs", "onnx:128", "--depths", "3", "--latency-queries", "2"])
    cold_query.main([*cluster, "--index", sample_index, "--runs", "1", "--mode", "bm25"])
    serve_load.main([*cluster, "--index", sample_index, "--limit", "2", "--seconds", "1", "--levels", "1",
                     "--compare", "2", "--first-stage-only"])
    monkeypatch.setenv(suite.RECORDS_ENV, str(records))  # the other way to send records elsewhere
    index_throughput.main(["--url", opensearch_url, "--limit", "3", "--sentences", "off", "--precision", "onnx",
                           "--model", PACKAGED_MODEL])

    written = {path.name for path in records.glob("*.json")}
    assert written == {"query_latency.json", "query_log_overhead-batched.json", "query_log_overhead-single.json",
                       "query_log_overhead-commands.json", "reranker_speed.json", "cold_query.json", "serve_load.json",
                       "index_throughput-onnx.json"}
    latency = check_record(records / "query_latency.json", "query_latency")
    assert [row["mode"] for row in latency["results"]] == ["(query encoding alone)", "bm25", "hybrid"]
    assert all(0 < row["p50"] <= row["p95"] for row in latency["results"])
    assert latency["settings"]["queries"] == 2 and latency["versions"]["opensearch"]
    for name in written - {"query_latency.json"}:
        check_record(records / name, name.removesuffix(".json").split("-")[0])
    throughput = suite.read_record(records / "index_throughput-onnx.json")
    assert throughput["results"][0]["blocks"] >= 3 and throughput["results"][0]["end_to_end"] > 0
    assert not list(suite.RECORDS.glob("*-onnx.json")), "a test wrote into the committed records"


def test_the_gpu_stages_run_on_the_cpu_without_a_cluster(tmp_path: Path) -> None:
    """What a session with a GPU runs (``gpu_stages``), here on the CPU over a few abstracts, in torch fp32 with the
    GPU's length-sorted batches cut by word pieces: no cluster is asked, and the record is well formed."""
    from benchmarks import gpu_stages
    from biorank.models.encoder import PACKAGED_MODEL

    records = tmp_path / "records"
    gpu_stages.main(["--device", "cpu", "--precision", "fp32", "--model", PACKAGED_MODEL, "--limit", "12",
                     "--queries", "1", "--quality-limit", "4", "--batch", "6", "--batch-tokens", "512",
                     "--records-dir", str(records)])
    row = check_record(records / "gpu_stages-cpu.json", "gpu_stages")["results"][0]
    assert row["device"] == "cpu" and row["peak_bound"] is None and row["abstracts_per_s"] > 0
    assert row["min_cos"] > 0.999 and row["top10_overlap"] >= 0.99 and row["rerank_max_diff"] < 1e-3
    assert min(row["rerank_p50"], row["relevance_p50"], row["sentence_encode_p50"]) > 0
