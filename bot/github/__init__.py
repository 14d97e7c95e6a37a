"""GitHub access in the App's own terms."""
