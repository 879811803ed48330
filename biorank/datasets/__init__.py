"""The public data the docs and the tests use (``biorank datasets``): SciFact, NFCorpus, PubMed XML, PubMedQA and
BioASQ, fetched from their publishers or a mirror, verified against pinned SHA-256 values, and laid out as every
example expects (``data/scifact/corpus.jsonl``, ...).

:mod:`~biorank.datasets.catalogue` says what each set is and pins its files; :mod:`~biorank.datasets.transfer`
moves bytes (resumable, verified before a file takes its name); :mod:`~biorank.datasets.fetching` checks a data
folder and writes a set into it, converting the publishers' archives where their layout differs.
"""

from biorank.datasets.catalogue import DATASETS, Dataset, Pinned, Source, dataset
from biorank.datasets.fetching import Fetched, Presence, get, instructions, presence

__all__ = ["DATASETS", "Dataset", "Fetched", "Pinned", "Presence", "Source", "dataset", "get", "instructions",
           "presence"]
