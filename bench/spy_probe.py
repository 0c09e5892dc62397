"""Does the model's own representation of a judge prompt carry who the spy is?

  python bench/spy_probe.py                    # 400 idealised facts games, SmolLM2-135M
  python bench/spy_probe.py --games 8          # seconds (tests)

Builds detector prompts of `--config`'s game (its prompts, players, mask and
constrained vote, encoded exactly as `SpyGame` encodes them) for an idealised
game: the civilians restate the document exactly, the spy restates its masked
copy, so the spy's line shows `*` and the scripted detectors of
`bench/spy_ceiling.py` find it every time. The frozen model (`--model`, an HF
directory, float32) reads each prompt once; logistic-regression probes on its
hidden states, fitted on the first 3/4 of the games and scored on the rest, ask:

- vote position (the last prompt token, where the vote's first token is
  predicted): which player is the spy (4-way with 4 players);
- each player's line end: is this line the spy's (the game's answer is the
  line the probe scores highest).

Then the vote-position probe's accuracy against the number of games it was fitted
on: how many labelled games a linear readout of the frozen model needs, where the
detectors' GRPO gets one reward per vote instead of a label. High probe accuracy
with detectors at chance means the information reaches the vote position and the
training, not the model, is what is missing (docs/results.md, spy game).
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

TRAIN_SIZES = (25, 50, 100, 200, 300)


def idealised_players(config, document: str, rng, spy_line: str = "masked"
                      ) -> tuple[str, int, dict[int, str]]:
  """(the reference, the spy, each player's public output) of an idealised game: the
  civilians restate the document, the spy its masked copy (`spy_line="masked"`), or
  that copy with the masked span left out, no `*` shown ("dropped")."""
  from rlsvr.envs.spy import mechanics  # noqa: PLC0415

  document = mechanics.truncate_words(document, config.truncate_words)
  spy = int(rng.integers(1, config.num_players + 1))
  masked = mechanics.mask_span(document, config.mask_fraction, rng).text
  if spy_line == "dropped":
    masked = " ".join(masked.replace("*", " ").split())
  elif spy_line != "masked":
    raise ValueError(f"spy_line={spy_line!r}: use masked or dropped")
  return document, spy, {p: (masked if p == spy else document).replace("\n", " ")
                         for p in range(1, config.num_players + 1)}


def idealised_games(game, documents, seed: int):
  """(prompt ids, spy, token index of each player's line end) per document."""
  from rlsvr.envs.spy import prompts  # noqa: PLC0415

  config, tokenizer = game.config, game.tokenizer
  rng = np.random.default_rng(seed)
  games = []
  for document in documents:
    document, spy, texts = idealised_players(config, document, rng)
    outputs = [(1, p, texts[p]) for p in range(1, config.num_players + 1)]
    prompt = prompts.detector_prompt(config, reference=document, outputs=outputs)
    ids = game.encode(prompt, game.prefill("detector"))
    # Line ends: the token holding each line's last character (BPE may join it to the
    # newline after it, as Qwen's does with punctuation).
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True,
        **game.chat_template_kwargs) + game.prefill("detector")
    encoded = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    if list(encoded["input_ids"]) != ids:
      raise ValueError("the chat text's tokens differ from the game's prompt ids")
    base = text.index(prompt)
    ends = []
    for p in range(1, config.num_players + 1):
      last = base + prompt.index("\n", prompt.index(f"Player {p}: ")) - 1
      ends.append(next(i for i, (a, b) in enumerate(encoded["offset_mapping"]) if a <= last < b))
    games.append((ids, spy, ends))
  return games


def hidden_states(model, ids, layers):
  import torch  # noqa: PLC0415

  with torch.no_grad():  # Logits of the last position only: the head over all is most of the cost.
    out = model(torch.tensor([ids]), output_hidden_states=True, logits_to_keep=1)
  return {layer: out.hidden_states[layer][0].numpy() for layer in layers}


def fit_probe(x_train, y_train, classes: int, l2: float = 1e-2):
  """Multinomial logistic regression on standardised features (L-BFGS, L2 penalty);
  returns the scoring function (features -> logits)."""
  import torch  # noqa: PLC0415

  mean, std = x_train.mean(0), x_train.std(0) + 1e-6
  x = torch.tensor((x_train - mean) / std, dtype=torch.float32)
  y = torch.tensor(y_train)
  w = torch.zeros(x.shape[1], classes, requires_grad=True)
  b = torch.zeros(classes, requires_grad=True)
  opt = torch.optim.LBFGS([w, b], max_iter=500, line_search_fn="strong_wolfe")

  def closure():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(x @ w + b, y) + l2 * (w ** 2).sum()
    loss.backward()
    return loss

  opt.step(closure)
  w, b = w.detach().numpy(), b.detach().numpy()
  return lambda z: ((z - mean) / std) @ w + b


def accuracy(correct) -> tuple[float, float]:
  """Mean and its standard error."""
  correct = np.asarray(correct, dtype=float)
  return float(correct.mean()), float(correct.std() / np.sqrt(len(correct)))


def probe(vote_x, line_x, spies, num_train: int, num_test_from: int):
  """Accuracies on games [num_test_from:] of probes fitted on games [:num_train]."""
  players = line_x.shape[1]
  test = slice(num_test_from, None)
  vote = fit_probe(vote_x[:num_train], spies[:num_train] - 1, players)
  vote_acc = accuracy(vote(vote_x[test]).argmax(1) + 1 == spies[test])
  is_spy = (np.arange(1, players + 1)[None] == spies[:, None]).astype(int)
  line = fit_probe(line_x[:num_train].reshape(-1, line_x.shape[2]),
                   is_spy[:num_train].reshape(-1), 2)
  z = line(line_x[test].reshape(-1, line_x.shape[2]))
  line_acc = accuracy((z[:, 1] - z[:, 0]).reshape(-1, players).argmax(1) + 1 == spies[test])
  return vote_acc, line_acc


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="configs/spy_summ.py:cpu")
  parser.add_argument("--model", default=None,
                      help="HF model directory (default: the cached SmolLM2-135M-Instruct)")
  parser.add_argument("--games", type=int, default=400)
  parser.add_argument("--layers", default="6,12,18,24,30",
                      help="hidden-state indices (0 = embeddings); clipped to the model's")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--json", default=None)
  args = parser.parse_args(argv)

  import torch  # noqa: PLC0415
  import transformers  # noqa: PLC0415

  from rlsvr.data.bundled import BUNDLED, fact_sheets  # noqa: PLC0415
  from rlsvr.envs.spy import SpyGame  # noqa: PLC0415
  from rlsvr.envs.spy.experiment import game_config  # noqa: PLC0415
  from rlsvr.model import assets  # noqa: PLC0415

  torch.manual_seed(args.seed)
  config = game_config(load_config(args.config))
  model_dir = args.model or str(assets.smollm2_135m())
  tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
  model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
  num_layers = model.config.num_hidden_layers
  layers = sorted({min(int(k), num_layers) for k in args.layers.split(",")})
  if config.task == "facts":  # Unlimited distinct documents, seeded apart from the corpus.
    documents = fact_sheets(args.games, seed=args.seed + 1)
  else:
    corpus = BUNDLED[config.task]
    documents = [corpus[i % len(corpus)] for i in range(args.games)]
  games = idealised_games(SpyGame(config, tokenizer), documents, args.seed)

  start = time.time()
  vote_x = {layer: [] for layer in layers}
  line_x = {layer: [] for layer in layers}
  for i, (ids, _, ends) in enumerate(games):
    states = hidden_states(model, ids, layers)
    for layer in layers:
      vote_x[layer].append(states[layer][-1])
      line_x[layer].append(states[layer][ends])
    if (i + 1) % 50 == 0:
      print(f"{i + 1}/{len(games)} prompts read, {time.time() - start:.0f} s", flush=True)
  spies = np.array([spy for _, spy, _ in games])
  num_train = (3 * len(games)) // 4
  result = {"games": len(games), "test_games": len(games) - num_train,
            "chance": 1 / config.num_players, "prompt_tokens": float(np.mean([len(g[0]) for g in games])),
            "layers": {}, "vote_probe_by_train_games": {}}
  print(f"\n{args.config}, {model_dir}: {len(games)} idealised games, probes fitted on "
        f"{num_train}, scored on {len(games) - num_train} (chance {result['chance']:.2f})")
  print(f"{'layer':>5}  {'vote position':>15}  {'line ends':>15}")
  for layer in layers:
    v, l = probe(np.array(vote_x[layer]), np.array(line_x[layer]), spies, num_train, num_train)
    result["layers"][layer] = {"vote_probe": v[0], "vote_probe/se": v[1],
                               "line_probe": l[0], "line_probe/se": l[1]}
    print(f"{layer:5d}  {v[0]:.3f} ± {v[1]:.3f}  {l[0]:.3f} ± {l[1]:.3f}")
  best = max(layers, key=lambda k: result["layers"][k]["vote_probe"])
  print(f"\nvote-position probe, layer {best}, against the games it was fitted on:")
  for n in [n for n in TRAIN_SIZES if n < num_train] + [num_train]:
    v, _ = probe(np.array(vote_x[best]), np.array(line_x[best]), spies, n, num_train)
    result["vote_probe_by_train_games"][n] = {"acc": v[0], "se": v[1]}
    print(f"{n:5d} games: {v[0]:.3f} ± {v[1]:.3f}")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)


if __name__ == "__main__":
  main()
