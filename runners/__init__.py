"""What runs on the self-hosted GPU runner (standard library only; see issue #5)."""
