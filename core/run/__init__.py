"""The headless test run (``loadout run``) and its report."""
