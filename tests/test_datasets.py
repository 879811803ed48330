"""``biorank datasets``: sets fetched over real HTTP from a server on 127.0.0.1 (or copied from a folder), verified
against their pins, resumed after a cut, refused when corrupt; and the publishers' archive formats converted to the
layout, from tiny archives built here out of real lines of the shared data."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import re
import shutil
import socket
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from biorank.cli import cli
from biorank.datasets import DATASETS, Pinned, Source, get
from biorank.downloads import Artifact, fetch
from biorank.errors import ArtifactError, DatasetError

SCIFACT = [p.path for p in DATASETS["scifact"].files]


class _Mirror(http.server.SimpleHTTPRequestHandler):
    """A folder served as publishers serve files: a Range request gets the rest (206); every request is recorded;
    a path in ``server.cut`` gets half of its bytes on its next request, and then the connection closes."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.requests.append((self.path, self.headers.get("Range")))  # type: ignore[attr-defined]
        path = Path(self.translate_path(self.path))
        if path.is_dir():
            super().do_GET()  # the folder's listing, as NLM's server lists its update files
            return
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        asked = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        start = int(asked[1]) if asked else 0
        if start >= len(data) and asked:
            self.send_response(416)
            self.end_headers()
            return
        self.send_response(206 if asked else 200)
        if asked:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        body = data[start:]
        if self.path in self.server.cut:  # type: ignore[attr-defined]
            self.server.cut.discard(self.path)  # type: ignore[attr-defined]
            body = body[: len(body) // 2]
            self.close_connection = True
        self.wfile.write(body)


@pytest.fixture
def serve() -> Iterator:
    """``serve(folder)`` → (base URL, server): ``server.requests`` lists (path, Range), ``server.cut`` the paths
    to cut short once."""
    servers = []

    def start(folder: Path) -> tuple[str, http.server.ThreadingHTTPServer]:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Mirror, directory=str(folder)))
        server.requests, server.cut = [], set()  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["datasets", *args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.stdout, result.stderr


def _error(stderr: str) -> str:
    """The last line of stderr, which must be the whole error: one line, ``Error: …``."""
    last = stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith("Error: "), stderr
    return last


def _mirror_of(shared_data: Path, tmp_path: Path, *paths: str) -> Path:
    root = tmp_path / "mirror"
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared_data / path, root / path)
    return root


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.part"))


def test_get_from_a_mirror_fills_the_layout_and_fetches_nothing_twice(shared_data: Path, tmp_path: Path,
                                                                        serve) -> None:
    url, server = serve(shared_data)
    data = tmp_path / "data"
    code, out, err = _run("get", "scifact", "pubmedqa", "--from", url, "--to", str(data))
    assert code == 0, err
    for path in [*SCIFACT, "pubmedqa/pqal_cv_set.json"]:
        assert (data / path).read_bytes() == (shared_data / path).read_bytes(), path
    assert _leftovers(data) == []
    assert f"scifact: 4 files in {data / 'scifact'}, verified (4 fetched, 0 already there)" in out
    assert f"data folder: {data}" in err

    asked = len(server.requests)
    code, out, _ = _run("get", "scifact", "--from", url, "--to", str(data))
    assert code == 0 and "(0 fetched, 4 already there)" in out
    assert len(server.requests) == asked  # verified files are not fetched again

    (data / "scifact" / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n")  # not the pinned file
    code, _, err = _run("get", "scifact", "--from", url, "--to", str(data))
    assert code == 0 and "scifact/qrels/train.tsv is not the pinned file: fetching it again" in err
    assert [p for p, _ in server.requests[asked:]] == ["/scifact/qrels/train.tsv"]
    assert (data / "scifact/qrels/train.tsv").read_bytes() == (shared_data / "scifact/qrels/train.tsv").read_bytes()


def test_an_interrupted_download_resumes_where_it_stopped(shared_data: Path, tmp_path: Path, serve) -> None:
    path = "pubmedqa/pqal_cv_set.json"
    url, server = serve(_mirror_of(shared_data, tmp_path, path))
    server.cut.add(f"/{path}")
    data = tmp_path / "data"
    size = (shared_data / path).stat().st_size

    code, _, err = _run("get", "pubmedqa", "--from", url, "--to", str(data))
    assert code == 1
    assert f"the download of {path} from 127.0.0.1 broke off after {size // 2:,} of {size:,} bytes" in _error(err)
    assert not (data / path).exists()  # half a file never has the file's name
    assert (data / f"{path}.part").stat().st_size == size // 2

    code, _, err = _run("get", "pubmedqa", "--from", url, "--to", str(data))
    assert code == 0, err
    assert server.requests[-1] == (f"/{path}", f"bytes={size // 2}-")  # only the rest was asked for
    assert (data / path).read_bytes() == (shared_data / path).read_bytes()
    assert _leftovers(data) == []


def test_an_interrupted_maven_artifact_resumes_from_its_part(tmp_path: Path, serve,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The same download moves the local node's jars and the encoders: a cut keeps the part for the next call."""
    data = bytes(range(256)) * 1024
    artifact = Artifact("org.example", "thing", "1.0", "jar", _sha256(data), len(data))
    repository = tmp_path / "repository"
    (repository / artifact.repository_path).parent.mkdir(parents=True)
    (repository / artifact.repository_path).write_bytes(data)
    url, server = serve(repository)
    server.cut.add(f"/{artifact.repository_path}")
    monkeypatch.setenv("BIORANK_MAVEN_REPO", url)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.m2 copy to fall back on
    part = tmp_path / "cache" / "maven" / f"{artifact.repository_path}.part"

    with pytest.raises(ArtifactError, match=r"org\.example:thing:1\.0:jar from .*BIORANK_MAVEN_REPO"):
        fetch(artifact, tmp_path / "cache")
    assert part.stat().st_size == len(data) // 2

    advanced: list[int] = []
    path = fetch(artifact, tmp_path / "cache", advanced.append)
    assert server.requests[-1] == (f"/{artifact.repository_path}", f"bytes={len(data) // 2}-")
    assert path.read_bytes() == data and not part.exists()
    assert sum(advanced) == len(data)  # a progress bar sized for the whole artifact ends full


@pytest.mark.parametrize("over_http", [True, False], ids=["url", "folder"])
def test_a_corrupted_mirror_file_is_refused_in_one_line_and_nothing_looks_finished(
        shared_data: Path, tmp_path: Path, serve, over_http: bool) -> None:
    paths = [p.path for p in DATASETS["pubmed"].files]
    root = _mirror_of(shared_data, tmp_path, *paths)
    bad = root / paths[-1]
    corrupted = bad.read_bytes().replace(b"29768149", b"29768150", 1)
    bad.write_bytes(corrupted)
    mirror = serve(root)[0] if over_http else str(root)
    data = tmp_path / "data"

    code, _, err = _run("get", "pubmed", "--from", mirror, "--to", str(data))
    assert code == 1
    error = _error(err)
    pin = DATASETS["pubmed"].files[-1].sha256
    assert f"{paths[-1]} from {mirror}/{paths[-1]} failed verification" in error
    assert f"sha256 {_sha256(corrupted)}, expected {pin}" in error
    assert not (data / paths[-1]).exists() and _leftovers(data) == []
    code, out, _ = _run("list", "--to", str(data))
    assert re.search(r"^pubmed +0\.7 MB   here: partly: 2 of 3 files$", out, re.M), out


def test_the_network_down_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = _run("get", "pubmed", "--from", f"http://127.0.0.1:{port}", "--to", str(tmp_path / "data"))
    assert code == 1
    assert "cannot reach 127.0.0.1 for pubmed/medline16n0902.xml.gz" in _error(err)
    assert "check the network, or fetch from a mirror with --from URL|DIR" in _error(err)


def test_an_unknown_set_is_one_line_naming_the_known_ones(tmp_path: Path) -> None:
    code, _, err = _run("get", "scifact", "scifakt", "--to", str(tmp_path / "data"))
    assert code == 1
    assert _error(err) == f"Error: unknown data set 'scifakt'; known: {', '.join(DATASETS)}"
    assert not (tmp_path / "data").exists()  # checked before anything is fetched


def test_bioasq_prints_its_steps_without_a_mirror_and_is_copied_from_one(shared_data: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    code, _, err = _run("get", "bioasq", "--to", str(data))
    assert code == 1 and not data.exists()
    assert "register (free) at https://participants-area.bioasq.org/" in err
    assert f"{data}/bioasq/Task7BGoldenEnriched/: 7B1_golden.json 7B2_golden.json" in err
    assert _error(err) == ("Error: bioasq cannot be fetched by a program: take the steps above, or copy it from a "
                           "mirror with --from URL|DIR")

    code, out, err = _run("get", "bioasq", "bioasq-abstracts", "--from", str(shared_data), "--to", str(data))
    assert code == 0, err
    assert "bioasq: 16 files" in out and "bioasq-abstracts: 2 files" in out
    code, out, _ = _run("get", "bioasq", "--to", str(data))  # there and verified: no steps, no mirror needed
    assert code == 0 and "bioasq: 16 files" in out and "(0 fetched, 16 already there)" in out
    code, out, _ = _run("list", "--to", str(data))
    assert re.search(r"^bioasq +8\.2 MB   here: yes$", out, re.M), out
    assert re.search(r"^scifact +8\.7 MB   here: no$", out, re.M), out


def test_list_says_what_each_set_is_and_what_the_folder_holds(shared_data: Path) -> None:
    code, out, _ = _run("list", "--to", str(shared_data))
    assert code == 0
    for ds in DATASETS.values():
        state = "no" if ds.newest else "yes"
        assert re.search(rf"^{re.escape(ds.name)} .*   here: {state}$", out, re.M), (ds.name, out)
        assert f"  {ds.licence}\n" in out and f"  from {ds.origin}\n" in out
    assert "cite Wadden et al., EMNLP 2020" in out
    shown = " ".join(_run("get", "--help")[1].split())
    assert all(re.search(rf"Sets:.* {re.escape(name)}[,; ]", shown) for name in DATASETS), shown  # every set named


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _pinned(expected: dict[str, bytes]) -> tuple[Pinned, ...]:
    return tuple(Pinned(path, _sha256(content), len(content)) for path, content in expected.items())


def test_scifact_is_made_from_the_publishers_archives_without_the_held_out_claims(shared_data: Path, tmp_path: Path,
                                                                                 serve) -> None:
    corpus = b"".join((shared_data / "scifact/corpus.jsonl").open("rb").readlines()[:3])
    claims = b"".join((shared_data / "scifact/claims_train.jsonl").open("rb").readlines()[:5])
    train_queries = (shared_data / "scifact/queries_train.jsonl").open("rb").readlines()[:4]
    judged = {json.loads(line)["_id"] for line in train_queries}
    qrels_lines = (shared_data / "scifact/qrels/train.tsv").open("rb").readlines()
    qrels = qrels_lines[0] + b"".join(line for line in qrels_lines[1:] if line.split(b"\t")[0].decode() in judged)
    held_out = b'{"_id": "-1", "text": "a held-out claim", "metadata": {}}\n'
    assert b"\r" not in qrels  # the layout's file ends its lines in LF
    publisher = tmp_path / "publisher"
    publisher.mkdir()
    # AllenAI's tarball: data/ with every split; BEIR's zip: scifact/ with every claim as a query.
    (publisher / "data.tar.gz").write_bytes(_tar_gz({
        "data/corpus.jsonl": corpus, "data/claims_train.jsonl": claims.replace(b"\n", b"\r\n"),  # LF once written
        "data/claims_dev.jsonl": b'{"id": -1, "claim": "held out"}\n', "data/claims_test.jsonl": b'{"id": -2}\n'}))
    with zipfile.ZipFile(publisher / "scifact.zip", "w") as beir:
        beir.writestr("scifact/corpus.jsonl", b'{"_id": "4983", "title": "", "text": ""}\n')
        beir.writestr("scifact/queries.jsonl", b"".join([held_out, *train_queries[:2], held_out, *train_queries[2:]]))
        beir.writestr("scifact/qrels/train.tsv", qrels.replace(b"\n", b"\r\n"))  # as BEIR's csv module wrote it
        beir.writestr("scifact/qrels/test.tsv", b"query-id\tcorpus-id\tscore\n-1\t4983\t1\n")
    url, server = serve(publisher)
    expected = {"scifact/corpus.jsonl": corpus, "scifact/claims_train.jsonl": claims,
                "scifact/queries_train.jsonl": b"".join(train_queries), "scifact/qrels/train.tsv": qrels}
    tarball, archive = (publisher / "data.tar.gz").read_bytes(), (publisher / "scifact.zip").read_bytes()
    ds = replace(DATASETS["scifact"], files=_pinned(expected), sources=(
        Source(f"{url}/data.tar.gz", len(tarball), sha256=_sha256(tarball)),
        Source(f"{url}/scifact.zip", len(archive), md5=hashlib.md5(archive).hexdigest())))
    data, seen = tmp_path / "data", []

    fetched = get(ds, data, progress=lambda label, done, total: seen.append((label, done, total)))
    assert set(fetched.written) == set(expected) and fetched.kept == ()
    for path, content in expected.items():
        assert (data / path).read_bytes() == content, path
    written = sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file())
    assert written == sorted(expected)  # no dev or test claims, no test qrels, no downloads left behind
    assert ("data.tar.gz", len(tarball), len(tarball)) in seen

    asked = len(server.requests)
    assert get(ds, data).written == () and len(server.requests) == asked


def test_a_publishers_download_that_is_not_the_pinned_one_is_refused(tmp_path: Path, serve) -> None:
    publisher = tmp_path / "publisher"
    publisher.mkdir()
    tarball = _tar_gz({"data/corpus.jsonl": b"{}\n", "data/claims_train.jsonl": b"{}\n"})
    (publisher / "data.tar.gz").write_bytes(tarball)
    url, _ = serve(publisher)
    pin = _sha256(b"the release as it was pinned")
    ds = replace(DATASETS["scifact"], sources=(Source(f"{url}/data.tar.gz", len(tarball), sha256=pin),
                                               *DATASETS["scifact"].sources[1:]))
    data = tmp_path / "data"
    with pytest.raises(DatasetError, match=rf"data\.tar\.gz from {url}/data\.tar\.gz failed verification: "
                                        rf"sha256 {_sha256(tarball)}, expected {pin}; nothing of it was kept"):
        get(ds, data)
    assert [p for p in data.rglob("*") if p.is_file()] == []


def test_pubmedqa_is_made_from_the_authors_files_without_the_test_questions(shared_data: Path, tmp_path: Path,
                                                                            serve) -> None:
    kept = dict(list(json.loads((shared_data / "pubmedqa/pqal_cv_set.json").read_bytes()).items())[:3])
    test = {"1": {"QUESTION": "a test question"}, "2": {"QUESTION": "another"}}
    pmids = list(kept)
    questions = {"1": test["1"], pmids[0]: kept[pmids[0]], pmids[1]: kept[pmids[1]], "2": test["2"],
                 pmids[2]: kept[pmids[2]]}
    publisher = tmp_path / "publisher"
    publisher.mkdir()
    (publisher / "ori_pqal.json").write_text(json.dumps(questions, indent=4))
    (publisher / "test_ground_truth.json").write_text(json.dumps({"1": "yes", "2": "no"}, indent=4))
    url, _ = serve(publisher)
    expected = json.dumps(kept, indent=4).encode()
    ds = replace(DATASETS["pubmedqa"], files=_pinned({"pubmedqa/pqal_cv_set.json": expected}),
                 sources=tuple(Source(f"{url}/{name}") for name in ("ori_pqal.json", "test_ground_truth.json")))

    assert get(ds, tmp_path / "data").written == ("pubmedqa/pqal_cv_set.json",)
    assert (tmp_path / "data/pubmedqa/pqal_cv_set.json").read_bytes() == expected


def test_the_newest_pubmed_update_file_comes_with_its_md5_checked(shared_data: Path, tmp_path: Path, serve) -> None:
    updates = tmp_path / "mirror" / "pubmed" / "updatefiles"
    updates.mkdir(parents=True)
    for name, source in (("pubmed99n0001.xml.gz", "test_current_medline.xml.gz"),
                         ("pubmed99n0002.xml.gz", "medline16n0902.xml.gz")):
        content = (shared_data / "pubmed" / source).read_bytes()
        (updates / name).write_bytes(content)
        (updates / f"{name}.md5").write_text(f"MD5({name})= {hashlib.md5(content).hexdigest()}\n")
    (updates / "pubmed99n0002_stats.html").write_text("<html></html>")
    url, server = serve(tmp_path / "mirror")
    data = tmp_path / "data"

    code, out, err = _run("get", "pubmed-update", "--from", url, "--to", str(data))
    assert code == 0, err
    assert "pubmed-update: 1 file in" in out and "(1 fetched, 0 already there)" in out
    assert (data / "pubmed/updatefiles/pubmed99n0002.xml.gz").read_bytes() == (updates / "pubmed99n0002.xml.gz"
                                                                                  ).read_bytes()
    assert not any("n0001" in path for path, _ in server.requests)  # only the newest
    code, out, _ = _run("list", "--to", str(data))
    assert re.search(r"^pubmed-update +~50 MB   here: yes \(pubmed99n0002\.xml\.gz\)$", out, re.M), out

    (updates / "pubmed99n0003.xml.gz").write_bytes(b"not what NLM published")
    (updates / "pubmed99n0003.xml.gz.md5").write_text(f"MD5(pubmed99n0003.xml.gz)= {'0' * 32}\n")
    code, _, err = _run("get", "pubmed-update", "--from", str(tmp_path / "mirror"), "--to", str(data))
    assert code == 1
    assert f"failed verification: md5 {hashlib.md5(b'not what NLM published').hexdigest()}, expected {'0' * 32}" \
        in _error(err)
    assert not (data / "pubmed/updatefiles/pubmed99n0003.xml.gz").exists() and _leftovers(data) == []
