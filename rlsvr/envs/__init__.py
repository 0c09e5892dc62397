"""Environments: the seam between the trainer and a paper (see base.py)."""
