"""``biorank serve``: a real uvicorn server on a loopback port, over indices on the real node, asked over HTTP."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opensearchpy import OpenSearch
from running import serving

from biorank.cluster.local import free_port
from biorank.models.placement import AskedPlacement
from biorank.pipeline import Pipeline, PipelineSettings
from biorank.retrieval.searcher import Searcher
from biorank.service import bounds as service_bounds
from biorank.service.app import SearchService, ServiceSettings
from biorank.service.bounds import MAX_BODY_BYTES
from biorank.service.server import HeadTimeoutProtocol

CLAIM = "Vitamin B12 deficiency raises homocysteine levels."


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
                            searcher=Searcher.open(opensearch, sample_index, encoder=default_encoder))
    with serving(service) as url:
        yield url, service


def test_the_api_answers_as_the_pipeline_does_and_logs_the_query(opensearch, sample_index, default_encoder,
                                                                 sample_service) -> None:
    url, _ = sample_service
    status, answer = call(f"{url}/api/search", {"q": CLAIM, "k": 10})
    assert status == 200, answer
    searcher = Searcher.open(opensearch, sample_index, encoder=default_encoder)
    expected = Pipeline.build("hybrid", searcher).search(CLAIM, 10)
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
                            query_log_index="unused", searcher=Searcher.open(opensearch, medline_index,
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
                            query_log_index="unused", searcher=Searcher.open(opensearch, sample_index,
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
    import logging

    down = OpenSearch(hosts=[f"http://127.0.0.1:{free_port()}"], max_retries=0, timeout=5)
    service = SearchService(down, ServiceSettings(index="biorank-demo", query_log=False), query_log_index="unused")
    logged: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = logged.append  # type: ignore[method-assign]
    with serving(service) as url:
        # Added once the server has configured its loggers (which drops the handlers it finds).
        logging.getLogger("uvicorn.error").addHandler(handler)
        try:
            for status, answer in (call(f"{url}/api/health"), call(f"{url}/api/search", {"q": CLAIM})):
                assert status == 503 and "lost the connection" in answer["error"] and "\n" not in answer["error"]
            status, page = call(f"{url}/?q=vitamin")
            assert status == 503 and "lost the connection" in page
        finally:
            logging.getLogger("uvicorn.error").removeHandler(handler)
    # Each 503 is one line in the server's log, not a traceback.
    assert len(logged) == 3 and not any(r.exc_info for r in logged), [r.getMessage() for r in logged]
    assert all(r.getMessage().startswith("503 ") and "\n" not in r.getMessage() for r in logged)


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
                               pipeline=PipelineSettings(reranker=str(tiny_reranker), placement=AskedPlacement("fp32")))
    service = SearchService(opensearch, settings, query_log_index="unused",
                            searcher=Searcher.open(opensearch, medline_index, encoder=default_encoder))

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


def test_a_person_downloads_the_page_as_ris_in_a_real_browser(opensearch, medline_index, default_encoder, browser,
                                                               tmp_path) -> None:
    from selenium.webdriver.common.by import By

    service = SearchService(opensearch, ServiceSettings(index=medline_index, query_log=False),
                            query_log_index="unused",
                            searcher=Searcher.open(opensearch, medline_index, encoder=default_encoder))
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    with serving(service) as url:
        browser.get(f"{url}/?q=cataract+surgery&mode=bm25")
        titles = [h.find_element(By.TAG_NAME, "h2").text for h in browser.find_elements(By.CSS_SELECTOR, "li.hit")]
        browser.find_element(By.LINK_TEXT, "RIS").click()
        deadline = time.monotonic() + 120
        while not (done := list(downloads.glob("*.ris"))) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert [p.name for p in done] == ["biorank-cataract-surgery.ris"]
    text = done[0].read_bytes().decode()
    assert text.startswith("TY  - JOUR\r\n") and text.count("ER  - \r\n") == len(titles) == 10
    assert [line[6:] for line in text.split("\r\n") if line.startswith("TI  - ")] == titles


def test_a_person_sorts_by_date_and_follows_similar_articles_in_a_real_browser(
    opensearch, medline_index, default_encoder, browser,
) -> None:
    import re

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.expected_conditions import staleness_of
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.wait import WebDriverWait

    service = SearchService(opensearch, ServiceSettings(index=medline_index, query_log=False),
                            query_log_index="unused",
                            searcher=Searcher.open(opensearch, medline_index, encoder=default_encoder))

    def metas() -> list[str]:
        return [h.find_element(By.CLASS_NAME, "meta").text for h in browser.find_elements(By.CSS_SELECTOR, "li.hit")]

    def follow(action: Callable[[], Any]) -> None:
        page = browser.find_element(By.TAG_NAME, "html")
        action()
        WebDriverWait(browser, 120).until(staleness_of(page))

    with serving(service) as url:
        browser.get(f"{url}/?q=surgery+outcomes+in+patients")
        by_score = metas()
        Select(browser.find_element(By.NAME, "sort")).select_by_value("date")
        follow(browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click)
        years = [int(re.search(r"\b(\d{4}) · id", m).group(1)) for m in metas()]
        assert len(years) == 10 and years == sorted(years, reverse=True) and metas() != by_score
        assert Select(browser.find_element(By.NAME, "sort")).first_selected_option.get_attribute("value") == "date"

        first = re.search(r"id (\d+)", metas()[0]).group(1)
        follow(browser.find_elements(By.CSS_SELECTOR, "li.hit a.similar")[0].click)
        assert "similar articles (dense)" in browser.find_element(By.CLASS_NAME, "timing").text
        similar = [re.search(r"id (\d+)", m).group(1) for m in metas()]
        assert len(similar) == 10 and first not in similar and f"most like {first}" in browser.page_source


def test_a_person_narrows_by_a_facet_in_a_real_browser(opensearch, medline_index, default_encoder, browser) -> None:
    from urllib.parse import quote

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.expected_conditions import staleness_of
    from selenium.webdriver.support.wait import WebDriverWait

    service = SearchService(opensearch, ServiceSettings(index=medline_index, query_log=False),
                            query_log_index="unused",
                            searcher=Searcher.open(opensearch, medline_index, encoder=default_encoder))
    with serving(service) as url:
        browser.get(f"{url}/?q={quote('visual acuity after cataract surgery')}")
        journals = browser.find_element(By.XPATH, "//aside[@class='facets']/p[strong='Journal']")
        link = journals.find_elements(By.TAG_NAME, "a")[1]  # not the first: any value narrows
        journal, page = link.text, browser.find_element(By.TAG_NAME, "html")
        link.click()
        WebDriverWait(browser, 120).until(staleness_of(page))
        metas = [h.find_element(By.CLASS_NAME, "meta").text for h in browser.find_elements(By.CSS_SELECTOR, "li.hit")]
        assert metas and all(m.startswith(journal) for m in metas), (journal, metas)
        assert f"only journal '{journal}'" in browser.find_element(By.CLASS_NAME, "timing").text
        assert browser.find_element(By.NAME, "journal").get_attribute("value") == journal


def _raw(url: str, head: bytes, body_parts: Sequence[bytes] = (), *, wait_s: float = 30) -> bytes:
    """What the server answers to ``head`` and then ``body_parts`` written on one connection, as they are; stops
    sending when the server has answered or closed."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as conn:
        conn.sendall(head)
        try:
            for part in body_parts:
                conn.sendall(part)
        except OSError:
            pass  # the server refused and closed while the client still sent: its answer is read below
        answer = b""
        try:
            while chunk := conn.recv(65536):
                answer += chunk
        except OSError:
            pass
    return answer


def test_a_chunked_body_is_bounded_as_it_arrives(sample_service) -> None:
    """No Content-Length to check: the bytes are counted as they stream, and the server stops reading at the
    limit."""
    url, _ = sample_service
    head = (b"POST /api/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    padding = b" " * 8192
    chunks = [b"%x\r\n%s\r\n" % (len(padding), padding) for _ in range(4 * MAX_BODY_BYTES // len(padding))]
    answer = _raw(url, head, [b'1\r\n{\r\n', *chunks, b"1\r\n}\r\n0\r\n\r\n"])
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 413"), answer[:300]
    assert json.loads(rest.partition(b"\r\n\r\n")[2]) == {"error": f"a request body may have {MAX_BODY_BYTES} "
                                                                   "bytes at most"}
    # A chunked body within the limit is read and answered as any other.
    body = json.dumps({"q": CLAIM, "k": 2, "mode": "bm25"}).encode()
    answer = _raw(url, head, [b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)])
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert len(json.loads(answer.partition(b"\r\n\r\n")[2].decode())["hits"]) == 2


def test_errors_have_one_shape_and_answers_carry_the_security_headers(sample_service) -> None:
    url, _ = sample_service
    for path, status in (("/api/no-such-thing", 404), ("/api/search", 405), ("/api/search/", 404)):
        # A Host of the client's choosing never makes a redirect's Location.
        code, payload = call(f"{url}{path}", headers={"Host": "evil.example"})
        assert (code, list(payload)) == (status, ["error"]), (path, payload)
    with urllib.request.urlopen(urllib.request.Request(f"{url}/api/health", method="HEAD"), timeout=60) as response:
        assert response.status == 200 and response.read() == b""
    with urllib.request.urlopen(f"{url}/?q=vitamin", timeout=60) as response:
        headers = response.headers
    assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "no-referrer"
    assert "script-src" not in headers["content-security-policy"] and "default-src 'none'" in headers[
        "content-security-policy"] and "frame-ancestors 'none'" in headers["content-security-policy"]


def test_a_request_that_stops_arriving_is_not_held_open(opensearch, sample_index, default_encoder,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Half a head, or a head and part of the body, then nothing: the server closes or answers 408 in its own
    time, instead of holding the connection for ever."""
    monkeypatch.setattr(HeadTimeoutProtocol, "head_timeout_s", 1.0)
    monkeypatch.setattr(service_bounds, "BODY_TIMEOUT_S", 1.0)
    service = SearchService(opensearch, ServiceSettings(index=sample_index, query_log=False), query_log_index="unused",
                            searcher=Searcher.open(opensearch, sample_index, encoder=default_encoder))
    with serving(service) as url:
        started = time.monotonic()
        assert _raw(url, b"GET /api/health HTTP/1.1\r\nHost: x\r\nX-Half: ", wait_s=20) == b""
        assert time.monotonic() - started < 10
        started = time.monotonic()
        answer = _raw(url, b"POST /api/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Content-Length: 100\r\n\r\n{\"q\": ", wait_s=20)
        assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 10, answer[:300]
        # A kept-alive connection that starts its next request and stops is closed too.
        started = time.monotonic()
        answer = _raw(url, b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\nGET /api/health HTTP/1.1\r\nHo",
                      wait_s=20)
        assert answer.startswith(b"HTTP/1.1 200") and answer.count(b"HTTP/1.1 ") == 1, answer[:300]
        assert time.monotonic() - started < 10


def test_a_bm25_request_does_not_wait_behind_reranks(sample_service) -> None:
    """Reranks hold the cross-encoder for a second or more each on a CPU; a request that needs no model goes on."""
    url, _ = sample_service
    rerank = {"q": CLAIM, "k": 10, "rerank": True, "snippets": True}
    started = time.monotonic()
    assert call(f"{url}/api/search", rerank)[0] == 200  # loads the cross-encoder, once
    started = time.monotonic()
    assert call(f"{url}/api/search", rerank)[0] == 200
    one_rerank = time.monotonic() - started
    statuses: list[int] = []
    reranks = [threading.Thread(target=lambda: statuses.append(call(f"{url}/api/search", rerank)[0]))
               for _ in range(3)]
    for thread in reranks:
        thread.start()
    time.sleep(min(0.3, one_rerank / 4))
    started = time.monotonic()
    status, answer = call(f"{url}/api/search", {"q": CLAIM, "k": 10, "mode": "bm25"})
    bm25 = time.monotonic() - started
    still_reranking = sum(t.is_alive() for t in reranks)
    for thread in reranks:
        thread.join()
    assert status == 200 and len(answer["hits"]) == 10 and statuses == [200, 200, 200]
    # Behind one lock it waited for at least the rest of a rerank, and usually for all three.
    assert bm25 < one_rerank / 3 and still_reranking >= 2, (bm25, one_rerank, still_reranking)


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    """Waits for a state of the server that a request brings about (not a bound on its speed: a guard on a hang)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"the server never reached: {what}"
        time.sleep(0.02)


def test_the_models_lane_is_bounded_and_forgets_a_client_that_left(opensearch, sample_index, default_encoder,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With the models busy (their lock held here), a first-stage request is answered while they stay busy, a
    request that reranks or wants snippets waits in a bounded queue, the next is told when to come back, and one
    whose client hung up while it waited never runs."""
    import socket

    service = SearchService(opensearch, ServiceSettings(index=sample_index, query_log=False, rerank_queue=1),
                            query_log_index="unused", searcher=Searcher.open(opensearch, sample_index,
                                                                        encoder=default_encoder))
    searched: list[str] = []
    search = service.search
    monkeypatch.setattr(service, "search", lambda request: searched.append(request.q) or search(request))
    lane, answers = service.model_lane, {}
    snippets = {"q": CLAIM, "k": 3, "mode": "bm25", "snippets": True}

    def ask(name: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.update({name: call(f"{url}/api/search", snippets)}))
        thread.start()
        return thread

    with serving(service) as url:
        with service._rerank_turn:  # the models stay busy until the block ends
            running = ask("running")
            _until(lambda: lane.running == 1, "a request running in the models' lane")

            host, port = url.removeprefix("http://").split(":")
            body = json.dumps({"q": "a client that leaves", "rerank": True}).encode()
            with socket.create_connection((host, int(port))) as conn:
                conn.sendall(b"POST /api/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                _until(lambda: lane.waiting == 1, "the request queued")
            _until(lambda: lane.dropped == 1 and lane.waiting == 0, "the queued request of a gone client dropped")

            waiting = ask("waiting")
            _until(lambda: lane.waiting == 1, "a request waiting in the models' lane")
            for path, sent in (("/api/search", {"q": CLAIM, "rerank": True}), ("/?q=vitamin&rerank=1", None)):
                request = urllib.request.Request(f"{url}{path}", data=sent and json.dumps(sent).encode(),
                                                 headers={"content-type": "application/json"})
                with pytest.raises(urllib.error.HTTPError) as refused:
                    urllib.request.urlopen(request, timeout=60)
                headers, text = refused.value.headers, refused.value.read().decode()
                assert refused.value.code == 503 and int(headers["retry-after"]) > 0 and "busy" in text, (path, text)
                assert headers["x-content-type-options"] == "nosniff"
                assert list(json.loads(text)) == ["error"] if sent else 'role="alert"' in text

            status, answer = call(f"{url}/api/search", {"q": CLAIM, "k": 5, "mode": "bm25"})
            assert status == 200 and len(answer["hits"]) == 5
            assert running.is_alive() and waiting.is_alive() and lane.running == lane.waiting == 1
        running.join()
        waiting.join()
    assert answers["running"][0] == answers["waiting"][0] == 200, answers
    assert searched == [CLAIM] * 3 and lane.dropped == 1  # the gone client's request never ran
