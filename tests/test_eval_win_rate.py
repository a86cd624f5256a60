"""Win rate: judges (HTTP on 127.0.0.1 only, local reward model, log-likelihood) and plumbing."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest
from test_eval_support import TinyProfile, make_split, records, tiny_gpt2

from benchmark.artifact import Artifact
from benchmark.evaluation.base import EvalContext, evaluate
from benchmark.evaluation.judge_templates import TEMPLATES, parse_verdict
from benchmark.evaluation.judges import (
    ContextPMIJudge,
    HTTPJudge,
    LocalLLMJudge,
    LogLikelihoodJudge,
    RewardModelJudge,
    VerdictJudge,
    judge_generator,
    make_judge,
)


class JudgeServer:
    """An OpenAI-compatible endpoint on 127.0.0.1 that prefers the answer saying 'good'.

    With ``mode="always_a"`` it answers "A" regardless (pure position bias), with
    ``mode="garbage"`` it answers something unparseable.
    """

    def __init__(self, mode: str = "content") -> None:
        self.mode, self.requests = mode, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, self.headers.get("Authorization"), body))
                text = body["messages"][0]["content"]
                a, b = re.search(r"Answer A:\n(.*)\n\nAnswer B:\n(.*)\n\n", text, re.S).groups()
                verdict = {"always_a": "A", "garbage": "I cannot decide"}.get(
                    outer.mode, "A" if "good" in a else "B."
                )
                reply = {"choices": [{"message": {"role": "assistant", "content": verdict}}]}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server_factory():
    servers = []

    def make(mode="content"):
        servers.append(JudgeServer(mode))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def test_parse_verdict():
    assert [parse_verdict(x) for x in ("A", " b.", "**B**", "A) because", "Answer: A", "")] == [
        "A",
        "B",
        "B",
        "A",
        None,
        None,
    ]


def test_http_judge_sees_content_through_position_randomisation(server_factory, monkeypatch):
    server = server_factory()
    monkeypatch.setenv("JUDGE_KEY", "secret")
    judge = HTTPJudge(server.url, model="judge-model", api_key_env="JUDGE_KEY", seed=1)
    n = 20
    a = ["a good answer"] * 10 + ["a poor answer"] * 10
    b = ["a poor answer"] * 10 + ["a good answer"] * 10
    verdicts = judge.compare(["q"] * n, a, b)
    assert verdicts.tolist() == [1.0] * 10 + [0.0] * 10
    path, auth, body = server.requests[0]
    assert path == "/v1/chat/completions" and auth == "Bearer secret"
    assert body["model"] == "judge-model" and body["temperature"] == 0
    assert "secret" not in json.dumps(judge.settings())
    # Both presentation orders were used, so a position-biased judge cannot fake a winner.
    shown_first = [
        re.search(r"Answer A:\n(.*)\n\n", r[2]["messages"][0]["content"]).group(1)
        for r in server.requests[:10]
    ]
    assert set(shown_first) == {"a good answer", "a poor answer"}


def test_position_bias_and_parse_failures_are_neutralised(server_factory):
    biased = HTTPJudge(server_factory("always_a").url, model="m", seed=0)
    assert abs(biased.compare(["q"] * 200, ["x"] * 200, ["y"] * 200).mean() - 0.5) < 0.1
    broken = HTTPJudge(server_factory("garbage").url, model="m")
    assert broken.compare(["q"] * 3, ["x"] * 3, ["y"] * 3).tolist() == [0.5] * 3
    assert broken.parse_failures == 3


@pytest.fixture(scope="module")
def profile():
    corpus = ["the cat sat on the mat.", "the dog ran in the park.", "what is the answer?"]
    return TinyProfile(corpus * 5)


def test_loglik_judge_prefers_the_response_the_generator_finds_likelier(profile):
    gen = profile.generator()
    judge = LogLikelihoodJudge(gen)
    prompts, a, b = ["the cat"] * 2, [" sat on the mat.", " mat the on sat."], [" dog", " the cat"]
    scores_a, scores_b = judge.score(prompts, a), judge.score(prompts, b)
    want = np.where(scores_a > scores_b, 1.0, 0.0)
    assert judge.compare(prompts, a, b).tolist() == want.tolist()
    assert (judge.compare(prompts, a, b) + judge.compare(prompts, b, a)).tolist() == [1.0, 1.0]
    n_tokens = len(gen.tokenizer(a[0], add_special_tokens=False)["input_ids"])
    assert scores_a[0] == pytest.approx(gen.logprobs(prompts[:1], a[:1])[0] / n_tokens)


def test_pmi_judge_scores_what_the_prompt_adds_to_the_response(profile):
    gen = profile.generator()
    judge = ContextPMIJudge(gen, null_prompt="\n\nHuman: ")
    prompts, responses = ["the cat sat on", "in the beginning"], [" the mat.", " the mat."]
    want = gen.logprobs(prompts, responses) - gen.logprobs(["\n\nHuman: "] * 2, responses)
    np.testing.assert_allclose(judge.score(prompts, responses), want)
    # the same response scores differently under different prompts; loglik's length
    # normalisation is not involved, and a prompt that explains nothing scores 0
    assert judge.score(prompts, responses)[0] != judge.score(prompts, responses)[1]
    assert judge.score(["\n\nHuman: "], [" the mat."])[0] == pytest.approx(0.0, abs=1e-9)
    assert make_judge({"type": "pmi"}, gen, 0).settings() == {"judge": "pmi", "null_prompt": ""}


def test_a_judge_reads_the_named_model_or_else_the_profiles_generator(profile):
    """``lm`` picks a judge LM by name (never silently the profile's own); judges that
    read no LM get none."""
    assert judge_generator({"type": "pmi"}, profile) is profile.generator()
    assert judge_generator({"type": "http", "url": "u", "model": "m"}, profile) is None
    with pytest.raises(ValueError, match="unknown judge model 'smollm2'"):
        judge_generator({"type": "pmi", "lm": "smollm2"}, profile)
    gen = profile.generator()
    judge = make_judge({"type": "pmi", "null_prompt": "x", "lm": "gemma-3-270m"}, gen, 0)
    assert isinstance(judge, ContextPMIJudge) and judge.generator is gen


def test_batched_logprobs_equal_one_row_at_a_time(profile):
    """Length-sorted batches with logits kept only at completion positions score each row
    as a batch of one does, in the caller's order."""
    gen = profile.generator()
    prompts = ["the cat sat on the mat and", "a", "the dog", "in the beginning the cat"]
    completions = [" ran.", " the cat sat on the mat.", "", " sat"]
    batched = gen.logprobs(prompts, completions)
    size, gen.batch_size = gen.batch_size, 1
    try:
        alone = gen.logprobs(prompts, completions)
    finally:
        gen.batch_size = size
    assert batched[2] == 0.0
    np.testing.assert_allclose(batched, alone, rtol=1e-5, atol=1e-4)


def test_local_llm_judge_answers_the_likelier_letter_and_undoes_the_shuffle(profile):
    gen = profile.generator()
    judge = LocalLLMJudge(gen, seed=0)
    prompts = ["judge this: the cat sat.", "judge this: the dog ran.", "which one?"]
    letter_a, letter_b = gen.logprobs(prompts, ["A"] * 3), gen.logprobs(prompts, ["B"] * 3)
    want = ["A" if la > lb else "B" for la, lb in zip(letter_a, letter_b, strict=True)]
    assert judge.verdicts(prompts) == want
    # A judge that always names the first answer wins exactly where nothing was swapped.
    judge.verdicts = lambda shown: ["A"] * len(shown)
    swap = np.random.default_rng(0).random(8) < 0.5
    assert judge.compare(["q"] * 8, ["x"] * 8, ["y"] * 8).tolist() == (~swap).astype(float).tolist()


def test_reward_model_judge_loads_a_local_model(profile, tmp_path):
    from transformers import GPT2Config, GPT2ForSequenceClassification

    config = GPT2Config(
        vocab_size=len(profile.tokenizer),
        n_layer=1,
        n_embd=32,
        n_head=2,
        n_positions=64,
        num_labels=1,
        pad_token_id=0,
    )
    GPT2ForSequenceClassification(config).save_pretrained(tmp_path)
    profile.tokenizer.save_pretrained(tmp_path)
    judge = RewardModelJudge(str(tmp_path), batch_size=2)
    prompts, a, b = ["q"] * 3, ["the cat", "a dog ran", "what"], ["the mat", "park", "is it"]
    scores_a, scores_b = judge.score(prompts, a), judge.score(prompts, b)
    assert np.all(scores_a != scores_b)
    assert judge.compare(prompts, a, b).tolist() == (scores_a > scores_b).astype(float).tolist()
    assert judge.score(prompts[:1], a[:1])[0] == pytest.approx(scores_a[0], abs=1e-5)


def test_win_rate_metric_end_to_end(profile, server_factory, tmp_path):
    model = tiny_gpt2(len(profile.tokenizer), seed=0)
    model.save_pretrained(tmp_path / "released")
    split = make_split([], [], [])
    split.parts["test"] = [
        {**r, "prompt": f"question {i}?", "chosen": "a good answer"}
        for i, r in enumerate(records(["x"] * 6, "test"))
    ]
    ctx = EvalContext(split=split, profile=profile, work_dir=tmp_path)
    server = server_factory()
    spec = {
        "name": "win_rate",
        "max_new_tokens": 4,
        "judge": {"type": "http", "url": server.url, "model": "m"},
    }
    out = evaluate(Artifact("model", model_dir=str(tmp_path / "released")), ctx, [spec])
    # the reference always says "good" and the tiny model never does: the judge picks it
    counts = out["metrics"]["win_rate"].pop("per_client")["test"]
    # per client (6 tuples of 2 clients), 2 tokens a judged tuple and no win anywhere
    assert sum(counts["tokens"]) == 12 and counts["win_rate_hits"] == [0, 0]
    assert out["metrics"]["win_rate"] == {
        "win_rate": 0.0,
        "ties": 0.0,
        "n": 6.0,
        "parse_failures": 0.0,
    }
    assert len(server.requests) == 6
    assert out["settings"]["win_rate"]["judge_judge"] == "http"
    skipped = evaluate(Artifact("texts", texts=["a"]), ctx, [spec])["skipped"]
    assert "win_rate" in skipped


def test_paper_templates_render_the_answers_and_parse_the_verdict_line():
    oasst = TEMPLATES["oasst"]
    shown = oasst.render("What is 2+2?", "four", "five")
    assert "Query: What is 2+2?" in shown and "Response A:\nfour" in shown
    assert shown.endswith('More helpful: <"A" or "B">')
    assert oasst.parse("Comparison: A mentions B.\nMore helpful: B") == "B"
    assert oasst.parse("Comparison: both fine\nMore helpful: A.") == "A"
    assert oasst.parse("Comparison: I cannot tell") is None
    assert TEMPLATES["tldr"].parse("Comparison: shorter.\nPreferred: A") == "A"
    assert "more helpful and harmless" in TEMPLATES["hh"].render("q", "a", "b")


class ContentJudge(VerdictJudge):
    """Replies in the paper format, preferring the response that says 'good'."""

    name = "content"

    def verdicts(self, judge_prompts):
        replies = []
        for p in judge_prompts:
            a = p.split("Response A:\n")[1].split("\n\nResponse B:")[0]
            replies.append(
                "Comparison: one is good.\nMore helpful: " + ("A" if "good" in a else "B")
            )
        return [self.template.parse(r) for r in replies]


def test_a_paper_template_judge_sees_both_positions_and_counts_wins():
    judge = ContentJudge(seed=3, template="oasst")
    verdicts = judge.compare(
        ["q"] * 20, ["good answer"] * 10 + ["bad"] * 10, ["bad"] * 10 + ["good answer"] * 10
    )
    assert verdicts.tolist() == [1.0] * 10 + [0.0] * 10
    assert judge.settings()["template"] == "oasst" and judge.parse_failures == 0
