"""Settings shared by the evaluation configs (`eval_*.py`); not a runnable config itself.

Variants (comma-separated after the file, e.g. `configs/eval_math.py:smoke`):
  (none)   the paper's model, full datasets
  cpu      SmolLM2-135M-Instruct on the CPU, 20 items per dataset, short answers
  smoke    tiny random Qwen3 with the real Qwen3 tokenizer, 2 items, 8 tokens (tests)
"""
import ml_collections

from configs.base import parse_variants

VARIANTS = ("cpu", "smoke")


def eval_config(suite: str, datasets: tuple[str, ...], arg: str | None, *,
                model: str = "hub:Qwen/Qwen3-4B-Instruct-2507",
                max_new_tokens: int = 1024) -> ml_collections.ConfigDict:
  variants = parse_variants(arg, VARIANTS)
  c = ml_collections.ConfigDict()
  c.suite = suite  # math | summ | pairwise | rlsr.
  # A model source ("smollm2", "hub:<org/name>", "random:<preset>", an HF directory) or a
  # training run (its workdir or checkpoints/ folder; tokenizer from the run's config).
  c.model = model
  c.tokenizer = ""  # "" : the model's own; "qwen3": the offline Qwen3 tokenizer.
  c.step = 0  # Checkpoint step of a training run; 0: the latest.
  c.dtype = "bfloat16"  # float32 | bfloat16.
  c.seed = 0  # Random-init sources, sampling, GPQA option order, gap perturbations.
  c.datasets = ",".join(datasets)  # Comma-separated; each has a data.<name> spec below.
  # Per dataset: "" (shared data folder, $RLSVR_DATA or ../shared/data), "hub",
  # "hub:<org/name>[:config]", or a local file.
  c.data = ml_collections.ConfigDict({name: "" for name in datasets})
  c.limit = 0  # First N items per dataset; 0: all.
  c.samples = 1  # Responses per item; accuracy is pass@1 averaged over them.
  c.batch_size = 16  # Items per generation batch (and per cache flush).
  c.max_prompt_tokens = 8192  # Longer documents are cut to fit (instructions are kept).
  c.sampling = ml_collections.ConfigDict()
  c.sampling.max_new_tokens = max_new_tokens
  c.sampling.temperature = 0.0  # 0: greedy.
  c.sampling.top_p = 1.0
  c.scoring_timeout_s = 10.0  # Per math-verify comparison / SymPy verification.
  c.judge = ml_collections.ConfigDict()
  c.judge.kind = "local"  # local (our sampler) | http (OpenAI-compatible endpoint).
  # local: a model source ("" : the evaluated model judges); http: the endpoint's model
  # name ("" : $RLSVR_JUDGE_MODEL).
  c.judge.model = ""
  c.judge.tokenizer = ""
  c.judge.base_url = ""  # http: e.g. http://localhost:8000/v1 ("" : $OPENAI_BASE_URL).
  c.judge.api_key = ""  # http: "" : $OPENAI_API_KEY. Never written to results.json.
  c.judge.timeout_s = 60.0  # http: per request.
  c.judge.retries = 3  # http: retries of transport errors, 429 and 5xx.
  c.judge.backoff_s = 1.0  # http: first retry delay, doubled each retry.
  c.judge.workers = 4  # http: concurrent requests.
  c.judge.max_new_tokens = 1024
  c.judge.temperature = 0.0
  c.judge.template = 1  # RLSR Countdown judge prompt strictness 1..4.
  c.workdir = ""  # --workdir wins; "" : runs/eval_<suite>.
  c.baseline = ""  # An earlier results.json (or its folder) to compare against.
  c.progress = True  # tqdm progress bars.

  if "cpu" in variants:
    c.model = "smollm2"
    c.dtype = "float32"
    c.limit = 20
    c.batch_size = 8
    c.max_prompt_tokens = 2048
    c.sampling.max_new_tokens = 256
    c.judge.max_new_tokens = 128
  if "smoke" in variants:
    c.model = "random:tiny"
    c.tokenizer = "qwen3"
    c.dtype = "float32"
    c.limit = 2
    c.batch_size = 4
    c.max_prompt_tokens = 512
    c.sampling.max_new_tokens = 8
    c.judge.max_new_tokens = 8
    c.progress = False
  return c
