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
    GPU's length-sorted batches cut by word pieces, two sizes compared: no cluster is asked. Measured apart from
    the ONNX reference (``--outputs``, as the lent GPU machine runs it) and compared with it after (``--compare``),
    the record is well formed and says the machine that measured."""
    from benchmarks import gpu_stages
    from biorank.models.encoder import PACKAGED_MODEL

    records, outputs = tmp_path / "records", tmp_path / "outputs.npz"
    gpu_stages.main(["--device", "cpu", "--precision", "fp32", "--model", PACKAGED_MODEL, "--limit", "12",
                     "--queries", "1", "--quality-limit", "4", "--batch", "6", "--batch-tokens", "256,512",
                     "--outputs", str(outputs), "--notes", "measured apart"])
    assert outputs.is_file() and not records.exists()
    gpu_stages.main(["--compare", str(outputs), "--records-dir", str(records)])
    record = check_record(records / "gpu_stages-cpu.json", "gpu_stages")
    row, settings = record["results"][0], record["settings"]
    assert row["device"] == "cpu" and row["peak_bound"] is None and row["abstracts_per_s"] > 0
    assert row["sentences_per_s"] > row["abstracts_per_s"] and row["pubmed_hours"] > 0
    assert row["min_cos"] > 0.999 and row["top10_overlap"] >= 0.99 and row["rerank_max_diff"] < 1e-3
    assert min(row["rerank_p50"], row["rerank100_p50"], row["relevance_p50"], row["sentence_encode_p50"]) > 0
    assert [s["batch_tokens"] for s in settings["batch_tokens_sweep"]] == [256, 512]
    assert settings["batch_tokens"] in (256, 512) and "--outputs" in settings["measured_by"]
    assert record["notes"] == "measured apart" and record["machine"]["cores"] >= 1 and settings["torch_cuda"] != ""

def test_a_gpu_call_brings_back_its_best_candidate_in_pieces_that_collect_joins(tmp_path: Path) -> None:
    """``gpu_session``'s weights part there and ``collect`` here: the candidate best on the unseen dev (not on the
    dev split) comes back as bf16 in pieces the device tool returns (each under 16 MiB), and is joined here into
    the very weights the figures there reranked with."""
    import argparse

    import torch
    from safetensors.torch import load_file

    from benchmarks import gpu_session
    from biorank.models.shipped import shipped_reranker_folder

    shipped = shipped_reranker_folder()
    for name, dev, unseen in (("memorising", 0.9, 0.5), ("general", 0.8, 0.6)):
        folder = tmp_path / "work" / name
        folder.mkdir(parents=True)
        for path in shipped.iterdir():
            (folder / path.name).symlink_to(path)
        (folder / "training.json").write_text(json.dumps({"history": [{"nDCG@10": dev, "nDCG@10 dev-unseen": unseen}]}))
    args = argparse.Namespace(budget=60, work=tmp_path / "work", out=tmp_path / "out", smoke=True, device="cpu")
    call = gpu_session.Call(args)
    call.trained = [tmp_path / "work" / "memorising", tmp_path / "work" / "general"]
    gpu_session._weights(call, tmp_path)
    call.log.close()
    pieces = sorted((tmp_path / "out").glob("general.tar.*"))
    assert len(pieces) >= 3 and all(p.stat().st_size <= 16 * 2**20 for p in pieces)
    assert not list((tmp_path / "out").glob("memorising.*")) and call.returned.name == "general"

    gpu_session.collect(argparse.Namespace(files=tmp_path / "out", out=tmp_path / "back"))
    joined = load_file(tmp_path / "back" / "general" / "model.safetensors")
    returned, original = load_file(call.returned / "model.safetensors"), load_file(shipped / "model.safetensors")
    assert joined.keys() == returned.keys() == original.keys()
    assert all(torch.equal(joined[k], returned[k]) for k in joined)
    assert all(torch.equal(joined[k], original[k].to(torch.bfloat16).float()) for k in joined)
    assert json.loads((tmp_path / "back" / "general" / "training.json").read_text())["history"][0]["nDCG@10"] == 0.8


def test_the_carried_vectors_study_finds_an_index_ranks_as_itself(opensearch_url: str, sample_index: str,
                                                                    tmp_path: Path) -> None:
    """``studies/carried_vectors.py`` over one index as both sides: every claim's top 10 the same, in order, and
    the same nDCG@10 (what vectors encoded elsewhere are held to), in a well-formed record."""
    from benchmarks.studies import carried_vectors

    records = tmp_path / "records"
    carried_vectors.main(["--url", opensearch_url, "--records-dir", str(records), "--here", sample_index,
                          "--there", sample_index, "--variant", "itself"])
    record = suite.read_record(records / "carried_vectors-itself.json")
    assert record.keys() >= RECORD_KEYS and record["settings"]["claims"] > 100
    assert [row["mode"] for row in record["results"]] == ["dense", "hybrid"]
    for row in record["results"]:
        assert row["same_top10"] == row["same_top10_set"] == row["top10_overlap"] == 1.0
        assert row["ndcg_here"] == row["ndcg_there"] > 0 and row["ndcg_diff"] == 0
