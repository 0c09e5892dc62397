"""Data specs: shared folder (with override), local layouts, clear offline failures."""
import json

import pytest

from rlsvr.data import sources


def test_shared_dir_override(monkeypatch, tmp_path):
  monkeypatch.setenv(sources.ENV_VAR, str(tmp_path))
  assert sources.shared_data_dir() == tmp_path
  with pytest.raises(sources.DataError, match=sources.ENV_VAR):
    sources.shared_file("gsm8k/test.jsonl")
  (tmp_path / "gsm8k").mkdir()
  (tmp_path / "gsm8k" / "test.jsonl").write_text('{"a": 1}\n')
  assert sources.load_rows("gsm8k", "", local="gsm8k/test.jsonl", hub=None) == [{"a": 1}]


def test_default_shared_dir_is_next_to_the_repo(monkeypatch):
  monkeypatch.delenv(sources.ENV_VAR, raising=False)
  assert sources.shared_data_dir().parts[-2:] == ("shared", "data")


def test_read_rows_layouts(tmp_path):
  (tmp_path / "a.jsonl").write_text('{"x": 1}\n\n{"x": 2}\n')
  (tmp_path / "b.json").write_text(json.dumps({"name": "bee", "problems": [{"x": 3}]}))
  (tmp_path / "c.csv").write_text('x,y\n4,"a, b"\n')
  (tmp_path / "d.txt").write_text('{"x": 5}\n')
  assert sources.read_rows(tmp_path / "a.jsonl") == [{"x": 1}, {"x": 2}]
  assert sources.read_rows(tmp_path / "b.json") == [{"x": 3}]
  assert sources.read_rows(tmp_path / "c.csv") == [{"x": "4", "y": "a, b"}]
  assert sources.read_rows(tmp_path / "d.txt") == [{"x": 5}]
  (tmp_path / "bad.jsonl").write_text('{"x": 1}\nnot json\n')
  with pytest.raises(sources.DataError, match="line 2"):
    sources.read_rows(tmp_path / "bad.jsonl")
  with pytest.raises(sources.DataError, match="not found"):
    sources.read_rows(tmp_path / "missing.jsonl")


def test_limit_and_missing_sources(tmp_path):
  (tmp_path / "a.jsonl").write_text("".join(f'{{"x": {i}}}\n' for i in range(5)))
  assert len(sources.load_rows("d", str(tmp_path / "a.jsonl"), local=None, hub=None, limit=2)) == 2
  with pytest.raises(sources.DataError, match="data.d"):
    sources.load_rows("d", "", local=None, hub=None)
  with pytest.raises(sources.DataError, match="no hub"):
    sources.load_rows("d", "hub", local=None, hub=None)


def test_hub_fails_clearly_offline(monkeypatch):
  monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  with pytest.raises(sources.DataError, match="Offline"):
    sources.load_rows("gsm8k", "hub:nobody/no-such-dataset-xyz", local=None,
                   hub=sources.HubSource("openai/gsm8k", "main"))


def test_first_field():
  assert sources.first_field({"a": "", "b": 2}, ("a", "b"), "w") == 2
  with pytest.raises(sources.DataError, match="none of the fields"):
    sources.first_field({"c": 1}, ("a", "b"), "w")
