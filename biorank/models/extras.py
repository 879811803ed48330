"""What the light install leaves out, and the one message that says how to get it.

``pip install biorank`` brings ONNX Runtime and tokenizers: indexing and searching with the default encoder,
reranking and snippets with the shipped cross-encoder run there, never importing torch. torch,
transformers and sentence-transformers come with the ``train`` extra, for what only they can do: training,
a GPU, bf16 on a CPU that computes it natively, and models that have no ONNX graph yet (a hub checkpoint,
a model that is not BERT). Each place that needs them asks :func:`require_torch` first, so a light install
answers with one line instead of a traceback. The same goes for the smaller extras of single commands
(:func:`require`): ``vectors`` (pyarrow, for ``encode`` and ``index --vectors``) and ``tune`` (optuna, for
``tune-snippets``).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator

from biorank.errors import BiorankError

__all__ = ["TRAIN_EXTRA", "ExtraUnavailable", "TorchUnavailable", "installed", "quiet_loading", "require",
           "require_torch"]

TRAIN_EXTRA = "pip install 'biorank[train]'"
"""The command that adds torch, transformers and sentence-transformers to an install."""
TORCH_MODULES = ("torch", "transformers", "sentence_transformers")


class ExtraUnavailable(BiorankError):
    """Something needs a package of an extra (``biorank[vectors]``, ``biorank[tune]``, ...) this install left out."""


class TorchUnavailable(ExtraUnavailable):
    """Something needs torch (training, a GPU, a model without an ONNX graph) and this install has none."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it (torch takes seconds to import).

    Args:
        module: a top-level module name.

    Returns:
        True where an import would find it.

    Example:
        >>> installed("json")
        True
    """
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require_torch(purpose: str) -> None:
    """Raise :class:`TorchUnavailable` in one line, with the pip command, unless torch and its two libraries are
    installed.

    Args:
        purpose: what needs them, as the start of the message ("training a cross-encoder").

    Example:
        >>> require_torch("training a cross-encoder")  # doctest: +SKIP
    """
    missing = [module for module in TORCH_MODULES if not installed(module)]
    if missing:
        raise TorchUnavailable(f"{purpose} needs {', '.join(missing)}, which this install leaves out: {TRAIN_EXTRA}")


def require(module: str, extra: str, purpose: str) -> None:
    """Raise :class:`ExtraUnavailable` in one line, with the pip command, unless ``module`` is installed.

    Args:
        module: the top-level module needed.
        extra: the extra of biorank that brings it.
        purpose: what needs it, as the start of the message ("biorank encode").

    Example:
        >>> require("json", "vectors", "biorank encode")
    """
    if not installed(module):
        raise ExtraUnavailable(f"{purpose} needs {module}, which this install leaves out: "
                               f"pip install 'biorank[{extra}]'")


@contextlib.contextmanager
def quiet_loading(*, fresh_head: bool = False) -> Iterator[None]:
    """Hide transformers' per-load "Loading weights" bar, which would cut through biorank's own progress bar.

    ``fresh_head`` also hides its load report, which calls the head of a model about to be trained "MISSING";
    every other load keeps it, so a checkpoint with missing weights is never used silently.
    """
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    verbosity = logging.get_verbosity()
    logging.disable_progress_bar()
    if fresh_head:
        logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if was_enabled:
            logging.enable_progress_bar()
