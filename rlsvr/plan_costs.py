"""What each part of a training step costs in device memory: the planner's arithmetic.

Exact: parameter bytes from the parameter table's rule (`rlsvr.model.params`) on an abstract mesh, KV caches
from the sampler's buckets. Estimates (marked so in the plan): prompt lengths and
activations. Attention is blocked (`rlsvr.model.attention`): its working set is
rows x heads x block x S, never T x S. `rlsvr.plan` assembles these into a plan.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import os

from rlsvr.model.config import PRESETS, ModelConfig, preset

MESH_AXES = ("data", "fsdp", "tensor")  # As rlsvr.parallel (imported lazily: it imports jax).
_HUB_PRESETS = {f"qwen/{name}": name for name in PRESETS}  # "hub:Qwen/Qwen3-8B" -> qwen3-8b
# Hub models the configs name that have no preset: their config.json, transcribed.
_KNOWN = {
    "qwen/qwen2.5-7b-instruct": ModelConfig(
        model_type="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944,
        num_layers=28, num_heads=28, num_kv_heads=4, head_dim=128, tie_word_embeddings=False,
        qk_norm=False, qkv_bias=True, max_position_embeddings=32768),
    "smollm2": ModelConfig(
        model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
        num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64, tie_word_embeddings=True,
        qk_norm=False, rope_theta=100000.0, max_position_embeddings=8192)}


def model_config_of(source: str) -> ModelConfig:
  """The architecture of a `model.source`, offline (presets, known hub names, config.json)."""
  if source in _KNOWN:
    return _KNOWN[source]
  if source.startswith("random:"):
    name = source.split(":", 1)[1]
    if name == "tiny":
      from rlsvr.model.sources import TINY_QWEN3  # noqa: PLC0415 (imports jax)
      return TINY_QWEN3
    return preset(name)
  if source.startswith("hub:"):
    repo = source.split(":", 1)[1]
    try:  # The HF cache, when the model was downloaded before; never the network.
      import huggingface_hub  # noqa: PLC0415
      cached = huggingface_hub.try_to_load_from_cache(repo, "config.json")
    except Exception:  # noqa: BLE001 (an unreadable cache is just a miss)
      cached = None
    if isinstance(cached, str):
      return ModelConfig.from_hf_dir(os.path.dirname(cached))
    if repo.lower() in _HUB_PRESETS or repo.lower() in _KNOWN:
      return _KNOWN.get(repo.lower()) or preset(_HUB_PRESETS[repo.lower()])
    raise ValueError(f"model.source={source!r}: architecture unknown offline; use random:<preset> "
                     f"(one of {sorted(_HUB_PRESETS.values())}) or a local HF directory")
  if os.path.isfile(os.path.join(os.path.expanduser(source), "config.json")):
    return ModelConfig.from_hf_dir(os.path.expanduser(source))
  raise ValueError(f"model.source={source!r} is not a preset, a known hub name or an HF directory")



@functools.lru_cache(maxsize=None)
def _param_elems(config: ModelConfig, sizes: tuple[int, ...], lora=None) -> dict[str, int]:
  """Per-device parameter elements by sharding axes ("" = replicated), by
  `rlsvr.model.params.spec_for`; of the LoRA adapters alone with `lora` (a LoraConfig)."""
  import jax  # noqa: PLC0415
  from rlsvr.model import lora as lora_lib, params as params_lib, qwen3  # noqa: PLC0415

  mesh, elems = jax.sharding.AbstractMesh(sizes, MESH_AXES), {}
  tree = qwen3.abstract_params(config) if lora is None else jax.eval_shape(
      lambda key: lora_lib.init_adapters(config, lora, key), jax.random.key(0))
  for path, leaf in params_lib.flatten(tree).items():
    spec = params_lib.spec_for(path, leaf.shape, mesh)
    axes = [a for entry in spec if entry for a in (entry if isinstance(entry, tuple) else (entry,))]
    key = "·".join(f"{a}{mesh.shape[a]}" for a in axes)
    elems[key] = elems.get(key, 0) + leaf.size // math.prod(mesh.shape[a] for a in axes)
  return elems


def param_bytes(config: ModelConfig, sizes: dict[str, int], itemsize: int,
                lora=None) -> tuple[int, str]:
  """Per-device bytes of one copy of the parameters (with `lora`: of its adapters), and
  how they are sharded."""
  elems = _param_elems(config, tuple(sizes[a] for a in MESH_AXES), lora)
  total = sum(elems.values())
  return total * itemsize, ", ".join(f"{axes or 'replicated'} {100 * n / total:.3g}%" for axes, n
                                     in sorted(elems.items(), key=lambda kv: -kv[1]))


@dataclasses.dataclass(frozen=True)
class Estimates:
  """Assumptions behind the prompt lengths; every one is printed with the plan."""

  tokens_per_word: float = 1.4  # English prose under the Qwen / Llama tokenizers.
  template_tokens: int = 512  # Instructions and chat template around a prompt's content.
  output_tokens: int = 0  # A game player's public output in later prompts; 0: the max length.
  prompt_tokens: tuple[tuple[str, int], ...] = ()  # Overrides per sampler call, by name.


@dataclasses.dataclass(frozen=True)
class Component:
  phase: str  # "resident" (always held) or the phase it belongs to.
  name: str
  bytes: int  # Per device.
  sharding: str
  estimate: bool = False


def sampler_bucket(n: int, kind: str) -> int:
  """The padded size the sampler compiles for ("batch", "prompt" or "new_tokens")."""
  from rlsvr.sampling.layout import Buckets  # noqa: PLC0415

  return Buckets.pick(n, getattr(Buckets(), kind), kind)


def batch_bucket(n: int) -> int:
  """The padded prompt / completion length of a train batch (`rlsvr.rl.batch`)."""
  from rlsvr.sampling.layout import length_bucket  # noqa: PLC0415

  return length_bucket(n)


def _split(n: int, size: int) -> int:  # A dimension is split only when the axis divides it.
  return n // size if size > 1 and n % size == 0 else n


def _layer_terms(m: ModelConfig, t: int):
  """Per-token, per-layer activation elements (linear part) and attended heads, on tensor=t."""
  h, k, f = _split(m.num_heads, t), _split(m.num_kv_heads, t), _split(m.intermediate_size, t)
  return 4 * m.hidden_size + 4 * h * m.head_dim + 6 * k * m.head_dim + 4 * f, h


def train_activations(m: ModelConfig, rows: int, seq: int, completion: int, cb: int, *,
                       remat: bool, t: int, chunk: int, block: int) -> int:
  """Estimated activation bytes of one micro-batch's forward + backward on one device.

  Blocked attention keeps no scores for the backward pass; one block's fp32 scores,
  compute-dtype probabilities and, in the backward, two fp32 cotangents exist at a
  time. Remat keeps only layer inputs. The KL reference forward runs layer by layer
  before the backward: no extra peak.
  """
  lin, heads = _layer_terms(m, t)
  saved = rows * seq * lin * cb
  work = saved + rows * heads * min(block, seq) * seq * (12 + cb)  # One layer's backward.
  layers = m.num_layers * rows * seq * m.hidden_size * cb if remat else m.num_layers * saved
  logits = 4 * rows * chunk * _split(m.vocab_size, t) + rows * (completion + 1) * m.hidden_size
  return layers + work + 4 * logits  # Four fp32 logit chunks alive; fp32 hidden window.


def sample_phase(name, rows, prompt, new, m: ModelConfig, pb: int, nb: int, t: int,
                 gathered: int, block: int, *, max_rows: int = 0, max_cache_tokens: int = 0,
                 per_prompt: int = 1) -> list[Component]:
  """One slice of a sampler call (`rlsvr.sampling.layout`, as the sampler cuts it): its KV
  cache (exact), the larger of the prefill's working set and the prefix's split into
  per-layer arrays, and the per-layer copy of the weights the decode loop reads (all
  estimates but the cache).

  `per_prompt` rows continue each prompt (GRPO group, detectors): the sampler keeps one
  prompt prefix per prompt when a slice holds whole groups and the prompts split over
  the mesh at least as well as the rows.
  """
  from rlsvr.sampling import layout  # noqa: PLC0415 (rlsvr.sampling imports jax)

  per_device = lambda x: _split(x, nb)
  k = layout.slice_rows(rows, per_prompt, prompt, new, max_rows=max_rows,
                        max_cache_tokens=max_cache_tokens, share=True, rows_per_device=per_device)
  r, u, b = layout.layout(k, per_prompt, True, per_device)
  p, n = sampler_bucket(prompt, "prompt"), sampler_bucket(new, "new_tokens")
  bd, ud, kd = _split(b, nb), _split(u, nb), _split(m.num_kv_heads, t)
  how = (f"batch/{nb} (data·fsdp)" if bd < b else "batch whole") + (
      f", kv heads/{t}" if kd < m.num_kv_heads else "")
  calls = f", {-(-rows // k)} slices" if k < rows else ""
  shared = f", {u} prompts x {r}" if r > 1 else ""
  phase = f"sample: {name} (B={b}{shared}{calls}, P={p}, N={n})"
  lin, heads = _layer_terms(m, t)
  per_slot = 2 * m.num_layers * kd * m.head_dim * pb
  prefix, kv = per_slot * ud * p, per_slot * (ud * p + bd * n)
  prefill = ud * p * (lin * pb + 2 * m.hidden_size * 4) + ud * heads * min(block, p) * p * (8 + pb)
  layers = (m.num_params() - m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2))
  head = 0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size  # Transposed untied head.
  gather = [Component(phase, "FSDP-gathered embedding + one layer", gathered * pb, "whole", True)]
  return [Component(phase, f"KV cache 2 x L{m.num_layers} x K x Dh x (U x P + B x N)", kv, how),
          Component(phase, "max(prefill layer, prefix split per layer)",
                    max(prefill, prefix), how, estimate=True),
          Component(phase, "weights laid out for the decode loop (layers, untied head)",
                    (layers + head) * pb // max(nb * t, 1), "as the params", estimate=True),
          ] + (gather if gathered else [])
