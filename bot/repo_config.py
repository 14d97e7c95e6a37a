"""Per-repository configuration: `.github/rsi.yml` on the upstream's default branch.

Who may trigger, which GPUs, how many rounds, the guard and practical thresholds, the
approval policy and a GPU budget. Every key is optional: an absent file, or an absent key,
means the defaults below. Unknown keys are errors (a typo must not silently mean "use the
default"), and so is anything malformed; a malformed file yields the defaults *plus* an
error that names the line and field, for the PR (`render_error`) — it is never ignored.

`ConfigCache.get` reads the file through the contents API once, then only asks GitHub
whether it changed (`If-None-Match`: a 304 costs no rate limit and no parse).

    # .github/rsi.yml
    trigger:
      allow: [alice, bob]              # may run /rsi commands besides write/maintain/admin
      trusted_pushers: [openrsi-bot]   # pushes by these verify without approval
    approval: required-for-untrusted   # or never-required
    gpus: [h100, h200]
    rounds: auto                       # pairs of rounds until decided; or a fixed number a side
    modes: [streaming, non-streaming]
    thresholds:
      practical_pct: 3.0
      latency_p95_pct: 10.0
      ttfa_p95_pct: 10.0
      text_ttft_p95_pct: 10.0          # streaming ASR: first transcript text
      wer_increase: 0.01
      failure_rate: 0.01
    guards:
      other_rows_pct: 10.0             # the primary metric and request throughput in the
                                       # other mode or at another concurrency: a regression
                                       # past this lowers the verdict
    budget:
      max_rounds: 10                   # the most rounds a side: a command's, and auto's cap
      gpu_minutes: 120                 # with rounds: auto, the most GPU minutes one
                                       # verification spends per GPU kind; fixed rounds
                                       # estimated past it do not start (default: no limit)
      max_running: 2                   # verifications running at once, this repository
      pr_gpu_minutes: 480              # `/rsi verify` on a PR rsi-bot did not open: per PR
      day_gpu_minutes: 1440            # and per day, this repository
    base: keep                         # or main: re-measure when main moves
    benchmark_ref: v0.1.9              # the benchmark client's tree (default: the base)
    design: auto                       # or alternate, crossover, sequential (auto: the
                                       # task's own)
    control: none                      # or aa: base-against-base pairs beside the real ones
                                       # (needs the alternate design)
    watch:                             # each push to the default branch against its parent
      tasks: [cosyvoice3]              # default: the tasks of this repository's candidates
      gpus: [H200]                     # default: gpus above; modes likewise
      gpu_minutes_per_day: 240         # pushes past it wait for the next day's budget
                                       # (`watch: false` turns it off)
      alert_issue: false               # also open an issue for a confirmed regression
"""

from __future__ import annotations

import difflib
import itertools
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

import yaml
from markupsafe import Markup
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from bot import yaml_bounded
from evidence import inert
from evidence.metrics import BY_NAME, canonical
from evidence.policy import Lead, Policy
from evidence.render import macro

log = logging.getLogger(__name__)

CONFIG_PATH = ".github/rsi.yml"
MAX_PROBLEMS = 20  # listed on the PR; the rest are counted


# --- the model ---------------------------------------------------------------------------


def _as_list(value: Any) -> Any:
    """`gpus: h100` means `gpus: [h100]`."""
    return [value] if isinstance(value, str) else value


def _login(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    login = value.strip().removeprefix("@").lower()
    if not login or any(c.isspace() for c in login):
        raise _bad("not_a_login")
    return login


def _upper(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _unique(items: list[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


Login = Annotated[str, BeforeValidator(_login)]
GpuName = Literal["H100", "H200"]
ModeName = Literal["streaming", "non-streaming"]
Gpu = Annotated[GpuName, BeforeValidator(_upper)]
Mode = Annotated[ModeName, BeforeValidator(_lower)]
Logins = Annotated[list[Login], BeforeValidator(_as_list)]
Pct = Annotated[float, Field(ge=0, allow_inf_nan=False)]

MIN_ROUNDS = 3  # fewer rounds a side give no usable interval
_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class Trigger(BaseModel):
    model_config = _STRICT

    allow: Logins = Field(
        default_factory=list,
        description="users allowed to run /rsi commands besides write/maintain/admin",
    )
    trusted_pushers: Logins = Field(
        default_factory=list, description="pushes by these start a verification without approval"
    )

    @field_validator("allow", "trusted_pushers")
    @classmethod
    def _dedupe(cls, v: list[str]) -> list[str]:
        return _unique(v)


class Thresholds(BaseModel):
    model_config = _STRICT

    practical_pct: Pct = Field(default=3.0, description="minimum effect to claim, percent")
    latency_p95_pct: Pct = Field(default=10.0, description="latency p95 guard, percent")
    ttfa_p95_pct: Pct = Field(default=10.0, description="TTFA p95 guard, percent")
    text_ttft_p95_pct: Pct = Field(
        default=10.0, description="text TTFT p95 guard (streaming ASR), percent"
    )
    wer_increase: Pct = Field(default=0.01, description="absolute WER increase allowed")
    failure_rate: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = Field(
        default=0.01, description="failed-request share allowed"
    )


TASK_PATTERN = r"^[a-z0-9][a-z0-9-]{0,99}$"
TaskName = Annotated[str, Field(pattern=TASK_PATTERN)]


class Watch(BaseModel):
    """Each push to the default branch measured against the commit before it."""

    model_config = _STRICT

    enabled: bool = Field(default=True, description="`watch: false` turns the watch off")
    tasks: Annotated[list[TaskName], BeforeValidator(_as_list)] = Field(
        default_factory=list,
        description="tasks measured (default: those of this repository's candidates)",
    )
    gpus: Annotated[list[Gpu], BeforeValidator(_as_list)] | None = Field(
        default=None, description="GPU kinds (default: the repository's `gpus`)"
    )
    modes: Annotated[list[Mode], BeforeValidator(_as_list)] | None = Field(
        default=None, description="modes (default: the repository's `modes`)"
    )
    gpu_minutes_per_day: float = Field(
        default=240,
        ge=0,
        le=100_000,
        allow_inf_nan=False,
        description="GPU minutes the watch may spend in a day; pushes past it wait",
    )
    alert_issue: bool = Field(
        default=False,
        description="also open an issue for each confirmed regression (one is opened "
        "anyway when the culprit came in without a PR)",
    )


def _watch(value: Any) -> Any:
    """`watch: false` / `watch: true` as the section they mean."""
    return {"enabled": value} if isinstance(value, bool) else value


class Guards(BaseModel):
    model_config = _STRICT

    other_rows_pct: Pct = Field(
        default=10.0,
        description="regression of the primary metric or request throughput on a row that "
        "is not primary (another mode or concurrency) that lowers the verdict, percent",
    )


def _metric(v: Any) -> Any:
    """A metric by any of its names, as the engine names it; an unknown one is refused."""
    if not isinstance(v, str):
        return v
    name = canonical(v.strip().lower())
    if name not in BY_NAME:
        raise _bad("metric_unknown", known=", ".join(BY_NAME))
    return name


class Headline(BaseModel):
    """The row the verdict's words lead with when it decides the verdict, the same on
    every commit (default: the candidate's claim; else the row with the most evidence)."""

    model_config = _STRICT

    gpu: Gpu | None = Field(default=None, description="GPU kind")
    metric: Annotated[str, BeforeValidator(_metric)] | None = Field(
        default=None, description="metric, e.g. throughput_qps or rtf"
    )
    mode: Mode | None = Field(default=None, description="streaming or non-streaming")
    concurrency: Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        default=None, description="concurrency"
    )

    def lead(self) -> Lead | None:
        if (self.gpu, self.metric, self.mode, self.concurrency) == (None, None, None, None):
            return None
        return Lead(gpu=self.gpu, metric=self.metric, mode=self.mode, concurrency=self.concurrency)


class Budget(BaseModel):
    model_config = _STRICT

    max_rounds: int = Field(
        default=10,
        ge=MIN_ROUNDS,
        le=50,
        description="most rounds a side: what one command may ask, and the cap of rounds: auto",
    )
    gpu_minutes: float | None = Field(
        default=None,
        ge=1,
        le=100_000,
        allow_inf_nan=False,
        description="with rounds: auto, the most GPU minutes a verification spends per GPU "
        "kind, both sides and start-ups included; with fixed rounds, a verification whose "
        "estimate passes it is not started (none: no limit)",
    )
    max_running: int = Field(
        default=2, ge=1, le=50, description="verifications running at once, this repository"
    )
    pr_gpu_minutes: float = Field(
        default=480,
        ge=0,
        le=100_000,
        allow_inf_nan=False,
        description="GPU minutes verifications may spend on one PR rsi-bot did not open, "
        "whatever asks for them (`/rsi verify`, a push, an approval, a re-run)",
    )
    day_gpu_minutes: float = Field(
        default=1440,
        ge=0,
        le=1_000_000,
        allow_inf_nan=False,
        description="GPU minutes verifications may spend in a day on PRs rsi-bot did not open",
    )


AUTO = "auto"
REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$"

DesignName = Literal["auto", "alternate", "crossover", "sequential"]
ControlName = Literal["none", "aa"]


def _control(value: Any) -> Any:
    """YAML 1.1 reads an unquoted `no`, `off`, `yes` or `on` as a boolean: name the
    cause instead of "should be 'none' or 'aa'" about a value the user never typed."""
    if isinstance(value, bool):
        raise _bad("control_boolean")
    return _lower(value)


def _rounds(value: Any) -> Any:
    """`rounds` is a whole number of rounds a side or `auto`; nothing else (not `true`,
    not `"5"`)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _bad("rounds_kind")


Rounds = Annotated[int | Literal["auto"], BeforeValidator(_rounds)]


def rounds_phrase(rounds: int, adaptive: bool) -> str:
    """How many rounds a verification runs, in words: "5 rounds a side", or
    "rounds until decided (at most 10 a side)"."""
    return words("rounds_phrase", rounds, adaptive)


def words(name: str, /, *args: Any, **kwargs: Any) -> str:
    """A plain-text message of `pr_templates/repo_config.txt.j2`."""
    return macro("repo_config.txt.j2", name, *args, **kwargs)


CUSTOM_CODES = frozenset(
    {
        "not_a_login",
        "control_boolean",
        "rounds_kind",
        "ref_dotdot",
        "watch_gpus_outside",
        "control_needs_pairs",
        "rounds_least",
        "rounds_at_most",
        "rounds_most_budget",
        "metric_unknown",
        "headline_not_measured",
    }
)
"""The checks of our own validators: their error type is the macro that words them."""


def _bad(code: str, **params: Any) -> PydanticCustomError:
    """A value the file may not hold: `code` is the macro of repo_config.txt.j2 that
    says why, `params` its arguments. The problem is worded from those; the same words
    are the error's message for whoever reads the exception itself (no braces: pydantic
    would fill them in)."""
    said = words(code, **params).replace("{", "(").replace("}", ")")
    return PydanticCustomError(code, said, params)


@dataclass(frozen=True)
class Plan:
    """What a verification runs. `adaptive`: pairs of rounds until decided, at most
    `rounds` a side and `gpu_minutes` per GPU kind (None: no limit)."""

    gpus: list[str]
    rounds: int
    modes: list[str]
    adaptive: bool = False
    gpu_minutes: float | None = None
    control: bool = False  # a null control's runs beside the real ones (`control: aa`)


class RepoConfig(BaseModel):
    """`.github/rsi.yml`. `RepoConfig()` is the defaults."""

    model_config = _STRICT

    trigger: Trigger = Field(default_factory=Trigger)
    approval: Literal["required-for-untrusted", "never-required"] = "required-for-untrusted"
    gpus: Annotated[list[Gpu], BeforeValidator(_as_list), Field(min_length=1)] = Field(
        default_factory=lambda: list[GpuName](["H100", "H200"])
    )
    # budget comes before rounds so that the rounds check sees it (and is reported at rounds).
    budget: Budget = Field(default_factory=Budget)
    rounds: Rounds = "auto"
    modes: Annotated[list[Mode], BeforeValidator(_as_list), Field(min_length=1)] = Field(
        default_factory=lambda: list[ModeName](["streaming", "non-streaming"])
    )
    thresholds: Thresholds = Field(default_factory=Thresholds)
    guards: Guards = Field(default_factory=Guards)
    headline: Headline = Field(default_factory=Headline)
    base: Literal["keep", "main"] = "keep"
    # Read by the runner from the base commit's copy of this file: the ref of the
    # upstream repository whose benchmark scripts measure both sides.
    benchmark_ref: Annotated[str | None, Field(pattern=REF_PATTERN)] = None
    # How the runner measures (the dispatch's `design` input): auto leaves it to the task.
    # design comes before control so that the control check sees it.
    design: Annotated[DesignName, BeforeValidator(_lower)] = "auto"
    # A null control (the dispatch's `control` input): base against base beside the real
    # pairs, so that the machine's own side bias is in the evidence.
    control: Annotated[ControlName, BeforeValidator(_control)] = "none"
    # Pushes to the default branch measured against their parent (on unless `false`).
    watch: Annotated[Watch, BeforeValidator(_watch)] = Field(default_factory=Watch)

    @field_validator("benchmark_ref")
    @classmethod
    def _a_ref(cls, v: str | None) -> str | None:
        if v is not None and ".." in v:
            raise _bad("ref_dotdot")
        return v

    @field_validator("gpus", "modes")
    @classmethod
    def _dedupe(cls, v: list[str]) -> list[str]:
        return _unique(v)

    @field_validator("headline")
    @classmethod
    def _headline_measured(cls, v: Headline, info: ValidationInfo) -> Headline:
        """A headline names a row the repository measures (else it would never lead)."""
        gpus, modes = info.data.get("gpus") or [], info.data.get("modes") or []
        if v.gpu is not None and v.gpu not in gpus:
            raise _bad("headline_not_measured", what="gpu", got=v.gpu, allowed=list(gpus))
        if v.mode is not None and v.mode not in modes:
            raise _bad("headline_not_measured", what="mode", got=v.mode, allowed=list(modes))
        return v

    @field_validator("watch")
    @classmethod
    def _watch_within_gpus(cls, v: Watch, info: ValidationInfo) -> Watch:
        """The watch measures on GPU kinds the repository allows."""
        allowed = info.data.get("gpus") or []
        outside = [g for g in v.gpus or [] if g not in allowed]
        if outside:
            raise _bad("watch_gpus_outside", outside=outside, allowed=list(allowed))
        return v

    @field_validator("control")
    @classmethod
    def _control_needs_pairs(cls, v: str, info: ValidationInfo) -> str:
        """The control's base-against-base pairs sit between the alternate design's real
        pairs; sequential rounds have no pairs to put them beside, and the crossover's
        two GPUs are both busy with real pairs (the runner refuses either)."""
        design = str(info.data.get("design"))
        if v == "aa" and design in ("sequential", "crossover"):
            raise _bad("control_needs_pairs", design=design)
        return v

    @field_validator("rounds")
    @classmethod
    def _within_budget(cls, v: int | str, info: ValidationInfo) -> int | str:
        if not isinstance(v, int):
            return v
        if v < MIN_ROUNDS:
            raise _bad("rounds_least", least=MIN_ROUNDS)
        if v > 50:
            raise _bad("rounds_at_most", most=50)
        budget = info.data.get("budget")
        if isinstance(budget, Budget) and v > budget.max_rounds:
            raise _bad("rounds_most_budget", most=budget.max_rounds)
        return v

    def policy(self, base: Policy | None = None) -> Policy:
        """The engine's thresholds with this repository's overrides (the rest from `base`)."""
        t = self.thresholds
        return (base or Policy()).model_copy(
            update={
                "threshold_pct": t.practical_pct,
                "guard_latency_p95_pct": t.latency_p95_pct,
                "guard_ttfa_p95_pct": t.ttfa_p95_pct,
                "guard_text_ttft_p95_pct": t.text_ttft_p95_pct,
                "wer_increase_max": t.wer_increase,
                "failure_rate_max": t.failure_rate,
                "guard_other_rows_pct": self.guards.other_rows_pct,
                "lead": self.headline.lead(),
                "max_rounds": self.budget.max_rounds,
            }
        )

    def allows(self, login: str) -> bool:
        """Named in `trigger.allow` (write/maintain/admin are checked by the caller)."""
        return login.strip().removeprefix("@").lower() in self.trigger.allow

    def trusts_pusher(self, login: str, app_wide: frozenset[str] = frozenset()) -> bool:
        """Whether a push by `login` verifies without approval: `approval: never-required`,
        `trigger.trusted_pushers`, or the App's own `RSI_TRUSTED_PUSHERS` (`app_wide`)."""
        if self.approval == "never-required":
            return True
        who = login.strip().removeprefix("@").lower()
        return who in self.trigger.trusted_pushers or who in app_wide

    def rounds_problem(self, rounds: int | str) -> str | None:
        """Why a command may not ask `rounds` (None when it may)."""
        if not isinstance(rounds, int):
            return None if rounds == AUTO else words("rounds_not_a_number", rounds)
        if rounds < MIN_ROUNDS:
            return words("rounds_too_few", rounds, MIN_ROUNDS)
        if rounds > self.budget.max_rounds:
            return words(
                "rounds_over_budget", rounds, self.budget.max_rounds, CONFIG_PATH, MIN_ROUNDS
            )
        return None

    def plan(
        self, *, gpus: Sequence[str] | None = None, rounds: int | str | None = None
    ) -> Plan | str:
        """What a verification asked with these GPUs and rounds will run, or why it may
        not: the one place where the repository's `gpus`, `rounds` and `modes` apply
        (intake, pushes and commands alike)."""
        chosen = list(self.gpus)
        if gpus:
            asked = _unique([g.upper() for g in gpus])
            outside = [g for g in asked if g not in self.gpus]
            if outside:
                return words("gpus_outside", outside, self.gpus, CONFIG_PATH)
            chosen = asked
        n = self.rounds if rounds is None else rounds
        problem = self.rounds_problem(n)
        if problem:
            return problem
        modes = [str(m) for m in self.modes]
        if not isinstance(n, int):  # auto: the budget's cap a side, and its GPU minutes
            return Plan(
                gpus=[str(g) for g in chosen],
                rounds=self.budget.max_rounds,
                modes=modes,
                adaptive=True,
                gpu_minutes=self.budget.gpu_minutes,
                control=self.control != "none",
            )
        return Plan(
            gpus=[str(g) for g in chosen], rounds=n, modes=modes, control=self.control != "none"
        )

    def plan_like(self, gpus: Sequence[str] | None) -> Plan:
        """The plan for a re-verification that keeps the earlier GPUs where this config
        still allows them, else the config's own (pushes and the Re-run button)."""
        plan = self.plan(gpus=gpus)
        if isinstance(plan, Plan):
            return plan
        default = self.plan()
        assert isinstance(default, Plan)  # the config's own values always make a plan
        return default

    def summary(self) -> str:
        """One line for humans: what a verification will do under this config."""
        b = self.budget
        rounds = (
            rounds_phrase(b.max_rounds, True)
            if self.rounds == AUTO
            else rounds_phrase(int(self.rounds), False)
        )
        return words("summary", self, rounds)


# --- parsing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the file: `code`, a macro of `pr_templates/repo_config.txt.j2`,
    and its `params`; the value found (`got`, quoted) and where (`line`/`column` 1-based,
    `field` such as "thresholds.practical_pct" or "gpus[1]")."""

    code: str
    params: tuple[tuple[str, Any], ...] = ()
    field: str | None = None
    line: int | None = None
    column: int | None = None
    got: str | None = None

    @property
    def message(self) -> str:
        text = words(self.code, **dict(self.params))
        return text if self.got is None else words("with_got", text, self.got)

    def __str__(self) -> str:
        return words("problem_at", self.line, self.column, self.field, self.message)


def problem(code: str, **params: Any) -> Problem:
    """A problem of the whole file (no line or field)."""
    return Problem(code, tuple(params.items()))


@dataclass(frozen=True)
class ConfigResult:
    """What a repository runs with: `config` (the defaults when the file is absent or
    malformed) and `error` (None, or every problem, one a line, naming line and field)."""

    config: RepoConfig
    error: str | None = None
    problems: tuple[Problem, ...] = ()
    found: bool = False  # the file exists on the default branch
    sha: str | None = None  # its blob sha, when found
    html_url: str | None = None  # where to see it, when found
    path: str = CONFIG_PATH

    @property
    def ok(self) -> bool:
        return self.error is None


def fail_with(source: ConfigResult, problems: Sequence[Problem]) -> ConfigResult:
    """The defaults, with what is wrong with the file `source` describes."""
    probs = tuple(problems)
    error = "\n".join(str(p) for p in probs)
    return replace(source, config=RepoConfig(), error=error, problems=probs)


def parse(
    text: str, *, sha: str | None = None, html_url: str | None = None, path: str = CONFIG_PATH
) -> ConfigResult:
    """The file's text as a `ConfigResult` (never raises for bad content)."""
    source = ConfigResult(RepoConfig(), found=True, sha=sha, html_url=html_url, path=path)
    try:
        root, data = yaml_bounded.load(text)
    except yaml_bounded.Refused as exc:
        return fail_with(source, [Problem(exc.code, exc.params, line=exc.line, column=exc.column)])
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(x for x in (exc.context, exc.problem) if x) or "invalid YAML"
        line = mark.line + 1 if mark else None
        column = mark.column + 1 if mark else None
        found = Problem("yaml_syntax", (("what", what),), line=line, column=column)
        return fail_with(source, [found])
    except yaml.YAMLError as exc:  # e.g. a control character the reader refuses
        return fail_with(source, [problem("yaml_syntax", what=str(exc))])
    except Exception as exc:  # a constructor's own failure (`!!bool foo`), what no bound foresaw
        log.warning("rsi.yml: the reader gave up: %s", type(exc).__name__)
        return fail_with(source, [problem("yaml_unreadable", what=type(exc).__name__)])
    if data is None:  # empty, or only comments
        return source
    if not isinstance(data, dict):
        line = root.start_mark.line + 1 if root is not None else None
        kind = (("kind", _yaml_kind(data)),)
        return fail_with(source, [Problem("not_a_mapping_file", kind, line=line)])
    duplicates = list(itertools.islice(_duplicates(root, (), set()), MAX_PROBLEMS))
    try:
        config = RepoConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        problems = [_problem(err, root) for err in errors[:MAX_PROBLEMS]]
        listed = sorted([*duplicates, *problems], key=_order)
        more = len(errors) + len(duplicates) - MAX_PROBLEMS
        if more > 0:  # each problem costs a walk of the file: the first ones say enough
            listed = [*listed[:MAX_PROBLEMS], problem("more_problems", count=more)]
        return fail_with(source, listed)
    if duplicates:
        return fail_with(source, duplicates)
    return replace(source, config=config)


MAX_PROBLEMS = 30
"""Problems said of one file; the rest are counted."""


def _order(p: Problem) -> tuple[int, str]:
    return (p.line or 0, p.field or "")


def _yaml_kind(data: Any) -> str:
    if isinstance(data, list):
        return "list"
    if isinstance(data, str):
        return "string"
    return type(data).__name__


def _path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        part = part if isinstance(part, int) or len(part) <= 60 else part[:57] + "…"
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _node_at(
    root: yaml.Node | None, loc: Sequence[int | str], *, key: bool = False
) -> yaml.Node | None:
    """The YAML node `loc` points at (its key node when `key`), or the deepest one found."""
    node = root
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, yaml.MappingNode):
            hit = next(
                (
                    (k, v)
                    for k, v in node.value
                    if isinstance(k, yaml.ScalarNode) and k.value == str(part)
                ),
                None,
            )
            if hit is None:
                return node
            node = hit[0] if key and last else hit[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(node.value):
                return node
            node = node.value[part]
        else:
            return node
    return node


def _fields_at(loc: Sequence[int | str]) -> list[str]:
    """The keys allowed in the mapping that `loc` names (for "did you mean")."""
    model: type[BaseModel] = RepoConfig
    for part in loc:
        info = model.model_fields.get(str(part))
        ann = info.annotation if info else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return list(model.model_fields)


def _brief(value: Any, depth: int = 0) -> Any:
    """At most what a problem line shows (60 characters) of a value, however large."""
    if isinstance(value, str):
        return value[:61]
    if depth > 3:
        return "…"
    if isinstance(value, list | tuple | set | frozenset):
        return [_brief(v, depth + 1) for v in list(value)[:8]]
    if isinstance(value, dict):
        return {str(k)[:61]: _brief(v, depth + 1) for k, v in list(value.items())[:8]}
    return value


def _shown(value: Any) -> str:
    """A value from the file, quoted safely (a code span: no mentions, no markup)."""
    try:  # the value cut down first: aliases can repeat a long string thousands of times
        text = json.dumps(_brief(value), default=str, ensure_ascii=False)
    except ValueError:  # an integer past Python's digit limit for str()
        text = type(value).__name__
    return code_span(text if len(text) <= 60 else text[:57] + "…")


_LIMITS = {
    "greater_than_equal": ("at_least", "ge"),
    "greater_than": ("more_than", "gt"),
    "less_than_equal": ("at_most", "le"),
    "less_than": ("less_than", "lt"),
    "too_short": ("at_least_items", "min_length"),
    "too_long": ("at_most_items", "max_length"),
}
_KINDS = {
    "int_type": "whole_number",
    "int_parsing": "whole_number",
    "int_from_float": "whole_number",
    "int_parsing_size": "whole_number",
    "float_type": "a_number",
    "float_parsing": "a_number",
    "finite_number": "a_number",
    "bool_type": "true_or_false",
    "bool_parsing": "true_or_false",
    "string_type": "text",
    "list_type": "a_list",
    "model_type": "not_a_mapping",
    "model_attributes_type": "not_a_mapping",
    "dict_type": "not_a_mapping",
}
_FORMS = {TASK_PATTERN: "task_form", REF_PATTERN: "ref_form"}


def _why(err: Any) -> tuple[str, dict[str, Any]]:
    """pydantic's error as (code, params) of our own words: its message is never shown."""
    kind, ctx = str(err["type"]), dict(err.get("ctx") or {})
    if kind in _LIMITS:
        code, key = _LIMITS[kind]
        return code, {"bound": ctx.get(key)}
    if kind in _KINDS:
        return _KINDS[kind], {}
    if kind == "literal_error":
        return "one_of", {"values": re.findall(r"'((?:[^'\\]|\\.)*)'", str(ctx.get("expected")))}
    if kind == "string_pattern_mismatch":
        return _FORMS.get(str(ctx.get("pattern")), "not_this_form"), {}
    if kind == "invalid_key":
        return "key_not_text", {}
    if kind in CUSTOM_CODES:
        return kind, ctx
    log.warning("rsi.yml: no words for pydantic's %r; said generically", kind)
    return "not_valid_here", {}


def _problem(err: Any, root: yaml.Node | None) -> Problem:
    loc: tuple[int | str, ...] = tuple(err["loc"])
    got: str | None = None
    if err["type"] == "extra_forbidden":
        key = str(loc[-1])[:60]
        known = _fields_at(loc[:-1])
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        code = "unknown_key"
        params: dict[str, Any] = {
            "key": code_span(key),
            "close": code_span(close[0]) if close else "",
            "known": [code_span(k) for k in known],
        }
        node = _node_at(root, loc, key=True)
    else:
        code, params = _why(err)
        got = _shown(err["input"])
        node = _node_at(root, loc)
    mark = node.start_mark if node is not None else None
    return Problem(
        code,
        tuple(params.items()),
        field=_path(loc) or None,
        line=mark.line + 1 if mark else None,
        column=mark.column + 1 if mark else None,
        got=got,
    )


def _duplicates(node: yaml.Node | None, loc: tuple[int | str, ...], seen_nodes: set[int]) -> Any:
    """PyYAML keeps the last of two equal keys silently; a config must not. A node an
    alias repeats is looked at once."""
    if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
        if id(node) in seen_nodes:
            return
        seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            name = str(k.value) if isinstance(k, yaml.ScalarNode) else None
            if name is not None and name in seen:
                yield Problem(
                    "given_twice",
                    (("name", code_span(name)),),
                    field=_path((*loc, name)),
                    line=k.start_mark.line + 1,
                    column=k.start_mark.column + 1,
                )
            if name is not None:
                seen.add(name)
            yield from _duplicates(v, (*loc, name) if name is not None else loc, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            yield from _duplicates(item, (*loc, i), seen_nodes)


# --- the PR's message ----------------------------------------------------------------------


def code_span(text: str) -> str:
    """`text` as a Markdown code span, whatever backticks it holds, on one line and
    without control characters (a bidirectional override would reorder what follows)."""
    text = inert.clean(text)
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def render_error(result: ConfigResult) -> str:
    """Markdown for the PR when `.github/rsi.yml` is malformed ("" when it is not):
    `config_error` of `pr_templates/repo_config.md.j2`."""
    if result.error is None:
        return ""
    shown = result.problems[:MAX_PROBLEMS]
    more = len(result.problems) - len(shown)
    defaults = RepoConfig().summary()
    md = macro("repo_config.md.j2", "config_error", result, shown, more, defaults, _inline)
    return md + "\n"


_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")


def _inline(message: str) -> Markup:
    """A problem message on one Markdown line: its code spans (the file's keys and
    values, quoted by `code_span`) kept as they are, the text around them inert."""
    out, at = [], 0
    for span in _SPAN.finditer(message):
        out += [inert.text(message[at : span.start()]), span.group(0)]
        at = span.end()
    out.append(inert.text(message[at:]))
    return Markup("".join(out))
