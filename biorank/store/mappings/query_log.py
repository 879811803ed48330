"""Settings and mappings of the query log: one entry per query that biorank answered.

The log is read by people (``biorank log``, OpenSearch Dashboards), so every field is explicitly typed and the
Dashboards saved objects can name them (``tests/test_dashboards.py`` checks that they exist).

Two parts grow as biorank does, without a mapping change:
- ``latency_ms``: milliseconds per stage. ``first_stage``, ``rerank``, ``snippets`` and ``total`` are declared
  so Dashboards knows them before any record carries them; a stage added later maps to ``float`` by a dynamic
  template;
- ``hits``: the top hits with their score parts. ``hits`` is an ``object``, not ``nested``: Dashboards'
  aggregation-based visualisations cannot aggregate nested fields, and percentiles over an object array use
  every value, which is what a score distribution needs. A score part added later (a reranker's) maps to
  ``float`` the same way.
"""

from __future__ import annotations

from biorank.types import SCORE_PARTS

QUERY_LOG_VERSION = 1
"""Raised whenever a field changes meaning; records are read by name, so older logs stay readable."""

STAGES = ("first_stage", "rerank", "snippets", "total")


def query_log_index_body() -> dict:
    number = {"type": "float"}
    return {
        "settings": {"index": {
            # One small index on any cluster: replicas would leave a single node yellow.
            "number_of_shards": 1, "number_of_replicas": 0,
            # Work every logged query would pay for: an fsync per bulk request, a refresh every second.
            # A log may lose its last seconds in a node crash; readers refresh (`biorank log`) or wait 5 s.
            "translog": {"durability": "async"}, "refresh_interval": "5s",
        }},
        "mappings": {
            "_meta": {"biorank": {"kind": "query_log", "mapping_version": QUERY_LOG_VERSION}},
            "dynamic": "strict",
            "dynamic_templates": [
                {"stage_latencies": {"path_match": "latency_ms.*", "mapping": number}},
                {"score_parts": {"path_match": "hits.*", "match_mapping_type": "double", "mapping": number}},
                {"integer_score_parts": {"path_match": "hits.*", "match_mapping_type": "long", "mapping": number}},
            ],
            "properties": {
                "timestamp": {"type": "date"},
                "run": {"type": "keyword"},
                "command": {"type": "keyword"},
                "biorank_version": {"type": "keyword"},
                "index": {"type": "keyword"},
                "system": {"type": "keyword"},
                "query_id": {"type": "keyword"},
                "query": {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 1024}}},
                "mode": {"type": "keyword"},
                "bm25_fields": {"type": "keyword"},
                "lambda": number,
                "k": {"type": "integer"},
                "batch": {"type": "integer"},
                "hits_returned": {"type": "integer"},
                "latency_ms": {"type": "object", "dynamic": True,
                               "properties": {stage: number for stage in STAGES}},
                "hits": {"type": "object", "dynamic": True, "properties": {
                    "id": {"type": "keyword"},
                    "rank": {"type": "integer"},
                    "block": {"type": "integer"},
                    **{part: number for part in SCORE_PARTS},
                }},
            },
        },
    }
