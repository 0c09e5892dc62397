"""A checkpoint written while TrainState still held an (unused) RNG key still restores."""
import jax
import numpy as np
import orbax.checkpoint as ocp

from rlsvr import checkpoint
from rlsvr.rl.train_step import GRPOConfig, init_train_state
from tests.rl.tiny import CONFIG, random_params


def test_old_checkpoint_with_rng_restores(tmp_path):
  state = init_train_state(CONFIG, GRPOConfig(), random_params())
  saver = checkpoint.Checkpointer(str(tmp_path))
  # The old layout: the state item also held `rng` (the key data of a jax.random.key).
  old = {"step": state.step + 7, "params": state.params, "opt_state": state.opt_state,
         "rng": jax.random.key_data(jax.random.key(3))}
  saver.manager.save(7, args=ocp.args.Composite(
      state=ocp.args.StandardSave(old), env=ocp.args.JsonSave({"ema": 1.5}),
      meta=ocp.args.JsonSave({})))
  saver.close()
  fresh = init_train_state(CONFIG, GRPOConfig(), random_params(seed=1))
  restored, env, _ = checkpoint.Checkpointer(str(tmp_path)).restore(fresh)
  assert int(restored.step) == 7 and env == {"ema": 1.5}
  for a, b in zip(jax.tree.leaves(restored.params), jax.tree.leaves(state.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # A new checkpoint has no key at all, and restores too.
  saver = checkpoint.Checkpointer(str(tmp_path / "new"))
  saver.save(1, restored, {}, {})
  saver.close()
  again, _, _ = checkpoint.Checkpointer(str(tmp_path / "new")).restore(fresh)
  assert int(again.step) == 7
