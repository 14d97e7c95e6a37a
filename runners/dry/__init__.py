"""The dry task: a CPU stand-in server and client (standard library only)."""
