"""The ``biorank`` command: thin commands over the library (options → one library call → render). Heavy
imports stay inside the commands, so ``biorank --help`` starts in a blink."""

from biorank.cli.main import cli, main

__all__ = ["cli", "main"]
