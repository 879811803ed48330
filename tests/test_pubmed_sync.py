"""Keeping a PubMed index current: a baseline of real MEDLINE citations and update files in PubMed's own format
(real citations revised, ``<DeleteCitation>`` lists), applied in order, once, on the real node."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli.main import cli
from biorank.indexer.indexer import IndexOptions
from biorank.indexer.updates import (
    SyncRefused,
    apply_files,
    find_pubmed_files,
    plan_sync,
    sha256_of,
)
from biorank.store.indices import sentences_index_name
from biorank.store.record import read_record

BASELINE = 8  # real citations in the baseline subset; one more arrives with the first update


@pytest.fixture(scope="module")
def citations(shared_data: Path) -> list[str]:
    """The first citations of the real 2016 MEDLINE baseline file 902, as written there."""
    raw = gzip.decompress((shared_data / "pubmed" / "medline16n0902.xml.gz").read_bytes()).decode()
    return re.findall(r"<MedlineCitation .*?</MedlineCitation>", raw, flags=re.S)[: BASELINE + 1]


def pmid(citation: str) -> str:
    return re.search(r"<PMID[^>]*>(\d+)</PMID>", citation).group(1)


def revised(citation: str, mark: str) -> str:
    """The citation with ``mark`` added to its title, as a revised version in a later file would change it."""
    return re.sub(r"</ArticleTitle>", f" {mark}</ArticleTitle>", citation, count=1)


def baseline_file(folder: Path, citations: list[str]) -> Path:
    """A baseline file in the 2016 MEDLINE form (bare MedlineCitation elements), gzipped as NLM ships it."""
    path = folder / "medline16n0902.xml.gz"
    text = '<?xml version="1.0" encoding="UTF-8"?>\n<MedlineCitationSet>\n' + "\n".join(citations)
    path.write_bytes(gzip.compress((text + "\n</MedlineCitationSet>\n").encode()))
    return path


def update_file(path: Path, citations: list[str], deleted: list[str]) -> Path:
    """An update file in today's PubmedArticleSet form: new and revised citations, then a DeleteCitation list."""
    articles = "".join(f"<PubmedArticle>\n{c}\n</PubmedArticle>\n" for c in citations)
    pmids = "".join(f'<PMID Version="1">{p}</PMID>\n' for p in deleted)
    path.write_text('<?xml version="1.0" encoding="UTF-8"?>\n<PubmedArticleSet>\n' + articles
                    + (f"<DeleteCitation>\n{pmids}</DeleteCitation>\n" if deleted else "") + "</PubmedArticleSet>\n")
    return path


def stored(client: OpenSearch, index: str) -> tuple[dict[str, str], set[str], set[str]]:
    """Block-0 titles by id, the ids every block belongs to, and those every sentence belongs to."""
    sentences = sentences_index_name(index)
    client.indices.refresh(index=f"{index},{sentences}")
    blocks = client.search(index=index, body={"size": 1000, "_source": ["id", "block", "title"]})["hits"]["hits"]
    entries = client.search(index=sentences, body={"size": 5000, "_source": ["doc_id"]})["hits"]["hits"]
    titles = {h["_source"]["id"]: h["_source"]["title"] for h in blocks if h["_source"]["block"] == 0}
    return titles, {h["_source"]["id"] for h in blocks}, {h["_source"]["doc_id"] for h in entries}


def test_baseline_and_updates_applied_in_order_once(
    opensearch: OpenSearch, opensearch_url: str, index_name: str, default_encoder, citations: list[str],
    tmp_path: Path,
) -> None:
    ids = [pmid(c) for c in citations]
    folder = tmp_path / "pubmed"
    (folder / "baseline").mkdir(parents=True)
    (folder / "updatefiles").mkdir()
    baseline_file(folder / "baseline", citations[:BASELINE])
    # 903 revises 1 and 2, brings a new citation, deletes 3, 4 and a PMID that was never there; 904 (given in
    # the same call) revises 1 again, withdraws the citation 903 brought and brings 3 back.
    update_file(folder / "updatefiles" / "medline16n0903.xml",
                [revised(citations[1], "[903]"), revised(citations[2], "[903]"), citations[BASELINE]],
                [ids[3], ids[4], "99999999"])
    update_file(folder / "updatefiles" / "medline16n0904.xml",
                [revised(citations[1], "[904]"), revised(citations[3], "[904]")], [ids[BASELINE]])
    (folder / "updatefiles" / "medline16n0903.xml.md5").write_text("MD5(medline16n0903.xml)= 0\n")

    files, ignored = find_pubmed_files([folder])
    assert [f.name for f in files] == ["medline16n0902.xml.gz", "medline16n0903.xml", "medline16n0904.xml"]
    assert [p.name for p in ignored] == ["medline16n0903.xml.md5"]
    options = IndexOptions(index=index_name, format="pubmed", batch_size=3, rejects=tmp_path / "rejects.tsv")

    # Interrupted after the baseline: only what was applied in full is recorded.
    def interrupt(done: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        apply_files(opensearch, options, plan_sync(files, ()), encoder=default_encoder, applied=interrupt)
    assert [f.name for f in read_record(opensearch, index_name).applied_files] == ["medline16n0902.xml.gz"]

    # Resumed: the two update files in one call, the later one winning.
    plan = plan_sync(files, read_record(opensearch, index_name).applied_files)
    assert ([f.name for f, _ in plan.apply], [f.name for f in plan.skipped]) == (
        ["medline16n0903.xml", "medline16n0904.xml"], ["medline16n0902.xml.gz"])
    report = apply_files(opensearch, options, plan, encoder=default_encoder)
    assert (report.deleted, report.absent, report.failed) == (3, 1, 0)

    expected = {i: re.search(r"<ArticleTitle>(.*?)</ArticleTitle>", c, flags=re.S).group(1) for i, c in
                zip(ids, citations, strict=True)}
    expected[ids[1]] += " [904]"
    expected[ids[2]] += " [903]"
    expected[ids[3]] += " [904]"
    del expected[ids[4]], expected[ids[BASELINE]]
    titles, block_owners, sentence_owners = stored(opensearch, index_name)
    assert titles == expected
    # Nothing of a deleted citation is left: no block, no sentence; every sentence is of the latest version.
    assert block_owners == sentence_owners == set(expected)
    title_sentences = opensearch.search(index=sentences_index_name(index_name), body={
        "size": 10, "query": {"bool": {"filter": [{"term": {"doc_id": ids[1]}}, {"term": {"section": "title"}}]}}})
    assert "[904]" in " ".join(h["_source"]["text"] for h in title_sentences["hits"]["hits"])

    record = read_record(opensearch, index_name)
    assert [(f.name, f.sha256, f.deleted) for f in record.applied_files] == [
        (f.name, sha256_of(f.path), deleted) for f, deleted in zip(files, (0, 2, 1), strict=True)]

    # The folder again: nothing to apply, nothing changes.
    runner = CliRunner()
    again = runner.invoke(cli, ["--url", opensearch_url, "sync", str(folder), "--index", index_name])
    assert again.exit_code == 0, again.output
    assert (f"{index_name} is current: all 3 files are applied already (last applied: medline16n0904.xml)"
            in again.output)
    assert stored(opensearch, index_name)[0] == expected
    stats = runner.invoke(cli, ["--url", opensearch_url, "stats", "--index", index_name])
    assert "last file applied" in stats.output and "medline16n0904.xml" in stats.output

    # A new file numbered before the last one applied is refused in one line, unless allowed.
    late = update_file(tmp_path / "medline16n0900.xml", [revised(citations[0], "[900]")], [])
    refused = runner.invoke(cli, ["--url", opensearch_url, "sync", str(folder), str(late), "--index", index_name])
    assert refused.exit_code != 0
    assert refused.output.strip().splitlines()[-1].endswith(
        "medline16n0900.xml is numbered before medline16n0904.xml, already applied: applying it now could bring "
        "back older versions and deleted citations; --allow-out-of-order applies it anyway")
    allowed = plan_sync(find_pubmed_files([late])[0], record.applied_files, allow_out_of_order=True)
    assert [f.name for f, _ in allowed.apply] == ["medline16n0900.xml"]

    # An applied file whose content changed is refused, not applied again or skipped.
    update_file(folder / "updatefiles" / "medline16n0904.xml", [revised(citations[1], "[other]")], [])
    with pytest.raises(SyncRefused, match=r"differs from the medline16n0904\.xml applied on"):
        plan_sync(find_pubmed_files([folder])[0], record.applied_files)
    assert stored(opensearch, index_name)[0] == expected


def test_files_are_taken_in_nlm_order_and_other_names_left_out(tmp_path: Path) -> None:
    for name in ("baseline/pubmed25n0002.xml.gz", "baseline/pubmed25n0002.xml.gz.md5", "updatefiles/README.txt",
                 "updatefiles/pubmed25n1275.xml.gz", "old/pubmed24n1300.xml.gz", "baseline/pubmed25n0001.xml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    files, ignored = find_pubmed_files([tmp_path])
    assert [f.name for f in files] == ["pubmed24n1300.xml.gz", "pubmed25n0001.xml", "pubmed25n0002.xml.gz",
                                       "pubmed25n1275.xml.gz"]
    assert sorted(p.name for p in ignored) == ["README.txt", "pubmed25n0002.xml.gz.md5"]
    with pytest.raises(SyncRefused, match="is not named as NLM names its files"):
        find_pubmed_files([tmp_path / "updatefiles" / "README.txt"])
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "pubmed25n1275.xml.gz").write_bytes(b"")
    with pytest.raises(SyncRefused, match=r"two files named pubmed25n1275\.xml\.gz"):
        find_pubmed_files([tmp_path])
