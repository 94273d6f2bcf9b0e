"""Permutations (Git Re-Basin): specs derived from any model, applying, matching."""
