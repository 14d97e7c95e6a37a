"""`.github/rsi.yml` files written to cost the App time or memory, and the problem each
must be refused with (shared by the tests and bench/hostile_config.py)."""

from __future__ import annotations


def laughs(levels: int) -> str:
    """A "billion laughs": each level an alias list of nine of the level below (700 bytes
    at eleven levels, 9¹¹ values once expanded)."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join([*lines, f"gpus: *a{levels}", ""])


HOSTILE: dict[str, tuple[str, str]] = {
    "billion-laughs": (laughs(11), "yaml_too_many_nodes"),
    "aliases-to-a-wide-mapping": (
        "w: &w {"
        + ", ".join(f"k{i}: {i}" for i in range(900))
        + "}\n"
        + "".join(f"x{i}: *w\n" for i in range(40)),
        "yaml_too_many_nodes",
    ),
    "flow-nesting": ("gpus: " + "[" * 10_000 + "]" * 10_000 + "\n", "yaml_too_deep"),
    "block-nesting": ("".join(" " * i + f"k{i}:\n" for i in range(200)), "yaml_too_deep"),
    "hex-digits": ("rounds: 0x" + "f" * 60_000 + "\n", "number_too_long"),
    "float-digits": ("thresholds: {practical_pct: 1." + "5" * 50_000 + "}\n", "number_too_long"),
    "repeated-keys": ("".join(f"rounds: {i % 9}\n" for i in range(6_000)), "yaml_too_many_nodes"),
    "many-keys": ("".join(f"k{i}: 1\n" for i in range(6_000)), "yaml_too_many_nodes"),
    "a-megabyte": ("gpus: [h100]\n" + "# padding\n" * 100_000, "yaml_too_large"),
}
"""name → (file text, the problem's code)."""
