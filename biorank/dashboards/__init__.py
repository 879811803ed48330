"""OpenSearch Dashboards: the saved objects biorank ships (``biorank.ndjson``) and their import."""
