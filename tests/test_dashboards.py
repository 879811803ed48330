"""The saved objects biorank ships: well-formed, naming only fields biorank's real indices have, importable.

Dashboards itself runs only where Docker does, so the import is tested against a closed port and against a
small HTTP server that checks the request as Dashboards' import API reads it (multipart ``file``, an
``.ndjson`` name, the ``osd-xsrf`` header, ``overwrite=true``) and answers in its format.
"""

from __future__ import annotations

import fnmatch
import json
import re
import socket
import threading
from collections.abc import Iterator
from email.parser import BytesParser
from email.policy import default as default_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli import cli
from biorank.dashboards.saved_objects import read_saved_objects, saved_objects_path
from biorank.store.query_log import QueryLog

REPO = Path(__file__).resolve().parents[1]
INDEX_REF = "kibanaSavedObjectMeta.searchSourceJSON.index"
NUMBER_TYPES = {"float", "double", "half_float", "scaled_float", "short", "integer", "long", "byte"}
# What each aggregation needs of its field in Dashboards' editor.
AGG_NEEDS = {"terms": "aggregatable", "date_histogram": "date", "histogram": "number", "percentiles": "number",
             "avg": "number", "max": "number", "min": "number", "sum": "number"}


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return read_saved_objects()


def _by_id(objects: list[dict]) -> dict[tuple[str, str], dict]:
    return {(o["type"], o["id"]): o for o in objects}


def _pattern_of(obj: dict) -> str:
    [ref] = [r for r in obj["references"] if r["name"] == INDEX_REF]
    assert ref["type"] == "index-pattern"
    return ref["id"]


def named_fields(objects: list[dict]) -> list[tuple[str, str, str, str]]:
    """(index pattern id, field, what it needs, which object names it) for every field the objects name."""
    named = []
    for o in objects:
        attributes = o["attributes"]
        if o["type"] == "index-pattern":
            if "timeFieldName" in attributes:
                named.append((o["id"], attributes["timeFieldName"], "date", o["id"]))
            for name in json.loads(attributes.get("fieldFormatMap", "{}")):
                named.append((o["id"], name, "any", o["id"]))
            continue
        if o["type"] not in ("search", "visualization"):
            continue
        pattern = _pattern_of(o)
        source = json.loads(attributes["kibanaSavedObjectMeta"]["searchSourceJSON"])
        for name in re.findall(r"([\w.]+)\s*:", source.get("query", {}).get("query", "")):
            named.append((pattern, name, "any", o["id"]))
        if o["type"] == "search":
            named += [(pattern, name, "any", o["id"]) for name in attributes["columns"]]
            named += [(pattern, name, "aggregatable", o["id"]) for name, _ in attributes["sort"]]
        else:
            for agg in json.loads(attributes["visState"])["aggs"]:
                if "field" in agg["params"]:
                    named.append((pattern, agg["params"]["field"], AGG_NEEDS[agg["type"]], o["id"]))
    return named


def test_the_shipped_file_is_well_formed_and_every_reference_resolves(objects: list[dict]) -> None:
    assert (REPO / "docker" / "dashboards" / "biorank.ndjson").read_bytes() == saved_objects_path().read_bytes()
    by_id = _by_id(objects)
    assert len(by_id) == len(objects), "duplicate ids"
    kinds = sorted({o["type"] for o in objects})
    assert kinds == ["dashboard", "index-pattern", "search", "visualization"]
    for o in objects:
        for ref in o["references"]:
            assert (ref["type"], ref["id"]) in by_id, f"{o['id']} refers to a missing {ref}"
        if o["type"] == "visualization":
            state = json.loads(o["attributes"]["visState"])
            assert state["title"] == o["attributes"]["title"]
            assert state["type"] in ("histogram", "line", "table")
            assert len({a["id"] for a in state["aggs"]}) == len(state["aggs"])
            json.loads(o["attributes"]["uiStateJSON"])
        if o["type"] in ("visualization", "search"):
            source = json.loads(o["attributes"]["kibanaSavedObjectMeta"]["searchSourceJSON"])
            assert source["indexRefName"] == INDEX_REF and _pattern_of(o)
    [dashboard] = [o for o in objects if o["type"] == "dashboard"]
    panels = json.loads(dashboard["attributes"]["panelsJSON"])
    refs = {r["name"]: r for r in dashboard["references"]}
    assert sorted(p["panelRefName"] for p in panels) == sorted(refs)
    shown = {refs[p["panelRefName"]]["id"] for p in panels}
    assert shown == {o["id"] for o in objects if o["type"] in ("visualization", "search")}
    for p in panels:
        grid = p["gridData"]
        assert grid["i"] == p["panelIndex"] and grid["x"] >= 0 and grid["x"] + grid["w"] <= 48


def test_the_dashboard_shows_what_the_issue_asks_for(objects: list[dict]) -> None:
    named = {(pattern, field, need) for pattern, field, need, _ in named_fields(objects)}
    log, documents = "biorank-queries", "biorank-documents"
    assert (log, "timestamp", "date") in named  # queries over time, and the log's time field
    for stage in ("first_stage", "rerank", "snippets", "total"):
        assert (log, f"latency_ms.{stage}", "number") in named
    for part in ("bm25", "dense", "hybrid"):
        assert (log, f"hits.{part}", "number") in named
    assert (log, "query.keyword", "aggregatable") in named
    assert (documents, "year", "number") in named and (documents, "journal", "aggregatable") in named
    patterns = {o["id"] for o in objects if o["type"] == "index-pattern"}
    assert patterns == {"biorank-documents", "biorank-sentences", "biorank-queries"}


@pytest.fixture
def real_indices(opensearch: OpenSearch, sample_index: str, query_log_index: str) -> dict[str, str]:
    """Index pattern id -> an index biorank created on the real node that the pattern is for."""
    log = QueryLog(opensearch, query_log_index, command="test")
    log.add(index=sample_index, query="q", mode="bm25", k=1, latency_ms={"first_stage": 1.0}, hits=[])
    log.close()
    assert log.written == 1
    return {"biorank-documents": sample_index, "biorank-sentences": f"{sample_index}-sentences",
            "biorank-queries": query_log_index}


def test_every_field_the_saved_objects_name_exists_in_the_mappings_biorank_creates(
    objects: list[dict], opensearch: OpenSearch, real_indices: dict[str, str]
) -> None:
    named = named_fields(objects)
    assert len(named) > 20
    for pattern, field, need, who in named:
        index = real_indices[pattern]
        caps = opensearch.field_caps(index=index, fields=field)["fields"].get(field)
        assert caps, f"{who} names {field!r}, which {index} (pattern {pattern}) does not have"
        [(kind, cap)] = caps.items()
        if need == "date":
            assert kind == "date", f"{who}: {field} is {kind}, not a date"
        elif need == "number":
            assert kind in NUMBER_TYPES and cap["aggregatable"], f"{who}: {field} is {kind}, not a number"
        elif need == "aggregatable":
            assert cap["aggregatable"], f"{who}: {field} ({kind}) cannot be aggregated or sorted on"


def _matches(title: str, name: str) -> bool:
    """An index pattern's inclusions and later exclusions, as OpenSearch resolves them."""
    included = False
    for part in title.split(","):
        if part.startswith("-"):
            included = included and not fnmatch.fnmatchcase(name, part[1:])
        elif fnmatch.fnmatchcase(name, part):
            included = True
    return included


def test_each_index_pattern_catches_its_own_indices_and_no_other(
    objects: list[dict], opensearch: OpenSearch, real_indices: dict[str, str]
) -> None:
    titles = {o["id"]: o["attributes"]["title"] for o in objects if o["type"] == "index-pattern"}
    for pattern, title in titles.items():
        resolved = opensearch.transport.perform_request("GET", f"/_resolve/index/{quote(title, safe='*,-')}")
        names = {i["name"] for i in resolved["indices"]}
        for other, index in real_indices.items():
            assert (index in names) == (other == pattern), f"{title!r} on the node, {index}"
            assert _matches(title, index) == (other == pattern)
    # What `biorank demo` and the defaults create: the log must not count as documents, nor sentences.
    demo = {"biorank-demo": "biorank-documents", "biorank-demo-sentences": "biorank-sentences",
            "biorank": "biorank-documents", "biorank-sentences": "biorank-sentences",
            "biorank-queries": "biorank-queries"}
    for index, pattern in demo.items():
        assert [p for p, title in titles.items() if _matches(title, index)] == [pattern], index


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_dashboards_is_one_clear_line() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(cli, ["dashboards", "import", "--url", url])
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith(f"Error: cannot reach OpenSearch Dashboards at {url}")
    assert "Traceback" not in result.output


class _ImportAPI(BaseHTTPRequestHandler):
    """Answers POST /api/saved_objects/_import as Dashboards does; keeps what it was sent."""

    status: ClassVar[int] = 200
    received: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        message = BytesParser(policy=default_policy).parsebytes(
            f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode() + body)
        parts = {p.get_param("name", header="content-disposition"): p for p in message.iter_parts()}
        upload = parts["file"]
        objects = [json.loads(line) for line in upload.get_payload(decode=True).decode().splitlines() if line]
        self.received.append({"path": self.path, "xsrf": self.headers.get("osd-xsrf"),
                              "filename": upload.get_filename(), "bytes": upload.get_payload(decode=True)})
        if self.status == 200:
            answer = {"success": True, "successCount": len(objects), "successResults": [
                {"type": o["type"], "id": o["id"], "meta": {"title": o["attributes"]["title"]}} for o in objects]}
        else:
            answer = {"statusCode": 503, "error": "Service Unavailable",
                      "message": "OpenSearch Dashboards server is not ready yet"}
        data = json.dumps(answer).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def import_api() -> Iterator[tuple[str, type[_ImportAPI]]]:
    handler = type("Handler", (_ImportAPI,), {"received": [], "status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_import_posts_the_file_as_dashboards_expects_and_lists_what_was_created(
    objects: list[dict], import_api: tuple[str, type[_ImportAPI]]
) -> None:
    url, api = import_api
    result = CliRunner().invoke(cli, ["dashboards", "import", "--url", url + "/"])
    assert result.exit_code == 0, result.output
    [request] = api.received
    assert request["path"] == "/api/saved_objects/_import?overwrite=true"
    assert request["xsrf"] == "true" and request["filename"].endswith(".ndjson")
    assert request["bytes"] == saved_objects_path().read_bytes()
    assert f"imported {len(objects)} saved objects into {url}:" in result.stdout
    for o in objects:
        assert o["id"] in result.stdout
    assert f"open {url}/app/dashboards#/view/biorank-overview" in result.stdout


def test_a_dashboards_that_is_still_starting_is_one_clear_line(import_api: tuple[str, type[_ImportAPI]]) -> None:
    url, api = import_api
    api.status = 503
    result = CliRunner().invoke(cli, ["dashboards", "import", "--url", url])
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"Error: OpenSearch Dashboards at {url} is not ready") and "not ready yet" in last
