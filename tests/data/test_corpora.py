"""Tests for rlsvr.data.corpora: bundled, local files, hub errors (offline)."""
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlsvr.data import TASK_SOURCES, CorpusError, Document, bundled_corpus, load_corpus, load_local

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data")


def test_task_sources_match_the_paper():
  assert TASK_SOURCES["summarisation"].name == "ccdv/govreport-summarization"
  assert TASK_SOURCES["summarisation"].field == "report"
  assert (TASK_SOURCES["writing"].name, TASK_SOURCES["writing"].field) == (
      "euclaise/writingprompts", "prompt")
  math = TASK_SOURCES["math"]
  assert (math.name, math.config, math.field) == ("nvidia/Nemotron-CC-Math-v1", "3", "text")


def test_bundled():
  docs = list(load_corpus("math", limit=3))
  assert docs == bundled_corpus("math")[:3]
  assert docs[0] == Document("math-0", docs[0].text)
  with pytest.raises(CorpusError, match="poetry"):
    bundled_corpus("poetry")
  with pytest.raises(CorpusError, match="unknown task"):
    load_corpus("poetry")


def test_local_jsonl_json_parquet(tmp_path):
  rows = [{"id": "a", "body": "first"}, {"body": "second"}, {"id": 7, "body": "third"}]
  jsonl = tmp_path / "c.jsonl"
  jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
  as_json = tmp_path / "c.json"
  as_json.write_text(json.dumps(rows))
  parquet = tmp_path / "c.parquet"
  pq.write_table(pa.Table.from_pylist([{"id": "x", "body": "p1"}, {"id": "y", "body": "p2"}]),
                 parquet)
  expected = [Document("a", "first"), Document("1", "second"), Document("7", "third")]
  assert list(load_local(str(jsonl), "body")) == expected
  assert list(load_corpus("writing", str(as_json), field="body")) == expected
  assert list(load_corpus("summarisation", str(parquet), field="body", limit=1)) == [
      Document("x", "p1")]


def test_local_errors_name_the_problem(tmp_path):
  path = tmp_path / "c.jsonl"
  path.write_text(json.dumps({"text": "x"}) + "\n" + json.dumps({"text": 3}) + "\nnot json\n")
  with pytest.raises(CorpusError, match=r"row 0 has no field 'prompt'; fields are \['text'\]"):
    list(load_corpus("writing", str(path)))
  with pytest.raises(CorpusError, match="field 'text' of row 1 is int"):
    list(load_local(str(path), "text"))
  bad = tmp_path / "bad.jsonl"
  bad.write_text(json.dumps({"text": "x"}) + "\n\nnot json\n")
  with pytest.raises(CorpusError, match="line 3 is not JSON"):
    list(load_local(str(bad), "text"))
  with pytest.raises(CorpusError, match="not found: .*missing.jsonl"):
    list(load_local(str(tmp_path / "missing.jsonl"), "text"))
  (tmp_path / "c.csv").write_text("text\nx\n")
  with pytest.raises(CorpusError, match="unsupported"):
    list(load_local(str(tmp_path / "c.csv"), "text"))


def test_hub_failure_names_the_dataset():
  # conftest sets HF_DATASETS_OFFLINE=1, so loading fails at once.
  with pytest.raises(CorpusError, match="nvidia/Nemotron-CC-Math-v1.*config '3'"):
    next(load_corpus("math", "hub"))
  with pytest.raises(CorpusError, match="someone/not-a-dataset"):
    next(load_corpus("writing", "someone/not-a-dataset"))


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="../shared/data is absent")
def test_shared_govreport_and_writingprompts():
  reports = list(load_corpus("summarisation", os.path.join(SHARED, "govreport",
                                                           "govreport_4docs.jsonl"),
                             field="document"))
  assert len(reports) == 4 and all(len(d.text.split()) > 100 for d in reports)
  prompts = list(load_corpus("writing", os.path.join(SHARED, "writingprompts",
                                                     "writingprompts_100.jsonl"), limit=5))
  assert len(prompts) == 5 and all(d.text for d in prompts)
