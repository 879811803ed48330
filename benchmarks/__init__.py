"""biorank's benchmark suite: the repeatable measurements here, the one-time decision studies in ``studies``.

See benchmarks/README.md for the questions, the scripts and their records."""
