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
    PubmedFile,
    SyncPlan,
    SyncRefused,
    apply_files,
    file_key,
    find_pubmed_files,
    plan_sync,
    sha256_of,
)
from biorank.models.encoder import PACKAGED_MODEL
from biorank.store.indices import sentences_index_name
from biorank.store.record import AppliedFile, read_record

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


def gzipped_update(path: Path, citations: list[str], deleted: list[str]) -> Path:
    """An update file as NLM ships it, gzipped."""
    update_file(path.with_suffix(""), citations, deleted)
    path.write_bytes(gzip.compress(path.with_suffix("").read_bytes()))
    path.with_suffix("").unlink()
    return path


def test_a_damaged_file_is_refused_before_any_write_and_never_recorded(
    opensearch: OpenSearch, opensearch_url: str, index_name: str, default_encoder, citations: list[str],
    tmp_path: Path,
) -> None:
    """A download cut short (probe 2.10) or XML that libxml2 gives up on (2.18, billion laughs) is refused whole
    before anything is written, so the genuine file can still be applied afterwards; and a file whose reading stops
    early while it is applied is not recorded."""
    folder = tmp_path / "pubmed"
    folder.mkdir()
    baseline_file(folder, citations[:4])
    full = gzipped_update(tmp_path / "medline16n0903.xml.gz", citations[4:8], [pmid(citations[0])])
    cut = folder / full.name
    cut.write_bytes(full.read_bytes()[: len(full.read_bytes()) * 4 // 10])

    runner = CliRunner()
    refused = runner.invoke(cli, ["--url", opensearch_url, "sync", str(folder), "--index", index_name,
                                  "--model", PACKAGED_MODEL])
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert refused.output.strip().splitlines()[-1] == (
        "Error: medline16n0903.xml.gz is cut short (its gzip stream ends before its trailer: an "
        "interrupted download?); nothing was applied: download it again")
    assert not opensearch.indices.exists(index=index_name)

    # Applied past the check (the file changed after it), a read that stops early is not recorded.
    options = IndexOptions(index=index_name, format="pubmed", rejects=tmp_path / "rejects.tsv")
    files, _ = find_pubmed_files([folder])
    with pytest.raises(SyncRefused, match=r"medline16n0903\.xml\.gz was not read to its end \(.*\); it is not "
                                          r"recorded as applied"):
        apply_files(opensearch, options, SyncPlan(apply=[(f, sha256_of(f.path)) for f in files]),
                    encoder=default_encoder)
    assert [f.name for f in read_record(opensearch, index_name).applied_files] == ["medline16n0902.xml.gz"]

    # The genuine file then goes in whole: its citations, its deletion, and its record.
    cut.write_bytes(full.read_bytes())
    plan = plan_sync(find_pubmed_files([folder])[0], read_record(opensearch, index_name).applied_files)
    report = apply_files(opensearch, options, plan, encoder=default_encoder)
    assert report.deleted == 1 and not report.incomplete
    assert set(stored(opensearch, index_name)[0]) == {pmid(c) for c in citations[1:8]}
    assert [f.name for f in read_record(opensearch, index_name).applied_files] == [
        "medline16n0902.xml.gz", "medline16n0903.xml.gz"]

    # Entities that libxml2 refuses to expand make the file damaged as a whole, named with the line.
    laughs = tmp_path / "laughs" / "medline16n0904.xml"
    laughs.parent.mkdir()
    entities = "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10))
    laughs.write_text(f'<?xml version="1.0"?>\n<!DOCTYPE PubmedArticleSet [<!ENTITY lol0 "lol">{entities}]>\n'
                      f"<PubmedArticleSet>\n<PubmedArticle>\n{revised(citations[1], '&lol9;')}\n</PubmedArticle>\n"
                      "</PubmedArticleSet>\n")
    with pytest.raises(SyncRefused, match=r"medline16n0904\.xml is damaged or not PubMed XML \(line \d+: .*"):
        plan_sync(find_pubmed_files([laughs])[0], read_record(opensearch, index_name).applied_files)


def test_gaps_other_series_and_one_number_under_two_names(tmp_path: Path) -> None:
    """A file past a gap or of another year's series is refused unless allowed (probe 2.6); one number under
    several names is one file, applied once (2.7)."""
    def nlm(name: str) -> PubmedFile:
        path = tmp_path / name
        body = b'<?xml version="1.0"?>\n<PubmedArticleSet>\n</PubmedArticleSet>\n'
        path.write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
        return PubmedFile(path, *file_key(name))

    applied = [AppliedFile(f"pubmed25n000{n}.xml.gz", "0" * 64, "2026-01-01T00:00:00+00:00") for n in (1, 2, 3, 4)]
    with pytest.raises(SyncRefused, match=r"pubmed99n9999\.xml\.gz is of another year's series than "
                                          r"pubmed25n0004\.xml\.gz.*--allow-gaps"):
        plan_sync([nlm("pubmed99n9999.xml.gz")], applied)
    with pytest.raises(SyncRefused, match=r"pubmed25n0006\.xml\.gz does not follow pubmed25n0004\.xml\.gz: "
                                          r"number 0005 is missing"):
        plan_sync([nlm("pubmed25n0006.xml.gz")], applied)
    with pytest.raises(SyncRefused, match=r"pubmed25n0009\.xml does not follow pubmed25n0005\.xml\.gz: numbers "
                                          r"0006 to 0008 are missing"):
        plan_sync([nlm("pubmed25n0005.xml.gz"), nlm("pubmed25n0009.xml")], applied)
    allowed = plan_sync([nlm("pubmed25n0006.xml.gz")], applied, allow_gaps=True)
    assert [f.name for f, _ in allowed.apply] == ["pubmed25n0006.xml.gz"]

    files, _ = find_pubmed_files([nlm(n).path for n in ("pubmed25n0004.xml", "medline25n0005.xml.gz",
                                                          "pubmed25n0005.xml", "pubmed25n0005.xml.gz")])
    plan = plan_sync(files, applied)
    assert [f.name for f, _ in plan.apply] == ["medline25n0005.xml.gz"]
    assert [(f.name, other) for f, other in plan.twins] == [
        ("pubmed25n0004.xml", "pubmed25n0004.xml.gz"), ("pubmed25n0005.xml", "medline25n0005.xml.gz"),
        ("pubmed25n0005.xml.gz", "medline25n0005.xml.gz")]
