"""Prompt datasets of the reward_fn environment: sources, prompts, columns."""
import json

import pytest

from configs.rlvr_math import get_config
from rlsvr.envs.reward_fn import data
from rlsvr.envs.reward_fn.config import RewardFnConfig
from rlsvr.data import sources
from tests.envs.spy.fakes import ASSISTANT, USER, ByteTokenizer

SHARED_GSM8K = sources.shared_data_dir() / "gsm8k" / "test.jsonl"


def _config(source, **reward_fn):
  c = get_config("smoke")
  c.data.source = source
  c.reward_fn.update(reward_fn)
  return c


def _prompts(**fields):
  c = _config("gsm8k", **fields)
  return data.Prompts(RewardFnConfig.from_config(c), ByteTokenizer())


def test_local_jsonl_rows_keep_every_column(tmp_path):
  path = tmp_path / "rows.jsonl"
  rows = [{"prompt": f"q{k}", "answer": str(k), "level": k % 2} for k in range(5)]
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  c = _config(str(path))
  c.data.limit = 3
  assert data.load_rows(c) == rows[:3]


@pytest.mark.skipif(not SHARED_GSM8K.is_file(), reason=f"no shared data at {SHARED_GSM8K}")
def test_shared_gsm8k_rows_have_extracted_answers():
  c = _config("gsm8k")
  c.data.limit = 3
  rows = data.load_rows(c)
  assert len(rows) == 3 and set(rows[0]) == {"question", "answer", "id"}
  assert rows[0]["question"].startswith("Janet")
  assert rows[0]["answer"] == "18"  # "#### 18" already taken apart


@pytest.mark.parametrize("source, says", [
    ("mmlu_pro", "multiple-choice suite"), ("no_such_set", "use a math suite"),
])
def test_unknown_sources_are_refused_by_name(source, says):
  with pytest.raises(ValueError, match=says):
    data.check_source(source)


def test_missing_local_file_says_so(tmp_path):
  with pytest.raises(sources.DataError, match="not found"):
    data.load_rows(_config(str(tmp_path / "absent.jsonl")))


def test_string_prompts_stay_strings_and_the_policy_reads_them_as_a_chat():
  # TRL's form: reward functions see the dataset's string; only the policy's ids are a chat
  # (system turn, then the prompt with its instruction as the user turn).
  p = _prompts(prompt_field="q", instruction="Box it.", system_prompt="Be brief.")
  prompt = p.prompt({"q": "1+1?"})
  assert prompt == "1+1?\n\nBox it."
  assert p.encode(prompt) == [USER, *b"Be brief.", USER, *b"1+1?\n\nBox it.", ASSISTANT]


def test_without_the_chat_template_string_prompts_stay_text():
  p = _prompts(prompt_field="q", instruction="Box it.", use_chat_template=False)
  prompt = p.prompt({"q": "1+1?"})
  assert prompt == "1+1?\n\nBox it."
  assert p.encode(prompt) == list(b"1+1?\n\nBox it.")


def test_message_prompts_get_the_system_turn_first():
  p = _prompts(prompt_field="messages", instruction="", system_prompt="Be brief.")
  row = {"messages": [{"role": "user", "content": "hi"}]}
  assert p.prompt(row) == [{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": "hi"}]


def test_message_prompts_get_the_instruction_on_the_last_user_turn():
  p = _prompts(prompt_field="messages", instruction="Box it.")
  messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
              {"role": "user", "content": "c"}]
  row = {"messages": messages}
  assert p.prompt(row)[-1] == {"role": "user", "content": "c\n\nBox it."}
  assert messages[-1]["content"] == "c"  # the dataset's row is left as it was


def test_encode_applies_the_template_then_the_prefill():
  p = _prompts(prompt_field="q", instruction="", answer_prefill="A: ")
  assert p.encode(p.prompt({"q": "hi"})) == [USER, *b"hi", ASSISTANT, *b"A: "]


@pytest.mark.parametrize("row, says", [({"other": "x"}, "no column 'q'"),
                                       ({"q": 3}, "holds a int")])
def test_bad_prompt_rows_name_the_column(row, says):
  with pytest.raises(ValueError, match=says):
    _prompts(prompt_field="q").prompt(row)


def test_columns_repeat_per_completion_and_leave_out_trl_prompt_columns():
  rows = [{"prompt": "a", "answer": 1}, {"prompt": "b", "answer": 2, "extra": "x"}]
  assert data.columns_of(rows, 2) == {"answer": [1, 1, 2, 2], "extra": [None, None, "x", "x"]}
