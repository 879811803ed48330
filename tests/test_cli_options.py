"""The option groups hand a command the library's own settings object, built from its options: what ``index`` and
``encode`` read with is one :class:`~biorank.indexer.batches.IndexOptions`, whose defaults the options show."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from biorank.cli import options
from biorank.indexer.batches import IndexOptions


def _reader() -> tuple[click.Command, list[IndexOptions]]:
    """A command with every reading option, as ``index`` places them, that keeps what it is handed."""
    handed: list[IndexOptions] = []

    @click.command()
    @options.reading
    @options.reading_options
    @options.batch_size_option
    @options.no_sentences_option()
    @options.max_record_bytes_option
    @options.rejects_option()
    def read(reading: IndexOptions) -> None:
        handed.append(reading)

    return read, handed


def test_the_reading_options_build_the_indexers_options(tmp_path: Path) -> None:
    read, handed = _reader()
    assert CliRunner().invoke(read, []).exit_code == 0
    given = ["--format", "jsonl", "--id-field", "pmid", "--title-field", "head", "--text-field", "body",
             "--batch-size", "8", "--no-sentences", "--max-record-bytes", "100", "--rejects", str(tmp_path / "r.tsv")]
    result = CliRunner().invoke(read, given)
    assert result.exit_code == 0, result.output
    assert handed == [IndexOptions(), IndexOptions(format="jsonl", id_field="pmid", title_field="head",
                                                   text_field="body", sentences=False, batch_size=8,
                                                   max_record_bytes=100, rejects=tmp_path / "r.tsv")]


@pytest.mark.parametrize(("option", "value", "said"), [
    ("--format", "xml", "'xml' is not one of 'auto', 'pubmed', "),
    ("--batch-size", "0", "Invalid value for '--batch-size': 0 is not in the range x>=1."),
    ("--max-record-bytes", "0", "Invalid value for '--max-record-bytes': 0 is not in the range x>=1.")])
def test_a_bad_reading_value_is_a_usage_error_before_the_command(option: str, value: str, said: str) -> None:
    read, handed = _reader()
    result = CliRunner().invoke(read, [option, value])
    assert result.exit_code == 2 and said in result.output and not handed
