"""``python -m biorank.cli``: the same command as ``biorank``."""

from biorank.cli.main import main

main()
