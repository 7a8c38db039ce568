"""Checkpoint -> ModelBundle; key conversions between naming schemes; save."""
