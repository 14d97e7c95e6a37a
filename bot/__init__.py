"""rsi-bot: the GitHub App that carries promoted candidates to evidence-bearing PRs."""
