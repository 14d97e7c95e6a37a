"""The App's configuration: environment variables, validated once at boot (12-factor).

`load_settings()` fails with one line for each missing or malformed variable, naming it
and what is wrong (the commands print them and exit 2, before touching the database);
the App's private key is read and parsed here, so a key that is missing or not a PEM RSA
key stops the process at boot. Secrets are `SecretStr`, so they never appear in a repr or
a log line.
"""

from __future__ import annotations

import functools
import ipaddress
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from dotenv import dotenv_values
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from evidence.bounds import DEFAULT as BOUNDS  # the engine's own bounds, without NumPy

DATA_DIR = Path.home() / ".local" / "share" / "rsi-bot"


class ConfigError(Exception):
    """Configuration that cannot run the App; the message names each variable."""


class MetricsSettings(BaseSettings):
    """Where `/metrics` is served: a listener of its own (the web process binds it beside
    the public one), on the public one only with METRICS_PUBLIC. Read alone by
    `bot.gunicorn_conf`, which needs nothing else."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=True
    )

    METRICS_HOST: str = "127.0.0.1"
    METRICS_PORT: int = Field(default=9100, ge=0, le=65535)  # 0: no metrics listener
    METRICS_PUBLIC: bool = False
    # `text` or `json` (one object a line); gunicorn's own lines follow it too.
    LOG_FORMAT: Literal["text", "json"] = "text"


class Settings(MetricsSettings):
    APP_ID: int
    PRIVATE_KEY: SecretStr | None = None
    PRIVATE_KEY_PATH: Path | None = None
    WEBHOOK_SECRET: SecretStr
    RSI_INTAKE_SECRET: SecretStr
    GITHUB_API_URL: str = "https://api.github.com"
    GITHUB_WEB_URL: str | None = None
    PUBLIC_URL: str = "http://localhost:8000"
    DATABASE_URL: str = f"sqlite:///{DATA_DIR / 'rsi-bot.db'}"
    REDIS_URL: str | None = None
    QUEUE_PATH: Path = DATA_DIR / "queue.db"
    ARTIFACT_STORE: str = str(DATA_DIR / "artifacts")
    AWS_ENDPOINT_URL: str | None = None
    # GitHub asks integrators to space mutating requests about a second apart (secondary
    # rate limits); PyGithub enforces both intervals per client.
    GITHUB_READ_INTERVAL_S: float = Field(default=0.25, ge=0)
    GITHUB_WRITE_INTERVAL_S: float = Field(default=1.0, ge=0)
    # Exponential backoff between retries of a 5xx (0.5 s, 1 s, 2 s, … six tries).
    GITHUB_RETRY_BACKOFF_S: float = Field(default=0.5, ge=0)
    RSI_RUNNER_REPO: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    RSI_WORKFLOW: str = "rsi-verify.yml"
    RSI_TRUSTED_PUSHERS: str = ""
    # The shared runner pool (bot/pool.py): verifications holding runners at once for one
    # installation's repositories, and jobs at once per runner kind ("H100=4,H200=8").
    RSI_INSTALLATION_MAX_RUNNING: int | None = Field(default=8, ge=1)
    RSI_POOL_MAX_RUNNING: str = Field(default="", pattern=r"^(\s*[A-Za-z0-9]+=\d+\s*,?)*$")
    # Requested verifications one repository may have waiting for a runner: past it a
    # request is refused before dispatch (a flood would otherwise grow a queue that
    # every reconciler pass walks).
    RSI_REPO_MAX_QUEUED: int = Field(default=20, ge=1, le=10_000)
    # A failed effect (a GitHub write, a bundle download) is retried this many times,
    # waiting BACKOFF, 2×BACKOFF, … (at most 10 minutes), then the verification fails.
    RSI_EFFECT_ATTEMPTS: int = Field(default=8, ge=1, le=50)
    RSI_EFFECT_BACKOFF_S: float = Field(default=5.0, ge=0)
    RSI_RUN_TIMEOUT_S: int = Field(default=6 * 3600, ge=60)
    RSI_LEASE_S: int = Field(default=600, ge=5)
    # The bounds of a bundle (docs/bounds.md); the artifact download stops at the first.
    RSI_BUNDLE_MAX_BYTES: int = Field(default=BOUNDS.max_bytes, ge=1)
    RSI_BUNDLE_MAX_MEMBERS: int = Field(default=BOUNDS.max_members, ge=1)
    RSI_BUNDLE_MAX_MEMBER_BYTES: int = Field(default=BOUNDS.max_member_bytes, ge=1)
    RSI_BUNDLE_MAX_RATIO: float = Field(default=BOUNDS.max_ratio, ge=1)
    RSI_BUNDLE_MAX_JSON_BYTES: int = Field(default=BOUNDS.max_json_bytes, ge=1)
    RSI_BUNDLE_MAX_RUNS: int = Field(default=BOUNDS.max_runs, ge=1)
    RSI_BUNDLE_MAX_LIST_VALUES: int = Field(default=BOUNDS.max_list_values, ge=1)
    RSI_BUNDLE_MAX_VALUES: int = Field(default=BOUNDS.max_values, ge=1)
    SENTRY_DSN: SecretStr | None = None
    LOG_LEVEL: str = "INFO"

    @field_validator("GITHUB_API_URL", "PUBLIC_URL")
    @classmethod
    def _no_trailing_slash(cls, v: str) -> str:
        return v.rstrip("/")

    @field_validator("PRIVATE_KEY")
    @classmethod
    def _key_parses(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None:
            check_private_key(_unescape(v.get_secret_value()))
        return v

    @field_validator("PRIVATE_KEY_PATH")
    @classmethod
    def _key_file_parses(cls, v: Path | None) -> Path | None:
        if v is not None:
            try:
                text = v.expanduser().read_text()
            except FileNotFoundError:
                raise ValueError(f"{v}: no such file") from None
            except (OSError, UnicodeDecodeError) as exc:
                why = getattr(exc, "strerror", None) or "not a text file"
                raise ValueError(f"{v}: cannot be read ({why})") from None
            try:
                check_private_key(text)
            except ValueError as exc:
                raise ValueError(f"{v}: {exc}") from None
        return v

    @model_validator(mode="after")
    def _key_given(self) -> Settings:
        if self.PRIVATE_KEY is None and self.PRIVATE_KEY_PATH is None:
            raise ValueError(KEY_MISSING)
        return self

    def private_key(self) -> str:
        if self.PRIVATE_KEY is not None:
            # Keys pasted into one-line environments often carry literal "\n".
            return _unescape(self.PRIVATE_KEY.get_secret_value())
        assert self.PRIVATE_KEY_PATH is not None
        return self.PRIVATE_KEY_PATH.expanduser().read_text()

    @property
    def web_url(self) -> str:
        """github.com for the public API; `https://HOST` for Enterprise's `/api/v3`."""
        if self.GITHUB_WEB_URL:
            return self.GITHUB_WEB_URL.rstrip("/")
        if self.GITHUB_API_URL == "https://api.github.com":
            return "https://github.com"
        return self.GITHUB_API_URL.removesuffix("/api/v3")

    @property
    def trusted_pushers(self) -> frozenset[str]:
        return frozenset(
            x.strip().lower() for x in self.RSI_TRUSTED_PUSHERS.split(",") if x.strip()
        )


KEY_MISSING = "set PRIVATE_KEY or PRIVATE_KEY_PATH (the App's private key)"


def _unescape(key: str) -> str:
    """Keys pasted into one-line environments often carry literal "\\n"."""
    return key.replace("\\n", "\n")


@functools.lru_cache(maxsize=8)
def load_private_key(pem: str) -> Any:
    """The key parsed from `pem`, once a process: parsing checks the RSA key's numbers
    (about 30 ms of CPU), and Settings and the JWT signer read the same key."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    return load_pem_private_key(pem.strip().encode(), password=None)


def check_private_key(pem: str) -> None:
    """Raise ValueError (one line) unless `pem` is an unencrypted PEM RSA private key, the
    kind GitHub issues to an App."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    if "-----BEGIN" not in pem:
        raise ValueError("not a PEM private key (no -----BEGIN line)")
    try:
        key = load_private_key(pem)
    except TypeError:
        raise ValueError("the private key is encrypted; give the key GitHub issued") from None
    except Exception:  # ValueError, UnsupportedAlgorithm: cryptography's words vary
        raise ValueError("not a PEM private key (it does not parse)") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("not an RSA private key (GitHub Apps sign with RSA)")


def is_loopback_url(url: str) -> bool:
    """Whether `url`'s host is this machine only (localhost, 127.0.0.0/8, ::1, 0.0.0.0),
    which GitHub cannot deliver webhooks to, or no host at all."""
    try:
        host = (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:  # not a URL at all (`http://[::1`): nothing GitHub can reach either
        return True
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified  # a private one may be GitHub Enterprise's


def loopback_warning(url: str) -> str | None:
    """The one-line warning for a PUBLIC_URL that GitHub cannot reach, or None."""
    if not is_loopback_url(url):
        return None
    return (
        f"rsi-bot: warning: PUBLIC_URL {url} is a loopback address: GitHub cannot deliver "
        "webhooks to it; set PUBLIC_URL to an address GitHub reaches (a public host or a tunnel)"
    )


NO_APP_YET = (
    "rsi-bot: no GitHub App is configured yet: create one with `rsi-bot setup` (README,"
    ' "Create and install the App"), which writes APP_ID and its secrets into .env'
)


HINTS = {
    "RSI_RUNNER_REPO": "must be owner/name, the repository holding the GPU workflow"
    ' (README, "The runner repository")',
}
"""A variable's own words when its value has the wrong form (pydantic's are generic)."""

_KINDS = {
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "float_parsing": "must be a number",
    "bool_parsing": "must be true or false",
}


def error_lines(exc: ValidationError) -> list[str]:
    """One line per error: `VARIABLE: what is wrong`."""
    lines = []
    for err in exc.errors():
        name = ".".join(str(x) for x in err["loc"])
        what = "is missing" if err["type"] == "missing" else err["msg"]
        if err["type"] != "missing" and name in HINTS:
            what = HINTS[name]
        elif err["type"] in _KINDS:
            what = f"{_KINDS[err['type']]} (got {err['input']!r})"
        what = what.removeprefix("Value error, ")
        lines.append(" ".join((f"{name}: {what}" if name else what).split()))
    return lines


def _key_missing(overrides: dict[str, object]) -> bool:
    """Whether any source names the key (the model check alone runs only when every field
    is valid, and a boot message should list everything at once)."""
    names = ("PRIVATE_KEY", "PRIVATE_KEY_PATH")
    env_file = overrides.get("_env_file", ".env")
    from_file: dict[str, str | None] = {}
    if isinstance(env_file, str | Path) and Path(env_file).is_file():
        from_file = dotenv_values(env_file)
    return not any(overrides.get(n) or os.environ.get(n) or from_file.get(n) for n in names)


def load_settings(**overrides: object) -> Settings:
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = error_lines(exc)
        if _key_missing(overrides) and not any(KEY_MISSING in line for line in lines):
            lines.append(KEY_MISSING)
        said = "\n".join(f"rsi-bot cannot start: {line}" for line in lines)
        if any(line.startswith("APP_ID: is missing") for line in lines):
            said += "\n" + NO_APP_YET
        raise ConfigError(said) from None
