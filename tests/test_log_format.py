"""Log lines as they land in a file or a collector: no terminal escape sequences unless
the stream is a terminal, and `LOG_FORMAT=json` as one JSON object a line."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot import observability
from tests import appkit

RED = "\x1b[31mred\x1b[0m and \x1b]0;a title\x07plain\x1b[2K"


@pytest.fixture
def bare_root() -> Iterator[logging.Logger]:
    """The root logger without handlers (pytest's capture handlers are put back after)."""
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    try:
        yield root
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


def emit(
    root: logging.Logger, msg: str, *args: object, exc: bool = False, name: str = "bot.x"
) -> None:
    with observability.delivery_context("d-7"), observability.verification_context("v-abcd"):
        if exc:
            try:
                raise RuntimeError("\x1b[1mboom\x1b[0m")
            except RuntimeError:
                logging.getLogger(name).exception(msg, *args)
        else:
            logging.getLogger(name).warning(msg, *args)


def test_text_log_to_a_file_has_no_colour_codes(
    tmp_path: Path, bare_root: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "rsi.log"
    with log.open("w") as f:
        monkeypatch.setattr(sys, "stderr", f)
        bare_root.handlers.clear()
        observability.configure_logging(appkit.settings(tmp_path, "http://x"))
        emit(bare_root, "runner said %s", RED)
        emit(bare_root, "failed", exc=True)
    text = log.read_text()
    assert "\x1b" not in text
    assert " WARNING bot.x delivery=d-7 verification=v-abcd: runner said red and plain" in text
    assert "RuntimeError: boom" in text


def test_a_terminal_keeps_them(tmp_path: Path) -> None:
    from bot.observability.logs import formatter_for

    primary, secondary = os.openpty()
    with os.fdopen(secondary, "w") as tty:
        assert tty.isatty()
        fmt = formatter_for("text", tty)
        record = logging.LogRecord("bot.x", logging.INFO, "f", 1, RED, (), None)
        assert "\x1b[31mred" in fmt.format(record)
    os.close(primary)
    assert "\x1b" not in formatter_for("text", io.StringIO()).format(record)


def test_json_format_one_object_a_line(tmp_path: Path, bare_root: logging.Logger) -> None:
    stream = io.StringIO()
    settings = appkit.settings(tmp_path, "http://x", LOG_FORMAT="json")
    old = sys.stderr
    sys.stderr = stream
    bare_root.handlers.clear()
    try:
        observability.configure_logging(settings)
    finally:
        sys.stderr = old
    emit(bare_root, "runner said %s\nsecond line", RED)
    emit(bare_root, "failed", exc=True, name="bot.y")
    logging.getLogger("bot.z").warning("no context")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3, lines
    first, second, third = (json.loads(x) for x in lines)
    assert first["level"] == "WARNING"
    assert first["logger"] == "bot.x"
    assert first["message"] == "runner said red and plain\nsecond line"
    assert first["delivery"] == "d-7"
    assert first["verification"] == "v-abcd"
    assert first["time"].endswith("+00:00")
    assert second["level"] == "ERROR"
    assert "RuntimeError: boom" in second["exception"]
    assert "delivery" not in third
    assert "verification" not in third
    assert "\x1b" not in stream.getvalue()


def test_log_format_is_checked() -> None:
    from bot.config import ConfigError, load_settings

    with pytest.raises(ConfigError) as err:
        load_settings(
            _env_file=None,
            APP_ID=1,
            PRIVATE_KEY=appkit.private_key_pem(),
            WEBHOOK_SECRET="w",
            RSI_INTAKE_SECRET="i",
            RSI_RUNNER_REPO="o/r",
            LOG_FORMAT="xml",
        )
    assert str(err.value).startswith("rsi-bot cannot start: LOG_FORMAT: ")
    assert "'text' or 'json'" in str(err.value)
    assert "\n" not in str(err.value)
