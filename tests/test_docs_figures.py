"""One figure per fact: every figure a user reads in README.md and the docs has a record, and the user docs speak
of the product, not of the project's history.

- No issue numbers ("issue 44", "(#12)") and no "today", "this machine" or "this week" in README.md,
  ARCHITECTURE.md, docs/, the shipped models' cards or any help screen: what a page says must stay true after the
  week it was written in (history goes to CHANGELOG.md and git).
- Every figure with a unit (ms, s, min, MB, GB, %, a ratio, abstracts/s, ...) and every bare decimal of three places or
  more (nDCG@10, MAP, cosine) in the prose of README.md and docs/ (the pages they include with ``--8<--`` too:
  ARCHITECTURE.md, the cross-encoder's card) is found in a record under benchmarks/records/ at the precision
  shown, or in what the code pins (model and download sizes, λ), or in :data:`ALLOWED`, the short list of
  arithmetic and definitions, each with its reason. The generated tables (between ``<!-- table: NAME -->``
  markers: ``benchmarks/render.py`` writes them from the records and ``--check`` holds them there) and code blocks
  are not prose. A figure a record does not hold is either made a record and rendered, or said without a number
  with a link to the page whose table holds it.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from biorank.cli import cli
from biorank.cli.topics import TOPICS
from biorank.downloads import Artifact

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "records"
USER_PAGES = sorted({ROOT / "README.md", ROOT / "ARCHITECTURE.md", *(ROOT / "docs").rglob("*.md"),
                     *ROOT.glob("biorank/models/*/README.md")})
FIGURE_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

STALE = re.compile(r"\bissues? #?\d+|\(#\d+\)|#\d{2,}\b|\btoday\b|\btoday's\b|\bthis (?:machine|week)\b", re.I)

TABLE = re.compile(r"<!-- table: ([\w.-]+) -->.*?<!-- /table: \1 -->", re.S)
FENCED = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$', re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)

MINUS, DASH = "\N{MINUS SIGN}", "\N{EN DASH}"  # a signed figure, a range
NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
UNITS = {
    "time": {"ms": 1e-3, "s": 1.0, "seconds": 1.0, "min": 60.0, "minutes": 60.0, "h": 3600.0, "hours": 3600.0},
    "size": {"KB": 1e3, "kB": 1e3, "KiB": 1024.0, "MB": 1e6, "MiB": 1024.0**2, "GB": 1e9, "GiB": 1024.0**3,
             "TB": 1e12},
    "share": {"%": 1.0},
    "ratio": {"\N{MULTIPLICATION SIGN}": 1.0, "x": 1.0},
}
UNIT = "|".join(sorted((re.escape(u) for family in UNITS.values() for u in family), key=len, reverse=True))
FIGURE = re.compile(
    rf"(?<![\w.,/#@=-])[+{MINUS}-]?(?P<a>{NUMBER})(?:\s?[{DASH}-]\s?(?P<b>{NUMBER}))?"
    rf"(?:(?P<sep>\s?)(?P<unit>{UNIT}|[a-z]+/s)(?![\w/])"  # a figure with its unit
    rf"|(?<=\d{{3}})(?!\.?\d))"  # or a bare decimal of three places or more
)
BARE = re.compile(r"\.\d{3,}$")

ALLOWED: dict[str, str] = {
    "67 MB": "the shipped cross-encoder's weights unpacked: 33.4 M parameters of 2 bytes (bf16)",
    "0.999": "a definition: the cosine to fp32 every precision must keep for an index's vectors (with top-10 "
             "overlap ≥ 0.99), the limit benchmarks/gpu_stages.py checks",
}
"""Figures that are arithmetic or definitions, not measurements: the figure as written, and why it needs no record."""


def _numbers(value: object) -> Iterator[float]:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        yield float(value)
    elif isinstance(value, str):
        for match in re.finditer(NUMBER, value):
            yield float(match[0].replace(",", ""))
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)


def _pinned() -> Iterator[float]:
    """Figures the code itself defines: the sizes of what biorank downloads (each file, each engine's whole, what one
    engine adds to another's) and of the models it ships, in bytes, and λ's defaults."""
    from biorank.cluster.artifacts import ENGINES
    from biorank.config import DEFAULT_LAMBDA
    from biorank.models.catalogue import MAVEN_MODELS

    yield DEFAULT_LAMBDA
    for model in MAVEN_MODELS.values():
        yield model.jar.size
        if model.default_lambda:
            yield model.default_lambda
    downloads = {version: engine.artifacts() for version, engine in ENGINES.items()}
    for version, engine in ENGINES.items():
        found = downloads[version]
        yield sum(artifact.size for artifact in found)
        yield from (artifact.size for artifact in found)
        if isinstance(engine.security, Artifact):
            yield engine.security.size
        for other in downloads.values():
            cached = {artifact.repository_path for artifact in other}
            yield sum(artifact.size for artifact in found if artifact.repository_path not in cached)
    yield from (path.stat().st_size for path in ROOT.glob("biorank/models/*/*") if path.is_file())


@cache
def recorded() -> list[float]:
    """Every number of every record's rows, settings and notes (and the code's pinned figures), sorted."""
    found: set[float] = set(_pinned())
    for path in RECORDS.glob("*.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        found.update(_numbers([record.get(key) for key in ("results", "settings", "notes")]))
    return sorted(found)


def _held(text: str, unit: str) -> bool:
    """Whether a record holds the figure ``text`` (in ``unit``) at the precision it is written with: as it is, or
    in another unit of its kind (ms for s, MB for GB, a fraction for a percentage)."""
    plain = text.replace(",", "")
    value = float(plain)
    tolerance = 0.5 * 10 ** -(len(plain.split(".")[1]) if "." in plain else 0) + 1e-9
    family = next((f for f in UNITS.values() if unit in f), {unit: 1.0})
    scales = {family[unit] / other for other in family.values()} | ({0.01} if unit == "%" else set())
    values = recorded()
    for scale in scales:  # a record's value in a unit worth ``other`` reads as value / scale in this one
        at = bisect_left(values, (value - tolerance) * scale)
        if at < len(values) and values[at] <= (value + tolerance) * scale:
            return True
    return False


def prose(text: str) -> str:
    """The page without its generated tables, code blocks, comments, code spans and link targets, lines kept."""
    for pattern in (TABLE, FENCED, HTML_COMMENT):
        text = pattern.sub(lambda m: "\n" * m[0].count("\n"), text)
    return LINK_TARGET.sub("]()", CODE_SPAN.sub("``", text))


def unrecorded(text: str) -> list[tuple[int, str]]:
    """(line, figure) for every figure of ``text``'s prose that no record holds and :data:`ALLOWED` does not name."""
    missing = []
    for number, line in enumerate(prose(text).splitlines(), 1):
        for match in FIGURE.finditer(line):
            unit = match["unit"] or ""
            written = match[0].strip()
            if written in ALLOWED or (unit == "x" and match["sep"]):  # "2 x 3" is not a ratio
                continue
            if not unit and not BARE.search(match["a"]):
                continue
            ends = [match["a"]] + ([match["b"]] if match["b"] else [])
            if not all(_held(end, unit) for end in ends):
                missing.append((number, written))
    return missing


def _with_includes(page: Path) -> str:
    """The page as mkdocs shows it: its ``--8<--`` lines replaced by the files they include."""
    return INCLUDE.sub(lambda m: (ROOT / m[1]).read_text(encoding="utf-8"), page.read_text(encoding="utf-8"))


def _screens(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, command in group.commands.items():
        found += _screens(command, (*path, name)) if isinstance(command, click.Group) else [(*path, name)]
    return found


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_speaks_of_issues_or_of_today(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [f"{text.count(chr(10), 0, m.start()) + 1}: {m[0]}" for m in STALE.finditer(text)]
    assert not found, f"{page.relative_to(ROOT)}: history belongs in CHANGELOG.md or git: {found}"


def test_no_help_screen_speaks_of_issues_or_of_today() -> None:
    runner = CliRunner()
    shown = {" ".join(path) or "biorank": runner.invoke(cli, [*path, "--help"], terminal_width=120).output
             for path in _screens(cli)}
    shown |= {f"help {topic}": runner.invoke(cli, ["help", topic], terminal_width=120).output for topic in TOPICS}
    found = {name: STALE.findall(text) for name, text in shown.items() if STALE.search(text)}
    assert not found, found


@pytest.mark.parametrize("page", FIGURE_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_in_the_prose_has_a_record(page: Path) -> None:
    missing = unrecorded(_with_includes(page))
    assert not missing, (f"{page.relative_to(ROOT)}: figures no record holds (line of the page as mkdocs shows it, "
                         f"includes expanded): {missing}; make them records and render them, or drop the number")


def test_the_check_finds_a_planted_figure() -> None:
    assert unrecorded("The hybrid gives 0.7979 nDCG@10 and a fresh query 1.23\N{EN DASH}1.41 s.") == []
    assert unrecorded("The hybrid gives 0.7981 nDCG@10.") == [(1, "0.7981")]
    assert unrecorded("Reranking 20 hits takes 2,519 ms,\nand 9,877.5 MB.") == [(1, "2,519 ms"), (2, "9,877.5 MB")]
    assert unrecorded("A share of 0.9 is 90 %, `--weight 0.1234` is code, [a](x.md#0.1234) a link.") == []
    assert unrecorded("<!-- table: t -->\n| 0.1234 |\n<!-- /table: t -->\n```sh\nx 0.1234\n```\n") == []
    assert unrecorded("OpenSearch 2.19.1 on 2026-11-26, sample of 300, λ 0.01.") == []
