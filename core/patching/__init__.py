"""ModelPatcher and weight adapters (LoRA, LoHa, LoKr, DoRA, ...)."""
