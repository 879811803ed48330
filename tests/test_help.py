"""Every help screen fits a terminal: at most 40 lines at 120 columns, with no repository path (a pip install has
no docs/ folder) and no issue number; the topics the one-line helps point to exist and say what the code does."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from biorank.cli import cli
from biorank.cli.screens import Expert, commands
from biorank.cli.topics import TOPICS

MAX_LINES = 40
WIDTH = 120


def _screens(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, command in group.commands.items():
        found += _screens(command, (*path, name)) if isinstance(command, click.Group) else [(*path, name)]
    return found


SCREENS = _screens(cli)


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args], terminal_width=WIDTH)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", SCREENS, ids=lambda path: " ".join(path) or "biorank")
def test_every_help_screen_fits_and_points_only_where_a_user_can_go(path: tuple[str, ...]) -> None:
    shown = _help(*path, "--help")
    lines = shown.rstrip("\n").splitlines()
    assert len(lines) <= MAX_LINES, f"{' '.join(path) or 'biorank'} --help is {len(lines)} lines:\n{shown}"
    assert "docs/" not in shown and "../shared" not in shown, shown
    assert not re.search(r"\bissues? \d", shown, re.IGNORECASE), shown


@pytest.mark.parametrize("topic", [None, *TOPICS])
def test_every_topic_fits_and_every_pointer_to_one_leads_somewhere(topic: str | None) -> None:
    shown = _help("help", *([topic] if topic else []))
    assert len(shown.rstrip("\n").splitlines()) <= MAX_LINES, shown
    assert "docs/" not in shown, shown


def test_every_topic_a_help_names_exists() -> None:
    named = {match for path in SCREENS for match in re.findall(r"biorank help ([a-z-]+)", _help(*path, "--help"))}
    named |= {param.topic for _, command in commands(cli) for param in command.params if isinstance(param, Expert)}
    assert named <= set(TOPICS), named - set(TOPICS)


def test_the_topics_say_what_the_code_does() -> None:
    from biorank.config import DEFAULT_LAMBDA
    from biorank.models.catalogue import MAVEN_MODELS
    from biorank.models.placement import PRECISIONS
    from biorank.retrieval.searcher import MODES

    precision = " ".join(_help("help", "precision").split())
    assert all(name in precision for name in PRECISIONS)
    modes = " ".join(_help("help", "modes").split())
    assert all(f"{mode} " in modes for mode in MODES)
    assert f"else {DEFAULT_LAMBDA:g}" in modes
    for model in MAVEN_MODELS.values():
        assert model.default_lambda is None or f"{model.name} {model.default_lambda:g}" in modes
    assert "0.03]" not in _help("query", "--help")  # λ's default is the index's, not one number


def test_help_names_a_command_too() -> None:
    assert _help("help", "tune-lambda").split("\n", 1)[1] == _help("tune-lambda", "--help").split("\n", 1)[1]
