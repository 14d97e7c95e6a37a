"""The App's configuration: environment variables, validated once at boot (12-factor).

`load_settings()` fails with one message naming every missing or malformed variable;
secrets are `SecretStr`, so they never appear in a repr or a log line.
"""

from __future__ import annotations

import os
from pathlib import Path

from dotenv import dotenv_values
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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
    # A failed effect (a GitHub write, a bundle download) is retried this many times,
    # waiting BACKOFF, 2×BACKOFF, … (at most 10 minutes), then the verification fails.
    RSI_EFFECT_ATTEMPTS: int = Field(default=8, ge=1, le=50)
    RSI_EFFECT_BACKOFF_S: float = Field(default=5.0, ge=0)
    RSI_RUN_TIMEOUT_S: int = Field(default=6 * 3600, ge=60)
    RSI_LEASE_S: int = Field(default=600, ge=5)
    # The bounds of a bundle (docs/bounds.md); the artifact download stops at the first.
    RSI_BUNDLE_MAX_BYTES: int = Field(default=2 << 30, ge=1)
    RSI_BUNDLE_MAX_MEMBERS: int = Field(default=20_000, ge=1)
    RSI_BUNDLE_MAX_MEMBER_BYTES: int = Field(default=512 << 20, ge=1)
    RSI_BUNDLE_MAX_RATIO: float = Field(default=200.0, ge=1)
    RSI_BUNDLE_MAX_JSON_BYTES: int = Field(default=64 << 20, ge=1)
    RSI_BUNDLE_MAX_RUNS: int = Field(default=10_000, ge=1)
    SENTRY_DSN: SecretStr | None = None
    LOG_LEVEL: str = "INFO"

    @field_validator("GITHUB_API_URL", "PUBLIC_URL")
    @classmethod
    def _no_trailing_slash(cls, v: str) -> str:
        return v.rstrip("/")

    @model_validator(mode="after")
    def _key_given(self) -> Settings:
        if self.PRIVATE_KEY is None and self.PRIVATE_KEY_PATH is None:
            raise ValueError(KEY_MISSING)
        return self

    def private_key(self) -> str:
        if self.PRIVATE_KEY is not None:
            # Keys pasted into one-line environments often carry literal "\n".
            return self.PRIVATE_KEY.get_secret_value().replace("\\n", "\n")
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
        lines = []
        for err in exc.errors():
            name = ".".join(str(x) for x in err["loc"]) or "configuration"
            what = "is missing" if err["type"] == "missing" else err["msg"]
            lines.append(f"  {name}: {what}")
        if _key_missing(overrides) and not any(KEY_MISSING in line for line in lines):
            lines.append(f"  PRIVATE_KEY: {KEY_MISSING}")
        raise ConfigError(
            "rsi-bot cannot start; fix these environment variables:\n" + "\n".join(lines)
        ) from None
