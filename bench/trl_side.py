"""TRL's side of `bench/learning_vs_trl.py`: run by the TRL venv's python, in its own process.

  /tmp/peers/bin/python bench/trl_side.py SPEC.json

SPEC.json (written by learning_vs_trl.py) names the model directory, the
dataset (rows already in the order our trainer draws them; TRL's shuffling is
off, so step s reads rows s*P .. s*P+P-1), the reward functions and the
hyperparameters. Writes `out` (a JSON): per step the mean reward, the seconds
spent in `_generate_and_score_completions` (sampling + rewards: `sample_s`) and
in the whole optimizer step (`step_s`, from `on_step_begin` to `on_step_end`),
the prompts of the step and the first row's prompt ids; plus the generation
config TRL used. Imports nothing of rlsvr except through the reward functions.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def resolve(path: str):
  module, _, attr = path.partition(":")
  return getattr(importlib.import_module(module), attr)


def main(spec_path: str) -> None:
  with open(spec_path, encoding="utf-8") as f:
    spec = json.load(f)
  import datasets  # noqa: PLC0415
  import torch  # noqa: PLC0415
  import transformers  # noqa: PLC0415
  import trl  # noqa: PLC0415

  t_start = time.time()
  steps_log: dict[int, dict] = {}

  class Timed(trl.GRPOTrainer):
    def _generate_and_score_completions(self, inputs):
      t0 = time.perf_counter()
      out = super()._generate_and_score_completions(inputs)
      g = self.num_generations
      steps_log.setdefault(self.state.global_step + 1, {}).update(
          sample_s=time.perf_counter() - t0,
          prompts=[inputs[k]["prompt"] for k in range(0, len(inputs), g)],
          prompt_ids_0=[int(t) for t, m in zip(out["prompt_ids"][0], out["prompt_mask"][0]) if m],
          completion_tokens=float(out["completion_mask"].sum(1).float().mean()))
      return out

  class Clock(transformers.TrainerCallback):
    def on_step_begin(self, args, state, control, **kw):
      self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
      steps_log.setdefault(state.global_step, {})["step_s"] = time.perf_counter() - self.t0

    def on_log(self, args, state, control, logs=None, **kw):
      if logs and "reward" in logs:
        steps_log.setdefault(state.global_step, {}).update(
            reward=float(logs["reward"]), trl_step_time=logs.get("step_time"),
            frac_reward_zero_std=logs.get("frac_reward_zero_std"))

  torch.manual_seed(spec["seed"])
  model = transformers.AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32)
  tokenizer = transformers.AutoTokenizer.from_pretrained(spec["model_dir"])
  with open(spec["data"], encoding="utf-8") as f:
    rows = json.load(f)
  p, g = spec["prompts_per_step"], spec["group_size"]
  with tempfile.TemporaryDirectory() as tmp:
    args = trl.GRPOConfig(
        output_dir=tmp, use_cpu=True, bf16=False, fp16=False, seed=spec["seed"],
        data_seed=spec["seed"], max_steps=spec["steps"], logging_steps=1, report_to=[],
        save_strategy="no", disable_tqdm=True, log_completions=False,
        # One update per generated batch of P prompts x G completions, sampled fresh each step.
        per_device_train_batch_size=p * g, num_generations=g, gradient_accumulation_steps=1,
        steps_per_generation=1, num_iterations=1, shuffle_dataset=False,
        max_completion_length=spec["max_new_tokens"], temperature=spec["temperature"],
        top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0,
        # AdamW at a constant lr (TRL's default schedule decays linearly to 0; ours is constant).
        learning_rate=spec["lr"], lr_scheduler_type="constant", warmup_steps=0,
        optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        weight_decay=spec["weight_decay"], max_grad_norm=spec["max_grad_norm"],
        # The loss: PPO clip, no KL, token-level aggregation, group-std advantages.
        beta=0.0, epsilon=spec["clip_eps"], epsilon_high=spec["clip_eps"], loss_type="dapo",
        scale_rewards="group", importance_sampling_level="token",
        multi_objective_aggregation="sum_then_normalize", reward_weights=spec["reward_weights"],
        mask_truncated_completions=False, top_entropy_quantile=1.0, entropy_coef=0.0,
        # Off, as on our side (remat=False): a speed setting, no effect on the numbers.
        gradient_checkpointing=False, disable_dropout=True, remove_unused_columns=False)
    peft_config = None
    if spec.get("lora"):  # Adapters on the frozen model, as ours (`model.lora`).
      import peft  # noqa: PLC0415

      peft_config = peft.LoraConfig(
          r=spec["lora"]["rank"], lora_alpha=spec["lora"]["alpha"],
          lora_dropout=spec["lora"].get("dropout", 0.0),
          bias="none", task_type="CAUSAL_LM",
          target_modules=[f"{t}_proj" for t in spec["lora"]["targets"]])
    trainer = Timed(model=model, processing_class=tokenizer, args=args, peft_config=peft_config,
                    reward_funcs=[resolve(r) for r in spec["reward_funcs"]],
                    train_dataset=datasets.Dataset.from_list(rows), callbacks=[Clock()])
    gen = trainer.generation_config
    generation = {k: getattr(gen, k, None) for k in
                  ("do_sample", "temperature", "top_p", "top_k", "min_p", "max_new_tokens",
                   "eos_token_id", "repetition_penalty")}
    t_train = time.time()
    trainer.train()
    t_end = time.time()
  out = {"steps": [dict(step=s, **steps_log[s]) for s in sorted(steps_log) if s >= 1],
         "generation_config": generation, "load_s": t_train - t_start,
         "train_s": t_end - t_train, "versions": {"trl": trl.__version__,
                                                   "transformers": transformers.__version__,
                                                   "torch": torch.__version__,
                                                   **({"peft": peft.__version__}
                                                      if peft_config else {})},
         "torch_threads": torch.get_num_threads()}
  with open(spec["out"], "w", encoding="utf-8") as f:
    json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
  main(sys.argv[1])
