"""Checkpoint merging: ComfyUI's model-merging nodes as one streamed pass over two or three files."""
