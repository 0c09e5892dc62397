"""Pairwise A/B: parsing, aggregation with a scripted judge, the HTTP judge on loopback."""
import http.server
import json
import threading

import pytest

from rlsvr.eval import pairwise as pw
from rlsvr.eval import runner

from .conftest import smoke, write_jsonl

SUMM = pw.PairItem("s", "summarisation", "summarise", "doc")
STORY = pw.PairItem("w", "writing", "write", "prompt")


def lines(**verdicts):
  return "Reasoning...\n" + "\n".join(f"{c}: {v}" for c, v in verdicts.items())


def test_parse_judgement():
  text = "overall: B (draft)\n**Novelty**: A\nnovelty: tie\n- overall: A\n"
  assert pw.parse_judgement(text, ("novelty", "overall", "emotion")) == {
      "novelty": "tie", "overall": "A"}  # the last line of each criterion counts
  assert pw.parse_judgement("overall: C", ("overall",)) == {}


def scripted(replies):
  """A judge replying from a function of the prompt (None = transport failure)."""
  def judge(prompts):
    out = []
    for p in prompts:
      text = replies(p)
      out.append(pw.Reply(text, "" if text is not None else "HTTP 503"))
    return out
  return judge


def test_position_bias_averages_to_half():
  records = pw.judge_pairs(scripted(lambda p: lines(overall="A")), [SUMM], ["ours"], ["base"])
  assert records[0]["scores"] == {"overall": 0.5}
  metrics = pw.aggregate(records)
  assert metrics["win_rate"] == 50.0 and metrics["position_consistency"] == 0.0


def test_consistent_preference_and_ties():
  prefer_ours = scripted(lambda p: lines(overall="A" if p.index("OURS") < p.index("BASE") else "B"))
  tie = scripted(lambda p: lines(overall="tie"))
  wins = pw.judge_pairs(prefer_ours, [SUMM, SUMM], ["OURS"] * 2, ["BASE"] * 2)
  ties = pw.judge_pairs(tie, [SUMM], ["OURS"], ["BASE"])
  assert pw.aggregate(wins)["win_rate"] == 100.0
  assert pw.aggregate(wins)["position_consistency"] == 100.0
  assert pw.aggregate(ties)["win_rate"] == 50.0
  assert pw.aggregate(wins + ties)["win_rate"] == pytest.approx(250 / 3)


def test_failures_are_reported_not_dropped():
  calls = iter([None, "no verdict here", lines(overall="A"), None])
  records = pw.judge_pairs(scripted(lambda p: next(calls)), [SUMM, SUMM], ["o", "o"], ["b", "b"])
  assert records[0]["scores"] == {"overall": None}  # both orders failed
  assert records[0]["judgements"][0]["error"] == "HTTP 503"
  assert records[0]["judgements"][1]["error"].startswith("unparseable")
  assert records[1]["scores"] == {"overall": 1.0}  # one valid order: the model first, "A"
  metrics = pw.aggregate(records)
  assert metrics["failures/overall"] == 3 and metrics["judgements"] == 4
  assert metrics["win_rate"] == 100.0  # over the judged item only


def test_writing_criteria():
  assert pw.criteria_of(STORY) == pw.WRITING_CRITERIA
  reply = lines(novelty="A", emotion="B", coherence="tie", consistency="A", overall="A")
  record, = pw.judge_pairs(scripted(lambda p: reply), [STORY], ["o"], ["b"])
  assert record["scores"] == {"novelty": 0.5, "emotion": 0.5, "coherence": 0.5,
                              "consistency": 0.5, "overall": 0.5}
  assert set(pw.aggregate([record])) >= {"win_rate/novelty", "failures/emotion", "win_rate"}
  prompt = pw.judge_prompt(STORY, "first", "second")
  assert all(f"{c}: A, B or tie" in prompt for c in pw.WRITING_CRITERIA)


# ---------------------------------------------------------------- fake OpenAI-compatible server


class FakeServer:
  """Loopback chat-completions server answering from a script of (status, body) replies."""

  MAX_REQUESTS = 50

  def __init__(self, script):
    self.script, self.requests = list(script), []
    owner = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        owner.requests.append((self.path, dict(self.headers), body))
        status, reply = owner.script.pop(0) if owner.script else (500, "script exhausted")
        if status == "hang":
          threading.Event().wait(reply)
          status, reply = 200, ""
        data = (json.dumps({"choices": [{"message": {"content": reply}}]})
                if status == 200 and isinstance(reply, str) and reply and not
                reply.startswith("RAW:") else str(reply).removeprefix("RAW:")).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

      def log_message(self, *args):
        pass

    self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    self.server.timeout = 0.2
    self.stop = threading.Event()
    self.thread = threading.Thread(target=self._loop, daemon=True)
    self.thread.start()
    self.url = f"http://127.0.0.1:{self.server.server_port}/v1"

  def _loop(self):
    # Bounded: at most MAX_REQUESTS requests, and it stops within 0.2 s of close().
    while not self.stop.is_set() and len(self.requests) < self.MAX_REQUESTS:
      self.server.handle_request()

  def close(self):
    self.stop.set()
    self.thread.join(timeout=5)
    self.server.server_close()


@pytest.fixture
def server_factory():
  servers = []
  yield lambda script: servers.append(FakeServer(script)) or servers[-1]
  for s in servers:
    s.close()


def test_http_judge_success_and_request_shape(server_factory):
  server = server_factory([(200, "overall: A")])
  judge = pw.HttpJudge(server.url, "judge-model", "sk-test", retries=0, max_tokens=7)
  assert judge(["hello"]) == [pw.Reply("overall: A")]
  path, headers, body = server.requests[0]
  assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer sk-test"
  assert body == {"model": "judge-model", "messages": [{"role": "user", "content": "hello"}],
                  "max_tokens": 7, "temperature": 0.0}


def test_http_judge_retries_then_succeeds(server_factory):
  server = server_factory([(500, "oops"), (429, "slow down"), (200, "overall: tie")])
  judge = pw.HttpJudge(server.url, "m", retries=2, backoff_s=0.01)
  assert judge.complete("x") == pw.Reply("overall: tie")
  assert len(server.requests) == 3


def test_http_judge_failures(server_factory):
  server = server_factory([(400, "bad request"), (200, "RAW:not json"), (503, "a"), (503, "b")])
  judge = pw.HttpJudge(server.url, "m", retries=1, backoff_s=0.01)
  assert judge.complete("x").error.startswith("HTTP 400")  # not retried
  assert judge.complete("x").error.startswith("malformed reply")
  failed = judge.complete("x")
  assert failed.text is None and "after 2 attempts" in failed.error and "503" in failed.error
  assert len(server.requests) == 4


def test_http_judge_timeout_and_unreachable(server_factory):
  server = server_factory([("hang", 1.0)])
  judge = pw.HttpJudge(server.url, "m", retries=0, timeout_s=0.3)
  assert "after 1 attempts" in judge.complete("x").error
  dead = pw.HttpJudge("http://127.0.0.1:9", "m", retries=1, backoff_s=0.01, timeout_s=1)
  assert dead.complete("x").text is None


def test_http_judge_needs_url_and_model(monkeypatch):
  monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
  monkeypatch.delenv("RLSVR_JUDGE_MODEL", raising=False)
  with pytest.raises(ValueError, match="base URL"):
    pw.HttpJudge()
  monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1/")
  monkeypatch.setenv("RLSVR_JUDGE_MODEL", "env-model")
  judge = pw.HttpJudge()
  assert (judge.base_url, judge.model) == ("http://127.0.0.1:1/v1", "env-model")


def test_pairwise_end_to_end_with_http_judge(tmp_path, server_factory):
  server = server_factory([(200, lines(novelty="A", emotion="A", coherence="A",
                                       consistency="A", overall="A"))] * 4)
  stories = write_jsonl(tmp_path / "wp.jsonl", [
      {"row_id": "1", "prompt": "[ WP ] A dragon learns to knit .", "story": "..."},
      {"row_id": "2", "prompt": "[ WP ] The moon calls .", "story": "..."}])
  c = smoke("eval_pairwise", tmp_path / "out", writingprompts=stories)
  c.judge.kind, c.judge.base_url, c.judge.model = "http", server.url, "fake"
  c.judge.api_key = "sk-secret"
  c.judge.timeout_s, c.judge.retries = 10.0, 0
  results = runner.run(c, c.workdir)
  metrics = results["datasets"]["writingprompts"]["metrics"]
  assert metrics["win_rate"] == 50.0 and metrics["failures/overall"] == 0  # always "A"
  assert len(server.requests) == 4  # 2 items x 2 orders
  # The judge's calls run concurrently: they reach the server in any order.
  sent = [r[2]["messages"][0]["content"] for r in server.requests]
  for prompt in ("A dragon learns to knit", "The moon calls"):
    assert sum(prompt in text for text in sent) == 2  # both orders of each item
  assert "sk-secret" not in (tmp_path / "out" / "results.json").read_text()


def test_pairwise_end_to_end_with_local_judge(tmp_path):
  docs = write_jsonl(tmp_path / "samsum.jsonl", [
      {"id": "1", "dialogue": "A: hi\nB: hello", "summary": "They greet."}])
  c = smoke("eval_pairwise", tmp_path / "out", samsum=docs)
  results = runner.run(c, c.workdir)
  metrics = results["datasets"]["samsum"]["metrics"]
  # A random model cannot produce the verdict lines: every judgement is a reported failure.
  assert metrics["judgements"] == 2 and metrics["failures/overall"] == 2
