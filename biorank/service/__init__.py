"""``biorank serve``: one long-lived process that loads the models once and answers a search page and a JSON API
through the same :class:`~biorank.pipeline.Pipeline` as the CLI."""
