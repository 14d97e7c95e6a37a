"""Typed inputs and outputs of the evidence engine.

Inputs (manifest, candidate, history, attribution) are validated with pydantic so a bad
file fails with the field that is wrong; unknown fields are kept, as docs/bundle.md says.
The output (`Evidence`) is what the App publishes and what `evidence.json` holds.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from evidence.metrics import BY_NAME, canonical

Side = Literal["base", "head"]
Mode = Literal["streaming", "non-streaming", "unspecified"]
RunStatus = Literal["ok", "failed", "skipped"]
# "no-change": the interval lies inside ± the practical threshold (equivalent);
# "inconclusive": the interval is too wide to say either way.
Verdict = Literal["improved", "regressed", "no-change", "inconclusive"]
Overall = Literal["improved", "regressed", "no-change", "inconclusive", "invalid"]
Severity = Literal["error", "warning", "info"]
ClaimStatus = Literal["confirmed", "weakened", "not-reproduced", "inconclusive", "none"]

SCHEMA = "rsi-evidence/1"


_LABELS = re.compile(r"\b([A-Z]\d{2,4}[A-Z]?)\b")


def gpu_label(name: str) -> str:
    """`NVIDIA H200` or `h200` → `H200`; other names are kept as given."""
    m = _LABELS.search(name.upper())
    return m.group(1) if m else name


class _Open(BaseModel):
    """Input records keep fields they do not know (docs/bundle.md: fields may be added)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


# --------------------------------------------------------------------- bundle manifest


class RunFiles(_Open):
    """`speed` is the benchmark's output; `records` its per-request rows when they are
    in another file (the ASR benchmarks); `kept` more of its files, for the record."""

    speed: str | None = None
    records: str | None = None
    wer: str | None = None
    server: str | None = None
    kept: list[str] = Field(default_factory=list)


class Run(_Open):
    id: str
    side: Side
    round: int = Field(ge=1)
    mode: Mode
    concurrency: int = Field(ge=1)
    requests: int | None = Field(default=None, ge=0)
    warmup_requests: int | None = Field(default=None, ge=0)
    started_at: str | None = None
    ended_at: str | None = None
    wall_clock_s: float | None = None
    status: RunStatus = "ok"
    error: str | None = None
    log_tail: str | None = None
    files: RunFiles = Field(default_factory=RunFiles)
    failure: str | None = None
    logs: dict[str, str] = Field(default_factory=dict)
    survivors: list[dict[str, Any]] = Field(default_factory=list)


class Commit(_Open):
    sha: str
    ref: str | None = None
    repo: str | None = None


class GpuMinutes(_Open):
    """Minutes each side held the GPU, server start-ups included (the runner's
    `gpu_minutes`)."""

    base: float | None = None
    head: float | None = None
    total: float | None = None


class AdaptiveRow(_Open):
    """One primary row's sequential decision (the runner's `adaptive.rows`)."""

    verdict: str | None = None
    stopped: str | None = None
    rounds: int | None = None
    detectable_pct: float | None = None
    reason: str | None = None


StopReason = Literal["decided", "max-rounds", "budget", "cut-short"]


class Adaptive(_Open):
    """`--rounds auto`: how the runner decided when to stop (docs/statistics.md)."""

    method: str | None = None
    threshold_pct: float | None = None
    alpha: float | None = None
    max_rounds: int | None = None
    gpu_minutes_budget: float | None = None
    looks: list[dict[str, Any]] = Field(default_factory=list)
    stopped: StopReason | None = None
    decisions: dict[str, str] = Field(default_factory=dict)
    rows: dict[str, AdaptiveRow] = Field(default_factory=dict)


# Designs the engine knows how to analyse as pairs (base and head runs of the same
# mode, concurrency and round measured close in time); any other name, even one that
# says `paired`, is analysed unpaired.
PAIRED_DESIGNS = frozenset({"alternate", "crossover", "sequential"})
# … of which the pairs are rounds minutes apart (runners/seqstats.py `rounds_paired`).
ROUNDS_DESIGNS = frozenset({"sequential"})


class DesignServer(_Open):
    """One server start of an alternating design: which rows it served and what it was
    given and used (the runner's `design.servers.<side>[]`)."""

    rows: list[str] = Field(default_factory=list)
    startup_s: float | None = Field(default=None, ge=0, le=1e6)
    vram_mib: float | None = Field(default=None, ge=0, le=1e8)
    memory_fraction: float | None = Field(default=None, ge=0, le=1)
    gpu_memory_total_mib: float | None = Field(default=None, ge=0, le=1e8)
    warmup: dict[str, Any] | None = None


class BurstSizing(_Open):
    """The burst length chosen after the first pairs (the runner's `design.burst_sizing`,
    runners/bursts.py): the task's length for `pairs` pairs, then `chosen`."""

    initial: int = Field(ge=1, le=10_000_000)
    chosen: int = Field(ge=1, le=10_000_000)
    pairs: int = Field(ge=0, le=1_000_000)
    within_cv: float | None = Field(default=None, ge=0, le=1e6)
    between_sd_pct: float | None = Field(default=None, ge=0, le=1e6)
    request_s: float | None = Field(default=None, ge=0, le=1e6)
    overhead_s: float | None = Field(default=None, ge=0, le=1e6)
    # a length tried for `probe_pairs` pairs before `chosen`, and what each length measured
    probed: int | None = Field(default=None, ge=1, le=10_000_000)
    probe_pairs: int = Field(default=0, ge=0, le=1_000_000)
    initial_sd_pct: float | None = Field(default=None, ge=0, le=1e6)
    probe_sd_pct: float | None = Field(default=None, ge=0, le=1e6)


class Design(_Open):
    """How base and head were measured against each other (the manifest's `design`).
    A bundle without one is today's sequential rounds, unpaired."""

    name: str = "sequential"
    paired: bool = Field(default=False, strict=True)
    unit: str | None = None
    summary: str | None = None
    assumes: list[str] = Field(default_factory=list)
    burst_requests: int | None = Field(default=None, ge=1, le=10_000_000)
    burst_sizing: BurstSizing | None = None
    servers: dict[str, list[DesignServer]] = Field(default_factory=dict)

    @property
    def analysed_paired(self) -> bool:
        """Whether the engine analyses the runs as pairs: only a design it knows to pair,
        so a name it has never seen cannot buy a narrower interval by saying `paired`."""
        return self.paired and self.name in PAIRED_DESIGNS

    @property
    def analysed_rounds(self) -> bool:
        return self.analysed_paired and self.name in ROUNDS_DESIGNS


class Control(_Open):
    """The manifest's `control`: runs of a null control interleaved with the real ones
    (docs/bundle.md). Validated apart from the manifest (`Manifest.control` is kept raw),
    so a malformed control is a finding naming its field and the real runs are still
    judged."""

    kind: Literal["aa"]  # the base code again in the head's place: the only kind known
    summary: str | None = None
    runs: list[Run] = Field(default_factory=list)
    gpu_minutes: float | None = Field(default=None, ge=0, le=1e6)


class Manifest(_Open):
    schema_: Literal["rsi-bundle/1"] = Field(alias="schema")
    verification_id: str
    repo: str
    task: str
    base: Commit
    head: Commit
    gpu: str
    runner: dict[str, Any] | None = None
    environment: dict[str, dict[str, Any]] = Field(default_factory=dict)
    benchmark: dict[str, Any] | None = None
    runs: list[Run]
    complete: bool = False
    # How the runner kept candidate code away from the measurement (runners/sandbox.py),
    # where the benchmark client came from, and the SHA-256 of every other file.
    isolation: dict[str, Any] | None = None
    benchmark_tree: dict[str, Any] | None = None
    digests: dict[str, str] | None = None
    survivors: list[dict[str, Any]] = Field(default_factory=list)
    # Rounds until decided (None: fixed rounds), and the GPU time each side held.
    adaptive: Adaptive | None = None
    gpu_minutes: GpuMinutes | None = None
    # How base and head were measured (None: a runner from before designs: sequential).
    design: Design | None = None
    # A null control (`Control`), as written: the loader validates it on its own.
    control: Any = None

    @property
    def measured_by(self) -> Design:
        """The design the runs were measured by; absent, today's sequential rounds."""
        return self.design if self.design is not None else Design(unit="round")

    # The engine reads these few fields of the open records above; a bundle where they
    # have another shape is refused with the field named, never a crash later on.
    @field_validator("environment")
    @classmethod
    def _packages_by_name(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for side, env in v.items():
            for key in ("gpu_name", "driver", "cuda", "image", "image_digest"):
                if not isinstance(env.get(key), str | None):
                    raise ValueError(f"{side}.{key} must be a string")
            pk = env.get("packages")
            if pk is not None and not (
                isinstance(pk, dict) and all(isinstance(x, str | None) for x in pk.values())
            ):
                raise ValueError(f"{side}.packages must map package names to versions")
        return v

    @field_validator("runner")
    @classmethod
    def _runner_name(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None and not isinstance(v.get("name"), str | None):
            raise ValueError("runner.name must be a string")
        return v

    @field_validator("benchmark_tree")
    @classmethod
    def _changed_files(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        changed = (v or {}).get("changed_by_head")
        if changed is not None and not (
            isinstance(changed, list) and all(isinstance(x, str) for x in changed)
        ):
            raise ValueError("benchmark_tree.changed_by_head must be a list of paths")
        return v


# ------------------------------------------------------------------- candidate (intake)


def stored(info: ValidationInfo) -> bool:
    """Whether a candidate taken in earlier is being read back (`context={"stored": True}`):
    the intake's rules, newer than it may be, are not applied to it again."""
    return bool(info.context and info.context.get("stored"))


class ClaimSpec(_Open):
    """What the candidate says it gains. `delta_pct` is the signed change of the metric,
    so a gain in a figure where lower is better (latency, WER) is negative."""

    metric: str
    mode: Mode = "unspecified"
    gpu: str | None = None
    concurrency: int | None = None
    delta_pct: float

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, v: str, info: ValidationInfo) -> str:
        if canonical(v) not in BY_NAME and not stored(info):
            raise ValueError(f"unknown metric; one of {', '.join(BY_NAME)}")
        return v

    @field_validator("gpu")
    @classmethod
    def _gpu_label(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None or not v.strip():
            return None  # no GPU named: judged on every GPU
        labels = set(_LABELS.findall(v.upper()))
        if len(labels) > 1 and not stored(info):
            raise ValueError(f"names {len(labels)} GPUs; a claim names one")
        return gpu_label(v)

    @model_validator(mode="after")
    def _a_gain(self, info: ValidationInfo) -> ClaimSpec:
        m = BY_NAME.get(canonical(self.metric))
        if m is None or stored(info):
            return self
        gain = self.delta_pct > 0 if m.better == "higher" else self.delta_pct < 0
        if not gain:
            way = (
                "rises, so its gain is positive"
                if m.better == "higher"
                else "falls, so its gain is negative"
            )
            raise ValueError(
                f"delta_pct {self.delta_pct:+g} is not a gain: a claim gives the signed change "
                f"and {m.label} improves when it {way}"
            )
        # A figure cannot fall by more than all of it; a rise past 100x is no claim.
        if not -100 < self.delta_pct <= 10_000:
            raise ValueError(f"delta_pct {self.delta_pct:+g} is outside (-100, +10000]")
        return self


_BAD_REF = re.compile(r"[\x01-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock(/|$)|^[-/.]|[/.]$")
# owner/name as GitHub spells them: an owner of ASCII letters, digits and '-' (not first),
# a name of ASCII letters, digits, '-', '_', '.' (not . or ..); matched whole (`$` alone
# would let a trailing newline spell the same repository a second way).
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*/(?!\.\.?\Z)[A-Za-z0-9_.-]+")
# A task's name, as the runner workflow checks it.
_TASK = re.compile(r"[a-z0-9][a-z0-9-]*")


def _hidden_characters(v: str) -> bool:
    """Control and format characters (a right-to-left override shows a branch name other
    than the one checked out). NUL is the intake's bounds' to name."""
    return any(c != "\0" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in v)


class HeadRef(_Open):
    """Where the head lives: checked as strictly as git and GitHub would, since each
    part ends up in a git command or an API path. Lengths and NUL characters are the
    intake's bounds (docs/bounds.md)."""

    repo: str
    ref: str
    sha: str

    @field_validator("repo")
    @classmethod
    def _repo(cls, v: str, info: ValidationInfo) -> str:
        if not _REPO.fullmatch(v) and not stored(info):
            raise ValueError("not an owner/name GitHub accepts")
        return v

    @field_validator("ref")
    @classmethod
    def _branch_name(cls, v: str, info: ValidationInfo) -> str:
        bad = v in ("", "@", "HEAD") or _BAD_REF.search(v) or _hidden_characters(v)
        if bad and not stored(info):
            raise ValueError("not a branch name git accepts (git check-ref-format)")
        return v

    @field_validator("sha")
    @classmethod
    def _full_sha(cls, v: str, info: ValidationInfo) -> str:
        """The exact commit: 40 hex digits (64 in a SHA-256 repository), as the runner
        checks it out."""
        if not re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", v) and not stored(info):
            raise ValueError("not a full commit SHA (40 or 64 lowercase hex digits)")
        return v


class TrajectoryPoint(_Open):
    """The seed article's form: one row per evaluated candidate."""

    hour: float
    reward: float | None = None
    passed: bool = True
    failed_guards: list[str] = Field(default_factory=list)


class Submission(_Open):
    """RSI-Harness `evolve_state.json` submissions."""

    at: float
    round: str
    score: float | None = None
    status: str = "completed"


class EvolveState(_Open):
    best_round: str | None = None
    best_score: float | None = None
    submissions: list[Submission]


class Harness(_Open):
    run_id: str | None = None
    best_round: str | None = None
    reward: float | None = None
    trajectory: list[TrajectoryPoint] | EvolveState | None = None


class Candidate(_Open):
    candidate_id: str
    task: str
    repo: str
    base_sha: str = Field(pattern=r"^[0-9a-f]{7,64}$")
    head: HeadRef
    title: str = Field(min_length=1, max_length=256)
    summary: str = ""
    claim: ClaimSpec | None = None
    gpus: list[str] = Field(default_factory=list)
    default_behavior_changes: list[str] = Field(default_factory=list)
    caveats: list[str] = Field(default_factory=list)
    harness: Harness | None = None
    pull_request: int | None = None

    @field_validator("repo")
    @classmethod
    def _repo(cls, v: str, info: ValidationInfo) -> str:
        """The same rule as the head's: `\\w` would take `ѕgl-project` (a Cyrillic ѕ),
        and `../..` or `x/..` would name a path, not a repository."""
        if not _REPO.fullmatch(v) and not stored(info):
            raise ValueError("not an owner/name GitHub accepts")
        return v

    @field_validator("task")
    @classmethod
    def _task_name(cls, v: str, info: ValidationInfo) -> str:
        if not _TASK.fullmatch(v) and not stored(info):
            raise ValueError("not a task name (lowercase letters, digits and '-')")
        return v

    @field_validator("gpus")
    @classmethod
    def _claim_on_a_listed_gpu(cls, v: list[str], info: ValidationInfo) -> list[str]:
        claim, gpus = info.data.get("claim"), {gpu_label(g) for g in v}
        if stored(info):
            return v
        if claim is not None and claim.gpu and gpus and claim.gpu not in gpus:
            raise ValueError(f"claim.gpu {claim.gpu} is not among gpus ({', '.join(sorted(gpus))})")
        return v


# --------------------------------------------------------------------- side inputs


class HistoryEntry(_Open):
    task: str
    gpu: str
    mode: Mode
    concurrency: int
    metric: str
    value: float
    sha: str | None = None
    measured_at: str | None = None
    fingerprint: dict[str, Any] = Field(default_factory=dict)


class AttributionEntry(_Open):
    number: int
    title: str
    url: str | None = None
    merged_at: str | None = None


# --------------------------------------------------------------------- the result


class Finding(BaseModel):
    code: str
    severity: Severity
    message: str
    gpu: str | None = None
    runs: list[str] = Field(default_factory=list)
    samples: list[str] = Field(default_factory=list)
    numbers: dict[str, float | int | str | None] = Field(default_factory=dict)


class StudyRow(BaseModel):
    gpu: str
    mode: Mode
    concurrency: int
    metric: str
    label: str
    unit: str
    better: Literal["higher", "lower"]
    base: float | None
    head: float | None
    n_base: int
    n_head: int
    delta_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    delta_abs: float | None = None
    ci_low_abs: float | None = None
    ci_high_abs: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    verdict: Verdict
    primary: bool = False
    guard: bool = False
    guard_failed: bool = False
    # What decides the row: the practical threshold in percent, or an absolute one for
    # rates judged as a difference (WER, failure rate); a guard's allowed regression.
    threshold_pct: float | None = None
    threshold_abs: float | None = None
    guard_pct: float | None = None
    mde_pct: float | None = None
    note: str | None = None
    # Which estimator ran: Welch's t on the rounds of each side, or the paired one on the
    # differences of pairs measured close in time (a design with `paired`), and on how
    # many complete pairs.
    method: Literal["paired", "welch"] | None = None
    pairs: int | None = None
    # The verdict the row had before something made it inconclusive (None: not demoted):
    # the null control of its configuration, which moved as much in the same direction
    # ("control"), or the runner's sequential test, which stopped without that verdict
    # ("sequential"; the fixed interval of a stopped run does not allow for its looks).
    demoted_from: Verdict | None = None
    demoted_by: Literal["control", "sequential"] | None = None


class Headline(BaseModel):
    metric: str
    mode: Mode
    concurrency: int
    delta_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    verdict: Verdict
    threshold_pct: float | None = None
    threshold_abs: float | None = None
    # A failed guard's row (another mode, concurrency or metric), which decided the
    # verdict: no primary row did.
    guard: bool = False


class AdaptiveRowResult(BaseModel):
    row: str
    verdict: str | None
    stopped: str | None
    rounds: int | None
    reason: str | None


class AdaptiveResult(BaseModel):
    method: str | None
    stopped: StopReason | None
    threshold_pct: float | None
    max_rounds: int | None
    gpu_minutes_budget: float | None
    rows: list[AdaptiveRowResult] = Field(default_factory=list)


class DesignServerResult(BaseModel):
    """One server start of an alternating design, as the report shows it."""

    side: Side
    rows: list[str] = Field(default_factory=list)
    startup_s: float | None = None
    vram_mib: float | None = None
    memory_fraction: float | None = None
    gpu_memory_total_mib: float | None = None


class DesignResult(BaseModel):
    """Which design measured a GPU's runs and what it assumes. `summary` and `assumes`
    are the engine's own words for a design it knows; what the runner wrote is kept
    apart (`runner_summary`, `runner_assumes`, bounded) and is only ever quoted."""

    name: str
    recorded: bool = True  # False: the bundle predates `design` (read as sequential)
    known: bool = True
    paired: bool = False  # as the engine analysed the runs
    rounds: bool = False  # … its pairs rounds minutes apart (the sequential design)
    unit: str = "round"
    summary: str
    assumes: list[str] = Field(default_factory=list)
    burst_requests: int | None = None
    burst_sizing: BurstSizing | None = None
    servers: list[DesignServerResult] = Field(default_factory=list)
    runner_summary: str | None = None
    runner_assumes: list[str] = Field(default_factory=list)


class HostCpu(BaseModel):
    """The host CPU's own speed over a bundle's runs (each run's `host_cpu_ms`, a fixed
    Python loop timed before the server starts): how much the machine itself moved."""

    runs: int
    min_ms: float
    max_ms: float
    cv_pct: float
    median_base_ms: float | None = None
    median_head_ms: float | None = None
    side_gap_pct: float = 0.0  # head's median against base's
    threshold_pct: float
    steady: bool  # CV and side gap both within threshold_pct


class ControlRow(BaseModel):
    """The null control of one configuration: base against the base code again in the
    head's place, compared like a row on the primary metric (head = the control)."""

    gpu: str
    mode: Mode
    concurrency: int
    metric: str
    label: str
    better: Literal["higher", "lower"]
    delta_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    delta_abs: float | None = None
    ci_low_abs: float | None = None
    ci_high_abs: float | None = None
    p_value: float | None = None
    mde_pct: float | None = None
    method: Literal["paired", "welch"]
    pairs: int | None = None  # complete control pairs compared (paired only)
    n_base: int = 0
    n_control: int = 0
    verdict: Verdict
    threshold_pct: float | None = None
    threshold_abs: float | None = None
    moved: bool = False  # improved/regressed, or its point estimate past the threshold
    note: str | None = None


class ControlResult(BaseModel):
    """A GPU's null control: which kind (the engine's words for it), its GPU cost and
    its rows. `runner_summary` is the runner's own description, bounded, only quoted."""

    kind: str
    summary: str
    runs: int
    gpu_minutes: float | None = None
    rows: list[ControlRow] = Field(default_factory=list)
    runner_summary: str | None = None


class Measured(BaseModel):
    """What one GPU's runner measured, from its manifest's `benchmark` (docs/bundle.md)
    and its runs: the runner's own text, bounded; None or empty where not recorded."""

    command: str | None = None  # the first mode's benchmark command (a template)
    commands: dict[str, str] = Field(default_factory=dict)  # per mode
    server_command: str | None = None
    dataset: str | None = None
    dataset_sha256: str | None = None
    dataset_sha256_head: str | None = None  # only when the head read another file
    modes: list[str] = Field(default_factory=list)
    concurrencies: list[int] = Field(default_factory=list)
    rounds: int | Literal["auto"] | None = None  # a side, or "auto": until decided
    max_rounds: int | None = None  # with "auto": the most a side
    gpu_minutes_budget: float | None = None  # with "auto": at most, both sides
    threshold_pct: float | None = None  # with "auto": the runner's practical threshold
    requests: int | None = None  # measured requests a run
    warmup_requests: int | None = None  # before each measured run


class Cost(BaseModel):
    """What one GPU kind's measurement cost, for later estimates (evidence/cost.py)."""

    design: str  # the design that measured (sequential, alternate, crossover, …)
    starts: int = Field(ge=0)  # server starts, both sides (the null control's included)
    startup_s: float | None = Field(default=None, ge=0)  # mean seconds a start took
    rows: int = Field(ge=0)  # mode × concurrency rows planned
    modes: int = Field(ge=0)  # modes planned
    rounds: int = Field(ge=0)  # rounds (pairs) a side that ran, the most of any row
    runs: int = Field(ge=0)  # runs or bursts that ran, both sides
    gpu_minutes: float | None = Field(default=None, ge=0)  # both sides, start-ups included
    run_s: float | None = Field(default=None, ge=0)  # GPU seconds a run, start-ups aside
    adaptive: bool = False  # rounds until decided (`rounds` is then where they stopped)
    control_runs: int = Field(default=0, ge=0)  # runs of the null control, beside `runs`
    # GPU seconds a run of each side's commit, its own start-ups aside: the estimate of a
    # later verification of the same commit starts from them.
    base_run_s: float | None = Field(default=None, ge=0)
    head_run_s: float | None = Field(default=None, ge=0)


class GpuResult(BaseModel):
    verdict: Overall
    reason: str
    headline: Headline | None = None
    claim_status: ClaimStatus = "none"
    fingerprint: dict[str, dict[str, Any]] = Field(default_factory=dict)
    startup_s: dict[str, float | None] = Field(default_factory=dict)
    peak_vram_mib: dict[str, float | None] = Field(default_factory=dict)
    runner: str | None = None
    rounds_per_side: int = 0
    per_request_audit: bool = True
    # The runner's sequential decision when the rounds ran until decided (None: fixed
    # rounds), and the GPU minutes of each side, start-ups included (None: not recorded).
    adaptive: AdaptiveResult | None = None
    gpu_minutes: GpuMinutes | None = None
    # How base and head were measured, and how steady the host was (None: evidence
    # from before these were recorded; no `host_cpu_ms` in the runs).
    design: DesignResult | None = None
    host_cpu: HostCpu | None = None
    # The null control (None: none ran, or evidence from before controls).
    control: ControlResult | None = None
    # The benchmark, dataset, requests and rounds (None: evidence from before this).
    measured: Measured | None = None
    # What the measurement cost, for later estimates (None: evidence from before this).
    cost: Cost | None = None


class ClaimRowResult(BaseModel):
    gpu: str
    concurrency: int
    status: ClaimStatus
    delta_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None


class ClaimResult(BaseModel):
    status: ClaimStatus
    message: str
    metric: str | None = None
    mode: Mode | None = None
    gpu: str | None = None
    claimed_delta_pct: float | None = None
    rows: list[ClaimRowResult] = Field(default_factory=list)


class RoundValue(BaseModel):
    """One measured round: what the per-round plot and the report's round table show."""

    gpu: str
    mode: Mode
    concurrency: int
    side: Side
    round: int
    order: int
    run_id: str
    throughput_qps: float | None
    status: RunStatus = "ok"


class Plot(BaseModel):
    name: str
    title: str
    path: str
    url: str | None = None


class Link(BaseModel):
    label: str
    url: str


class Reproduce(BaseModel):
    command: str
    base_sha: str
    head_sha: str
    head_repo: str | None
    image: str | None
    image_digest: str | None
    gpus: list[str]
    # The commit of the runner's checkout that measured (None: not recorded).
    runner_commit: str | None = None


class Evidence(BaseModel):
    schema_: str = Field(default=SCHEMA, alias="schema")
    verdict: Overall
    reason: str
    verification_id: str | None
    repo: str | None
    task: str | None
    base_sha: str | None
    head_sha: str | None
    head_repo: str | None = None
    threshold_pct: float
    gpus: dict[str, GpuResult]
    audit: list[Finding]
    study: list[StudyRow]
    caveats: list[str]
    claim: ClaimResult
    rounds: list[RoundValue] = Field(default_factory=list)
    links: list[Link] = Field(default_factory=list)
    attribution: list[AttributionEntry] = Field(default_factory=list)
    # GPU kinds of the verification with no bundle, and why: the evidence is partial.
    missing: dict[str, str] = Field(default_factory=dict)
    plots: list[Plot] = Field(default_factory=list)
    reproduce: Reproduce | None = None
    candidate: dict[str, Any] | None = None
    inputs: list[str] = Field(default_factory=list)
    per_request_audit: bool = True
    # The most rounds a side one command may ask in the repository (None: not known).
    max_rounds: int | None = None

    model_config = ConfigDict(populate_by_name=True)

    @model_validator(mode="after")
    def _read_legacy_no_change(self) -> Evidence:
        """Evidence written before "inconclusive" existed said no-change for every row
        that did not move past the threshold, however wide its interval. Such a row (it
        records no threshold of its own) is read with the evidence's threshold: no-change
        when its interval lies inside ± the threshold, else inconclusive, and a GPU's or
        the overall no-change that rested on it becomes inconclusive too. Rates judged by
        an absolute threshold (their interval is absolute) are left as they were."""
        legacy = [
            r
            for r in self.study
            if r.threshold_pct is None and r.threshold_abs is None and r.ci_low_abs is None
        ]
        if not legacy:
            return self
        t = self.threshold_pct
        for r in legacy:
            r.threshold_pct = t
            if r.verdict == "no-change" and not (
                r.ci_low_pct is not None
                and r.ci_high_pct is not None
                and -t < r.ci_low_pct
                and r.ci_high_pct < t
            ):
                r.verdict = "inconclusive"
        wide = [r for r in legacy if r.primary and r.verdict == "inconclusive"]
        for gpu, g in self.gpus.items():
            h = g.headline
            if h is not None and h.threshold_pct is None and h.threshold_abs is None:
                h.threshold_pct = t
                same = [
                    r
                    for r in legacy
                    if (r.gpu, r.metric, r.mode, r.concurrency)
                    == (gpu, h.metric, h.mode, h.concurrency)
                ]
                if same:
                    h.verdict = same[0].verdict
            if g.verdict == "no-change" and any(r.gpu == gpu for r in wide):
                g.verdict = "inconclusive"
        if self.verdict == "no-change" and wide:
            self.verdict = "inconclusive"
        return self
