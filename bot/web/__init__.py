"""The web process: webhooks, intake, reports and the set-up pages (Flask only)."""
