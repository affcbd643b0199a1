"""Inside LLM Inference: a guided tour of how a GPU server runs a large language model."""

__version__ = "0.1.0"
