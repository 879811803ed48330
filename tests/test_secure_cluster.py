"""biorank against a secured cluster (security plugin, HTTPS with its own CA, basic auth, an admin and a
read-only user): what works works as on a plain node, and every refusal is one line that names the fix."""

from __future__ import annotations

import gzip
import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from biorank.cli import cli
from biorank.cluster.local import LocalNode
from biorank.demo import sample_path


def _env(node: LocalNode, user: str, password: str, **extra: str) -> dict[str, str]:
    users = node.credentials
    assert users is not None
    return {"BIORANK_URL": node.status().url or "", "BIORANK_CA_FILE": str(users.ca_file), "BIORANK_USER": user,
            "BIORANK_PASSWORD": password, "BIORANK_QUERY_LOG_INDEX": "biorank-queries", **extra}


def _run(env: dict[str, str], *args: str):
    return CliRunner().invoke(cli, list(args), env=env)


def _one_line_error(result) -> str:
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.fixture(scope="module")
def secured_index(secure_node: LocalNode, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Ten sample abstracts indexed over HTTPS by the administrator."""
    users = secure_node.credentials
    folder = tmp_path_factory.mktemp("secure")
    corpus = folder / "ten.jsonl"
    with gzip.open(sample_path(), "rt", encoding="utf-8") as f:
        corpus.write_text("".join(next(f) for _ in range(10)), encoding="utf-8")
    name = f"secure-{uuid.uuid4().hex[:8]}"
    result = _run(_env(secure_node, users.admin, users.admin_password), "index", str(corpus), "--index", name,
                  "--rejects", str(folder / "rejects.tsv"))
    assert result.exit_code == 0, result.output
    assert f"{name}: 10 documents indexed" in result.output
    return name


def test_the_administrator_indexes_searches_and_reads_the_log_over_https(secure_node: LocalNode,
                                                                         secured_index: str) -> None:
    users = secure_node.credentials
    env = _env(secure_node, users.admin, users.admin_password)
    assert secure_node.status().url.startswith("https://")
    found = _run(env, "query", "cells die after injury", "--index", secured_index, "--json")
    assert found.exit_code == 0, found.output
    hits = [json.loads(line) for line in found.output.splitlines() if line.startswith("{")]
    assert len({h["id"] for h in hits}) == 10  # every document of the index, each once
    log = _run(env, "log", "--last", "1", "--json")
    assert log.exit_code == 0, log.output
    assert json.loads(log.output.splitlines()[0])["query"] == "cells die after injury"


def test_a_read_only_user_searches_and_every_write_is_one_line_naming_the_permission(
        secure_node: LocalNode, secured_index: str, tmp_path: Path) -> None:
    users = secure_node.credentials
    admin = _env(secure_node, users.admin, users.admin_password)
    assert _run(admin, "query", "a logged query", "--index", secured_index).exit_code == 0  # the log exists
    env = _env(secure_node, users.reader, users.reader_password)
    found = _run(env, "query", "cells die after injury", "--index", secured_index, "--mode", "hybrid")
    assert found.exit_code == 0, found.output
    # The query is answered; the query log, which the reader may not write, says so once.
    assert "the query log could not be written" in found.output and "no permissions for [indices:" in found.output
    assert _run(env, "indices").exit_code == 0
    assert _run(env, "log", "--last", "1").exit_code == 0

    corpus = tmp_path / "one.jsonl"
    corpus.write_text(json.dumps({"id": "r1", "title": "Calcium", "text": "Calcium rises."}) + "\n")
    for args in (["index", str(corpus), "--format", "jsonl", "--index", f"reader-{uuid.uuid4().hex[:8]}", "--rejects",
                  str(tmp_path / "r.tsv")], ["delete-index", secured_index, "--yes"]):
        line = _one_line_error(_run(env, *args))
        assert "answered 403" in line and "lacks that permission" in line
    # Nothing was deleted.
    assert _run(admin, "stats", "--index", secured_index).exit_code == 0


def test_a_wrong_password_is_one_line(secure_node: LocalNode) -> None:
    users = secure_node.credentials
    line = _one_line_error(_run(_env(secure_node, users.admin, "not-the-password"), "indices"))
    assert "refused the credentials" in line and "not-the-password" not in line


def test_a_certificate_from_another_ca_is_one_line_naming_the_fix(secure_node: LocalNode, tmp_path: Path) -> None:
    from biorank.cluster.security import configure_security

    other = tmp_path / "other"
    (other / "config" / "opensearch-security").mkdir(parents=True)
    (other / "config" / "opensearch-security" / "roles.yml").write_text("")
    (other / "config" / "opensearch-security" / "roles_mapping.yml").write_text("")
    configure_security(other / "config", other)
    users = secure_node.credentials
    env = _env(secure_node, users.admin, users.admin_password, BIORANK_CA_FILE=str(other / "config" / "root-ca.pem"))
    line = _one_line_error(_run(env, "indices"))
    assert "certificate verify failed" in line and "--ca-file" in line and "--no-verify" in line
    assert _run({**env, "BIORANK_VERIFY": "false"}, "indices").exit_code == 0
