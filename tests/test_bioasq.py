"""BioASQ Phase A measures: the official evaluator's figures on hand-made files, biorank's PMID reading on
hand-computed cases, then the real 7B-9B golden files."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from biorank.cli.main import cli
from biorank.evaluation.bioasq import (
    GoldenFileError,
    GoldQuestion,
    SnippetSpan,
    document_measures,
    mean_measures,
    merge_overlapping,
    official_ap_denominator,
    pmid,
    read_golden,
    snippet_measures,
)
from biorank.evaluation.bioasq_official import (
    EVALUATOR_VERSION,
    EvaluatorQuestion,
    EvaluatorSnippet,
    OfficialEvaluatorError,
    evaluator_questions,
    official_phase_a,
    read_evaluator_file,
)
from biorank.evaluation.phase_a import read_submission

approx = pytest.approx


def span(begin: int, end: int, document: str = "1", section: str = "abstract") -> SnippetSpan:
    return SnippetSpan(document, section, begin, end)


# ---------------------------------------------------------------- the official evaluator's own figures

OFFICIAL = Path(__file__).parent / "data" / "bioasq_official"
"""golden.json and submission.json: 9 real BioASQ 7B2 questions and a submission, each altered to exercise one
quirk of the official evaluator (written by hand from 7B2_golden.json; see the comments below)."""

MEASURES = ("doc-precision", "doc-recall", "doc-f1", "doc-map", "doc-gmap",
            "snippet-precision", "snippet-recall", "snippet-f1", "snippet-map", "snippet-gmap")

# Printed by the official evaluator, BioASQEvaluation.jar of github.com/BioASQ/Evaluation-Measures at commit
# 8c8e689068a41c1370fec55260e5fbfe3a6a6016 (flat/BioASQEvaluation/dist/, sha256 40321d15...72fa539), under
# OpenJDK 17.0.15, on 2026-11-27:
#   java -cp BioASQEvaluation.jar:lib/commons-cli-1.2.jar:lib/gson-2.2.4.jar evaluation.EvaluatorTask1b \
#       -phaseA -e VERSION tests/data/bioasq_official/golden.json tests/data/bioasq_official/submission.json
# Of the 20 figures it prints (concepts, documents, snippets, triples: P R F1 MAP GMAP each), the 10 of
# documents and snippets, as printed. "judged" is golden.json without question G (no gold documents), the
# questions `biorank eval` scores: a BioASQ golden file's judged queries are those with gold documents.
JAR_PRINTED = {
    ("golden", 2): "0.532051282051282 0.625 0.5664285714285714 0.5147158686221186 0.03937654919826337 "
                   "0.7362132352941176 0.34242054325448484 0.4454786444720903 0.44742561926651925 0.1534604652248704",
    ("golden", 3): "0.532051282051282 0.625 0.5664285714285714 0.24682570901320902 0.016901958322617504 "
                   "0.7362132352941176 0.34242054325448484 0.4454786444720903 0.25658062695642636 "
                   "0.020247096263096974",
    ("golden", 5): "0.532051282051282 0.625 0.5664285714285714 0.24682570901320902 0.016901958322617504 "
                   "0.7362132352941176 0.34242054325448484 0.4454786444720903 0.25658062695642636 "
                   "0.020247096263096974",
    ("golden", 8): "0.532051282051282 0.625 0.5664285714285714 0.5384923756798756 0.04028424367266308 "
                   "0.7362132352941176 0.34242054325448484 0.4454786444720903 0.48860208985475456 "
                   "0.16398425481130258",
    ("golden", 9): "0.608058608058608 0.7142857142857143 0.6473469387755102 0.6154198579198579 0.13187258839516625 "
                   "0.8413865546218487 0.39133776371941126 0.5091184508252461 0.5584023884054338 "
                   "0.12665753433624571",
    ("judged", 2): "0.608058608058608 0.7142857142857143 0.6473469387755102 0.588246706996707 0.12848222021444292 "
                   "0.6985294117647058 0.3533688360953112 0.4491256355935373 0.43991499344745055 "
                   "0.12963233443548078",
    ("judged", 5): "0.608058608058608 0.7142857142857143 0.6473469387755102 0.2820865245865246 0.04887321257757746 "
                   "0.6985294117647058 0.3533688360953112 0.4491256355935373 0.2789492879502016 "
                   "0.016116306111483958",
    ("judged", 9): "0.608058608058608 0.7142857142857143 0.6473469387755102 0.6154198579198579 0.13187258839516625 "
                   "0.8149509803921569 0.4122636421111964 0.5239799081924602 0.5681361198063394 "
                   "0.10074876994356091",
}


def _jar(golden: str, version: int) -> dict[str, float]:
    return dict(zip(MEASURES, map(float, JAR_PRINTED[golden, version].split()), strict=True))


def _judged_golden(tmp_path: Path) -> Path:
    data = json.loads((OFFICIAL / "golden.json").read_text())
    data["questions"] = [q for q in data["questions"] if q["documents"]]
    path = tmp_path / "judged.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("version", [2, 3, 5, 8, 9])
def test_official_measures_equal_the_jar_to_the_last_bit(version: int, tmp_path: Path):
    submitted = read_evaluator_file(OFFICIAL / "submission.json")
    for golden, path in (("golden", OFFICIAL / "golden.json"), ("judged", _judged_golden(tmp_path))):
        if (golden, version) in JAR_PRINTED:
            assert official_phase_a(read_evaluator_file(path), submitted, version).means == _jar(golden, version)


def test_eval_runs_prints_the_jar_figures_and_the_pmid_reading_apart(tmp_path: Path):
    for choice, version in EVALUATOR_VERSION.items():
        out = tmp_path / choice
        result = CliRunner().invoke(cli, ["eval", "--runs", str(OFFICIAL / "submission.json"), "--qrels",
                                          str(OFFICIAL / "golden.json"), "--bioasq-map", choice, "--measures",
                                          "ndcg@10", "--out", str(out)])
        assert result.exit_code == 0, result.output
        table = json.loads((out / "table.json").read_text())["table"]["submission"]
        jar = _jar("judged", version)
        official = {m: table["bioasq-" + m.replace("-map", "-ap")] for m in MEASURES}
        assert official == jar, choice
        # The PMID reading matches the https gold documents and cuts at 10, so it differs, under its own name.
        assert table["bioasq-doc-ap-pmid"] != table["bioasq-doc-ap"]
        assert table["bioasq-doc-gmap-pmid"] != table["bioasq-doc-gmap"]


def _official_rows(version: int = 8) -> tuple[dict, dict]:
    golden = read_evaluator_file(OFFICIAL / "golden.json")
    result = official_phase_a(golden, read_evaluator_file(OFFICIAL / "submission.json"), version)
    ids = {tag: q.id for tag, q in zip("ABCDEFGHI", golden, strict=True)}
    return ({tag: result.documents.get(q) for tag, q in ids.items()},
            {tag: result.snippets.get(q) for tag, q in ids.items()})


def test_official_quirks_question_by_question():
    docs, snippets = _official_rows(8)
    # A: gold [http 29028963, https 28968643/]; submitted [http 28968643, http 29028963, https 29028963/].
    # Only the http 29028963 matches: P 1/3, R 1/2; AP = P@2 = 1/2 over min(2, 10).
    assert docs["A"] == approx({"precision": 1 / 3, "recall": 1 / 2, "f1": 0.4, "ap": 0.25})
    # B: gold [d0, https d0/, d1, d1, d2] reads as 4 strings, submitted [d0, d1, d1, x] as 3: P 2/3, R 2/4,
    # AP (1 + 1) / 4.
    assert docs["B"] == approx({"precision": 2 / 3, "recall": 0.5, "f1": 4 / 7, "ap": 0.5})
    # C: 12 gold, 13 submitted with a miss at rank 7; nothing cut: AP = (6 + 7/8 + ... + 12/13) / 10 > 1.
    assert docs["C"]["ap"] == approx((6 + sum(k / (k + 1) for k in range(7, 13))) / 10)
    assert docs["C"]["ap"] > 1
    assert docs["D"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "ap": 0.0}  # empty lists
    assert docs["E"] is None and snippets["E"] is None  # not submitted: left out of the means
    # F has no gold snippets: -e 8 divides 0 by min(0, 10) (NaN, 0 in MAP, a factor 1 in GMAP); -e 9 leaves it
    # out. G has no gold documents: -e 8 counts its zeros, -e 9 leaves it out.
    assert math.isnan(snippets["F"]["ap"]) and docs["G"]["ap"] == 0.0
    docs9, snippets9 = _official_rows(9)
    assert snippets9["F"] is None and docs9["G"] is None
    # A's first snippet names its document in the https form: its characters count in P and R (matched by the
    # id after the last "/") but not in AP (whole strings); its three other snippets, two merged, all overlap.
    assert snippets["A"]["precision"] == 1.0
    assert snippets["A"]["ap"] < 0.5


def test_official_snippet_reading_and_overlap():
    [q] = evaluator_questions({"questions": [{"id": "q", "documents": ["1", "1"], "snippets": [
        {"document": "https://pubmed.ncbi.nlm.nih.gov/7/", "beginSection": "sections.0", "endSection": "sections.0",
         "offsetInBeginSection": 5, "offsetInEndSection": 9}]}]}, "x.json")
    assert q.documents == ("1",)
    [s] = q.snippets
    assert (s.document_only_id, s.begin_section, s.size) == ("7", "0", 5)
    gold = EvaluatorSnippet("http://www.ncbi.nlm.nih.gov/pubmed/7", "abstract", "abstract", 9, 20)
    # Ends inclusive, so touching spans share a character; "0" meets "abstract" but not the other way round.
    assert s.overlap(gold) == 1 and gold.overlap(s) == 0


def test_official_evaluator_rejects_what_it_cannot_read():
    with pytest.raises(OfficialEvaluatorError, match=r"q7.*offsetInBeginSection"):
        evaluator_questions({"questions": [{"id": "q7", "snippets": [{"offsetInBeginSection": 1.5}]}]}, "x.json")
    with pytest.raises(OfficialEvaluatorError, match=r"x\.json"):
        evaluator_questions({"answers": []}, "x.json")
    with pytest.raises(ValueError, match="versions"):
        official_phase_a([EvaluatorQuestion("q", (), ())], [], 4)


def test_read_submission_reads_old_section_names():
    _, snippets = read_submission(OFFICIAL / "submission.json")
    assert {s.section for found in snippets.values() for s in found} == {"title", "abstract"}


# ---------------------------------------------------------------- identifiers and years


def test_pmid_takes_the_trailing_digits_of_either_url_form():
    assert pmid("http://www.ncbi.nlm.nih.gov/pubmed/23028361") == "23028361"
    assert pmid("https://pubmed.ncbi.nlm.nih.gov/23028361/") == "23028361"
    assert pmid("23028361") == "23028361"
    with pytest.raises(ValueError):
        pmid("http://www.ncbi.nlm.nih.gov/pubmed/")


def test_official_ap_denominator_by_challenge():
    assert official_ap_denominator(2) == "gold"
    assert official_ap_denominator(3) == "cutoff"
    assert official_ap_denominator(7) == "cutoff"
    assert official_ap_denominator(8) == "min_gold_cutoff"
    assert official_ap_denominator(9) == "min_gold_cutoff"


# ---------------------------------------------------------------- documents, by hand


def test_documents_perfect_list():
    m = document_measures(["a", "b", "c"], {"a", "b", "c"})
    assert m == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "ap": 1.0}
    # BioASQ 3-7 divided by 10 whatever the gold size: (1 + 1 + 1) / 10.
    assert document_measures(["a", "b", "c"], {"a", "b", "c"}, ap_denominator="cutoff")["ap"] == approx(0.3)


def test_documents_empty_list_scores_zero():
    assert document_measures([], {"a", "b"}) == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "ap": 0.0}


def test_documents_with_no_relevant_item_score_zero_and_do_not_divide_by_zero():
    assert document_measures(["x", "y", "z"], {"a", "b"}) == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "ap": 0.0}


def test_documents_relevant_at_ranks_1_and_3_of_4_gold():
    m = document_measures(["g1", "x", "g2", "y"], {"g1", "g2", "g3", "g4"})
    assert m["precision"] == approx(2 / 4)
    assert m["recall"] == approx(2 / 4)
    assert m["f1"] == approx(0.5)
    # AP: P@1 = 1/1, P@3 = 2/3; sum 5/3; divided by min(|L_R| = 4, 10) = 4 -> 5/12 = 0.41667.
    assert m["ap"] == approx(5 / 12)
    # 7B (denominator 10): 5/3 / 10 = 1/6; |L_R| (= 4 here) gives 5/12 again.
    ranked, gold = ["g1", "x", "g2", "y"], {"g1", "g2", "g3", "g4"}
    assert document_measures(ranked, gold, ap_denominator="cutoff")["ap"] == approx(1 / 6)
    assert document_measures(ranked, gold, ap_denominator="gold")["ap"] == approx(5 / 12)


def test_documents_only_the_first_10_count():
    irrelevant = [f"x{i}" for i in range(9)]
    # Gold at ranks 10 and 11: rank 11 is beyond the cutoff.
    m = document_measures([*irrelevant, "g1", "g2"], {"g1", "g2"})
    assert m["precision"] == approx(1 / 10)
    assert m["recall"] == approx(1 / 2)
    # AP: P@10 = 1/10, divided by min(2, 10) = 2 -> 0.05.
    assert m["ap"] == approx(0.05)
    assert document_measures([*irrelevant, "x9", "g1", "g2"], {"g1", "g2"})["ap"] == 0.0
    assert document_measures([*irrelevant, "x9", "g1", "g2"], {"g1", "g2"}, cutoff=None)["recall"] == 1.0


def test_documents_duplicates_are_dropped_after_the_cut():
    # [a, a, b, x] -> [a, b, x]: P = 2/3, R = 2/2, F = 0.8; AP = (1/1 + 2/2) / 2 = 1.
    m = document_measures(["a", "a", "b", "x"], {"a", "b"})
    assert m == approx({"precision": 2 / 3, "recall": 1.0, "f1": 0.8, "ap": 1.0})
    # Ten copies of "a" then "b": the cut keeps only "a"; "b" is not pulled in from rank 11.
    m = document_measures(["a"] * 10 + ["b"], {"a", "b"})
    assert m["precision"] == 1.0
    assert m["recall"] == 0.5


def test_documents_match_by_pmid_whatever_the_url_form():
    retrieved = ["http://www.ncbi.nlm.nih.gov/pubmed/1", "https://pubmed.ncbi.nlm.nih.gov/2/"]
    assert document_measures(retrieved, {"1", "http://www.ncbi.nlm.nih.gov/pubmed/2"})["ap"] == 1.0


def test_both_map_denominators_on_the_same_example():
    # Question A: 3 gold, all 3 retrieved first. Question B: 12 gold, 10 retrieved, all relevant.
    a = (["a1", "a2", "a3"], {"a1", "a2", "a3"})
    b_gold = {f"b{i}" for i in range(12)}
    b = (sorted(b_gold)[:10], b_gold)
    by_kind = {
        kind: mean_measures([document_measures(*a, ap_denominator=kind), document_measures(*b, ap_denominator=kind)])
        for kind in ("min_gold_cutoff", "cutoff", "gold")
    }
    # min(|L_R|, 10): A 3/3, B 10/10.
    assert by_kind["min_gold_cutoff"]["map"] == approx(1.0)
    # 10 (BioASQ 3-7): A 3/10, B 10/10.
    assert by_kind["cutoff"]["map"] == approx((0.3 + 1.0) / 2)
    # |L_R| (BioASQ 1-2): A 3/3, B 10/12.
    assert by_kind["gold"]["map"] == approx((1.0 + 10 / 12) / 2)
    assert len({round(m["map"], 6) for m in by_kind.values()}) == 3


# ---------------------------------------------------------------- GMAP


def test_gmap_with_a_zero_ap_uses_epsilon():
    per_question = [
        {"precision": 1.0, "recall": 1.0, "f1": 1.0, "ap": 1.0},
        {"precision": 0.0, "recall": 0.0, "f1": 0.0, "ap": 0.0},
    ]
    m = mean_measures(per_question)
    assert m["map"] == 0.5
    # exp((log(1 + 1e-5) + log(0 + 1e-5)) / 2) = sqrt(1.00001e-5) = 0.0031623
    assert m["gmap"] == approx(math.sqrt((1 + 1e-5) * 1e-5))
    assert m["gmap"] == approx(0.0031623, abs=1e-7)
    with pytest.raises(ValueError):
        mean_measures([])


# ---------------------------------------------------------------- snippets, by hand


def test_duplicate_snippets_count_once():
    # The same snippet three times is one span after merging: precision stays 1, not 1/3.
    m = snippet_measures([span(100, 200)] * 3, [span(100, 200)])
    assert m["precision"] == 1.0 and m["recall"] == 1.0


def test_snippet_exact_match():
    for inclusive in (True, False):
        m = snippet_measures([span(100, 200)], [span(100, 200)], end_inclusive=inclusive)
        assert m == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "ap": 1.0}


def test_snippet_partial_overlap():
    # Gold [100, 200), retrieved [150, 250): characters 150..199 are shared, 50 of 100 on each side.
    exact = snippet_measures([span(150, 250)], [span(100, 200)], end_inclusive=False)
    assert exact == approx({"precision": 0.5, "recall": 0.5, "f1": 0.5, "ap": 0.5})
    # The official code counts end - begin + 1: overlap 200 - 150 + 1 = 51 of 101 on each side.
    official = snippet_measures([span(150, 250)], [span(100, 200)])
    assert official == approx({"precision": 51 / 101, "recall": 51 / 101, "f1": 51 / 101, "ap": 51 / 101})


def test_snippet_overlapping_two_gold_snippets():
    gold = [span(100, 200), span(300, 400)]
    # Retrieved [150, 350): 50 characters of each gold snippet; 100 of 200 retrieved, 100 of 200 gold.
    exact = snippet_measures([span(150, 350)], gold, end_inclusive=False)
    assert exact["precision"] == approx(0.5)
    assert exact["recall"] == approx(0.5)
    # Official sizes: overlaps 51 + 51 = 102; retrieved 201; gold 101 + 101 = 202.
    official = snippet_measures([span(150, 350)], gold)
    assert official["precision"] == approx(102 / 201)
    assert official["recall"] == approx(102 / 202)


def test_snippet_other_document_or_section_does_not_overlap():
    gold = [span(100, 200, document="1", section="abstract")]
    for retrieved in (span(100, 200, document="2"), span(100, 200, section="title")):
        m = snippet_measures([retrieved], gold)
        assert m == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "ap": 0.0}


def test_overlapping_retrieved_snippets_are_merged_not_counted_twice():
    gold = [span(100, 200)]
    retrieved = [span(100, 200), span(150, 250)]
    assert merge_overlapping(retrieved, end_inclusive=False) == [span(100, 250)]
    # Merged to [100, 250): 100 shared characters of 150 retrieved (not 150 of 200, as counting twice would give).
    exact = snippet_measures(retrieved, gold, end_inclusive=False)
    assert exact["precision"] == approx(100 / 150)
    assert exact["recall"] == 1.0
    # One merged snippet, P@1 = 2/3, one merged gold snippet.
    assert exact["ap"] == approx(2 / 3)
    official = snippet_measures(retrieved, gold)
    assert official["precision"] == approx(101 / 151)
    assert official["recall"] == 1.0


def test_overlapping_gold_snippets_are_merged_too():
    gold = [span(100, 200), span(150, 250), span(150, 250)]
    m = snippet_measures([span(100, 250)], gold, end_inclusive=False)
    assert m == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "ap": 1.0}


def test_merge_keeps_the_rank_of_the_first_member_and_chains():
    spans = [span(0, 10, document="9"), span(100, 200), span(300, 400), span(190, 310)]
    assert merge_overlapping(spans, end_inclusive=False) == [span(0, 10, document="9"), span(100, 400)]


def test_touching_snippets_share_a_character_in_the_official_count():
    # [100, 200) and [200, 300) share no character, but read inclusively both contain offset 200.
    exact = snippet_measures([span(200, 300)], [span(100, 200)], end_inclusive=False)
    assert exact["precision"] == 0.0
    official = snippet_measures([span(200, 300)], [span(100, 200)])
    assert official["precision"] == approx(1 / 101)


def test_snippet_ap_relevance_is_by_document_in_the_official_code():
    # Gold [0, 100) of document 1. Retrieved: the same span, then [500, 600) of the same document (no overlap).
    gold = [span(0, 100)]
    retrieved = [span(0, 100), span(500, 600)]
    # P@1 = 100/100, P@2 = 100/200. Officially rel(2) = 1 (same document): (1 + 0.5) / min(1, 10) = 1.5 > 1.
    assert snippet_measures(retrieved, gold, end_inclusive=False)["ap"] == approx(1.5)
    # Only overlapping snippets relevant: 1 / 1.
    assert snippet_measures(retrieved, gold, end_inclusive=False, strict_relevance=True)["ap"] == approx(1.0)
    # Precision is by characters either way: 100 of 200.
    assert snippet_measures(retrieved, gold, end_inclusive=False)["precision"] == approx(0.5)


def test_snippets_beyond_the_cutoff_do_not_count():
    gold = [span(0, 100)]
    retrieved = [span(1000 + 10 * i, 1005 + 10 * i) for i in range(10)] + [span(0, 100)]
    assert snippet_measures(retrieved, gold)["recall"] == 0.0
    assert snippet_measures(retrieved, gold, cutoff=None)["recall"] == 1.0


def test_snippet_empty_lists():
    assert snippet_measures([], [span(0, 10)]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "ap": 0.0}
    assert snippet_measures([span(0, 10)], [])["ap"] == 0.0


def test_snippet_span_validation():
    with pytest.raises(ValueError):
        SnippetSpan("1", "body", 0, 10)
    with pytest.raises(ValueError):
        SnippetSpan("1", "abstract", 10, 5)
    assert SnippetSpan("https://pubmed.ncbi.nlm.nih.gov/42/", "title", 0, 5).document == "42"


# ---------------------------------------------------------------- reading golden files


def _gold_snippet(**changes: object) -> dict:
    """A golden-file snippet of document 1's abstract, characters 4 to 7, with ``changes`` applied."""
    return {
        "document": "http://www.ncbi.nlm.nih.gov/pubmed/1",
        "text": "abc",
        "beginSection": "abstract",
        "endSection": "abstract",
        "offsetInBeginSection": 4,
        "offsetInEndSection": 7,
    } | changes


def _write_golden(path: Path, questions: list[dict]) -> Path:
    path.write_text(json.dumps({"questions": questions}), encoding="utf-8")
    return path


def test_read_golden_handles_url_forms_repeats_and_snippets_outside_the_documents(tmp_path: Path):
    snippet = _gold_snippet(document="https://pubmed.ncbi.nlm.nih.gov/3/")
    title = {**snippet, "document": "http://www.ncbi.nlm.nih.gov/pubmed/2", "beginSection": "title"}
    title |= {"endSection": "title", "offsetInBeginSection": -1, "offsetInEndSection": 5}
    path = _write_golden(
        tmp_path / "g.json",
        [
            {
                "id": "q1",
                "body": "Is it?",
                "type": "yesno",
                "documents": [
                    "http://www.ncbi.nlm.nih.gov/pubmed/2",
                    "https://pubmed.ncbi.nlm.nih.gov/1/",
                    "http://www.ncbi.nlm.nih.gov/pubmed/2",
                ],
                "snippets": [snippet, title],
            }
        ],
    )
    [q] = read_golden(path)
    assert q.documents == ("2", "1")
    # The snippet of document 3 stays gold although 3 is not a gold document; begin -1 is read as 0.
    assert q.spans == [SnippetSpan("3", "abstract", 4, 7), SnippetSpan("2", "title", 0, 5)]
    assert q.snippets[0].text == "abc"
    assert q.snippet_documents_missing == ("3",)


def test_read_golden_rejects_cross_section_snippets(tmp_path: Path):
    snippet = _gold_snippet(text="x", beginSection="title", offsetInBeginSection=0, offsetInEndSection=10)
    path = _write_golden(
        tmp_path / "g.json", [{"id": "q1", "body": "?", "type": "summary", "documents": [], "snippets": [snippet]}]
    )
    with pytest.raises(GoldenFileError, match=r"q1.*cross-section"):
        read_golden(path)


# ---------------------------------------------------------------- the real 7B-9B golden files

# From the README table of shared/data: questions, question-document pairs, distinct PMIDs, gold snippets.
README_COUNTS = {"7": (500, 2361, 2278, 3758), "8": (500, 2359, 2298, 4194), "9": (497, 3632, 3523, 5712)}


@pytest.fixture(scope="module")
def golden(shared_data: Path) -> dict[str, list[GoldQuestion]]:
    by_year: dict[str, list[GoldQuestion]] = {}
    for year in README_COUNTS:
        files = [shared_data / "bioasq" / f"Task{year}BGoldenEnriched" / f"{year}B{b}_golden.json" for b in range(1, 6)]
        by_year[year] = [q for f in files for q in read_golden(f)]
    return by_year


def test_golden_counts_match_the_readme(golden: dict[str, list[GoldQuestion]]):
    for year, (n_questions, n_pairs, n_pmids, n_snippets) in README_COUNTS.items():
        questions = golden[year]
        assert len(questions) == n_questions
        assert sum(len(q.documents) for q in questions) == n_pairs
        assert len({d for q in questions for d in q.documents}) == n_pmids
        assert sum(len(q.snippets) for q in questions) == n_snippets


def test_golden_quirks(golden: dict[str, list[GoldQuestion]]):
    # Snippets whose document is not among the question's documents: 2 + 2 + 169 (the README's prose says
    # 441; the files hold 173).
    missing = {
        year: sum(1 for q in qs for s in q.snippets if s.span.document in q.snippet_documents_missing)
        for year, qs in golden.items()
    }
    assert missing == {"7": 2, "8": 2, "9": 169}
    # Text length against end - begin: 9B is end-exclusive throughout; 271 snippets of 7B are one character
    # longer (an inclusive end), 395 of 8B one shorter. The 2 more in 7B are the title snippets that begin
    # at -1 in the file, read as 0.
    delta = {
        year: Counter(len(s.text) - (s.span.end - s.span.begin) for q in qs for s in q.snippets)
        for year, qs in golden.items()
    }
    assert delta == {"7": {0: 3485, 1: 271 + 2}, "8": {0: 3799, -1: 395}, "9": {0: 5712}}
    assert all(q.documents and q.snippets for qs in golden.values() for q in qs)


def test_7b_gold_snippets_against_themselves(golden: dict[str, list[GoldQuestion]]):
    for inclusive in (True, False):
        per_question = [snippet_measures(q.spans, q.spans, cutoff=None, end_inclusive=inclusive) for q in golden["7"]]
        for m in per_question:
            assert m["precision"] == approx(1.0)
            assert m["recall"] == approx(1.0)
            assert m["ap"] == approx(1.0)
        assert mean_measures(per_question)["f1"] == approx(1.0)
    # At the official cutoff of 10 snippets precision stays 1; recall falls where there are more gold characters.
    cut = [snippet_measures(q.spans, q.spans) for q in golden["7"]]
    assert all(m["precision"] == approx(1.0) for m in cut)
    assert any(m["recall"] < 1.0 for m in cut)


def test_gold_documents_against_themselves(golden: dict[str, list[GoldQuestion]]):
    for questions in golden.values():
        for kind in ("min_gold_cutoff", "cutoff", "gold"):
            per_question = [document_measures(q.documents, q.documents, ap_denominator=kind) for q in questions]
            for q, m in zip(questions, per_question, strict=True):
                n = len(q.documents)
                assert m["precision"] == 1.0
                assert m["recall"] == approx(min(n, 10) / n)
                # Ten relevant documents at most are returned; AP sums min(n, 10) precisions of 1.
                expected_ap = {"min_gold_cutoff": 1.0, "cutoff": min(n, 10) / 10, "gold": min(n, 10) / n}[kind]
                assert m["ap"] == approx(expected_ap)
            if kind == "min_gold_cutoff":
                assert mean_measures(per_question)["map"] == approx(1.0)
                # The official GMAP adds epsilon inside the logarithm and never takes it off again.
                assert mean_measures(per_question)["gmap"] == approx(1.0 + 1e-5)
            else:
                # Questions with fewer ("cutoff") or more ("gold") than 10 gold documents exist every year.
                assert mean_measures(per_question)["map"] < 0.99
    over_10 = {year: sum(len(q.documents) > 10 for q in qs) for year, qs in golden.items()}
    assert over_10 == {"7": 59, "8": 54, "9": 134}
