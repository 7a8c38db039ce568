"""Key conversions from other naming schemes (diffusers, open_clip, ...) to the original layout."""
