"""Libraries' log records never reach a user's terminal unless asked for.

opensearch-py logs every request that is not a 2xx as a warning (a probe for an index that does not exist yet is
one), urllib3 its retries, transformers its load reports, ONNX Runtime's tools their advice; and a library that
calls ``logging.basicConfig`` once makes every such record a ``WARNING:opensearch:...`` line in the middle of
biorank's output. What matters from them already reaches the user as biorank's own one-line message (an
exception the CLI turns into ``Error: ...``); the records themselves go nowhere by default, to standard error
with ``-v`` (``-vv`` for debug), or to a file with ``--log-file``. ``biorank serve``'s server log is uvicorn's
own and stays as it is.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_installed: list[logging.Handler] = []


def route_library_logs(verbose: int = 0, log_file: Path | None = None) -> None:
    """Give the root logger biorank's handlers, replacing those a previous call installed.

    With a handler on the root, ``logging.basicConfig`` in a library adds none of its own and Python's
    last-resort handler (which prints bare warnings to standard error) is never used.

    Args:
        verbose: 0 keeps library records off the terminal, 1 shows INFO and above on standard error, 2 DEBUG.
        log_file: also append every INFO record (DEBUG with ``-vv``) to this file.
    """
    root = logging.getLogger()
    for handler in _installed:
        root.removeHandler(handler)
    _installed.clear()
    level = logging.DEBUG if verbose > 1 else logging.INFO
    if verbose:
        _installed.append(logging.StreamHandler())
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        _installed.append(logging.FileHandler(log_file, encoding="utf-8"))
    if not _installed:
        _installed.append(logging.NullHandler())
    for handler in _installed:
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
    if verbose or log_file is not None:
        root.setLevel(level)
    # Python's warnings (a library's FutureWarning) become records of the "py.warnings" logger, routed as above.
    logging.captureWarnings(True)
    # transformers gives its own logger a handler of its own on standard error, and draws progress bars while it
    # loads and saves (biorank draws its own); both read these when imported.
    if not verbose:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
