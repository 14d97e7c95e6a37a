#!/usr/bin/env bash
# Entry point of the rsi-verify GPU runner image (runners/container/Dockerfile): check
# that this container can isolate candidate code, register one runner for one job, run
# it. Labels: self-hosted,linux,<gpu> — what the workflow's
# runs-on: [self-hosted, linux, <gpu>] asks for.
#
# Under actions-runner-controller the pod gets ACTIONS_RUNNER_INPUT_JITCONFIG and nothing
# else is needed. Otherwise either (JIT, preferred: no registration token in the container)
#   RSI_JITCONFIG       the encoded JIT configuration (REST: generate-jitconfig, with
#                       labels self-hosted, linux, <gpu>)
# or (ephemeral registration)
#   RSI_RUNNER_URL      the runner repository, e.g. <server>/OWNER/RUNNER_REPO
#   RSI_RUNNER_TOKEN    a registration token (expires in an hour)
#   RSI_GPU             h100 or h200
#   RSI_RUNNER_GROUP    optional: the runner group (one only this repository may use)
#   RSI_RUNNER_NAME     optional: default rsi-<gpu>-<hostname>
set -euo pipefail

die() { echo "rsi-runner-entrypoint: $*" >&2; exit 1; }

# Candidate isolation: root, the two users, and a cgroup v2 tree this container may
# write to (docker run --cgroupns=private and a writable /sys/fs/cgroup, or --privileged).
[[ "$(id -u)" == 0 ]] || die "must run as root (verify switches users and creates cgroups)"
[[ -f /sys/fs/cgroup/cgroup.controllers ]] || die "no cgroup v2 hierarchy at /sys/fs/cgroup"
[[ -w /sys/fs/cgroup ]] ||
    die "/sys/fs/cgroup is read-only: run with --cgroupns=private and a writable cgroup (--privileged, or --cgroup-parent with delegation)"
if ! err="$(cd /opt/rsi && python3 -m runners sandbox 2>&1 >/dev/null)"; then
    die "the candidate isolation self-check failed: $err"
fi

cd /actions-runner
if [[ -n "${ACTIONS_RUNNER_INPUT_JITCONFIG:-}" ]]; then
    # actions-runner-controller hands the pod its JIT configuration in this variable,
    # which run.sh reads itself.
    exec ./run.sh
fi
if [[ -n "${RSI_JITCONFIG:-}" ]]; then
    jit="$RSI_JITCONFIG"
    unset RSI_JITCONFIG # the job must not see it
    exec ./run.sh --jitconfig "$jit"
fi

: "${RSI_RUNNER_URL:?set RSI_RUNNER_URL (or RSI_JITCONFIG)}"
: "${RSI_RUNNER_TOKEN:?set RSI_RUNNER_TOKEN (or RSI_JITCONFIG)}"
: "${RSI_GPU:?set RSI_GPU (h100 or h200)}"
[[ "$RSI_GPU" =~ ^[a-z0-9]+$ ]] || die "RSI_GPU must be a runner label such as h200"
group=()
if [[ -n "${RSI_RUNNER_GROUP:-}" ]]; then group=(--runnergroup "$RSI_RUNNER_GROUP"); fi
token="$RSI_RUNNER_TOKEN"
unset RSI_RUNNER_TOKEN # the job must not see it
./config.sh --url "$RSI_RUNNER_URL" --token "$token" \
    --name "${RSI_RUNNER_NAME:-rsi-$RSI_GPU-$(hostname)}" \
    --labels "self-hosted,linux,$RSI_GPU" --no-default-labels \
    "${group[@]}" --ephemeral --unattended --disableupdate
unset token
exec ./run.sh
