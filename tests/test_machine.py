"""The verification state machine on its own: every state × every event, and the paths
that matter (two GPUs, one failing, cancels and supersessions that must not erase)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from bot.verification import machine as M
from bot.verification import reasons as R
from bot.verification.reasons import Reason

GPUS = ("H100", "H200")


def fresh(*gpus: str, requested_by: str | None = None) -> M.Verification:
    return M.Verification(
        state=M.State.QUEUED,
        jobs=tuple(M.Job(g) for g in gpus or GPUS),
        requested_by=requested_by,
    )


def run(v: M.Verification, *events: M.Event) -> tuple[M.Verification, list[M.Effect]]:
    out: list[M.Effect] = []
    for e in events:
        v, effects = M.step(v, e)
        out += effects
    return v, out


def dispatched(*gpus: str, requested_by: str | None = None) -> M.Verification:
    v, _ = run(fresh(*gpus, requested_by=requested_by), M.Start())
    for i, g in enumerate(gpus or GPUS):
        v, _ = M.step(v, M.Dispatched(g, 100 + i, f"https://runs/{100 + i}"))
    return v


def kinds(effects: list[M.Effect] | tuple[M.Effect, ...]) -> list[str]:
    return [type(e).__name__ for e in effects]


SAMPLE_EVENTS: list[M.Event] = [
    M.Start(),
    M.Start(busy=2, max_running=2),
    M.Dispatched("H100", 7, "u"),
    M.Dispatched("H100"),
    M.RunLocated("H100", 7, "u"),
    M.RunStarted("H100"),
    M.RunCompleted("H100", "success", "u"),
    M.RunCompleted("H100", "failure", "u"),
    M.RunCompleted("H100", "cancelled"),
    M.RunCompleted("H100", "timed_out"),
    M.BundleKept("H100"),
    M.BundleRejected("H100", Reason(R.BUNDLE_REJECTED, {"gpu": "H100", "problem": "x"})),
    M.RunTimedOut("H100", 360),
    M.EvidenceBuilt("improved"),
    M.AlsoAsked("carol"),
    M.EvidenceFailed(Reason(R.BUNDLE_UNREADABLE, {"problem": "x"})),
    M.Cancel(Reason(R.CANCELLED_BY, {"user": "alice"})),
    M.Supersede("v-0000000001", "f" * 40),
    M.StepFailed("Dispatch", "GitHub unreachable", 6),
    M.HeadNotTip("a" * 40, "c" * 40, "fork:branch"),
    M.Dispatched("H999"),
    M.RunStarted("H999"),
    M.RunCompleted("H999", "success"),
    M.BundleKept("H999"),
    M.RunTimedOut("H999", 1),
    M.AwaitApproval("b" * 40, "drive-by"),
    M.StalePress("mia", "b" * 40, "c" * 40),
]


def states_reachable() -> list[M.Verification]:
    """A verification in every state (and jobs in every job state), from real paths."""
    out = [fresh(), dispatched()]
    v = dispatched()
    v, _ = M.step(v, M.RunStarted("H100"))
    out.append(v)
    v, _ = run(v, M.RunCompleted("H100", "success"))
    out.append(v)
    v, _ = run(v, M.BundleKept("H100"))
    out.append(v)
    v, _ = run(v, M.RunCompleted("H200", "success"), M.BundleKept("H200"))
    assert v.state == M.State.INGESTING
    out.append(v)
    out.append(run(v, M.EvidenceBuilt("improved"))[0])
    out.append(run(dispatched(), M.Cancel(Reason(R.CANCELLED_BY, {"user": "a"})))[0])
    out.append(run(dispatched(), M.Supersede("v-1", "a" * 40))[0])
    out.append(run(dispatched(), M.StepFailed("X", "e", 3))[0])
    out.append(run(dispatched(), M.RunTimedOut("H100", 1), M.RunTimedOut("H200", 1))[0])
    out.append(awaiting())
    return out


def awaiting() -> M.Verification:
    return M.step(fresh(), M.AwaitApproval("b" * 40, "drive-by"))[0]


def test_every_state_is_reached() -> None:
    seen = {v.state for v in states_reachable()}
    assert seen == set(M.State)


@pytest.mark.parametrize(
    ("v", "event"),
    list(itertools.product(states_reachable(), SAMPLE_EVENTS)),
    ids=lambda x: type(x).__name__ if not isinstance(x, M.Verification) else x.state.value,
)
def test_every_state_and_event(v: M.Verification, event: M.Event) -> None:
    """Invariants that hold for any transition: final states never move, effects only
    come with a change or a retry of a dispatch, a final state carries its reason, job
    states only move forward, and every effect survives the outbox's JSON."""
    after, effects = M.step(v, event)
    if isinstance(event, M.StalePress):  # in any state: the presser is told, nothing moves
        assert after == v
        assert kinds(effects) == ["Reply"]
        kind, params = M.effect_to_json(effects[0])
        assert M.effect_from_json(kind, params) == effects[0]
        return
    if isinstance(event, M.AlsoAsked):  # one more requester: told now if it has ended
        assert after.state == v.state
        assert after.jobs == v.jobs
        assert effects == ((M.Notify("carol"),) if v.state.final else ())
        return
    if v.state.final:
        assert after == v
        # Only a run learnt of too late is cancelled.
        assert all(isinstance(e, M.CancelRun) for e in effects)
        assert not effects or isinstance(event, M.Dispatched | M.RunLocated)
        return
    if after == v:  # nothing moved: at most a run learnt of too late is cancelled
        assert all(isinstance(e, M.CancelRun) for e in effects)
        assert not effects or isinstance(event, M.Dispatched | M.RunLocated)
    if after.state.final and after.state != M.State.PUBLISHED:
        assert after.reason is not None
        assert not any(j.state.live for j in after.jobs)
        assert "CompleteCheckRun" in kinds(effects)
        assert "EndVerification" in kinds(effects)
    order = list(M.JobState)
    for before_job, after_job in zip(v.jobs, after.jobs, strict=True):
        if before_job.state.over:
            assert after_job == before_job
        else:
            assert order.index(after_job.state) >= order.index(before_job.state) or (
                after_job.state.over
            )
    for e in effects:
        kind, params = M.effect_to_json(e)
        assert M.effect_from_json(kind, params) == e


def test_start_dispatches_each_gpu_once() -> None:
    v, effects = M.step(fresh(), M.Start())
    # The body's section says a newer measurement is under way (when one was published).
    assert kinds(effects) == [
        "EnsurePullRequest",
        "EnsureCheckRun",
        "UpdatePrBody",
        "Dispatch",
        "Dispatch",
    ]
    assert all(j.state == M.JobState.DISPATCHING for j in v.jobs)
    again, more = M.step(v, M.Start())
    assert (again, more) == (v, ())


def test_over_budget_stays_queued() -> None:
    v, effects = M.step(fresh(), M.Start(busy=2, max_running=2))
    assert v == fresh()
    assert effects == ()


def test_check_run_in_progress_once_every_gpu_is_dispatched() -> None:
    v, _ = M.step(fresh(), M.Start())
    v, e1 = M.step(v, M.Dispatched("H100", 1))
    assert v.state == M.State.DISPATCHED
    assert e1 == ()
    v, e2 = M.step(v, M.Dispatched("H200", 2))
    assert kinds(e2) == ["CheckRunInProgress"]


def test_run_id_learnt_by_name_is_kept_when_dispatch_returns_none() -> None:
    v, _ = M.step(fresh("H100"), M.Start())
    v, _ = M.step(v, M.RunLocated("H100", 55, "u"))
    v, _ = M.step(v, M.Dispatched("H100", None, None))
    assert v.jobs[0].run_id == 55
    assert v.jobs[0].state == M.JobState.DISPATCHED


def test_two_gpus_publish_once_when_both_are_kept() -> None:
    v = dispatched()
    v, e = run(v, M.RunCompleted("H100", "success"), M.RunCompleted("H200", "success"))
    assert kinds(e) == ["Ingest", "Ingest"]
    v, e = M.step(v, M.BundleKept("H200"))
    assert e == ()
    assert v.state == M.State.DISPATCHED
    v, e = M.step(v, M.BundleKept("H100"))
    assert kinds(e) == ["BuildEvidence"]
    assert v.state == M.State.INGESTING
    v, e = M.step(v, M.BundleKept("H100"))
    assert e == ()


def test_one_gpu_failing_still_publishes_the_other() -> None:
    v = dispatched(requested_by="alice")
    v, e = run(v, M.RunCompleted("H100", "failure", "https://runs/1"))
    assert v.state == M.State.DISPATCHED
    assert e == []
    assert v.jobs[0].reason == Reason(R.RUN_FAILED)
    v, e = run(v, M.RunCompleted("H200", "success"), M.BundleKept("H200"))
    assert v.state == M.State.INGESTING
    assert kinds(e) == ["Ingest", "BuildEvidence"]
    v, e = run(v, M.EvidenceBuilt("improved"))
    assert v.state == M.State.PUBLISHED
    assert kinds(e) == [
        "UpsertComment",
        "UpdatePrBody",
        "CompleteCheckRun",
        "EndVerification",
        "Notify",
    ]
    assert e[-1] == M.Notify("alice")
    # Partial results: the H100 failed, so an improvement on the H200 alone is neutral.
    assert M.CompleteCheckRun("neutral") in e


@pytest.mark.parametrize(
    ("verdict", "conclusion"),
    [
        ("improved", "success"),
        ("regressed", "failure"),
        ("invalid", "failure"),
        ("no-change", "neutral"),
        ("inconclusive", "neutral"),
        ("something-new", "neutral"),
    ],
)
def test_the_machine_decides_the_check_run_s_conclusion(verdict: str, conclusion: str) -> None:
    v = dispatched("H200")
    v, _ = run(v, M.RunCompleted("H200", "success"), M.BundleKept("H200"))
    _, e = run(v, M.EvidenceBuilt(verdict))
    assert M.CompleteCheckRun(conclusion) in e


def test_a_regression_measured_on_one_gpu_of_two_stays_a_failure() -> None:
    v = dispatched()
    v, _ = run(
        v,
        M.RunCompleted("H100", "failure"),
        M.RunCompleted("H200", "success"),
        M.BundleKept("H200"),
    )
    _, e = run(v, M.EvidenceBuilt("regressed"))
    assert M.CompleteCheckRun("failure") in e


@pytest.mark.parametrize(
    ("conclusion", "job_state", "state", "code"),
    [
        ("failure", M.JobState.FAILED, M.State.FAILED, R.RUN_FAILED),
        ("cancelled", M.JobState.CANCELLED, M.State.CANCELLED, R.RUN_CANCELLED),
        ("timed_out", M.JobState.TIMED_OUT, M.State.TIMED_OUT, R.RUN_TIMED_OUT),
        ("startup_failure", M.JobState.FAILED, M.State.FAILED, R.RUN_FAILED),
    ],
)
def test_a_lone_failing_gpu_ends_with_its_reason(
    conclusion: str, job_state: M.JobState, state: M.State, code: str
) -> None:
    v, e = M.step(dispatched("H200"), M.RunCompleted("H200", conclusion, "u"))
    assert v.state == state
    assert v.jobs[0].state == job_state
    assert v.reason is not None
    assert v.reason.code == code
    assert kinds(e) == ["CompleteCheckRun", "UpsertComment", "UpdatePrBody", "EndVerification"]


def test_every_gpu_failing_ends_with_no_evidence() -> None:
    v, _e = run(dispatched(), M.RunCompleted("H100", "failure"), M.RunCompleted("H200", "failure"))
    assert v.state == M.State.FAILED
    assert v.reason == Reason(R.NO_EVIDENCE)


def test_silent_runners_time_out_and_are_cancelled() -> None:
    v, e = run(dispatched(), M.RunTimedOut("H100", 360))
    assert v.state == M.State.DISPATCHED
    assert kinds(e) == ["CancelRun"]
    v, e = run(v, M.RunTimedOut("H200", 360))
    assert v.state == M.State.TIMED_OUT
    assert kinds(e)[0] == "CancelRun"


def test_a_timed_out_gpu_does_not_hide_the_other_gpus_evidence() -> None:
    v, _ = run(dispatched(), M.RunCompleted("H200", "success"), M.BundleKept("H200"))
    v, e = M.step(v, M.RunTimedOut("H100", 360))
    assert v.state == M.State.INGESTING
    assert kinds(e) == ["CancelRun", "BuildEvidence"]


def test_rejected_bundle_is_a_failed_gpu() -> None:
    why = Reason(R.BUNDLE_REJECTED, {"gpu": "H100", "problem": "wrong head"})
    v, _ = run(dispatched("H100"), M.RunCompleted("H100", "success"), M.BundleRejected("H100", why))
    assert v.state == M.State.FAILED
    assert v.reason == why


def test_cancel_stops_live_runs_and_keeps_the_comment_truthful() -> None:
    v, _ = run(dispatched(requested_by="bob"), M.RunStarted("H100"))
    v, e = M.step(v, M.Cancel(Reason(R.CANCELLED_BY, {"user": "carol"})))
    assert v.state == M.State.CANCELLED
    assert kinds(e) == [
        "CancelRun",
        "CancelRun",
        "CompleteCheckRun",
        "UpsertComment",
        "UpdatePrBody",
        "EndVerification",
        "Notify",
    ]
    assert all(j.state == M.JobState.CANCELLED for j in v.jobs)


def test_who_cancels_is_not_also_notified() -> None:
    v, e = M.step(dispatched(requested_by="bob"), M.Cancel(Reason(R.CANCELLED_BY, {"user": "bob"})))
    assert v.state == M.State.CANCELLED
    assert "Notify" not in kinds(e)


def test_cancel_before_dispatch_cancels_no_run() -> None:
    v, e = M.step(fresh(), M.Cancel(Reason(R.PR_CLOSED, {"state": "closed"})))
    assert v.state == M.State.CANCELLED
    assert "CancelRun" not in kinds(e)


def test_supersede_says_nothing_on_the_comment_and_notifies_nobody() -> None:
    v, e = M.step(dispatched(requested_by="bob"), M.Supersede("v-2", "b" * 40))
    assert v.state == M.State.SUPERSEDED
    assert "UpsertComment" not in kinds(e)
    assert "Notify" not in kinds(e)


def test_a_head_awaiting_approval_runs_nothing_until_it_is_superseded() -> None:
    """An untrusted head waits: a check run (the executor makes it `action_required` with
    the button) and the comment say so; no start dispatches it; when an approval's own
    verification (or a newer head) supersedes it, the button goes and the comment says
    what is true now."""
    v, effects = M.step(fresh(), M.AwaitApproval("b" * 40, "drive-by"))
    assert v.state == M.State.AWAITING_APPROVAL
    assert not v.state.final
    assert kinds(effects) == ["EnsureCheckRun", "UpsertComment"]
    assert v.reason == Reason(R.AWAITING_APPROVAL)
    assert v.reason is not None
    assert v.reason.params == {"sha": "b" * 40, "pusher": "drive-by"}
    assert M.step(v, M.Start()) == (v, ())
    assert M.step(v, M.AwaitApproval("b" * 40, "drive-by")) == (v, ())
    ended, effects = M.step(v, M.Supersede("v-2", "b" * 40))
    assert ended.state == M.State.SUPERSEDED
    assert M.CompleteCheckRun("neutral", drop_actions=True) in effects
    assert "UpsertComment" in kinds(effects)
    assert "CancelRun" not in kinds(effects)
    # Only a verification that never started waits.
    assert M.step(dispatched(), M.AwaitApproval("b" * 40, "x")) == (dispatched(), ())


def test_a_stale_press_is_answered_whatever_the_state() -> None:
    for v in (dispatched(), run(dispatched(), M.Supersede("v-2", "c" * 40))[0]):
        after, effects = M.step(v, M.StalePress("mia", "b" * 40, "c" * 40))
        assert after == v
        [said] = effects
        assert isinstance(said, M.Reply)
        assert said.user == "mia"
        assert said.reason.params == {"sha": "b" * 40, "head": "c" * 40}


def test_a_promoted_commit_that_is_not_the_prs_head_is_never_dispatched() -> None:
    """The PR shows another head than the promoted one: the dispatches under way are
    cancelled before they reach GitHub, and the reason names both commits and the branch."""
    v, effects = run(fresh(), M.Start(), M.HeadNotTip("a" * 40, "c" * 40, "fork:branch"))
    assert v.state == M.State.FAILED
    assert all(j.state == M.JobState.CANCELLED for j in v.jobs)
    assert v.reason == Reason(R.HEAD_NOT_TIP)
    assert v.reason is not None
    assert v.reason.params == {"sha": "a" * 40, "tip": "c" * 40, "branch": "fork:branch"}
    assert "UpsertComment" in kinds(effects)


def test_evidence_failure_only_while_ingesting() -> None:
    why = Reason(R.BUNDLE_UNREADABLE, {"problem": "x"})
    assert M.step(dispatched(), M.EvidenceFailed(why)) == (dispatched(), ())
    v, _ = run(dispatched("H100"), M.RunCompleted("H100", "success"), M.BundleKept("H100"))
    v, e = M.step(v, M.EvidenceFailed(why))
    assert v.state == M.State.FAILED
    assert v.reason == why
    assert M.CompleteCheckRun("failure") in e


def test_step_failed_ends_any_active_state() -> None:
    for v in states_reachable():
        if v.state.final:
            continue
        after, _e = M.step(v, M.StepFailed("Ingest", "boom", 6))
        assert after.state == M.State.FAILED
        assert after.reason == Reason(R.STEP_FAILED)
        assert after.reason is not None
        assert after.reason.params["attempts"] == 6


def test_late_events_after_the_end_change_nothing() -> None:
    v, _ = run(dispatched("H100"), M.RunCompleted("H100", "failure"))
    for e in SAMPLE_EVENTS:
        after, effects = M.step(v, e)
        assert after == v
        if isinstance(e, M.StalePress):  # answered, nothing moves
            assert kinds(effects) == ["Reply"]
        elif isinstance(e, M.AlsoAsked):  # asked after the end: told at once
            assert effects == (M.Notify("carol"),)
        elif effects:  # a run of the ended job that is not the one it had
            assert isinstance(e, M.Dispatched | M.RunLocated)
            assert effects == (M.CancelRun("H100", 7),)


def test_a_run_dispatched_while_the_verification_was_cancelled_is_cancelled() -> None:
    v, _ = M.step(fresh("H200"), M.Start())  # the dispatch is under way
    v, _ = M.step(v, M.Cancel(Reason(R.CANCELLED_BY, {"user": "a"})))
    assert v.jobs[0].run_id is None
    after, effects = M.step(v, M.Dispatched("H200", 99, "u"))
    assert after == v
    assert effects == (M.CancelRun("H200", 99),)
    assert M.step(v, M.RunLocated("H200", 99)) == (v, (M.CancelRun("H200", 99),))
    assert M.step(v, M.Dispatched("H200", None)) == (v, ())


def test_unknown_gpu_is_ignored() -> None:
    v = dispatched()
    for e in (M.RunStarted("A100"), M.RunCompleted("A100", "success"), M.BundleKept("A100")):
        assert M.step(v, e) == (v, ())


def test_reason_codes_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown reason code"):
        Reason("made-up")
    assert Reason.from_json({"code": "made-up"}) is None
    assert Reason.from_json(None) is None
    r = Reason(R.NO_REPORT, {"gpu": "H100", "minutes": 5})
    assert Reason.from_json(r.to_json()) == r


def test_not_an_event() -> None:
    with pytest.raises(TypeError):
        M.step(dispatched(), "start")  # type: ignore[arg-type]


def test_job_helpers() -> None:
    v = dispatched()
    assert v.job("h100") is not None
    assert v.job("A100") is None
    changed = v.with_job(replace(v.jobs[0], state=M.JobState.RUNNING))
    assert changed.jobs[0].state == M.JobState.RUNNING
    assert changed.jobs[1] == v.jobs[1]


def _measurement(
    vid: str, head: str = "a" * 40, awaiting: bool = False, rounds: int = 5
) -> M.Measurement:
    return M.Measurement(
        vid, head, "b" * 40, ("H200",), (rounds, False, None), ("streaming",), awaiting
    )


def test_a_request_for_the_same_measurement_joins_it() -> None:
    active = (_measurement("v-old", head="c" * 40), _measurement("v-same"))
    plan = M.plan_head(active, _measurement(""))
    assert plan == M.HeadPlan(join="v-same", supersede=())


def test_a_new_measurement_supersedes_every_active_one() -> None:
    active = (_measurement("v-old", head="c" * 40), _measurement("v-fewer", rounds=3))
    plan = M.plan_head(active, _measurement(""))
    assert plan == M.HeadPlan(join=None, supersede=("v-old", "v-fewer"))


def test_one_that_runs_never_joins_one_that_awaits_approval_nor_the_reverse() -> None:
    waiting = (_measurement("v-waits", awaiting=True),)
    assert M.plan_head(waiting, _measurement("")).join is None
    running = (_measurement("v-runs"),)
    assert M.plan_head(running, _measurement("", awaiting=True)) == M.HeadPlan(None, ("v-runs",))
