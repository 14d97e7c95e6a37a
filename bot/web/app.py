"""Flask app factory: `gunicorn 'bot.web.app:create_app()'`."""

from __future__ import annotations

from flask import Flask, Response, jsonify
from sqlalchemy import text

from bot import observability, runtime, services
from bot.config import Settings, load_settings
from bot.web import history, intake, reports, webhooks


def create_app(settings: Settings | None = None, *, svc: services.Services | None = None) -> Flask:
    settings = settings or (svc.settings if svc else load_settings())
    observability.configure_logging(settings)
    observability.init_sentry(settings, "web")
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB
    app.extensions["rsi"] = svc or runtime.build(settings)
    app.register_blueprint(webhooks.bp)
    app.register_blueprint(intake.bp)
    app.register_blueprint(reports.bp)
    app.register_blueprint(history.bp)
    observability.init_app(app, app.extensions["rsi"])

    @app.get("/healthz")
    def healthz() -> tuple[Response, int]:
        r: services.Services = app.extensions["rsi"]
        try:
            with r.db.session() as s:
                s.execute(text("SELECT 1"))
        except Exception as exc:
            return jsonify(ok=False, database=str(exc.__class__.__name__)), 503
        return jsonify(ok=True), 200

    return app
