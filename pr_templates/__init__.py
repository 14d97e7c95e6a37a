"""Jinja2 templates for the PR comment, check-run summary, PR-body section and report."""
