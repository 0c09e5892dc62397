"""Experiment configs: one file per experiment, each a `get_config(arg)`."""
