"""The reward-function environment (`env = "reward_fn"`): prompts plus TRL-style rewards."""
