"""The SpyRL experiment family; `spy_summ.py`, `spy_write.py`, `spy_math.py` pick a task.

Variants (comma-separated, e.g. `configs/spy_summ.py:cpu,sequential`):
  (none)      the paper's run: Qwen3-4B-Instruct-2507, 128 games per step, 8 devices
  cpu         the embedded default: SmolLM2-135M-Instruct, bundled corpus, small games;
              summarisation plays the "facts" task (short generated fact sheets)
  cpu_long    `cpu` run longer, with more held-out games
  detectors   with cpu: the detectors alone learn the played game, one game a step and
              256 rotated votes; 24 decision steps, players at 0.3 and a cosine-decayed
              learning rate (16-22 min, the README's main job); with cpu_long the earlier
              48-step recipe (players at 0.7, constant lr; docs/results.md, ~30 min)
  reports     with cpu: summarisation of the bundled ~80-word reports instead of fact sheets
  smoke       tiny random Qwen3 with the real Qwen3 tokenizer; seconds (tests)
  sequential  the two-player sequential game
  no_spy      the no-spy ablation (clue phase only)
  released    the released code's detection reward shaping and baseline order
  bundled     the bundled corpus instead of the hub dataset
"""
import ml_collections
from ml_collections.config_dict import placeholder

from configs.base import base_config, parse_variants, run_locally

VARIANTS = ("cpu", "cpu_long", "detectors", "reports", "smoke", "sequential", "no_spy",
            "released", "bundled")


def spy_config(task: str, arg: str | None) -> ml_collections.ConfigDict:
  variants = parse_variants(arg, VARIANTS)

  c = base_config()
  c.env = "spy"  # Which environment plays the steps.
  c.spy = ml_collections.ConfigDict()
  c.spy.task = task  # summarisation | writing | math.
  c.spy.variant = ("sequential" if "sequential" in variants else
                   "no_spy" if "no_spy" in variants else "parallel")  # parallel|sequential|no_spy
  c.spy.games_per_step = 128  # Games per step (paper: 128), one per source document.
  # Unset (None) keys take the defaults of spy.task and spy.variant when the run starts
  # (`rlsvr.envs.spy.config.SpyGameConfig.for_task`), so `--config.spy.variant=sequential`
  # gets the sequential game's settings; set one to override it.
  c.spy.num_players = placeholder(int)  # Players per game (4 summarisation, 5 otherwise).
  c.spy.rollout_n = placeholder(int)  # Detectors per game (paper: 8; math 4).
  # same: every detector reads the players as 1..n (paper); rotated: detector r reads them
  # rotated by r mod n and renumbered, its vote mapped back, so a position preference
  # earns chance in every group (`rlsvr.envs.spy.config.SpyGameConfig`).
  c.spy.detector_orders = "same"
  # game: a game's detectors form one GRPO group (paper); prompt: those reading the same
  # order do, each order normalised by its own spread (`SpyGameConfig.detector_groups`).
  c.spy.detector_groups = "game"
  # independent: each game seats its spy at random (paper); stratified: a step's games seat
  # their spies at every seat equally often, which cancels a position preference within
  # the step with one prompt per game (`rlsvr.envs.spy.config.SpyGameConfig`).
  c.spy.spy_seats = "independent"
  c.spy.mask_fraction = placeholder(float)  # Share of the spy's characters masked.
  c.spy.truncate_words = placeholder(int)  # Inputs cut to their first N words.
  c.spy.rounds = 1  # Times every player writes.
  c.spy.spy_view = placeholder(str)  # masked | none (sequential writing/math).
  c.spy.vote_pick = "last"  # Which \boxed{} is the vote: last | first.
  c.spy.detection_reward = "released" if "released" in variants else "paper"  # paper | released.
  c.spy.beta = 0.1  # Performance reward: spy-vs-civilian coefficient.
  c.spy.lam = 0.1  # Performance reward: civilian-spread coefficient.
  c.spy.baseline_momentum = 0.9  # Role-baseline EMA momentum.
  # pre_update: subtract the EMA from before this step (unbiased); released: update, then
  # subtract (the released code's order; the `released` variant).
  c.spy.baseline_order = "released" if "released" in variants else "pre_update"
  c.spy.training_phase = placeholder(str)  # interactive | clue | decision (no_spy: clue).
  c.spy.cycle_length = 1  # Steps per phase when interactive.
  c.spy.joint = False  # Train players and detectors every step.
  c.spy.player_max_new_tokens = 4096  # Response length (paper: 4096).
  c.spy.detector_max_new_tokens = 4096
  # Start replies with the format marker (`Answer:`, `\boxed{`): for models too small to
  # follow the format instructions; not the paper's setting.
  c.spy.answer_prefill = False
  # The detector's reply is `\boxed{` plus one valid vote, drawn by the sampler from the
  # model's distribution restricted to `1}`..`n}`, `N/A}` (no reasoning); not the paper's.
  c.spy.constrained_vote = False
  # With constrained_vote: whether N/A is one of its answers (`SpyGameConfig.vote_abstain`).
  c.spy.vote_abstain = True
  # The detectors' sampling temperature; unset: sampling.temperature's, as every call's.
  c.spy.detector_temperature = placeholder(float)
  # The players' outputs end after the first of these, e.g. ("\n",): one-line answers.
  c.spy.player_stop_strings = ()
  c.data.source = "bundled" if "bundled" in variants else "hub"
  # 640 Ki cache slots per sampler slice on an 8-GPU node: 16 player rows (P=24576 +
  # N=4096 each), 64 detector rows (8 shared 40k-token prompts + 64 x 4096); more do not
  # fit 80 GB (`python -m rlsvr.plan`).
  c.sampling.max_cache_tokens = 640 * 1024

  if "cpu_long" in variants:
    variants.append("cpu")
  if "detectors" in variants and not {"cpu", "smoke"} & set(variants):
    raise ValueError("`detectors` sizes a CPU run: use it with cpu, e.g. "
                     "configs/spy_summ.py:cpu,detectors")
  long_run = "cpu_long" in variants
  if "cpu" in variants:
    # Sized for minutes on 2 CPU cores: the update over the prompts (rules, document,
    # every player's output) dominates a step, so documents are short (docs/results.md).
    run_locally(c, "smollm2")
    c.data.source = "bundled"
    c.steps = 8  # 4 decision and 4 clue steps.
    c.sampling.temperature = 0.7  # A 135M model writes noticeably better below 1.0.
    c.spy.games_per_step = 2
    # The paper's 8 detectors per game: they share one prompt, so they cost little, and
    # groups of 2 or 4 often voted alike (no spread, nothing learnt).
    c.spy.rollout_n = 8
    c.spy.truncate_words = 80
    c.spy.player_max_new_tokens = 40
    c.spy.detector_max_new_tokens = 32
    # SmolLM2-135M never writes `Answer:` or a `\boxed{}` vote within these budgets by itself
    # (every reward was 0, so GRPO had nothing to learn from); with the markers it does.
    c.spy.answer_prefill = True
    # Even with the prefill its free-form votes copied the prompt's `\boxed{k}` (many invalid
    # per step); restricted to the valid answers, every vote counts.
    c.spy.constrained_vote = True
    # Before/after on 8 held-out games, all in one sampler call per phase.
    c.heldout.size = 8
    c.heldout.per_call = 8
    # A decision step whose detectors all miss (or all hit) has no signal: up to 2 rounds of
    # games are played for groups with spread (DAPO's dynamic sampling).
    c.grpo.filter_groups = True
    c.grpo.max_num_gen_batches = 2
    c.checkpoint.every = 2
    if task == "summarisation" and "reports" not in variants:
      # The summarisation game on ~25-word fact sheets (`rlsvr.data.bundled.fact_sheets`):
      # the reports' games carried nothing a detector could use (docs/results.md).
      c.spy.task = "facts"
      c.spy.truncate_words = 200  # Sheets are never cut.
  if "cpu_long" in variants:
    # 10 decision + 10 clue steps, and a held-out evaluation whose standard error
    # (16 games x 8 votes) can tell a rise from noise.
    c.steps = 20
    c.heldout.size = 16
    c.checkpoint.every = 6
  if "detectors" in variants:
    # The played game whose detectors learn (docs/results.md, "The played game teaches"):
    # the players stay untrained, so this measures whether the game's reward teaches the vote.
    c.steps = 48 if long_run else 24
    c.spy.training_phase = "decision"
    c.spy.games_per_step = 1
    # 256 votes on one game's 4 rotated prompts: a position preference earns chance in every
    # group, and the votes are nearly free next to the update over the prompts.
    c.spy.rollout_n = 256
    c.spy.detector_orders = "rotated"
    c.spy.constrained_vote = True
    c.spy.vote_abstain = False  # With N/A the votes abstained rather than guess.
    c.spy.mask_fraction = 0.4  # The spy's summary misses facts (least-recall rule: ~1.0).
    # Votes draw at 1.0: at 0.7 one number took every vote within a few steps.
    c.spy.detector_temperature = 1.0
    if long_run:  # The 48-step recipe of docs/results.md, players at 0.7.
      c.grpo.lr = 3e-5
      c.grpo.warmup_steps = 12
    else:
      # Players at 0.3, one line each: every civilian restates the sheet (recall 0.99), so
      # only the spy's line differs; at 0.7 one civilian in six wrote something else and the
      # vote read the games slowly (docs/results.md, "Players that copy the sheet").
      c.sampling.temperature = 0.3
      c.spy.player_stop_strings = ("\n",)
      # A cosine decay to 0 by the last step: at a constant rate the vote learnt, then
      # drifted off it by step 24 (docs/results.md, "A decaying learning rate").
      c.grpo.lr = 8e-5
      c.grpo.warmup_steps = 4
      c.grpo.lr_schedule = "cosine"
    # Without the KL to the initial weights the vote drifted onto one number in 1-11 steps
    # at every votes count and warmup tried; at 0.2 it learnt instead.
    c.grpo.kl_coef = 0.2
    c.grpo.remat = False  # The 4 prompts fit in memory whole; remat would only recompute.
    c.grpo.micro_batch_size = 0
    c.grpo.filter_groups = False  # 256 votes always have spread.
    # 16 games x 256 votes: a standard error of ~0.01-0.02 on the before/after accuracy.
    c.heldout.size = 16
    c.heldout.per_call = 16
    c.checkpoint.every = 8 if long_run else 4
  if "smoke" in variants:
    run_locally(c, "random:tiny", tokenizer="qwen3")
    c.data.source = "bundled"
    c.steps = 2
    c.spy.games_per_step = 2
    c.spy.rollout_n = 2
    c.spy.truncate_words = 40
    c.spy.player_max_new_tokens = 8
    c.spy.detector_max_new_tokens = 8
    c.grpo.remat = False
    c.checkpoint.every = 1
  return c
