"""Quantized weights: GGML block formats (GGUF files) and scaled fp8, kept quantized in memory and
dequantized per layer at forward by the op layers (``core.ops.layers``)."""
