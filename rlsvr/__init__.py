"""rlsvr: RL with self-produced rewards (SpyRL / RLSVR and RLSR) in JAX."""
