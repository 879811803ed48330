"""The ``biorank`` command: thin commands over the library (options → one library call → render). Heavy
imports stay inside the commands, so ``biorank --help`` starts in a blink."""

# The command modules register themselves on the group, which each imports from main; main imports none of them,
# so no import runs in a circle.
from biorank.cli import (  # noqa: F401
    cluster,
    datasets,
    evaluate,
    indexing,
    inspect,
    searching,
    serving,
    topics,
    training,
    tuning,
)
from biorank.cli.main import cli, main

__all__ = ["cli", "main"]
