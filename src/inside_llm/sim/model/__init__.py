"""What a model is and runs: shape formulas (models), the numpy transformers, SmolLM2 and its int8 kernels, tokenizers."""
