"""Quantization (chapter 8): formats and quantizers, and held-out perplexity with the weights quantized."""
