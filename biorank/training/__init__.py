"""Training biorank's own models offline on a CPU: the cross-encoder reranker and the dense encoder."""
