"""`rsi-bot` command line. Heavy imports happen inside commands so `--help` stays fast."""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from bot.config import Settings
from evidence.bounds import DEFAULT as BOUNDS  # standard library only: no NumPy here


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rsi-bot")
def main() -> None:
    """rsi-bot: evidence-bearing pull requests for GPU serving performance changes."""


def _finite(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    if value != value or value in (float("inf"), float("-inf")):  # NaN is not equal to itself
        raise click.BadParameter("must be a finite number")
    return value


def _web_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """An http(s) URL with a host: anything else would make every link in the report dead
    (or worse), and was dropped silently."""
    from urllib.parse import urlsplit

    if value is None:
        return None
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:  # "http://[::1": an unclosed IPv6 address
        host = None
    if host is None or parts.scheme not in ("http", "https"):
        raise click.BadParameter(f"{value!r} is not an http(s) URL with a host")
    return value


def _out_dir(_ctx: click.Context, _param: click.Parameter, value: Path) -> Path:
    """DIR checked before any work, not after it: a folder, or one that can be made in
    the nearest folder that exists. Nothing is created until the evidence is built."""
    if value.exists() and not value.is_dir():
        raise click.BadParameter(f"{value} is a file, not a folder")
    there = value
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        raise click.BadParameter(f"cannot make {value}: {there} is not a folder")
    if not os.access(there, os.W_OK | os.X_OK):
        raise click.BadParameter(f"cannot write into {there}")
    return value


@main.command()
@click.argument("bundles", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--candidate", type=click.Path(path_type=Path), help="Intake JSON of the candidate.")
@click.option("--history", type=click.Path(path_type=Path), help="Earlier measurements of main.")
@click.option(
    "--attribution", type=click.Path(path_type=Path), help="Other PRs merged between base and head."
)
@click.option(
    "--threshold",
    type=click.FloatRange(min=0),
    default=3.0,
    show_default=True,
    callback=_finite,
    help="Practical threshold in percent.",
)
@click.option(
    "--github-url",
    default="https://github.com",
    show_default=True,
    callback=_web_url,
    help="GitHub (Enterprise) web URL for compare links.",
)
@click.option(
    "--public-url",
    default=None,
    callback=_web_url,
    help="Base URL where DIR will be served (plot links).",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path),
    callback=_out_dir,
    metavar="DIR",
)
@click.option(
    "--max-bundle-bytes",
    type=click.IntRange(min=1),
    default=BOUNDS.max_bytes,
    show_default=True,
    help="Refuse an archive that unpacks to more bytes.",
)
@click.option(
    "--max-members",
    type=click.IntRange(min=1),
    default=BOUNDS.max_members,
    show_default=True,
    help="Refuse an archive of more members.",
)
@click.option(
    "--max-member-bytes",
    type=click.IntRange(min=1),
    default=BOUNDS.max_member_bytes,
    show_default=True,
    help="Refuse an archive with a member that unpacks to more bytes.",
)
@click.option(
    "--max-ratio",
    type=click.FloatRange(min=1),
    default=BOUNDS.max_ratio,
    show_default=True,
    help="Refuse an archive compressed more than this many times (past 1 MiB).",
)
@click.option(
    "--max-json-bytes",
    type=click.IntRange(min=1),
    default=BOUNDS.max_json_bytes,
    show_default=True,
    help="Refuse a manifest or run file bigger than this.",
)
@click.option(
    "--max-runs",
    type=click.IntRange(min=1),
    default=BOUNDS.max_runs,
    show_default=True,
    help="Refuse a manifest of more runs.",
)
@click.option(
    "--max-list-values",
    type=click.IntRange(min=1),
    default=BOUNDS.max_list_values,
    show_default=True,
    help="Refuse a request whose list of gaps (inter_chunk_s, itls) is longer.",
)
@click.option(
    "--max-values",
    type=click.IntRange(min=1),
    default=BOUNDS.max_values,
    show_default=True,
    help="Refuse a bundle whose run files hold more per-request numbers in all.",
)
def evidence(
    bundles: tuple[Path, ...],
    candidate: Path | None,
    history: Path | None,
    attribution: Path | None,
    threshold: float,
    github_url: str,
    public_url: str | None,
    out: Path,
    max_bundle_bytes: int,
    max_members: int,
    max_member_bytes: int,
    max_ratio: float,
    max_json_bytes: int,
    max_runs: int,
    max_list_values: int,
    max_values: int,
) -> None:
    """Build the evidence for one verification (one bundle per GPU) into DIR.

    Exits 0 whenever evidence was built, whatever the verdict; 2 on unreadable input,
    input beyond the bounds (docs/bounds.md) included, and on bundles that are not one
    verification's (different verifications, or one GPU kind twice).
    """
    from evidence import inert
    from evidence.build import Inputs, build, read_json_file, write
    from evidence.errors import InputError, NotOneVerification
    from evidence.limits import Limits
    from evidence.model import AttributionEntry, Candidate, HistoryEntry
    from evidence.policy import Policy
    from evidence.render import audit_groups

    limits = Limits(
        max_bytes=max_bundle_bytes,
        max_members=max_members,
        max_member_bytes=max_member_bytes,
        max_ratio=max_ratio,
        max_json_bytes=max_json_bytes,
        max_runs=max_runs,
        max_list_values=max_list_values,
        max_values=max_values,
    )

    try:
        inputs = Inputs(
            bundles=list(bundles),
            candidate=read_json_file(candidate, Candidate) if candidate else None,
            history=read_json_file(history, list[HistoryEntry]) if history else [],
            attribution=(
                read_json_file(attribution, list[AttributionEntry]) if attribution else []
            ),
            policy=Policy(threshold_pct=threshold),
            github_url=github_url,
            public_url=public_url,
            limits=limits,
        )
        ev, sources = build(inputs)
    except NotOneVerification as exc:
        click.echo(f"rsi-bot evidence: not one verification: {exc}", err=True)
        sys.exit(2)
    except InputError as exc:
        click.echo(f"rsi-bot evidence: unreadable input: {exc}", err=True)
        sys.exit(2)
    try:
        write(ev, sources, out, public_url)
    except OSError as exc:
        click.echo(f"rsi-bot evidence: cannot write {out}: {exc}", err=True)
        sys.exit(2)
    click.echo(f"verdict: {ev.verdict} — {ev.reason}")
    for gpu, g in ev.gpus.items():
        click.echo(f"  {gpu}: {g.verdict} — {g.reason}")
    click.echo(f"claim: {ev.claim.status}")
    errors = sum(1 for f in ev.audit if f.severity == "error")
    warnings = sum(1 for f in ev.audit if f.severity == "warning")
    click.echo(f"audit: {errors} error(s), {warnings} warning(s)")
    for sev in audit_groups(ev.audit, 3, ("error", "warning"), merge=True):
        for c in sev.codes:  # each code named, the first few of its findings said
            for i, f in enumerate(c.findings):
                times = f" ×{c.repeats(i)}" if c.repeats(i) > 1 else ""
                where = f" ({f.gpu})" if f.gpu else ""
                said = inert.clean(f"{c.code}{times}{where}: {f.message[:300]}")
                click.echo(f"  {sev.severity} {said}")
            if c.more:
                click.echo(f"  … and {c.more} more {c.code} (all in the report)")
    click.echo(f"report: {(out / 'report.html').resolve()}")


def _settings() -> Settings:
    from bot.config import ConfigError, load_settings

    try:
        return load_settings()
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the database to the newest schema (for deployments)."""
    from bot.db import upgrade

    settings = _settings()
    upgrade(settings.DATABASE_URL)
    click.echo("database is up to date")


@main.command()
@click.option("--workers", default=2, show_default=True, help="Worker threads.")
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="Serve this worker's Prometheus /metrics on this port (jobs, GitHub calls), on "
    "METRICS_HOST (default 127.0.0.1).",
)
def worker(workers: int, metrics_port: int | None) -> None:
    """Run the queue consumer (the Procfile's `worker:`)."""
    settings = _settings()  # a bad setting says so before the App is imported (2 s of it)
    from bot.db import next_step, schema_behind, shown

    behind = schema_behind(settings.DATABASE_URL)
    if behind is not None:  # every job, and the minute's reconcile, would fail on it
        click.echo(
            f"rsi-bot cannot start: the database {shown(settings.DATABASE_URL)} is not ready: "
            f"{behind}; {next_step(behind)}",
            err=True,
        )
        sys.exit(2)
    from bot import observability, runtime

    observability.configure_logging(settings)
    observability.init_sentry(settings, "worker")
    rt = runtime.build(settings)
    if metrics_port is not None:
        _serve_worker_metrics(rt, metrics_port, settings.METRICS_HOST)
    consumer = rt.huey.create_consumer(workers=workers, worker_type="thread", periodic=True)
    _hold_signals_while_starting(consumer)
    consumer.run()


def _serve_worker_metrics(rt: Any, port: int, host: str) -> None:
    """The worker's `/metrics`, if its port can be had: a port another process holds must
    not stop the jobs (the worker, started again and again, would process none)."""
    from bot import observability

    try:
        observability.serve_metrics(rt, port, host=host)
    except OSError as exc:
        logging.getLogger("rsi.worker").error(
            "the queue worker cannot serve /metrics on %s:%d (%s); it runs its jobs without "
            "them: free the port or set METRICS_PORT to another",
            host,
            port,
            exc.strerror or exc,
        )


def _hold_signals_while_starting(consumer: Any) -> None:
    """huey sets its signal handlers at the end of `start`, after its threads run: a
    SIGINT or SIGTERM in between broke the start half-way, with its threads running.
    One that comes while it starts is held, then given to huey's handlers: it stops the
    consumer as it does later."""
    import signal

    start = consumer.start

    def started() -> None:
        held: list[int] = []
        kinds = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        before = {s: signal.signal(s, lambda n, _: held.append(n)) for s in kinds}
        try:
            start()  # its last step sets huey's handlers in place of these
        except BaseException:
            for s, handler in before.items():
                signal.signal(s, handler)
            raise
        for n in held:
            signal.raise_signal(n)

    consumer.start = started


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--workers", default=2, show_default=True, help="Queue worker threads.")
@click.option(
    "--web-workers",
    default=1,
    show_default=True,
    help="gunicorn worker processes (each serves thousands of connections).",
)
def serve(host: str, port: int, workers: int, web_workers: int) -> None:
    """Run the web app and the queue worker on the embedded default (SQLite, local files).

    The web app runs in gunicorn, configured as the Procfile's `web:` (bot/gunicorn_conf.py),
    with `/metrics` on METRICS_HOST:METRICS_PORT; the queue worker (`rsi-bot worker`, its
    `/metrics` on the next port) runs beside it and is restarted if it dies.
    """
    from bot import observability, serving
    from bot.db import shown, upgrade

    settings = _settings()
    if port == settings.METRICS_PORT:
        click.echo(f"rsi-bot serve: METRICS_PORT is {port} too; /metrics needs its own", err=True)
        sys.exit(2)
    observability.configure_logging(settings)
    upgrade(settings.DATABASE_URL)
    bind = [serving.bind_address(host, port)]
    metrics_port = settings.METRICS_PORT or None
    if metrics_port:
        bind.append(serving.bind_address(settings.METRICS_HOST, metrics_port))

    def ready(bound: list[tuple[str, int]]) -> None:
        listening = serving.url_of(*bound[0])
        if "PUBLIC_URL" not in settings.model_fields_set:
            # Not the default's port: where this server really is. The web workers and
            # the queue worker start after this and read it from the environment.
            os.environ["PUBLIC_URL"] = settings.PUBLIC_URL = listening
        click.echo(f"rsi-bot listening on {listening} (database {shown(settings.DATABASE_URL)})")
        _warn_loopback(settings.PUBLIC_URL)

    serving.WebServer(
        _web_app,
        {"bind": bind, "workers": web_workers},
        queue_worker=serving.queue_worker_command(workers, metrics_port and metrics_port + 1),
        ready=ready,
    ).run()


def _warn_loopback(public_url: str) -> None:
    from bot.config import loopback_warning

    warning = loopback_warning(public_url)
    if warning:
        click.echo(warning, err=True)


def _web_app() -> object:
    """The App's WSGI app, built in each gunicorn worker."""
    from bot.web.app import create_app

    return create_app()


@main.command()
@click.option(
    "--redeliver-since",
    type=click.IntRange(1, 72),
    default=None,
    help="Also ask GitHub to redeliver what failed this many hours back (at most 72, "
    "what GitHub keeps); after an outage longer than the worker's hourly look.",
)
def reconcile(redeliver_since: int | None) -> None:
    """Re-queue lost work and time out silent runners now (the worker does it every minute)."""
    from bot import deliveries, runtime
    from bot.db import next_step, schema_behind, shown

    settings = _settings()
    behind = schema_behind(settings.DATABASE_URL)
    if behind is not None:
        click.echo(
            f"rsi-bot reconcile: the database {shown(settings.DATABASE_URL)} is not ready: "
            f"{behind}; {next_step(behind)}",
            err=True,
        )
        sys.exit(2)
    svc = runtime.build(settings)
    svc.queue.reconcile()
    if redeliver_since is not None:
        n = deliveries.redeliver_failed(svc, window_s=redeliver_since * 3600)
        if n is None:
            click.echo(
                "reconcile: GitHub could not be asked for its failed deliveries (see the "
                "log above); nothing was redelivered, try again later",
                err=True,
            )
            sys.exit(1)
        click.echo(f"asked GitHub to redeliver {n} failed deliveries")
    click.echo("reconciled")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option(
    "--manifest",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The App manifest to post (default: the project's app.yml).",
)
def setup(host: str, port: int, manifest: Path | None) -> None:
    """Create the GitHub App from app.yml and write its credentials to .env (first run).

    Serves /setup until stopped: open PUBLIC_URL/setup, create the App on GitHub, and
    GitHub sends you back to PUBLIC_URL/setup/complete, which writes APP_ID, PRIVATE_KEY,
    WEBHOOK_SECRET and RSI_INTAKE_SECRET into RSI_ENV_FILE (default .env).
    """
    from bot import observability, serving
    from bot.config import ConfigError
    from bot.web.setup import create_setup_app, load_setup_settings

    try:
        settings = load_setup_settings()
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    if settings.APP_ID is not None:
        click.echo(
            f"rsi-bot setup: APP_ID is already set (environment or {settings.RSI_ENV_FILE}); "
            "setup only creates a new App. Remove APP_ID to create another.",
            err=True,
        )
        sys.exit(2)
    observability.configure_logging(settings)
    try:  # a bad manifest stops here, not in gunicorn
        create_setup_app(settings, manifest=manifest)
    except ConfigError as exc:
        click.echo(f"rsi-bot setup cannot start: {exc}", err=True)
        sys.exit(2)

    def ready(bound: list[tuple[str, int]]) -> None:
        listening = serving.url_of(*bound[0])
        if not settings.public_url_given:  # the workers fork after this, and see it
            settings.PUBLIC_URL = listening
        click.echo(
            f"rsi-bot setup listening on {listening}: open {settings.public_url}/setup "
            f"(GitHub sends you back to {settings.public_url}/setup/complete, so that URL must "
            "reach this server). Stop with Ctrl-C once the App is created."
        )
        _warn_loopback(settings.public_url)

    # One worker: the states it issues live in its memory.
    serving.WebServer(
        lambda: create_setup_app(settings, manifest=manifest),
        {"bind": [serving.bind_address(host, port)], "workers": 1},
        ready=ready,
    ).run()


@main.command("runner-repo")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), metavar="DIR")
def runner_repo(directory: Path) -> None:
    """Write or update the runner repository in DIR from this version of rsi-bot.

    Writes .github/workflows/rsi-verify.yml, runners/ (the runner's Python files, task
    files and container recipe), .github/actionlint.yaml and RSI-VERSION (the version,
    the commit and each file's SHA-256). Running it twice changes nothing; files an older
    version wrote and this one no longer ships are removed. Commit DIR's changes then.
    """
    from bot import runner_repo as rr

    if not directory.exists() and not directory.parent.is_dir():
        # A mistyped path would otherwise become a tree of new folders.
        click.echo(
            f"rsi-bot runner-repo: cannot write {directory}: {directory.parent} is not a folder",
            err=True,
        )
        sys.exit(2)
    result = rr.write(directory)
    for rel in result.written:
        click.echo(f"wrote    {rel}")
    for rel in result.removed:
        click.echo(f"removed  {rel}")
    for rel in result.foreign:
        click.echo(f"kept     {rel} (not written by rsi-bot)")
    version = (directory / rr.VERSION_FILE).read_text().splitlines()[1:3]
    click.echo(
        f"{directory}: {len(result.written)} written, {len(result.removed)} removed, "
        f"{len(result.unchanged)} unchanged ({', '.join(version)})"
    )
    for line in _runner_repo_next(directory, bool(result.written or result.removed)):
        click.echo(line)


def _runner_repo_next(directory: Path, changed: bool) -> list[str]:
    """What to do with the copy: a git clone is committed and pushed; a plain folder
    becomes one first. Then the runners and the App's settings (README)."""
    steps = []
    if not (directory / ".git").exists():
        steps.append(
            f"{directory} is not a git clone: `git init` there (or write into a clone of "
            "your runner repository) and add it as the runner repository's remote"
        )
    if changed or steps:
        git = f"git -C {shlex.quote(str(directory))}"
        steps.append(
            f"commit and push: {git} add -A && {git} commit -m 'rsi-bot runners' && {git} push"
        )
    steps.append(
        "register a self-hosted runner per GPU kind there, labelled self-hosted, linux and "
        'h100 or h200 (README, "The runner repository")'
    )
    steps.append("set RSI_RUNNER_REPO=OWNER/NAME of that repository in the App's environment")
    return ["next:"] + [f"  {i}. {x}" for i, x in enumerate(steps, 1)]


@main.command("check-config")
@click.argument(
    "file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path(".github/rsi.yml"),
    required=False,
)
def check_config(file: Path) -> None:
    """Check a repository's .github/rsi.yml (FILE, that path by default) as the App will
    read it: each problem with its line and key, exit 1; else what a verification runs
    under it.
    """
    from bot import repo_config, yaml_bounded

    try:
        with file.open("rb") as f:  # no more than the App would read: it may be /dev/zero
            data = f.read(yaml_bounded.MAX_BYTES + 1)
        cut = len(data) > yaml_bounded.MAX_BYTES  # too large either way: a cut character too
        text = data.decode("utf-8-sig", errors="ignore" if cut else "strict")
    except (OSError, UnicodeDecodeError) as exc:
        click.echo(f"rsi-bot check-config: cannot read {file}: {exc}", err=True)
        sys.exit(2)
    result = repo_config.parse(text, path=str(file))
    if not result.ok:
        for problem in result.problems:
            click.echo(f"{file}: {problem}", err=True)
        sys.exit(1)
    click.echo(f"{file}: ok: {result.config.summary()}")


if __name__ == "__main__":
    main()
