"""Help screens that fit a terminal: an option a line, and the options only experts need named together at the
end of the screen, each explained on its topic's page (``biorank help TOPIC``, :mod:`biorank.cli.topics`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click

HELP_WIDTH = 120
"""Help fills a terminal up to this wide: a one-sentence option help then stays on its option's line."""
MORE = "More options (`biorank help TOPIC` explains each)"


class Expert(click.Option):
    """An option a first reader can skip: the help screen names it under ``topic`` at its end, and ``biorank help
    TOPIC`` shows its help line. It parses and behaves as any option: ``click.option(..., cls=Expert,
    topic="rerank")``."""

    def __init__(self, *args: Any, topic: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.topic = topic


class Screen(click.Command):
    """A command whose help lists its ordinary options, then its :class:`Expert` options' names by topic."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows, more = [], {}
        for param in self.get_params(ctx):
            if isinstance(param, Expert):
                if not param.hidden:
                    more.setdefault(param.topic, []).append(param.opts[0])
                continue
            record = param.get_help_record(ctx)
            if record is not None and not isinstance(param, click.Argument):
                rows.append(record)
        if rows:
            with formatter.section("Options"):
                formatter.write_dl(rows)
        if more:
            with formatter.section(MORE):
                for line in packed([f"{topic}: {' '.join(names)};" for topic, names in more.items()],
                                   formatter.width - formatter.current_indent):
                    formatter.write(f"{'':>{formatter.current_indent}}{line.rstrip(';')}\n")


SECTIONS = {
    "start": ("demo", "help", "cluster", "dashboards", "datasets"),
    "index": ("index", "encode", "sync", "reindex-vectors", "indices", "stats", "inspect", "mappings", "delete-index"),
    "search": ("query", "search", "similar", "serve", "log"),
    "evaluate": ("eval", "tune-lambda", "tune-rerank", "tune-snippets", "export-bioasq"),
    "train": ("gather-supervision", "train-reranker", "train-encoder", "train-snippet-scorer"),
}
"""The top screen's command list: names by what they are for (each command's --help says the rest)."""


def format_sections(group: click.Group, ctx: click.Context, formatter: click.HelpFormatter) -> None:
    """``group``'s commands by :data:`SECTIONS`, one line a section; a command no section names goes under
    "other", so none is ever left out."""
    names = [name for name in group.list_commands(ctx) if not getattr(group.get_command(ctx, name), "hidden", False)]
    placed = {name for section in SECTIONS.values() for name in section}
    rows = [(title, ", ".join(n for n in section if n in names)) for title, section in SECTIONS.items()]
    rows.append(("other", ", ".join(n for n in names if n not in placed)))
    with formatter.section("Commands (biorank COMMAND --help; biorank help TOPIC)"):
        formatter.write_dl([(title, line) for title, line in rows if line])


def packed(groups: list[str], width: int) -> Iterator[str]:
    """Words of ``groups`` in lines of at most ``width`` characters, never broken inside a word (an option's
    name stays whole, unlike click's wrapping, which breaks at hyphens)."""
    line = ""
    for word in " ".join(groups).split(" "):
        if line and len(line) + 1 + len(word) > width:
            yield line
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        yield line


def expert_rows(root: click.Group, topic: str) -> list[tuple[str, str]]:
    """The help lines of ``topic``'s :class:`Expert` options over every command under ``root``: one row for an
    option that reads the same everywhere, the commands named where it differs."""
    found: dict[tuple[str, str], list[str]] = {}
    for path, command in commands(root):
        ctx = click.Context(command, info_name=path, max_content_width=HELP_WIDTH)
        for param in command.params:
            if isinstance(param, Expert) and param.topic == topic and not param.hidden:
                record = param.get_help_record(ctx)
                if record is not None:
                    found.setdefault(record, []).append(path)
    names = [record[0] for record in found]
    return [(name, f"{text} ({', '.join(paths)})" if names.count(name) > 1 else text)
            for (name, text), paths in found.items()]


def commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    """Every command under ``group`` with its path (``cluster start``), sub-groups' commands included."""
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            yield from commands(command, f"{path} ")
        else:
            yield path, command
