r"""RLVR on math word problems: GRPO with Python reward functions (`env = "reward_fn"`).

  python -m rlsvr.train --config=configs/rlvr_math.py                # Qwen3-1.7B, GSM8K train (hub)
  python -m rlsvr.train --config=configs/rlvr_math.py:cpu            # SmolLM2-135M on the CPU
  python -m rlsvr.train --config=configs/rlvr_math.py:smoke          # seconds, random tiny model
  python -m rlsvr.train --config=configs/rlvr_math.py:math500        # MATH-500 (shared data)
  python -m rlsvr.train --config=configs/rlvr_math.py:cpu --config.data.source=gsm8k  # shared GSM8K
  python -m rlsvr.train --config=configs/rlvr_math.py \
      --config.reward_fn.reward_funcs=my_pkg.rewards:correct,trl.rewards:think_format_reward \
      --config.reward_fn.reward_weights=1.0,0.2

Variants (comma-separated):
  (none)   GSM8K train from the hub (`openai/gsm8k`, needs network or the HF cache),
           Qwen3-1.7B without thinking, 64 prompts x 8 samples, 1024 new tokens,
           reward = accuracy + 0.1 format, lr 1e-6, KL 0.001
  cpu      SmolLM2-135M-Instruct on the bundled generated word problems
           (`bundled:arithmetic`, `rlsvr.data.arithmetic`: no file, no network), 4 prompts
           x 4 samples; replies start with the answer box (answer_prefill): within a CPU
           budget a 135M model never writes one itself
  smoke    tiny random Qwen3 with the Qwen3 tokenizer on 16 bundled problems; seconds (tests)
  math500  MATH-500 from the shared data folder instead (with cpu / smoke too)

`cpu` and `smoke` read the bundled problems so that a fresh clone runs them offline;
`--config.data.source=gsm8k` (GSM8K's test split in the shared data folder, $RLSVR_DATA
or ../shared/data), `hub:openai/gsm8k:main` or a local file trains on other prompts.

Reward functions use TRL's calling convention (rlsvr/rewards/calling.py):
`f(prompts=, completions=, completion_ids=, **dataset_columns) -> list[float | None]`.
"""
import ml_collections

from configs.base import base_config, parse_variants, run_locally
from rlsvr.eval.math_suites import INSTRUCTION

VARIANTS = ("cpu", "smoke", "math500")
# Generated prompts (rlsvr/data/arithmetic.py) for the CPU-sized variants: the README's command
# must run from a fresh clone, where neither the shared data folder nor the network is.
BUNDLED = "bundled:arithmetic"


def get_config(arg=None) -> ml_collections.ConfigDict:
  variants = parse_variants(arg, VARIANTS)

  c = base_config()
  c.env = "reward_fn"  # Which environment plays the steps.
  c.model.source = "hub:Qwen/Qwen3-1.7B"
  c.model.enable_thinking = False  # Qwen3 hybrid models think unless told not to.
  c.reward_fn = ml_collections.ConfigDict()
  c.reward_fn.prompts_per_step = 64  # Prompts per step.
  c.reward_fn.group_size = 8  # Completions per prompt: one GRPO group.
  c.reward_fn.max_new_tokens = 1024  # Completion length.
  # The dataset column holding the prompt: a string, or a list of chat messages.
  c.reward_fn.prompt_field = "question"
  c.reward_fn.system_prompt = ""  # A system turn before every prompt ("" : none).
  c.reward_fn.instruction = INSTRUCTION  # Appended to the (last user) prompt text.
  # Text every reply starts with (the model continues it); reward functions see it as the
  # start of the completion. "" : none.
  c.reward_fn.answer_prefill = ""
  # True: the policy reads string prompts as one user message through the chat template;
  # False: as raw text. Either way reward functions get the dataset's form (TRL's): strings
  # for string prompts, chat messages for message-list prompts (always templated).
  c.reward_fn.use_chat_template = True
  # Comma-separated `module:function` (or `module.function`) reward functions.
  c.reward_fn.reward_funcs = "rlsvr.rewards.math:accuracy,rlsvr.rewards.math:format"
  c.reward_fn.reward_weights = "1.0,0.1"  # One per function; "" : all 1.
  # Safety net per reward-function call: the functions run in a worker process that is
  # killed past it, and the step fails naming the function (0: no limit, no worker; the
  # functions run in the trainer's thread).
  c.reward_fn.reward_timeout_s = 600.0
  # Rows every reward function returned None for: "zero_advantage" (TRL 1.16) trains them
  # with advantage 0, out of every group's baseline; "drop" leaves them out of the update.
  c.reward_fn.unscorable = "zero_advantage"
  # A math suite, bundled:arithmetic, hub:<name>[:config] or a local file (envs/reward_fn/data.py).
  c.data.source = "hub:openai/gsm8k:main"
  c.data.split = "train"
  c.data.limit = 0  # At most this many prompts (0: all).

  if "math500" in variants:
    c.data.source = "math500"
  if "cpu" in variants:
    # Sized for a few minutes on 2 CPU cores: sampling 16 x 24 tokens and one update over
    # 16 short rows per step.
    run_locally(c, "smollm2")
    c.data.source = "math500" if "math500" in variants else BUNDLED
    c.steps = 6
    c.reward_fn.prompts_per_step = 4
    c.reward_fn.group_size = 4
    c.reward_fn.max_new_tokens = 24
    # With the box opened the model writes an answer and usually closes it, so format and
    # (rarely) accuracy rewards vary within a group; without it every reward was 0.
    c.reward_fn.answer_prefill = "The final answer is $\\boxed{"
    c.checkpoint.every = 3
  if "smoke" in variants:
    run_locally(c, "random:tiny", tokenizer="qwen3")
    c.data.source = "math500" if "math500" in variants else BUNDLED
    c.data.limit = 16
    c.steps = 2
    c.reward_fn.prompts_per_step = 2
    c.reward_fn.group_size = 2
    c.reward_fn.max_new_tokens = 8
    c.grpo.remat = False
    c.checkpoint.every = 1
  return c
