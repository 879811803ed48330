"""One-time decision studies: each answers one question, once, and keeps its answer as a record."""
