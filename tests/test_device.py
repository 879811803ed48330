"""``--device``: where the encoder and the cross-encoder run, checked before any work (issue 42)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from running import one_line

from biorank.cli import cli, options
from biorank.models.cross_encoder import CrossEncoder
from biorank.models.encoder import PACKAGED_MODEL, Encoder
from biorank.models.placement import (
    AskedPlacement,
    DeviceError,
    check_device,
    check_precision,
    has_gpu,
    length_batches,
    resolve_device,
)
from biorank.models.shipped import SHIPPED_RERANKER
from biorank.pipeline import PipelineSettings
from biorank.retrieval.searcher import SearchSettings

ABSENT_GPUS = ["cuda:64", *([] if has_gpu() else ["cuda"])]
"""Devices no machine of the suite has: a 65th GPU anywhere, and any GPU where torch sees none (CI)."""


def closed_url() -> str:
    """A URL nothing listens on: a command that asked the cluster anything would say the cluster is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("device", ABSENT_GPUS)
def test_index_on_a_gpu_that_is_not_there_is_one_line_before_the_corpus_or_the_cluster(
        device: str, shared_data: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join((shared_data / "scifact" / "corpus.jsonl").open().readlines()[:2]))
    rejects = tmp_path / "rejects.tsv"
    result = CliRunner().invoke(cli, ["--url", closed_url(), "index", str(corpus), "--index", "device-test",
                                      "--device", device, "--rejects", str(rejects)])
    assert one_line(result).startswith(f"Error: --device {device}: torch sees ")
    assert not rejects.exists()


@pytest.mark.parametrize("command", [["query", "statins"], ["search", "--queries", "Q", "--output", "RUN"],
                                     ["serve"], ["demo"], ["reindex-vectors", "--model", PACKAGED_MODEL],
                                     ["train-reranker", "--queries", "Q", "--qrels", "Q", "--out", "RUN"]])
def test_every_neural_command_checks_biorank_device_first(command: list[str], tmp_path: Path) -> None:
    """BIORANK_DEVICE is read like --device; the check comes before the cluster is asked (it is not there)."""
    (tmp_path / "Q").write_text("1\tstatins\n")
    command = [str(tmp_path / part) if part in ("Q", "RUN") else part for part in command]
    result = CliRunner().invoke(cli, ["--url", closed_url(), *command], env={"BIORANK_DEVICE": "cuda:64"})
    assert one_line(result).startswith("Error: --device cuda:64: torch sees ")
    assert not (tmp_path / "RUN").exists()


def test_a_gpu_asked_of_the_light_install_says_what_to_install_in_one_line(tmp_path: Path) -> None:
    without_torch = Path(__file__).parent / "without_torch.py"
    run = subprocess.run([sys.executable, str(without_torch), "-m", "biorank.cli", "--url", closed_url(), "query",
                          "statins", "--device", "cuda"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and len(run.stderr.strip().splitlines()) == 1, run.stdout + run.stderr
    assert "--device cuda needs torch" in run.stderr and "pip install 'biorank[train]'" in run.stderr


def test_a_device_of_another_name_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["query", "statins", "--device", "gpu"])
    assert result.exit_code == 2 and "'gpu': use auto, cpu, cuda or cuda:N" in result.output


def test_settings_carry_one_placement_per_model() -> None:
    """--device places both models; --rerank-precision is the cross-encoder's alone; a bad name fails on building."""
    built = options.pipeline_settings(device="cpu", rerank_precision="fp32")
    assert (built.placement, built.search.placement) == (AskedPlacement("fp32", "cpu"), AskedPlacement("auto", "cpu"))
    assert options.pipeline_settings().placement == AskedPlacement() == PipelineSettings().search.placement
    with pytest.raises(DeviceError, match="not 'fp64'"):
        AskedPlacement("fp64")
    with pytest.raises(DeviceError, match="'gpu': use auto, cpu, cuda or cuda:N"):
        SearchSettings(placement=AskedPlacement(device="gpu"))


def test_precisions_that_cannot_run_on_the_device_are_refused() -> None:
    with pytest.raises(DeviceError, match="precision onnx runs in ONNX Runtime on the CPU, not on cuda"):
        check_precision("onnx", "cuda")
    with pytest.raises(DeviceError, match="precision openvino runs in OpenVINO on the CPU"):
        check_precision("openvino", "cuda:1")
    with pytest.raises(DeviceError, match="fp16 runs on a GPU"):
        check_precision("fp16", "cpu")
    with pytest.raises(DeviceError, match="fp16 runs on a GPU"):
        Encoder(PACKAGED_MODEL, precision="fp16", device="cpu")
    assert check_device("cpu", "auto", "onnx", None) == "cpu"
    assert check_device("auto", "int8") == "auto"  # an exported graph runs on the CPU whatever auto would take


def test_auto_takes_the_cpu_where_torch_sees_no_gpu() -> None:
    assert resolve_device("auto") == resolve_device(None) == ("cuda" if has_gpu() else "cpu")
    if not has_gpu():
        assert Encoder(PACKAGED_MODEL, precision="fp32").device == "cpu"


def test_length_batches_sort_and_cut_by_rows_and_word_pieces() -> None:
    lengths = [30, 5, 300, 6, 7, 29]
    batches = length_batches(lengths, rows=2, tokens=70)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    assert [[lengths[i] for i in batch] for batch in batches] == [[5, 6], [7, 29], [30], [300]]
    assert all(len(b) * max(lengths[i] for i in b) <= 70 for b in batches if len(b) > 1)
    assert length_batches(lengths, rows=None, tokens=None) == [[1, 3, 4, 5, 0, 2]]


def test_batches_cut_by_word_pieces_give_the_same_vectors_in_input_order() -> None:
    """What a GPU runs (length-sorted batches cut by word pieces), run on the CPU in fp32."""
    texts = ["vitamin D", "Statins lower LDL cholesterol in adults with diabetes. " * 12, "BRCA1 mutation carriers",
             "Aspirin and the risk of colorectal cancer in a large cohort of women followed for a decade."]
    whole = Encoder(PACKAGED_MODEL, precision="fp32", device="cpu")
    cut = Encoder(PACKAGED_MODEL, precision="fp32", device="cpu", batch_tokens=40)
    assert whole.batch_tokens is None and cut.batch_tokens == 40
    assert np.abs(cut.encode(texts) - whole.encode(texts)).max() < 1e-5


def test_the_cross_encoder_runs_where_it_is_told() -> None:
    scorer = CrossEncoder(SHIPPED_RERANKER, precision="fp32", device="cpu", batch_size=4)
    assert (scorer.device, scorer.rows) == ("cpu", 4)
    assert scorer.score("vitamin D", ["Vitamin D and bone fractures."]).shape == (1,)


def test_device_cpu_reranks_a_query(opensearch_url: str, sample_index: str) -> None:
    result = CliRunner().invoke(cli, ["--url", opensearch_url, "query", "Vitamin B12 deficiency", "--index",
                                      sample_index, "-k", "2", "--rerank", "--device", "cpu", "--no-log", "--json"])
    assert result.exit_code == 0, result.output
    assert result.output.count('"rerank"') == 2


def test_help_of_a_command_with_device_imports_no_torch() -> None:
    code = ("import sys\nfrom click.testing import CliRunner\nfrom biorank.cli import cli\n"
            "assert CliRunner().invoke(cli, ['index', '--help']).exit_code == 0\nprint('torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "False", run.stdout + run.stderr
