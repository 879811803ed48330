"""Docs that cannot rot: the commands README.md and docs/ mark runnable run against the test node, and every
relative link of those pages resolves.

A runnable block is a fenced ``sh`` block right after ``<!-- runnable -->``. Its lines are what a reader types
after the quickstart, so the test changes only what a test must: every command goes to the test node (``--url``),
``data/`` (the folder ``biorank datasets get`` fills) is the tests' data folder, files a command writes land in a
temporary folder, an index other than the demo's gets a name of its own (deleted afterwards), ``biorank serve … &``
runs in the background on a free port that the block's ``curl`` lines reach, and the virtual environment and install
in front of the demo (``python3 -m venv .venv && .venv/bin/pip install . &&``) are what this test environment
already did. ``docs.jsonl`` (the index guide's example of
any JSON Lines) is written from the first abstracts of the bundled sample.
"""

from __future__ import annotations

import gzip
import json
import re
import shlex
import socket
import subprocess
import sys
import time
import unicodedata
import urllib.request
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from biorank.cli import cli
from biorank.demo import DEMO_INDEX, sample_path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = re.compile(r"<!-- runnable -->\s*```sh\n(.*?)```", re.S)
FENCED = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _runnable_blocks() -> list[pytest.param]:
    blocks, seen = [], set()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in RUNNABLE.finditer(text):
            if match[1] in seen:
                continue  # the same commands on two pages (the quickstart) run once
            seen.add(match[1])
            where = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
            blocks.append(pytest.param(match[1], id=where))
    return blocks


def _commands(block: str) -> list[list[str]]:
    """The block's commands as argument lists: continuation lines joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _curl(words: list[str], port: int) -> dict:
    """The block's ``curl -s URL [-H header] [-d body]`` as one request to the background server; its JSON answer."""
    url, headers, body, rest = None, {}, None, iter(words[1:])
    for word in rest:
        if word == "-H":
            name, _, value = next(rest).partition(":")
            headers[name.strip()] = value.strip()
        elif word == "-d":
            body = next(rest).encode()
        elif not word.startswith("-"):
            url = word
    assert url and url.startswith("localhost:8000/"), f"a runnable curl line must ask localhost:8000, not {url!r}"
    request = urllib.request.Request(f"http://127.0.0.1:{port}/{url.split('/', 1)[1]}", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 200
        return json.loads(response.read())


def _serve(words: list[str], url: str, port: int) -> subprocess.Popen:
    args = [arg if arg != "8000" else str(port) for arg in words[1:]]
    if "--port" not in args:
        args += ["--port", str(port)]
    server = subprocess.Popen([sys.executable, "-m", "biorank.cli", "--url", url, *args],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert server.poll() is None, f"biorank serve stopped: {server.stdout.read() if server.stdout else ''}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=5):
                return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise AssertionError("biorank serve did not answer within 120 s")


@pytest.fixture(scope="module")
def demo_index(opensearch) -> str:
    """What the quickstart leaves behind and the guides search: the demo index (quick when another test built it)."""
    from biorank.demo import index_sample

    index_sample(opensearch)
    return DEMO_INDEX


@pytest.mark.parametrize("block", _runnable_blocks())
def test_a_runnable_block_runs(block: str, demo_index: str, opensearch_url: str, opensearch, shared_data: Path,
                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BIORANK_URL", opensearch_url)
    (tmp_path / "data").symlink_to(shared_data, target_is_directory=True)  # what `biorank datasets get` writes
    with gzip.open(sample_path(), "rt", encoding="utf-8") as sample, open("docs.jsonl", "w") as docs:
        for line in list(sample)[:20]:
            record = json.loads(line)
            docs.write(json.dumps({"pmid": str(record["doc_id"]), "title": record["title"],
                                   "body": " ".join(record["abstract"])}) + "\n")
    own = f"biorank-test-docs-{uuid.uuid4().hex[:8]}"
    port, server = _free_port(), None
    try:
        for words in _commands(block):
            if "&&" in words:
                # The virtual environment and the install in front of the demo: what this environment did.
                words = words[len(words) - words[::-1].index("&&"):]
            words = [words[0].removeprefix(".venv/bin/"), *words[1:]]
            words = [f"{own}-{w}" if i and words[i - 1] in ("--index", "delete-index") and w != demo_index else w
                     for i, w in enumerate(words)]
            if words[0] == "curl":
                assert server is not None, "a runnable curl line needs a biorank serve … & before it"
                answer = _curl(words, port)
                assert answer.get("hits") or answer.get("status") or answer.get("id"), answer
                continue
            assert words[0] == "biorank", f"a runnable block holds biorank and curl commands only, not {words[0]!r}"
            if words[-1] == "&":
                assert words[1] == "serve", "only biorank serve runs in the background"
                server = _serve(words[:-1], opensearch_url, port)
                continue
            result = CliRunner().invoke(cli, ["--url", opensearch_url, *words[1:]])
            shown = shlex.join(words)
            assert result.exit_code == 0, f"{shown}\n{result.output}"
            assert result.output.strip(), f"{shown} printed nothing"
            assert "Traceback" not in result.output, f"{shown}\n{result.output}"
            if "--json" in words and words[1] == "query":
                assert all(json.loads(line) for line in result.output.splitlines() if line.strip()), shown
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        opensearch.indices.delete(index=f"{own}*", ignore_unavailable=True, allow_no_indices=True)


def test_the_docs_have_runnable_blocks_in_the_readme_and_in_every_guide() -> None:
    runnable = {page.relative_to(ROOT).as_posix() for page in PAGES if RUNNABLE.search(page.read_text("utf-8"))}
    assert "README.md" in runnable
    guides = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs" / "guides").glob("*.md")}
    # Training takes too long for a test; the Python guide's example is the README's, run by test_pipeline.py.
    untested = {"docs/guides/train.md", "docs/guides/python.md"}
    assert guides - untested <= runnable, sorted(guides - untested - runnable)


def test_the_examples_say_the_layout_biorank_datasets_writes() -> None:
    """No page points a reader at the team's own data folder: examples say data/..., which `biorank datasets get`
    fills on any machine."""
    pages = [*PAGES, *sorted((ROOT / "biorank" / "models").glob("*/README.md"))]
    stale = [page.relative_to(ROOT).as_posix() for page in pages if "../shared/data" in page.read_text("utf-8")]
    assert not stale, stale


def test_the_python_guide_shows_the_readme_example_that_runs() -> None:
    readme = re.search(r"<!-- python-example -->\s*```python\n(.*?)```", (ROOT / "README.md").read_text("utf-8"), re.S)
    guide = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "guides" / "python.md").read_text("utf-8"), re.S)
    assert readme and guide and guide[1] == readme[1]


def _slug(heading: str) -> str:
    """The anchor of a heading as mkdocs' toc extension (and, for plain headings, GitHub) makes it."""
    text = re.sub(r"[`*]", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def _anchors(page: Path) -> set[str]:
    text = FENCED.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m[1]) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(FENCED.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check offline
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        missing_anchor = bool(anchor) and resolved.suffix == ".md" and anchor not in _anchors(resolved)
        if not resolved.exists() or missing_anchor:
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_page_is_in_the_site_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [p.relative_to(ROOT / "docs").as_posix() for p in PAGES[1:]
               if f" {p.relative_to(ROOT / 'docs').as_posix()}\n" not in nav]
    assert not missing, missing


def test_runnable_commands_exist() -> None:
    """Every runnable biorank command names a command the CLI has (a quick check that needs no cluster)."""
    known = set(cli.commands)
    for block in _runnable_blocks():
        for words in _commands(block.values[0]):
            if "biorank" in words:
                name = words[words.index("biorank") + 1]
                assert name in known, name


def test_the_api_page_documents_every_exported_name() -> None:
    import biorank

    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: biorank\.(\w+)$", page, re.M))
    assert documented == set(biorank.__all__), sorted(documented ^ set(biorank.__all__))
