"""Errors a user can act on. The CLI prints their message as one line, without a traceback."""


class BiorankError(Exception):
    """Base class: the message says what went wrong and what to do about it."""


class ClusterUnavailable(BiorankError):
    """The cluster could not be reached or answered with an error that is not about the request."""


class JavaNotFound(BiorankError):
    """No Java runtime that this OpenSearch version supports."""


class ArtifactError(BiorankError):
    """An OpenSearch artifact could not be downloaded or failed verification."""


class DatasetError(BiorankError):
    """A public data set could not be fetched, failed verification, or needs steps only its user can take."""


class NodeStartError(BiorankError):
    """The local node did not come up."""


class ContainerError(BiorankError):
    """Docker is missing or refused, or an image or container of biorank's could not be made or started."""
