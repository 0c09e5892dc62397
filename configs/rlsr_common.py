"""The RLSR experiment family; `rlsr_countdown.py` and `rlsr_integration.py` pick a task.

Variants (comma-separated, e.g. `configs/rlsr_countdown.py:cpu,online`):
  (none)       paper settings: batch 64 problems x 8 answers, lr 1e-6, KL 0.001,
               answers up to 2048 tokens, the policy's initial weights judge (fixed)
  cpu          the embedded default: SmolLM2-135M-Instruct judges itself, tiny batches
  smoke        tiny random Qwen3 with the real Qwen3 tokenizer; seconds (tests)
  delayed      copy the policy into the judge at step judge_delay_steps (default 50)
  online       the judge is the current policy every step
  t1 .. t4     Countdown judge prompt countdown_1 .. countdown_4 (strictness 1..4), for
               ablations; the default is the task's own: Countdown's is countdown_4, the
               paper's final, stable prompt (with countdown_1 its policy was reward-hacked first)

The judge prompt can also be any template file: `--config.rlsr.judge_template=my_judge.txt`
(rlsvr/envs/self_judge/templates.py says how to write one; prompts/ holds the built-in ones).
"""
import ml_collections

from configs.base import base_config, parse_variants, run_locally

STRICTNESS = ("t1", "t2", "t3", "t4")
VARIANTS = ("cpu", "smoke", "delayed", "online", *STRICTNESS)


def rlsr_config(task: str, arg: str | None) -> ml_collections.ConfigDict:
  variants = parse_variants(arg, VARIANTS)

  c = base_config()
  c.env = "rlsr"  # Which environment plays the steps.
  c.model.source = "hub:Qwen/Qwen2.5-7B-Instruct"  # The paper's policy.
  c.rlsr = ml_collections.ConfigDict()
  c.rlsr.task = task  # countdown | integration | package.module:name (self_judge/tasks.py).
  c.rlsr.problems_per_step = 64  # Problems per step (paper batch 64).
  c.rlsr.group_size = 8  # Answers per problem: one GRPO group.
  # Judge prompt: "" (the task's default), a name in rlsvr/envs/self_judge/prompts/ or a .txt path.
  c.rlsr.judge_template = next((f"countdown_{v[1]}" for v in variants if v in STRICTNESS), "")
  c.rlsr.format_bonus = 0.1  # Reward for a well-formed <answer>.
  c.rlsr.judge_sees = "answer"  # answer (the <answer> block) | response (everything).
  c.rlsr.judge_weights = ("online" if "online" in variants else
                          "delayed" if "delayed" in variants else "fixed")  # Judge schedule.
  c.rlsr.judge_delay_steps = 50  # delayed: copy the policy into the judge at this step.
  c.rlsr.judge_repeat = False  # delayed: copy again every judge_delay_steps.
  c.rlsr.policy_max_new_tokens = 2048  # Answer length (paper 2048).
  c.rlsr.judge_max_new_tokens = 1024  # Judge response length.
  # Text every policy reply starts with (e.g. "<answer>"), for models too small to follow
  # the format; "" : none (the paper).
  c.rlsr.answer_prefill = ""
  # The judge's reply is `\boxed{` plus `1}` or `0}`, drawn from its distribution restricted
  # to the two (no reasoning); for judges too small to write a verdict. Not the paper's.
  c.rlsr.constrained_verdict = False
  # Cache slots per sampler slice: the judge's 512 prompts at once need ~140 GB per device
  # on 8 x 80 GB; 640 Ki slots (128 judge rows of 4096 + 1024) fit (`python -m rlsvr.plan`).
  c.sampling.max_cache_tokens = 640 * 1024
  # Integration verifier: safety-net time limits only (decisions are bounded by operation
  # counts); an answer that hits one is scored as unparseable, counted in verifier/timeouts.
  c.rlsr.verifier_time_limit_s = 30.0
  c.rlsr.integral_time_limit_s = 300.0
  c.judge = ml_collections.ConfigDict()
  c.judge.source = ""  # "" : the policy's own initial weights; else a model source (fixed only).
  c.judge.tokenizer = ""  # Tokenizer of a judge.source ("" : its directory's).
  c.judge.temperature = 0.0  # Judge sampling; 0 = greedy verdicts.
  # Countdown: generate | hub | a TinyZero JSONL; integration: ladder | an Integration Bee JSON |
  # a JSONL of rows (the tasks' load_problems: self_judge/countdown.py, integration_task.py).
  c.data.source = "generate" if task == "countdown" else "ladder"
  c.data.limit = 0  # At most this many problems (0: all / 1000 generated).

  if "cpu" in variants:
    run_locally(c, "smollm2")
    c.steps = 8
    c.rlsr.problems_per_step = 2
    c.rlsr.group_size = 4
    c.rlsr.policy_max_new_tokens = 64
    c.rlsr.judge_max_new_tokens = 32
    # SmolLM2-135M wrote no <answer> block and no parseable verdict in 3 steps (every reward
    # 0, no group with spread); with the block opened and the verdict restricted to 1 / 0
    # both parse.
    c.rlsr.answer_prefill = "<answer>"
    c.rlsr.constrained_verdict = True
    # The greedy judge (the default) accepts nearly every answer, so the format bonus is
    # the signal: held-out format rate 0.13 -> 0.53 in 4 steps. Sampled at temperature 1,
    # its verdicts were coin flips that drowned the bonus (format 0.13 -> 0.00 in 8 steps).
    c.heldout.size = 8  # Before/after true reward and judge TPR/TNR on 8 held-out problems.
    # Read only when delayed (the variant or --config.rlsr.judge_weights=delayed alike).
    c.rlsr.judge_delay_steps = 1
    c.checkpoint.every = 4
  if "smoke" in variants:
    run_locally(c, "random:tiny", tokenizer="qwen3")
    c.steps = 2
    c.rlsr.problems_per_step = 2
    c.rlsr.group_size = 2
    c.rlsr.policy_max_new_tokens = 8
    c.rlsr.judge_max_new_tokens = 8
    c.data.limit = 16
    c.rlsr.judge_delay_steps = 1  # Read only when delayed.
    c.grpo.remat = False
    c.checkpoint.every = 1
  return c
