"""``biorank serve``: a real uvicorn server on a loopback port, over indices on the real node, asked over HTTP."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opensearchpy import OpenSearch

from biorank.cluster.local import free_port
from biorank.pipeline import Pipeline, PipelineSettings
from biorank.retrieval.searcher import Searcher
from biorank.service.app import MAX_BODY_BYTES, SearchService, ServiceSettings, create_app

CLAIM = "Vitamin B12 deficiency raises homocysteine levels."


@contextmanager
def serving(service: SearchService) -> Iterator[str]:
    """``service`` behind uvicorn on a free loopback port, for as long as the block runs."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def call(url: str, body: Any = None, *, headers: dict[str, str] | None = None, raw: bytes | None = None,
         ) -> tuple[int, Any]:
    """(status, JSON or text) of a GET, or of a POST of ``body`` as JSON (``raw`` bytes as they are)."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            status, payload, kind = response.status, response.read(), response.headers.get("content-type", "")
    except urllib.error.HTTPError as e:
        status, payload, kind = e.code, e.read(), e.headers.get("content-type", "")
    return status, json.loads(payload) if "json" in kind else payload.decode()


@pytest.fixture(scope="module")
def sample_service(opensearch: OpenSearch, sample_index: str, default_encoder) -> Iterator[tuple[str, SearchService]]:
    service = SearchService(opensearch, ServiceSettings(index=sample_index),
                            query_log_index=os.environ["BIORANK_QUERY_LOG_INDEX"],
                            searcher=Searcher(opensearch, sample_index, encoder=default_encoder))
    with serving(service) as url:
        yield url, service


def test_the_api_answers_as_the_pipeline_does_and_logs_the_query(opensearch, sample_index, default_encoder,
                                                                 sample_service) -> None:
    url, _ = sample_service
    status, answer = call(f"{url}/api/search", {"q": CLAIM, "k": 10})
    assert status == 200, answer
    expected = Pipeline.build("hybrid", Searcher(opensearch, sample_index, encoder=default_encoder)).search(CLAIM, 10)
    assert [h["id"] for h in answer["hits"]] == [h.id for h in expected.hits]
    assert [h["score"] for h in answer["hits"]] == pytest.approx([h.score for h in expected.hits], abs=1e-5)
    assert answer["system"] == "hybrid" and answer["ms"]["first_stage"] > 0 and answer["ms"]["total"] > 0
    assert {"bm25", "dense", "hybrid", "rank", "title"} <= answer["hits"][0].keys()

    # Pages are slices of one ranking.
    _, second = call(f"{url}/api/search", {"q": CLAIM, "k": 5, "page": 2})
    assert [h["id"] for h in second["hits"]] == [h["id"] for h in answer["hits"][5:10]]
    assert [h["rank"] for h in second["hits"]] == list(range(6, 11)) and second["more"]

    # The query reaches the query log as the CLI's do, marked as the server's.
    log = os.environ["BIORANK_QUERY_LOG_INDEX"]
    deadline = time.monotonic() + 30
    while True:
        opensearch.indices.refresh(index=log)
        found = opensearch.search(index=log, body={"query": {"bool": {"filter": [
            {"term": {"command": "serve"}}, {"term": {"query.keyword": CLAIM}}]}}})["hits"]["hits"]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert found and found[0]["_source"]["index"] == sample_index


def test_snippets_documents_and_health(sample_service, sample_index) -> None:
    url, _ = sample_service
    status, answer = call(f"{url}/api/search", {"q": CLAIM, "k": 3, "snippets": True})
    assert status == 200, answer
    snippets = [s for h in answer["hits"] for s in h["snippets"]]
    assert snippets and all(s["offsetInEndSection"] > s["offsetInBeginSection"] for s in snippets)
    assert any(s.get("matches") for s in snippets)

    doc_id = answer["hits"][0]["id"]
    status, document = call(f"{url}/api/documents/{doc_id}")
    assert status == 200 and document["id"] == doc_id and document["abstract"] and document["sentences"] > 0
    status, missing = call(f"{url}/api/documents/no-such-document")
    assert status == 404 and "no document" in missing["error"]

    status, health = call(f"{url}/api/health")
    assert status == 200 and health["status"] in ("green", "yellow") and health["index"] == sample_index
    status, spec = call(f"{url}/openapi.json")
    assert status == 200 and {"/api/search", "/api/documents/{doc_id}", "/api/health"} <= spec["paths"].keys()


def test_bad_requests_get_one_line_and_the_right_status(sample_service) -> None:
    url, _ = sample_service
    for body in ({"q": ""}, {"q": "x", "k": 0}, {"q": "x", "k": 101}, {"q": "x", "k": 50, "page": 3},
                 {"q": "x", "mode": "nope"}, {"q": "x" * 4001}, {"k": 3}):
        status, answer = call(f"{url}/api/search", body)
        assert status == 422 and list(answer) == ["error"] and "\n" not in answer["error"], (body, answer)
    status, answer = call(f"{url}/api/search", {"q": "x", "year": "last year"})
    assert status == 400 and answer == {"error": answer["error"]} and "a year filter is" in answer["error"]
    status, answer = call(f"{url}/api/search", raw=b"{" + b" " * (MAX_BODY_BYTES + 1) + b"}")
    assert status == 413 and "bytes at most" in answer["error"]
    status, page = call(f"{url}/?q=x&mode=nope")
    assert status == 422 and 'role="alert"' in page


def test_filters_through_the_api(opensearch, medline_index, default_encoder) -> None:
    service = SearchService(opensearch, ServiceSettings(index=medline_index, query_log=False),
                            query_log_index="unused", searcher=Searcher(opensearch, medline_index,
                                                                        encoder=default_encoder))
    with serving(service) as url:
        status, answer = call(f"{url}/api/search", {"q": "visual acuity after cataract surgery", "year": "2014-2015",
                                                   "journal": ["journal of cataract and refractive surgery"],
                                                   "mesh": ["Humans"]})
    assert status == 200, answer
    assert len(answer["hits"]) == 4 and answer["filters"].startswith("year 2014-2015")
    for hit in answer["hits"]:
        assert hit["journal"] == "Journal of cataract and refractive surgery" and hit["year"] in (2014, 2015)
        assert "Humans" in hit["mesh"] and hit["url"] == f"https://pubmed.ncbi.nlm.nih.gov/{hit['id']}/"


def test_the_page_searches_pages_and_escapes_what_it_shows(sample_service) -> None:
    url, _ = sample_service
    status, page = call(f"{url}/")
    assert status == 200 and '<form method="get" action="/" role="search">' in page and "<ol" not in page
    status, page = call(f"{url}/?q=vitamin+B12+homocysteine&snippets=1")
    assert status == 200 and page.count('<li class="hit">') == 10 and "<mark>" in page and 'rel="next"' in page
    assert 'name="snippets" value="1" checked' in page and "first stage" in page
    status, page = call(f"{url}/?q=vitamin+B12+homocysteine&page=2")
    assert status == 200 and '<ol start="11"' in page and 'rel="prev"' in page
    status, page = call(f"{url}/?q=%3Cscript%3Ealert(1)%3C/script%3E")
    assert status == 200 and "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_an_api_key_guards_everything_but_health(opensearch, sample_index, default_encoder) -> None:
    service = SearchService(opensearch, ServiceSettings(index=sample_index, api_key="s3cret", query_log=False),
                            query_log_index="unused", searcher=Searcher(opensearch, sample_index,
                                                                        encoder=default_encoder))
    with serving(service) as url:
        assert call(f"{url}/api/search", {"q": CLAIM})[0] == 401
        assert call(f"{url}/api/search", {"q": CLAIM}, headers={"X-API-Key": "wrong"})[0] == 401
        assert call(f"{url}/api/search", {"q": CLAIM}, headers={"X-API-Key": "s3cret"})[0] == 200
        status, page = call(f"{url}/?q=vitamin&key=s3cret")
        assert status == 200 and 'name="key" value="s3cret"' in page
        assert call(f"{url}/?q=vitamin")[0] == 401
        assert call(f"{url}/api/health")[0] == 200


def test_a_cluster_that_cannot_be_reached_is_a_503_with_one_line() -> None:
    down = OpenSearch(hosts=[f"http://127.0.0.1:{free_port()}"], max_retries=0, timeout=5)
    service = SearchService(down, ServiceSettings(index="biorank-demo", query_log=False), query_log_index="unused")
    with serving(service) as url:
        for status, answer in (call(f"{url}/api/health"), call(f"{url}/api/search", {"q": CLAIM})):
            assert status == 503 and "lost the connection" in answer["error"] and "\n" not in answer["error"]
        status, page = call(f"{url}/?q=vitamin")
        assert status == 503 and "lost the connection" in page


@pytest.fixture()
def browser() -> Iterator[Any]:
    """Headless Chromium driven by selenium: Debian's chromium and chromium-driver (.ci/run installs them)."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    if not binary or not driver:
        raise RuntimeError("the browser test needs Chromium and its driver: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,1500"):
        options.add_argument(argument)
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield chrome
    finally:
        chrome.quit()


def test_an_index_without_a_reranker_of_its_own_reranks_with_the_shipped_one(sample_service) -> None:
    url, _ = sample_service
    status, plain = call(f"{url}/api/search", {"q": CLAIM, "k": 5})
    status_reranked, reranked = call(f"{url}/api/search", {"q": CLAIM, "k": 5, "rerank": True})
    assert status == status_reranked == 200, reranked
    assert all("rerank" in h for h in reranked["hits"]) and not any("rerank" in h for h in plain["hits"])
    assert reranked["system"] == "hybrid+rerank"


def test_a_person_searches_reranks_filters_and_pages_in_a_real_browser(
    opensearch, medline_index, default_encoder, tiny_reranker, browser, tmp_path,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.expected_conditions import staleness_of
    from selenium.webdriver.support.wait import WebDriverWait

    settings = ServiceSettings(index=medline_index, query_log=False,
                               pipeline=PipelineSettings(reranker=str(tiny_reranker), precision="fp32"))
    service = SearchService(opensearch, settings, query_log_index="unused",
                            searcher=Searcher(opensearch, medline_index, encoder=default_encoder))

    def hits() -> list[Any]:
        return browser.find_elements(By.CSS_SELECTOR, "li.hit")

    def navigate(action: Callable[[], Any]) -> None:
        # WebDriver does not wait for the page a form or link leads to: without this wait a reranked search, which
        # takes seconds on a busy CPU, is read half-way and its elements go stale under the test.
        page = browser.find_element(By.TAG_NAME, "html")
        action()
        WebDriverWait(browser, 120).until(staleness_of(page))
        WebDriverWait(browser, 120).until(lambda b: b.execute_script("return document.readyState") == "complete")

    with serving(service) as url:
        browser.get(url)
        # The keyboard alone: the query box has the focus, Enter searches.
        navigate(lambda: browser.switch_to.active_element.send_keys("surgery outcomes in patients" + Keys.ENTER))
        assert len(hits()) == 10 and "first stage" in browser.find_element(By.CLASS_NAME, "timing").text
        assert "rerank" not in hits()[0].find_element(By.CLASS_NAME, "scores").text

        browser.find_element(By.NAME, "rerank").click()
        navigate(lambda: browser.find_element(By.NAME, "q").send_keys(Keys.ENTER))
        assert browser.find_element(By.NAME, "rerank").is_selected() and len(hits()) == 10
        assert all("rerank" in h.find_element(By.CLASS_NAME, "scores").text for h in hits())
        assert "rerank" in browser.find_element(By.CLASS_NAME, "timing").text

        browser.find_element(By.NAME, "year").send_keys("2015")
        navigate(lambda: browser.find_element(By.NAME, "journal").send_keys(
            "journal of cataract and refractive surgery" + Keys.ENTER))
        metas = [h.find_element(By.CLASS_NAME, "meta").text for h in hits()]
        assert len(metas) == 10 and all("Journal of cataract and refractive surgery · 2015" in m for m in metas)
        assert "only year 2015" in browser.find_element(By.CLASS_NAME, "timing").text
        first_page = [h.find_element(By.TAG_NAME, "h2").text for h in hits()]

        navigate(browser.find_element(By.CSS_SELECTOR, "a[rel=next]").click)
        assert browser.find_element(By.CSS_SELECTOR, "ol").get_attribute("start") == "11"
        assert hits() and not {h.find_element(By.TAG_NAME, "h2").text for h in hits()} & set(first_page)
        assert all("2015" in h.find_element(By.CLASS_NAME, "meta").text for h in hits())
        navigate(browser.find_element(By.CSS_SELECTOR, "a[rel=prev]").click)
        assert [h.find_element(By.TAG_NAME, "h2").text for h in hits()] == first_page

        shot = Path(os.environ.get("BIORANK_SCREENSHOTS", tmp_path)) / "search-page.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
