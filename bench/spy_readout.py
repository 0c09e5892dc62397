"""How many games does the update need to learn the spy vote: from labels, and from rewards?

  python bench/spy_readout.py --mode label --games 96          # the answer given, as rows
  python bench/spy_readout.py --mode reward --games 96         # the detectors' GRPO reward
  python bench/spy_readout.py --mode reward --set grpo.lr=3e-6 --votes 16
  python bench/spy_readout.py --mode reward --spy-line dropped  # no `*`: a fact is missing
  python bench/spy_readout.py --mode label --spy-line played    # the untrained players' outputs
  python bench/spy_readout.py --games 2 --per-step 1 --eval-games 2 --config configs/spy_summ.py:smoke

The detection phase alone, on idealised games of `--config`'s facts game (those of
`bench/spy_probe.py`, `idealised_players`: the civilians restate the sheet, the spy its
masked copy or, with `--spy-line dropped`, that copy without the masked span, so the
scripted detectors find the spy every time and only the vote has to learn), with the
trainer's own update (`rlsvr.rl.train_step`, `--config`'s `grpo.*`) and no players to
sample. With `--spy-line played` the players play instead, once, with the untrained
weights at the players' sampling (`SpyGame.perform`), and the vote learns from what a
training run's detectors read; the held-out games' scripted ceiling is printed. Each
game is shown in every rotation of the players' order (`spy.detector_orders=rotated`),
so a fixed preferred position earns exactly chance.

- `--mode reward`: per shown order, `--votes` votes drawn from the constrained vote's
  distribution (the model's restricted to `1}`..`n}`, `N/A}` at the detectors' sampling
  temperature, as the sampler draws them and the update scores them), reward 1 for the
  spy; one GRPO group per game. This is the game's decision step without the sampler
  and the players.
- `--mode label`: every answer as a row, reward 1 for the spy's: one group per game,
  so the answer is given, not drawn. How fast the update can learn the readout at all.

Prints, every `--eval-every` steps, the held-out games' (`--eval-games`, one order each)
mean probability of the spy's vote, its accuracy (the most likely answer), the
abstention probability and the largest share of one shown number, with standard errors;
and the update's seconds. `docs/results.md` (spy game) reads them against the probe.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import load_config  # noqa: E402
from spy_probe import idealised_players  # noqa: E402

EVAL_ROWS = 8  # Prompts per forward call: one compiled shape per length bucket.


def _orders(game, reference: str, spy: int, outputs_of, rng, rotations: int):
  """[(prompt ids, the spy's shown number), ...] of one game in `rotations` orders (one:
  a random rotation); `outputs_of(order)` is what the detector reads in that order."""
  from rlsvr.envs.spy import prompts  # noqa: PLC0415
  from rlsvr.envs.spy.mechanics import rotated_order  # noqa: PLC0415

  n = game.config.num_players
  first = int(rng.integers(n)) if rotations == 1 else 0
  orders = []
  for r in range(first, first + rotations):
    order = rotated_order(n, r)  # Shown number k + 1 is player order[k].
    prompt = prompts.detector_prompt(game.config, reference=reference, outputs=outputs_of(order))
    orders.append((game.encode(prompt, game.prefill("detector")), order.index(spy) + 1))
  return orders


def shown_games(game, documents, rng, rotations: int, spy_line: str = "masked"):
  """Per document, the detector prompts of its idealised game in `rotations` orders:
  [(prompt ids, the spy's shown number), ...]."""
  out = []
  for document in documents:
    document, spy, texts = idealised_players(game.config, document, rng, spy_line)
    outputs_of = lambda order, texts=texts: [(1, k + 1, texts[p]) for k, p in enumerate(order)]
    out.append(_orders(game, document, spy, outputs_of, rng, rotations))
  return out


def played_games(game, documents, rng, rotations: int, sample, per_call: int = 16):
  """As `shown_games`, for games whose players played (`SpyGame.perform`, `sample` at the
  players' sampling, `per_call` games a sampler call): the detectors read what the game
  shows them, so the vote learns from the outputs a training run's detectors see. Also
  the scripted detectors' accuracy on each game (`scripted.game_accuracies`)."""
  from rlsvr.envs.spy import scripted  # noqa: PLC0415

  out, ceiling = [], []
  for i in range(0, len(documents), per_call):
    for played in game.perform(documents[i:i + per_call], sample, rng):
      out.append(_orders(game, played.reference, played.spy, played.public_outputs, rng,
                         rotations))
      ceiling.append(scripted.game_accuracies(
          played.reference, played.player_texts(game.config.num_players), played.spy))
  return out, ceiling


def make_vote_probs(model_config, first_tokens, temperature: float, pad_id: int):
  """probs(params, prompts) -> P x A: the constrained vote's distribution over the
  answers (the first token decides each: the rest of `n}`, `N/A}` is forced)."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415

  from rlsvr.model import qwen3  # noqa: PLC0415

  @jax.jit
  def last_logits(params, tokens_BxT, mask_BxT):
    positions_BxT = qwen3.positions_from_mask(mask_BxT)
    hidden_BxTxD, _ = qwen3.forward(model_config, params, tokens_BxT, positions_BxT, mask_BxT)
    return qwen3.unembed(model_config, params, hidden_BxTxD[:, -1:])[:, 0, jnp.array(first_tokens)]

  def probs(params, prompts):
    out = []
    width = -(-max(map(len, prompts)) // 64) * 64
    for i in range(0, len(prompts), EVAL_ROWS):
      chunk = prompts[i:i + EVAL_ROWS]
      tokens = np.full((EVAL_ROWS, width), pad_id, np.int32)
      mask = np.zeros((EVAL_ROWS, width), np.int32)
      for b, ids in enumerate(chunk):  # Left-padded: every prompt ends at the last slot.
        tokens[b, width - len(ids):], mask[b, width - len(ids):] = ids, 1
      mask[len(chunk):, -1] = 1  # Padding rows attend to one slot (no empty softmax).
      z = np.asarray(last_logits(params, tokens, mask), np.float64)[:len(chunk)] / temperature
      z = np.exp(z - z.max(1, keepdims=True))
      out.append(z / z.sum(1, keepdims=True))
    return np.concatenate(out)

  return probs


def make_players_sample(c, model_config, tokenizer, params, seed: int):
  """sample(prompts, **kw) with `params`: the trainer's sampler, a new key each call."""
  import itertools  # noqa: PLC0415

  from rlsvr import seeding  # noqa: PLC0415
  from rlsvr.model.tokenizer import stop_ids  # noqa: PLC0415
  from rlsvr.sampling import Sampler  # noqa: PLC0415

  sampler = Sampler(model_config, eos_ids=stop_ids(model_config, tokenizer), tokenizer=tokenizer,
                    max_rows=c.sampling.max_rows, max_cache_tokens=c.sampling.max_cache_tokens)
  calls = itertools.count()
  return lambda prompts, **kw: sampler(params, prompts,
                                       seed=seeding.derive(seed, "readout", next(calls)), **kw)


def evaluate(probs_fn, params, held_out, n: int) -> dict[str, float]:
  prompts = [ids for ((ids, _),) in held_out]
  shown_spy = np.array([spy for ((_, spy),) in held_out])
  p = probs_fn(params, prompts)
  p_spy = p[np.arange(len(p)), shown_spy - 1]
  hit = (p.argmax(1) == shown_spy - 1).astype(float)
  se = lambda x: float(np.std(x) / np.sqrt(len(x)))
  return {"p_spy": float(p_spy.mean()), "p_spy/se": se(p_spy), "acc": float(hit.mean()),
          "acc/se": se(hit), "p_abstain": float(p[:, n:].sum(1).mean()),
          "top_position_share": float(p[:, :n].mean(0).max() / max(p[:, :n].sum(1).mean(), 1e-9))}


def step_rows(games, probs, choices, mode: str, votes: int, rng, step: int,
              temperature: float):
  """The step's Trajectory rows: one GRPO group per game, each row scored as the
  sampler would have drawn it (over the answers' tokens, at `temperature`)."""
  from rlsvr.rl.rollout import Trajectory  # noqa: PLC0415
  from rlsvr.sampling.choices import allowed_at  # noqa: PLC0415

  rows, i = [], 0
  for g, orders in enumerate(games):
    group = step * 1000 + g
    for ids, shown_spy in orders:
      p = probs[i]
      i += 1
      answers = (range(len(choices)) if mode == "label" else
                 rng.choice(len(choices), size=votes, p=p))
      for a in answers:
        rows.append(Trajectory(
            prompt_ids=list(ids), completion_ids=list(choices[a]),
            logprobs=[float(np.log(max(p[a], 1e-30)))] + [0.0] * (len(choices[a]) - 1),
            reward=float(a == shown_spy - 1), group_id=group, role="detector",
            finish_reason="stop", max_new_tokens=max(map(len, choices)),
            temperature=temperature, allowed_ids=allowed_at(choices, choices[a])))
  return rows


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="configs/spy_summ.py:cpu")
  parser.add_argument("--set", action="append", default=[], help="config key=value")
  parser.add_argument("--mode", choices=("reward", "label"), default="reward")
  parser.add_argument("--games", type=int, default=96, help="training games")
  parser.add_argument("--per-step", type=int, default=4, help="games per update")
  parser.add_argument("--votes", type=int, default=8, help="reward mode: votes per shown order")
  parser.add_argument("--eval-games", type=int, default=64)
  parser.add_argument("--eval-every", type=int, default=4, help="steps")
  parser.add_argument("--spy-line", choices=("masked", "dropped", "played"), default="masked",
                      help="the players' outputs: idealised (the spy's is its masked copy, "
                           "or that copy without the masked span), or played by the "
                           "config's untrained model at the players' sampling")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--json", default=None)
  args = parser.parse_args(argv)

  import jax  # noqa: PLC0415

  from rlsvr import runtime  # noqa: PLC0415
  from rlsvr.data.bundled import fact_sheets  # noqa: PLC0415
  from rlsvr.envs.spy import SpyGame, scripted  # noqa: PLC0415
  from rlsvr.envs.spy.experiment import game_config  # noqa: PLC0415
  from rlsvr.model import sources  # noqa: PLC0415
  from rlsvr.rl.batch import build_batch  # noqa: PLC0415
  from rlsvr.rl.train_step import init_train_state, sampling_params, train_step  # noqa: PLC0415
  from rlsvr.train import grpo_config  # noqa: PLC0415

  runtime.enable_compilation_cache()
  c = load_config(args.config, args.set)
  c.spy.constrained_vote = True
  gcfg = grpo_config(c)
  model_config, params, tokenizer = sources.load_model(
      c.model.source, dtype=c.model.param_dtype, seed=args.seed, tokenizer=c.model.tokenizer)
  state = init_train_state(model_config, gcfg, params, seed=args.seed)
  del params
  game = SpyGame(game_config(c), tokenizer)
  n = game.config.num_players
  choices = game.vote_choices()
  pad_id = tokenizer.pad_token_id or 0
  # The detectors' temperature (`spy.detector_temperature`, else the run's).
  temperature = game.config.sampling_of("detector").get("temperature") or gcfg.temperature
  probs_fn = make_vote_probs(model_config, [ch[0] for ch in choices], temperature, pad_id)

  rng = np.random.default_rng(args.seed)
  # The held-out games first: the same for every --games.
  documents = fact_sheets(args.eval_games + args.games, seed=args.seed + 1)
  if args.spy_line == "played":
    t0 = time.time()
    sample = make_players_sample(c, model_config, tokenizer, sampling_params(state), args.seed)
    held_out, ceiling = played_games(game, documents[:args.eval_games], rng, 1, sample)
    train_games, _ = played_games(game, documents[args.eval_games:], rng, n, sample)
    summary = scripted.summarise(ceiling)
    print(f"played {len(documents)} games in {time.time() - t0:.0f} s; held-out ceiling: "
          + ", ".join(f"{k} {m:.3f} ± {se:.3f}" for k, (m, se) in summary.items()), flush=True)
  else:
    held_out = shown_games(game, documents[:args.eval_games], rng, 1, args.spy_line)
    train_games = shown_games(game, documents[args.eval_games:], rng, n, args.spy_line)
    summary = {}
  multiple = gcfg.updates_per_batch * (c.grpo.micro_batch_size or 1)
  print(f"{args.config} {args.mode}, spy line {args.spy_line}: {args.games} training games x {n} orders, "
        f"{args.per_step} a step, held-out {args.eval_games}; lr {gcfg.lr}, "
        f"prompt {np.mean([len(o[0][0]) for o in held_out]):.0f} tokens", flush=True)

  curve = []

  def report(step, seconds):
    r = evaluate(probs_fn, sampling_params(state), held_out, n)
    r.update(step=step, games=step * args.per_step, update_s=seconds)
    curve.append(r)
    print(f"step {step:3d} games {r['games']:4d} | p(spy) {r['p_spy']:.3f} ± {r['p_spy/se']:.3f}"
          f" | acc {r['acc']:.3f} ± {r['acc/se']:.3f} | p(N/A) {r['p_abstain']:.3f}"
          f" | top position {r['top_position_share']:.2f} | update {seconds:.0f} s", flush=True)

  steps = args.games // args.per_step
  update_s = 0.0
  report(0, update_s)
  for step in range(steps):
    games = train_games[step * args.per_step:(step + 1) * args.per_step]
    prompts = [ids for orders in games for ids, _ in orders]
    probs = probs_fn(sampling_params(state), prompts)
    rows = step_rows(games, probs, choices, args.mode, args.votes, rng, step, temperature)
    batch = build_batch(rows, gcfg, pad_id=pad_id, batch_multiple=multiple,
                        share_prompts=gcfg.share_prompts, pack_tokens=gcfg.pack_tokens)
    t0 = time.time()
    state, _ = train_step(state, batch)
    jax.block_until_ready(state)
    update_s += time.time() - t0
    if (step + 1) % args.eval_every == 0 or step + 1 == steps:
      report(step + 1, update_s)
  result = {"config": args.config, "mode": args.mode, "spy_line": args.spy_line,
            "sets": args.set, "votes": args.votes,
            "per_step": args.per_step, "lr": gcfg.lr,
            "held_out_ceiling": {k: {"mean": m, "se": se} for k, (m, se) in summary.items()},
            "curve": curve}
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)
  return result


if __name__ == "__main__":
  main()
