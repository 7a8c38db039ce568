"""What a model file is, from its header alone."""
