"""`.github/rsi.yml`: the model, its error messages, and reading it through the contents
API with ETags (against the GitHub stand-in)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bot import repo_config
from bot.github import config_file
from bot.github.client import GitHubApp
from bot.github.config_file import ConfigCache
from bot.repo_config import (
    CONFIG_PATH,
    ConfigResult,
    Plan,
    RepoConfig,
    parse,
    render_error,
    rounds_phrase,
)
from evidence.policy import Policy
from tests import appkit
from tests.hostile_configs import HOSTILE
from tests.standin import GitHubStandIn

FULL = """\
# .github/rsi.yml
trigger:
  allow: [Alice, "@bob"]
  trusted_pushers: [openrsi-bot]
approval: never-required
gpus: [h100, H200, h100]
rounds: 8
modes: [streaming]
thresholds:
  practical_pct: 2.5
  latency_p95_pct: 15
  ttfa_p95_pct: 12.0
  text_ttft_p95_pct: 20
  wer_increase: 0.02
  failure_rate: 0.005
budget:
  max_rounds: 12
  max_running: 1
base: main
"""

CONTENTS = f"/repos/{appkit.UPSTREAM}/contents/{CONFIG_PATH}"


# --- the model ---------------------------------------------------------------------------


def test_defaults() -> None:
    c = RepoConfig()
    assert c.trigger.allow == []
    assert c.trigger.trusted_pushers == []
    assert c.approval == "required-for-untrusted"
    assert c.gpus == ["H100", "H200"]
    assert c.rounds == "auto"
    assert c.modes == ["streaming", "non-streaming"]
    t = c.thresholds
    assert (t.practical_pct, t.latency_p95_pct, t.ttfa_p95_pct) == (3.0, 10.0, 10.0)
    assert (t.wer_increase, t.failure_rate) == (0.01, 0.01)
    assert (c.budget.max_rounds, c.budget.max_running) == (10, 2)
    assert c.budget.gpu_minutes is None
    assert c.base == "keep"
    assert (c.design, c.control) == ("auto", "none")
    # The defaults are the engine's own (and the repository's round budget, for its words).
    assert c.policy() == Policy(max_rounds=10)


@pytest.mark.parametrize("text", ["", "\n", "# nothing yet\n", "---\n"])
def test_empty_file_is_the_defaults(text: str) -> None:
    result = parse(text)
    assert result.ok
    assert result.error is None
    assert result.found
    assert result.config == RepoConfig()


def test_full_file() -> None:
    result = parse(FULL)
    assert result.error is None, result.error
    c = result.config
    assert c.trigger.allow == ["alice", "bob"]  # logins are case-insensitive; "@" dropped
    assert c.trigger.trusted_pushers == ["openrsi-bot"]
    assert c.approval == "never-required"
    assert c.gpus == ["H100", "H200"]  # upper-cased, repeats dropped
    assert c.rounds == 8
    assert c.modes == ["streaming"]
    assert c.thresholds.practical_pct == 2.5
    assert c.thresholds.latency_p95_pct == 15.0
    assert c.budget.max_rounds == 12
    assert c.budget.max_running == 1
    assert c.base == "main"


def test_partial_file_keeps_other_defaults() -> None:
    result = parse("gpus: h200\nthresholds:\n  practical_pct: 5\n")
    assert result.ok, result.error
    c = result.config
    assert c.gpus == ["H200"]  # one value for a list is that list
    assert c.thresholds.practical_pct == 5.0
    assert c.thresholds.latency_p95_pct == 10.0
    assert c.rounds == "auto"
    assert c.modes == ["streaming", "non-streaming"]
    assert c.trigger == RepoConfig().trigger


def test_policy_mapping() -> None:
    policy = parse(FULL).config.policy()
    assert policy.threshold_pct == 2.5
    assert policy.guard_latency_p95_pct == 15.0
    assert policy.guard_ttfa_p95_pct == 12.0
    assert policy.wer_increase_max == 0.02
    assert policy.failure_rate_max == 0.005
    assert policy.guard_pct("latency_p95_s") == 15.0
    assert policy.guard_pct("audio_ttfp_p95_s") == 12.0
    assert policy.guard_pct("text_ttft_p95_s") == 20.0
    # What the file does not name comes from the engine (or a given base policy).
    assert policy.alpha == Policy().alpha
    assert policy.min_rounds == Policy().min_rounds
    assert RepoConfig().policy(Policy(alpha=0.1)).alpha == 0.1


def test_trigger_approval_and_budget_helpers() -> None:
    c = parse(
        "trigger: {allow: [alice], trusted_pushers: [openrsi-bot]}\nbudget: {max_rounds: 6}\n"
    ).config
    assert c.allows("Alice")
    assert c.allows("@alice")
    assert not c.allows("mallory")
    assert c.trusts_pusher("OpenRSI-Bot")
    assert not c.trusts_pusher("mallory")
    assert c.trusts_pusher("ci-bot", frozenset({"ci-bot"}))  # RSI_TRUSTED_PUSHERS
    assert RepoConfig(approval="never-required").trusts_pusher("mallory")
    assert c.rounds_problem(6) is None
    assert "budget" in (c.rounds_problem(7) or "")
    assert c.rounds_problem(1) is not None


def test_model_validation_directly() -> None:
    with pytest.raises(ValidationError):
        RepoConfig.model_validate({"rounds": 51, "budget": {"max_rounds": 50}})
    with pytest.raises(ValidationError):
        RepoConfig.model_validate({"gpus": []})
    with pytest.raises(ValidationError):
        RepoConfig.model_validate({"thresholds": {"failure_rate": 1.5}})


# --- malformed files are reported, with line and field -----------------------------------


def _only(result: ConfigResult) -> repo_config.Problem:
    assert result.error is not None
    assert result.config == RepoConfig(), "a malformed file means the defaults"
    assert len(result.problems) == 1, result.error
    return result.problems[0]


def test_unknown_key_is_reported_with_a_suggestion() -> None:
    p = _only(parse("gpus: [h100]\nroundz: 5\n"))
    assert (p.field, p.line, p.column) == ("roundz", 2, 1)
    assert "unknown key `roundz`" in p.message
    assert "did you mean `rounds`" in p.message
    # The valid keys beside the typo do not apply either: the whole file is the defaults.


def test_nested_unknown_key() -> None:
    p = _only(parse("thresholds:\n  practical: 2\n"))
    assert (p.field, p.line) == ("thresholds.practical", 2)
    assert "did you mean `practical_pct`" in p.message


def test_unknown_key_without_a_close_match_lists_the_known_ones() -> None:
    p = _only(parse("budget:\n  zzz: 1\n"))
    assert "`max_rounds`" in p.message
    assert "`max_running`" in p.message


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("rounds: 5\n  gpus: [h100]\n", 2, 7),  # bad indentation
        ("gpus: [h100\nrounds: 5\n", 2, 7),  # unclosed flow sequence
        ("rounds: 5\nmodes: 'streaming\n", 3, 1),  # unclosed quote
    ],
)
def test_yaml_syntax_error_names_line_and_column(text: str, line: int, column: int) -> None:
    result = parse(text)
    p = _only(result)
    assert p.message.startswith("YAML syntax:")
    assert (p.line, p.column) == (line, column)
    assert result.error is not None
    assert result.error.startswith(f"line {line}, column {column}:")


@pytest.mark.parametrize(
    ("text", "field", "line", "words"),
    [
        ("rounds: 1\n", "rounds", 1, "at least 3 rounds a side"),
        ("rounds: 51\nbudget: {max_rounds: 50}\n", "rounds", 1, "at most 50 rounds a side"),
        ("rounds: 12\n", "rounds", 1, "budget.max_rounds (10)"),
        ("gpus:\n  - h100\n  - a100\n", "gpus[1]", 3, "'H100' or 'H200'"),
        ("modes: [batch]\n", "modes[0]", 1, "'streaming' or 'non-streaming'"),
        ("thresholds:\n  latency_p95_pct: -1\n", "thresholds.latency_p95_pct", 2, "at least 0 ("),
        ("thresholds: {failure_rate: 2}\n", "thresholds.failure_rate", 1, "must be at most 1 ("),
        ("thresholds: 3\n", "thresholds", 1, "mapping"),
        ("rounds: five\n", "rounds", 1, "a whole number of rounds a side, or auto"),
        ("rounds: true\n", "rounds", 1, "a whole number of rounds a side, or auto"),
        ("rounds: '5'\n", "rounds", 1, "a whole number of rounds a side, or auto"),
        ("budget: {gpu_minutes: 0}\n", "budget.gpu_minutes", 1, "must be at least 1 (got `0`)"),
        ("budget: {gpu_minutes: fast}\n", "budget.gpu_minutes", 1, "must be a number"),
        ("approval: sometimes\n", "approval", 1, "never-required"),
        ("base: latest\n", "base", 1, "'keep' or 'main'"),
        ("budget: {max_running: 0}\n", "budget.max_running", 1, "must be at least 1"),
        ("budget: {max_running: 51}\n", "budget.max_running", 1, "must be at most 50 ("),
        ("watch: {gpu_minutes_per_day: 1000000}\n", "watch.gpu_minutes_per_day", 1, "100,000"),
        ("watch: {tasks: [Big_Task]}\n", "watch.tasks[0]", 1, "must be a task name"),
        ("benchmark_ref: -x\n", "benchmark_ref", 1, "must be a branch or tag name"),
        ("benchmark_ref: a..b\n", "benchmark_ref", 1, "cannot contain `..`"),
        ("gpus: []\n", "gpus", 1, "must list at least 1 item ("),
        ("watch: {alert_issue: maybe}\n", "watch.alert_issue", 1, "must be true or false"),
        ("trigger: {allow: 3}\n", "trigger.allow", 1, "must be a list"),
        ("watch: {enabled: true, gpus: [h200]}\ngpus: [h100]\n", "watch", 1, "not among `gpus`"),
        ("trigger: {allow: ['two words']}\n", "trigger.allow[0]", 1, "not a GitHub login"),
        (
            "design: fast\n",
            "design",
            1,
            "'auto', 'alternate', 'crossover' or 'sequential' (got `\"fast\"`)",
        ),
        ("design: 2\n", "design", 1, "'auto', 'alternate', 'crossover' or 'sequential' (got `2`)"),
        ("control: bb\n", "control", 1, "'none' or 'aa' (got `\"bb\"`)"),
        ("control: no\n", "control", 1, "unquoted yes/no/on/off as true/false"),
        ("control: [aa]\n", "control", 1, "'none' or 'aa'"),
    ],
)
def test_invalid_values(text: str, field: str, line: int, words: str) -> None:
    p = _only(parse(text))
    assert p.field == field
    assert p.line == line
    assert words in p.message, p.message
    # Our words, never pydantic's own ("Input should be…", "Value error, …").
    assert not any(w in p.message for w in PYDANTIC_WORDS), p.message


def test_rounds_and_gpus_errors_together_in_file_order() -> None:
    result = parse("rounds: 1\ngpus: [a100]\n")
    assert [p.field for p in result.problems] == ["rounds", "gpus[0]"]
    assert result.error is not None
    assert result.error.splitlines()[0].startswith("line 1, column 9: rounds:")
    assert "line 2" in result.error.splitlines()[1]
    assert '`"A100"`' in result.error


def test_not_a_mapping() -> None:
    p = _only(parse("- rounds: 5\n"))
    assert "mapping" in p.message
    assert "list" in p.message
    assert p.line == 1


def test_duplicate_key_is_an_error() -> None:
    p = _only(parse("rounds: 5\ngpus: [h100]\nrounds: 6\n"))
    assert (p.field, p.line) == ("rounds", 3)
    assert "twice" in p.message


def test_render_error() -> None:
    url = f"https://github.com/{appkit.UPSTREAM}/blob/main/{CONFIG_PATH}"
    result = parse("rounds: 1\n@x: <b>\n", html_url=url, sha="0123456789abcdef")
    md = render_error(result)
    assert "`.github/rsi.yml`" in md
    assert url in md
    assert "`0123456`" in md
    assert f"({url}#L2)" in md  # links to the line
    assert "YAML syntax" in md
    assert "defaults" in md
    assert "GPUs H100, H200; rounds until decided (at most 10 a side)" in md
    assert "<b>" not in md.replace("`<b>`", "")  # markup from the file is not rendered
    invalid = parse("gpus: [a100]\nroundz: 3\n", html_url=url)
    md = render_error(invalid)
    assert "`gpus[0]`" in md
    assert "`roundz`" in md
    assert "did you mean `rounds`" in md
    assert f"({url}#L1)" in md
    assert f"({url}#L2)" in md
    assert render_error(parse("rounds: 5\n")) == ""


def test_render_error_quotes_values_safely() -> None:
    md = render_error(parse("approval: '@maintainers `x`'\n"))
    # A value from the file sits in a code span: no mention, no broken Markdown.
    line = next(x for x in md.splitlines() if x.startswith("- "))
    assert '``"@maintainers `x`"``' in line
    assert "&lt;" not in line


# --- reading it from GitHub ----------------------------------------------------------------


@pytest.fixture
def gh_app(tmp_path: Path, github: GitHubStandIn) -> GitHubApp:
    return GitHubApp(appkit.settings(tmp_path, github.url))


@pytest.fixture
def iid(gh_app: GitHubApp) -> int:
    return gh_app.installation_id(appkit.UPSTREAM)


def _reads(github: GitHubStandIn) -> list[Any]:
    return [r for r in github.requests if r.method == "GET" and r.path.lower() == CONTENTS.lower()]


def test_absent_file_is_the_defaults(github: GitHubStandIn, gh_app: GitHubApp, iid: int) -> None:
    result = ConfigCache().get(gh_app, iid, appkit.UPSTREAM)
    assert result.config == RepoConfig()
    assert result.error is None
    assert not result.found
    assert result.sha is None
    assert [r.status for r in _reads(github)] == [404]
    assert render_error(result) == ""


def test_file_is_read_then_revalidated_with_its_etag(
    github: GitHubStandIn, gh_app: GitHubApp, iid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    github.set_file(appkit.UPSTREAM, CONFIG_PATH, FULL)
    parsed: list[str] = []
    real_parse = repo_config.parse

    def spy(text: str, **kw: Any) -> ConfigResult:
        parsed.append(text)
        return real_parse(text, **kw)

    monkeypatch.setattr(config_file, "parse", spy)
    cache = ConfigCache()

    first = cache.get(gh_app, iid, appkit.UPSTREAM)
    assert first.error is None
    assert first.found
    assert first.config.rounds == 8
    assert first.config.gpus == ["H100", "H200"]
    assert first.sha
    assert first.html_url
    assert first.html_url.endswith(f"/blob/main/{CONFIG_PATH}")
    assert parsed == [FULL]

    second = cache.get(gh_app, iid, appkit.UPSTREAM.upper())  # repo names are case-insensitive
    assert second is first
    assert parsed == [FULL], "a 304 must not re-parse"
    reads = _reads(github)
    assert [r.status for r in reads] == [200, 304]
    etag = "If-None-Match"
    assert etag not in reads[0].headers
    assert reads[-1].headers[etag] == f'"{first.sha}"'
    assert reads[-1].status == 304

    # The file changes on the default branch: the next get reads it again.
    github.set_file(appkit.UPSTREAM, CONFIG_PATH, "rounds: 3\n")
    third = cache.get(gh_app, iid, appkit.UPSTREAM)
    assert third.config.rounds == 3
    assert third.config.gpus == ["H100", "H200"]
    assert third.sha != first.sha
    assert parsed == [FULL, "rounds: 3\n"]
    assert _reads(github)[-1].status == 200
    assert _reads(github)[-1].headers[etag] == f'"{first.sha}"'

    # And is revalidated against the new ETag.
    assert cache.get(gh_app, iid, appkit.UPSTREAM) is third
    assert _reads(github)[-1].status == 304
    assert _reads(github)[-1].headers[etag] == f'"{third.sha}"'


def test_same_blob_under_a_new_etag_is_not_reparsed(
    github: GitHubStandIn, gh_app: GitHubApp, iid: int
) -> None:
    github.set_file(appkit.UPSTREAM, CONFIG_PATH, "rounds: 4\n")
    cache = ConfigCache()
    first = cache.get(gh_app, iid, appkit.UPSTREAM)
    # An ETag also varies with the token, so GitHub may answer 200 for the same blob.
    cache._entries[appkit.UPSTREAM.lower()].etag = '"stale"'
    assert cache.get(gh_app, iid, appkit.UPSTREAM) is first
    assert _reads(github)[-1].status == 200


def test_file_removed_means_defaults_again(
    github: GitHubStandIn, gh_app: GitHubApp, iid: int
) -> None:
    github.set_file(appkit.UPSTREAM, CONFIG_PATH, "rounds: 4\n")
    cache = ConfigCache()
    assert cache.get(gh_app, iid, appkit.UPSTREAM).config.rounds == 4
    del github.repo(appkit.UPSTREAM).files[(None, CONFIG_PATH)]
    result = cache.get(gh_app, iid, appkit.UPSTREAM)
    assert result.config == RepoConfig()
    assert result.error is None
    assert not result.found


def test_read_from_the_default_branch_only(
    github: GitHubStandIn, gh_app: GitHubApp, iid: int
) -> None:
    github.set_file(appkit.UPSTREAM, CONFIG_PATH, "rounds: 9\n", ref="feature")
    github.set_file(appkit.UPSTREAM, CONFIG_PATH, "rounds: 4\n", ref="main")
    assert ConfigCache().get(gh_app, iid, appkit.UPSTREAM).config.rounds == 4


def test_malformed_file_gives_defaults_and_an_error(
    github: GitHubStandIn, gh_app: GitHubApp, iid: int
) -> None:
    github.set_file(appkit.UPSTREAM, CONFIG_PATH, "gpus: [h100]\nrounds: 1\n")
    cache = ConfigCache()
    result = cache.get(gh_app, iid, appkit.UPSTREAM)
    assert result.config == RepoConfig()
    assert result.found
    assert result.error is not None
    assert "line 2" in result.error
    assert "rounds" in result.error
    md = render_error(result)
    assert result.html_url is not None
    assert f"({result.html_url}#L2)" in md
    # Still reported while unchanged (from the cache, on a 304).
    again = cache.get(gh_app, iid, appkit.UPSTREAM)
    assert again.error == result.error
    assert _reads(github)[-1].status == 304

    github.set_file(appkit.UPSTREAM, CONFIG_PATH, "gpus: [h100\n")
    broken = cache.get(gh_app, iid, appkit.UPSTREAM)
    assert broken.error is not None
    assert broken.error.startswith("line 2, column 1: YAML syntax")

    github.set_file(appkit.UPSTREAM, CONFIG_PATH, "gpus: [h100]\n")
    fixed = cache.get(gh_app, iid, appkit.UPSTREAM)
    assert fixed.ok
    assert fixed.config.gpus == ["H100"]


def test_non_utf8_file_is_reported(github: GitHubStandIn, gh_app: GitHubApp, iid: int) -> None:
    github.set_file(appkit.UPSTREAM, CONFIG_PATH, b"rounds: \xff\n")
    result = ConfigCache().get(gh_app, iid, appkit.UPSTREAM)
    assert result.error is not None
    assert "UTF-8" in result.error
    assert result.config == RepoConfig()


def test_concurrent_gets(github: GitHubStandIn, gh_app: GitHubApp, iid: int) -> None:
    github.set_file(appkit.UPSTREAM, CONFIG_PATH, "rounds: 6\n")
    cache = ConfigCache()
    seen: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(3):
            rounds = cache.get(gh_app, iid, appkit.UPSTREAM).config.rounds
            with lock:
                seen.append(rounds)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [6] * 12
    assert {r.status for r in _reads(github)} <= {200, 304}


def test_benchmark_ref_is_a_ref_name() -> None:
    assert parse("benchmark_ref: v0.1.9\n").config.benchmark_ref == "v0.1.9"
    for bad in ("../etc", "-x", "a b", "x..y"):
        res = parse(f"benchmark_ref: '{bad}'\n")
        assert res.config.benchmark_ref is None
        assert res.problems, bad
        assert res.problems[0].field == "benchmark_ref"


def test_rounds_auto_is_the_default_and_plans_an_adaptive_verification() -> None:
    """`rounds: auto` (the default): pairs of rounds until decided, at most
    `budget.max_rounds` a side and `budget.gpu_minutes` per verification and GPU kind."""
    c = parse("budget: {max_rounds: 8, gpu_minutes: 90}\n").config
    assert c.rounds == "auto"
    plan = c.plan()
    assert isinstance(plan, Plan)
    assert (plan.adaptive, plan.rounds, plan.gpu_minutes) == (True, 8, 90.0)
    asked = c.plan(rounds="auto", gpus=["h100"])
    assert isinstance(asked, Plan)
    assert (asked.adaptive, asked.rounds, asked.gpus) == (True, 8, ["H100"])
    fixed = c.plan(rounds=5)
    assert isinstance(fixed, Plan)
    assert (fixed.adaptive, fixed.rounds, fixed.gpu_minutes) == (False, 5, None)
    assert parse("rounds: AUTO\n").config.rounds == "auto"
    assert "rounds until decided (at most 8 a side)" in c.summary()
    assert "at most 90 GPU minutes a verification and GPU kind" in c.summary()
    assert "no GPU-minute limit" in RepoConfig().summary()


def test_fixed_rounds_still_plan_fixed() -> None:
    c = parse("rounds: 6\n").config
    plan = c.plan()
    assert isinstance(plan, Plan)
    assert (plan.adaptive, plan.rounds) == (False, 6)
    assert "6 rounds a side" in c.summary()
    assert rounds_phrase(6, False) == "6 rounds a side"
    assert rounds_phrase(10, True) == "rounds until decided (at most 10 a side)"


# --- the measurement design and the null control ------------------------------------------


@pytest.mark.parametrize(
    ("text", "design", "control"),
    [
        ("design: alternate\ncontrol: aa\n", "alternate", "aa"),
        ("design: Sequential\n", "sequential", "none"),
        ("design: crossover\n", "crossover", "none"),
        ("control: AA\n", "auto", "aa"),  # auto: the task's design decides (the runner checks)
        ("design: auto\ncontrol: none\n", "auto", "none"),
        ("control: 'none'\n", "auto", "none"),
    ],
)
def test_design_and_control(text: str, design: str, control: str) -> None:
    result = parse(text)
    assert result.ok, result.error
    assert result.config.design == design
    assert result.config.control == control


def test_control_aa_with_the_sequential_design_is_refused_saying_why() -> None:
    p = _only(parse("design: sequential\ncontrol: aa\n"))
    assert (p.field, p.line) == ("control", 2)
    assert "needs the alternate design" in p.message
    assert "sequential rounds have none" in p.message
    assert "`design: alternate`" in p.message
    # In either order in the file.
    p = _only(parse("control: aa\ndesign: sequential\n"))
    assert (p.field, p.line) == ("control", 1)
    with pytest.raises(ValidationError, match="needs the alternate design"):
        RepoConfig(design="sequential", control="aa")
    p = _only(parse("design: crossover\ncontrol: aa\n"))
    assert "the crossover's two GPUs are both busy with real pairs" in p.message


def test_summary_and_the_error_message_name_the_design_and_control() -> None:
    assert "design auto (the task's own), no null control" in RepoConfig().summary()
    c = parse("design: alternate\ncontrol: aa\n").config
    assert "design alternate (both servers resident, bursts in pairs)" in c.summary()
    assert "a null control (base against base)" in c.summary()
    assert (
        "design sequential (a server start per round)" in RepoConfig(design="sequential").summary()
    )
    assert "design crossover (base and head on two GPUs at once, swapped)" in (
        RepoConfig(design="crossover").summary()
    )
    md = render_error(parse("design: sequential\ncontrol: aa\n"))
    assert "`control: aa` needs the alternate design" in md
    assert "design auto (the task's own), no null control" in md  # what runs meanwhile


def _leaves(model: type[Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key of the file, as its path of names."""
    out: list[tuple[str, ...]] = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and hasattr(ann, "model_fields"):
            out += _leaves(ann, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


PYDANTIC_WORDS = ("Input should", "Value error", "validation error", "Field required", "[type=")


@pytest.mark.parametrize("value", [-1, 10**9, 1.5, "x y", [], {}, True, "a..b", ["@a b"]])
def test_every_key_says_what_is_wrong_in_our_words(value: Any) -> None:
    """Each key given each kind of wrong value: every problem is one of our macros, with
    its params, and none of pydantic's own sentences reaches the maintainer."""
    said = 0
    for path in _leaves(RepoConfig):
        doc: Any = value
        for name in reversed(path):
            doc = {name: doc}
        result = repo_config.parse(json.dumps(doc))
        for p in result.problems:
            said += 1
            assert p.code != "not_valid_here", (path, value, p)
            assert not any(w in p.message for w in PYDANTIC_WORDS), (path, value, p.message)
            assert p.field is not None, (path, p)
            assert p.field.startswith(path[0]), (path, p)
    assert said > 0


@pytest.mark.parametrize("text", ["on: 1\n", "1: 2\n", "null: x\n", "trigger: {yes: [a]}\n"])
def test_a_key_yaml_does_not_read_as_text_is_said_so(text: str) -> None:
    """`on:` (a workflow file's habit), `yes:`, `null:` and `1:` are keys YAML reads as a
    boolean, null or number: said as such, not as a bad value."""
    p = _only(parse(text))
    assert p.code == "key_not_text", p
    assert "quote it" in p.message


def test_a_number_too_long_to_read_is_a_problem_not_a_crash() -> None:
    p = _only(parse("rounds: " + "9" * 5000 + "\n"))
    assert p.code == "number_too_long", p
    assert "too long" in p.message


def test_headline_names_the_row_the_verdict_leads_with() -> None:
    result = repo_config.parse("headline:\n  gpu: h200\n  metric: RTF\n  concurrency: 8\n")
    assert result.ok, result.problems
    lead = result.config.policy().lead
    assert lead is not None
    assert (lead.gpu, lead.metric, lead.mode, lead.concurrency) == ("H200", "rtf_mean", None, 8)
    assert repo_config.parse("gpus: [H100]\n").config.policy().lead is None
    unmeasured = repo_config.parse("gpus: [h100]\nheadline: {gpu: H200}\n")
    [problem] = unmeasured.problems
    assert problem.code == "headline_not_measured"
    assert "does not measure (gpus: H100)" in problem.message
    [problem] = repo_config.parse("modes: [streaming]\nheadline: {mode: non-streaming}\n").problems
    assert "does not measure (modes: streaming)" in problem.message
    bad = repo_config.parse("headline:\n  metric: speed\n")
    [problem] = bad.problems
    assert (problem.code, problem.field) == ("metric_unknown", "headline.metric")
    assert "not a metric rsi-bot measures; one of throughput_qps" in problem.message


def test_the_summary_says_the_watch_and_each_limit_once() -> None:
    said = RepoConfig().summary()
    assert said.count("a side") == 1
    assert said.count("at most 10") == 1
    assert "watch on: the tasks of this repository's candidates on H100, H200" in said
    assert "at most 240 GPU minutes a day" in said
    assert "480 GPU minutes a PR and 1440 a day" in said
    off = parse("watch: false\nrounds: 4\n").config.summary()
    assert off.endswith("watch off")
    assert "4 rounds a side (a command may ask up to 10)" in off
    watched = parse("watch: {tasks: [whisper], gpus: [H200], alert_issue: true}\n").config
    assert "watch on: whisper on H200, streaming, non-streaming" in watched.summary()
    assert "an issue for each confirmed regression" in watched.summary()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_file_built_to_cost_time_or_memory_is_refused_saying_why(name: str) -> None:
    """Each bound is checked while the file is read, before the work it guards: the
    billion laughs never expands, deep nesting never recurses, a huge number is never
    converted (bench/hostile_config.py times them)."""
    text, code = HOSTILE[name]
    result = parse(text)
    assert [p.code for p in result.problems] == [code], result.problems
    assert result.config == RepoConfig()
    assert "rsi-bot" in result.problems[0].message or "too long" in result.problems[0].message


def test_the_bounds_leave_room_for_a_real_file_and_its_anchors() -> None:
    """Anchors a maintainer would write are read; only what they expand to is counted."""
    text = "gpus: &g [h100, h200]\nwatch: {enabled: true, gpus: *g}\n" + "# note\n" * 2000
    result = parse(text)
    assert result.ok, result.error
    assert result.config.watch.gpus == ["H100", "H200"]


def test_many_problems_are_said_up_to_a_count() -> None:
    text = "".join(f"k{i}: 1\n" for i in range(200))
    result = parse(text)
    assert len(result.problems) == repo_config.MAX_PROBLEMS + 1
    assert result.problems[-1].code == "more_problems"
    assert "170 more problems" in result.problems[-1].message


def test_a_hostile_blob_is_parsed_once_for_every_repository_that_holds_it(
    github: GitHubStandIn, gh_app: GitHubApp, iid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses: list[str] = []
    real = config_file.parse

    def counted(text: str, **kw: Any) -> Any:
        parses.append(text)
        return real(text, **kw)

    monkeypatch.setattr(config_file, "parse", counted)
    text, code = HOSTILE["billion-laughs"]
    other = appkit.UPSTREAM.split("/")[0] + "/other-repo"
    github.add_repo(other)
    for repo in (appkit.UPSTREAM, other):
        github.set_file(repo, CONFIG_PATH, text)
    cache = ConfigCache()
    first = cache.get(gh_app, iid, appkit.UPSTREAM)
    cache.forget(appkit.UPSTREAM)  # a new ETag, as after a token change: read again
    again = cache.get(gh_app, iid, appkit.UPSTREAM)
    elsewhere = cache.get(gh_app, iid, other)
    assert len(parses) == 1
    assert [p.code for p in (*first.problems, *again.problems, *elsewhere.problems)] == [code] * 3
    assert elsewhere.html_url is not None
    assert other in elsewhere.html_url


@pytest.mark.parametrize(
    "text", ["x: !!timestamp 1\n", "x: !!bool foo\n", "x: !!int ''\n", "x: !!float ''\n"]
)
def test_a_value_its_own_tag_cannot_read_is_a_problem_not_a_traceback(text: str) -> None:
    p = _only(parse(text))
    assert p.code == "yaml_unreadable", p
    assert "simplify it" in p.message


def test_merge_keys_are_yaml_not_a_key_given_twice() -> None:
    result = parse("defaults: &b {max_rounds: 5}\nbudget: {<<: *b, max_rounds: 7}\n")
    assert [p.code for p in result.problems] == ["unknown_key"]  # `defaults`, not a repeat
    ok = parse("budget: &b {max_rounds: 7}\nwatch: {enabled: false}\n")
    assert ok.ok


def test_a_long_value_repeated_by_aliases_is_shown_cut_not_encoded_whole() -> None:
    """Before: a 64 KiB file (an alias to a 45,000-character string, 4,900 times) took
    900 MB to say the value was wrong: each problem encoded the whole value first."""
    long = "\\" * 45_000
    text = f"x: &s '{long}'\napproval: [{', '.join(['*s'] * 4_900)}]\n"
    result = parse(text)
    assert {p.code for p in result.problems} == {"unknown_key", "one_of"}
    assert all(len(str(p)) < 400 for p in result.problems)


def test_a_huge_unknown_key_is_named_cut() -> None:
    result = parse("? " + "a" * 65_000 + "\n: 1\n")
    [p] = result.problems
    assert p.code == "unknown_key"
    assert len(str(p)) < 400
