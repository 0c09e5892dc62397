"""Summarisation suites: ROUGE-L against rouge-score itself, every loader layout."""
import json

import pytest
from rouge_score import rouge_scorer

from rlsvr.eval import summ_suites as ss

from .conftest import shared_path, write_jsonl


def test_rouge_l_matches_rouge_score():
  preds = ["The cats were running quickly to the house.", "Nothing in common.", ""]
  refs = ["A cat runs quickly to the houses.", "Entirely different words here.", "x y"]
  scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
  expected = [100 * scorer.score(r, p)["rougeL"].fmeasure for p, r in zip(preds, refs)]
  got = ss.rouge_l(preds, refs)
  assert got == pytest.approx(expected)
  assert got[0] > 50 and got[1] == 0.0  # stemming matters: "cats"/"cat", "runs"/"running"


def test_rouge_l_scores_chinese_by_characters():
  # rouge-score's own tokenizer drops CJK text entirely: every Chinese pair would score 0.
  assert rouge_scorer.RougeScorer(["rougeL"]).score("会议讨论了预算", "会议讨论预算")[
      "rougeL"].fmeasure == 0.0
  # LCS of 会议讨论了预算 (7 chars) and 会议讨论预算 (6 chars) is 6: F1 = 2*6/(7+6).
  assert ss.rouge_l(["会议讨论了预算"], ["会议 讨论预算"], "zh")[0] == pytest.approx(
      100 * 12 / 13)


def test_clean_drops_thinking():
  assert ss.clean("<think>hmm\nlong</think>\n The summary. ") == "The summary."
  assert ss.clean("<think>never closed") == ""


def test_prompt_keeps_instructions_and_query():
  item = ss.SummItem("1", "DOC", "ref", query="What was decided?")
  p = ss.prompt("qmsum", item)
  assert p.body == "DOC" and "What was decided?" in p.after
  assert "会议" in ss.prompt("vcsum", ss.SummItem("1", "文", "摘要", language="zh")).after


def test_local_layouts(tmp_path):
  mixed = write_jsonl(tmp_path / "mixed.jsonl", [
      {"id": "g1", "dataset": "govreport", "document": "D1", "reference": "R1"},
      {"id": "m1", "dataset": "multinews", "document": "D2", "reference": "R2"}])
  assert [i.id for i in ss.load("govreport", mixed)] == ["g1"]
  longbench = write_jsonl(tmp_path / "lb.jsonl", [{"context": "C", "answers": ["A"], "_id": "x"}])
  assert ss.load("govreport", longbench)[0] == ss.SummItem("x", "C", "A")
  hub_like = write_jsonl(tmp_path / "hub.jsonl", [{"report": "R", "summary": "S"}])
  assert ss.load("govreport", hub_like)[0].reference == "S"


@pytest.mark.parametrize("name, relative", [
    ("govreport", "govreport/govreport_4docs.jsonl"),
    ("multi_news", "multi_news/multinews_representative.jsonl"),
    ("samsum", "samsum/test.jsonl"),
])
def test_shared_plain_loaders(name, relative):
  shared_path(relative)
  items = ss.load(name, limit=2)
  assert len(items) == 2 and all(i.document and i.reference for i in items)


def test_shared_qmsum_expands_queries():
  path = shared_path("qmsum/test.jsonl")
  meeting = json.loads(open(path, encoding="utf-8").readline())
  n = len(meeting["general_query_list"]) + len(meeting["specific_query_list"])
  items = ss.load("qmsum", limit=n)
  assert items[0].query == "Summarize the whole meeting."
  assert items[0].document.startswith(meeting["meeting_transcripts"][0]["speaker"] + ": ")
  assert len({i.document for i in items}) == 1  # one meeting's queries share its transcript


def test_shared_vcsum_is_chinese():
  shared_path("vcsum/short_test.txt")
  item, = ss.load("vcsum", limit=1)
  assert item.language == "zh" and "defi" in item.reference
  assert item.document.startswith("1: ")  # speaker-labelled turns
