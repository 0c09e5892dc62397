"""A LoRA run (configs/rlvr_math.py:smoke, rewarded by TRL's character-length example so
that its rewards spread): it trains the adapters alone, resumes exactly, and exports merged
HF weights and a PEFT adapter that transformers and peft load with our logits."""
import json
import os

import jax
import numpy as np
import pytest
import torch
import transformers

from rlsvr import checkpoint, export, metrics, train
from rlsvr.model import hf, lora, qwen3, sources
from rlsvr.model.params import flatten as _flat
from configs.rlvr_math import get_config
from tests.model.hf_reference import hf_logits, left_padded


def lora_smoke_config(steps, data):
  c = get_config("smoke")
  c.steps, c.checkpoint.every, c.data.source = steps, 1, data
  c.reward_fn.reward_funcs = "tests.rewards.trl_examples:char_length"
  c.reward_fn.reward_weights = ""
  c.model.lora.update(rank=4, alpha=8.0, targets="all", layers="1", dropout=0.1)
  c.grpo.lr = 1e-2  # Visible adapter moves in two steps.
  return c


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """(straight 2-step run, the same run stopped after step 1 and resumed to step 2)."""
  root = tmp_path_factory.mktemp("lora")
  data = root / "problems.jsonl"  # Local rows: no shared data folder needed.
  data.write_text("".join(json.dumps({"question": f"What is {k} + {k}?", "answer": str(2 * k)})
                          + "\n" for k in range(8)))
  straight, resumed = str(root / "straight"), str(root / "resumed")
  train.train(lora_smoke_config(2, str(data)), straight)
  train.train(lora_smoke_config(1, str(data)), resumed)
  train.train(lora_smoke_config(2, str(data)), resumed)
  return straight, resumed


def test_a_lora_run_trains_the_adapters_and_resumes_exactly(runs):
  straight, resumed = runs
  step, config, adapters, meta = checkpoint.restore_trained(_ckpts(straight))
  assert step == 2 and meta["lora"] == {"rank": 4, "alpha": 8.0, "targets": list(lora.TARGETS),
                                        "layers": [1], "dropout": 0.1}
  assert sorted(_flat(adapters)) == sorted(lora.from_dict(meta["lora"]).paths())
  # Layer 0 has no adapter: nothing reaches it (weight decay shrinks its A, B stays 0).
  assert all(not np.asarray(x)[0].any() for p, x in _flat(adapters).items()
             if p.endswith("_lora_b"))
  assert all(np.asarray(x)[1].any() for p, x in _flat(adapters).items())
  _, _, resumed_adapters, _ = checkpoint.restore_trained(_ckpts(resumed))
  for p, x in _flat(adapters).items():
    np.testing.assert_allclose(_flat(resumed_adapters)[p], x, atol=1e-6, err_msg=p)
  a, b = (metrics.read_jsonl(os.path.join(w, "metrics.jsonl")) for w in runs)
  assert [r["step"] for r in b] == [1, 2]
  for ra, rb in zip(a, b):
    assert ra["actor/pg_loss"] == pytest.approx(rb["actor/pg_loss"], abs=1e-6)
  assert a[1]["actor/kl"] > 0  # The reference (the base) and the policy have parted.


def _ckpts(workdir):
  return os.path.join(workdir, "checkpoints")


def test_a_lora_run_exports_merged_weights_and_a_peft_adapter(runs, tmp_path):
  import peft

  straight, _ = runs
  step, config, adapters, meta = checkpoint.restore_trained(_ckpts(straight))
  run = json.loads(meta["config"])
  _, base, _ = sources.load_model(run["model"]["source"], seed=run["seed"],
                                  tokenizer=run["model"]["tokenizer"])
  spec = lora.from_dict(meta["lora"])
  tokens, mask = left_padded([12, 7], config.vocab_size)
  real = mask.astype(bool)
  ours = np.asarray(qwen3.apply(config, lora.attach(config, spec, base, adapters), tokens,
                                mask))[real]
  assert np.abs(ours - np.asarray(qwen3.apply(config, base, tokens, mask))[real]).max() > 1e-3

  # Merged weights: the export's default form (its command line: docs/training.md's, run
  # by tests/test_docs_commands.py with --adapter too).
  export.export(straight, str(tmp_path / "merged"), dtype="float32")
  merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "merged",
                                                             dtype=torch.float32).eval()
  np.testing.assert_allclose(hf_logits(merged, tokens, mask)[real], ours, atol=1e-4)

  # PEFT: the adapters alone, loaded onto the transformers base model.
  step_out, path = export.export_adapter(straight, str(tmp_path / "adapter"))
  assert step_out == 2
  hf.save_pretrained(tmp_path / "base", config, base)
  base_model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base",
                                                                 dtype=torch.float32)
  peft_model = peft.PeftModel.from_pretrained(base_model, str(path)).eval()
  np.testing.assert_allclose(hf_logits(peft_model, tokens, mask)[real], ours, atol=1e-4)


def test_a_full_weight_run_has_no_adapter_to_export(tmp_path):
  from rlsvr.rl.train_step import GRPOConfig, init_train_state
  from tests.rl.tiny import CONFIG, random_params

  state = init_train_state(CONFIG, GRPOConfig(), random_params())
  meta = {"model_config": CONFIG.to_hf_dict("float32"), "param_dtype": "float32",
          "compute_dtype": "float32", "lora": None,
          "config": json.dumps({"model": {"source": "random:tiny"}})}
  saver = checkpoint.Checkpointer(str(tmp_path / "full"))
  saver.save(1, state, {}, meta)
  saver.close()
  with pytest.raises(ValueError, match="full-weight run"):
    export.export_adapter(str(tmp_path / "full"), str(tmp_path / "no_adapter"))


def test_a_bf16_run_exports_the_base_it_trained_on(tmp_path):
  """The base is loaded again in the compute dtype the run trained on: a random base
  drawn in bfloat16 is other numbers than one drawn in float32."""
  from rlsvr.rl.train_step import GRPOConfig, init_train_state

  spec = lora.LoraConfig(rank=2, alpha=4.0)
  config, base, _ = sources.load_model("random:tiny", dtype="bfloat16", seed=3,
                                       tokenizer="qwen3")
  state = init_train_state(config, GRPOConfig(compute_dtype="bfloat16"), base, lora=spec)
  adapters = jax.tree.map(lambda x: x + 0.01, state.params)
  meta = {"model_config": config.to_hf_dict("bfloat16"), "param_dtype": "float32",
          "compute_dtype": "bfloat16", "lora": lora.to_dict(spec),
          "config": json.dumps({"seed": 3, "model": {"source": "random:tiny",
                                                     "tokenizer": "qwen3"}})}
  saver = checkpoint.Checkpointer(str(tmp_path / "run"))
  saver.save(1, state.replace(params=adapters), {}, meta)
  saver.close()
  _, _, params, _ = checkpoint.restore_run(str(tmp_path / "run" / "checkpoints"))
  expected = lora.merge(config, spec, base, adapters, np.float32)
  for path, x in _flat(expected).items():
    np.testing.assert_array_equal(_flat(params)[path], x, err_msg=path)
