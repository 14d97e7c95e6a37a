"""The `/rsi` command parser on its own: every form a maintainer writes, and what must
not count as a command."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from bot.commands import Command, Mistake, parse
from bot.messages import help_text


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("/rsi reverify", Command("reverify")),
        ("/rsi  REVERIFY  H100", Command("reverify", gpus=["H100"])),
        ("/rsi reverify h100 h200", Command("reverify", gpus=["H100", "H200"])),
        ("/rsi reverify all", Command("reverify", all_gpus=True)),
        ("/rsi reverify h100 all", Command("reverify", all_gpus=True)),
        ("/rsi reverify all h200", Command("reverify", gpus=["H200"])),
        ("/rsi reverify rounds=7", Command("reverify", rounds=7)),
        # The `gpus=` form: a comma-separated list, or all.
        ("/rsi verify gpus=h100,h200 rounds=6", Command("verify", ["H100", "H200"], False, 6)),
        ("/rsi verify gpus=all", Command("verify", all_gpus=True)),
        (
            "/rsi verify gpus=h100,a100x",
            Command("verify", errors=[Mistake("unknown-argument", "gpus=h100,a100x")]),
        ),
        # A whole number however large: the repository's budget answers it with its range.
        ("/rsi reverify rounds=99999999999", Command("reverify", rounds=99999999999)),
        ("/rsi reverify base=main", Command("reverify", base_main=True)),
        ("/rsi reverify h200 rounds=4 base=main", Command("reverify", ["H200"], False, 4, True)),
        ("/rsi status", Command("status")),
        ("/rsi cancel", Command("cancel")),
        ("/rsi help", Command("help")),
        ("/rsi", Command("help")),
        ("  /rsi status  ", Command("status")),  # up to 3 spaces is still a paragraph
        ("Thanks!\n\n/rsi status\n", Command("status")),
        ("/rsi status extra words are ignored", Command("status")),
        ("/rsi reverify 0123abc h200", Command("reverify", gpus=["H200"], sha="0123abc")),
        ("/rsi reverify " + "AB" * 20, Command("reverify", sha="ab" * 20)),
        ("> quoted\n\n/rsi status", Command("status")),  # a blank line ends the quote
        ("<!-- a note -->\n/rsi cancel", Command("cancel")),
        ("```sh\nlog\n```\n/rsi cancel", Command("cancel")),
    ],
)
def test_commands(text: str, want: Command) -> None:
    assert parse(text) == want


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("/rsi frobnicate", "unknown command `frobnicate`"),
        ("/rsi reverify a100x", "unknown argument `a100x`"),
        ("/rsi reverify rounds=many", "`rounds=many`: rounds must be a whole number or auto"),
        ("/rsi reverify rounds=-1", "`rounds=-1`: rounds must be a whole number or auto"),
        ("/rsi reverify " + "x" * 500, "unknown argument `" + "x" * 40 + "`"),
        ("/rsi reverify abc12", "unknown argument `abc12`"),  # too short to name a commit
    ],
)
def test_mistakes_are_named(text: str, error: str) -> None:
    cmd = parse(text)
    assert cmd is not None
    assert help_text(cmd.errors).startswith(error + ".\n")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "LGTM",
        "please run /rsi reverify when you can",  # not a line of its own
        "> /rsi reverify",  # quoted from someone else
        "    /rsi reverify",  # an indented code block
        "Run:\n\n\t/rsi cancel",
        "```\n/rsi reverify\n```",  # in a code block
        "~~~sh\n/rsi cancel\n~~~",
        "````\n```\n/rsi reverify\n```\n````",  # a fence inside a longer fence
        "```\n```sh\n/rsi reverify\n```",  # a fence with an info string closes nothing
        "~~~\n~~\n/rsi reverify",  # nor does a shorter one (unclosed: code to the end)
        "> Could you\n/rsi reverify",  # a quote's lazy continuation is still the quote
        ">> /rsi reverify",
        "   > /rsi reverify",
        "<!--\n/rsi reverify\n-->",  # hidden: not what the comment shows
        "Thanks <!-- later:\n/rsi reverify\n-->",
        "<pre>\n/rsi reverify\n</pre>",
        "/rsirevert",
        "/rs reverify",
        # shown as nothing on GitHub: a link reference definition whose title spans lines
        '[ref]: https://example.com\n"\n/rsi reverify\n"',
        "[ref]: https://example.com '\n/rsi reverify\n'",
        "<script>\n/rsi reverify\n</script>",  # an HTML block
        "<div>\n/rsi reverify\n</div>",
        "<details>\n/rsi reverify",
        "- /rsi reverify",  # a list item: not a line of its own
        "1. /rsi reverify",
        "# /rsi reverify",  # a heading
        "[/rsi reverify](https://example.com)",  # a link's text
        "`/rsi reverify`",  # a code span
        # A character reference's line end is a space on GitHub: the second line is one
        # sentence with a code span, not a command.
        "a &#10;/rsi cancel&#10;b `\n/rsi cancel\n`",
        "note &#10;/rsi reverify deadbeef&#10;. `\n/rsi reverify deadbeef\n`",
        "<details>\n\n/rsi cancel\n\n</details>",  # collapsed until clicked
        "<details><summary>log</summary>\n\nok\n\n/rsi cancel\n\n</details>",
        "| a |\n|---|\n/rsi cancel",  # a table row
        "~~x\n/rsi cancel\ny~~",  # struck through
        "$$\n/rsi cancel\n$$",  # a math block
    ],
)
def test_not_commands(text: str) -> None:
    assert parse(text) is None


def test_a_command_after_a_closed_details_counts() -> None:
    cmd = parse("<details><summary>log</summary>\n\nok\n\n</details>\n\n/rsi cancel")
    assert cmd is not None
    assert cmd.name == "cancel"


def test_a_gpu_is_named_in_ascii_digits() -> None:
    cmd = parse("/rsi reverify h١٠٠")
    assert cmd is not None
    assert cmd.gpus is None
    assert cmd.errors == [Mistake("unknown-argument", "h١٠٠")]


def test_the_first_command_counts() -> None:
    assert parse("/rsi status\n/rsi cancel") == Command("status")


def test_a_command_after_a_closed_fence_counts() -> None:
    assert parse("```\nlog\n```\n/rsi cancel") == Command("cancel")


FENCES = [
    "```\n    ```\n/rsi reverify all rounds=10\n```",  # indented 4: code, closes nothing
    "```\n\t```\n/rsi reverify\n```",
    "   ```\n/rsi reverify\n   ```",  # indented 3: a fence
    "```\nlog\n   ```\n/rsi cancel",  # closed by a fence indented 3
    "    ```\n/rsi cancel",  # an indented code block, then the command
    "``` a`b\n/rsi cancel",  # a backtick in the info string: inline code, not a fence
    "~~~ a`b\n/rsi reverify\n~~~",  # tildes may have one
    "Text\n```\n/rsi reverify\n```",  # a fence interrupts a paragraph
    "```\n```\u00a0\n/rsi reverify\n```",  # a no-break space: not a closing fence
    "```\nx\x85```\n/rsi reverify\n```",  # \x85 is no line ending in Markdown
]


def _shown_as_command(text: str) -> bool:
    """What CommonMark (GitHub's Markdown) shows: a paragraph line outside any quote that
    starts with /rsi."""
    depth = 0
    for tok in MarkdownIt("commonmark").parse(text):
        depth += {"blockquote_open": 1, "blockquote_close": -1}.get(tok.type, 0)
        lines = tok.content.splitlines() if tok.type == "inline" and depth == 0 else []
        if any(ln.startswith("/rsi") for ln in lines):
            return True
    return False


@pytest.mark.parametrize("text", FENCES)
def test_fences_and_indents_are_read_as_commonmark_reads_them(text: str) -> None:
    """Before, an indented fence-like line closed a fence, so a command GitHub shows
    inside a code block was acted on."""
    assert (parse(text) is not None) == _shown_as_command(text)


def test_reverify_rounds_auto() -> None:
    cmd = parse("/rsi reverify h100 rounds=auto")
    assert (cmd.name, cmd.rounds, cmd.gpus, cmd.errors) == ("reverify", "auto", ["H100"], [])
    assert parse("/rsi reverify rounds=AUTO").rounds == "auto"


@pytest.mark.parametrize(
    "text",
    [
        # The end tag in an HTML comment ends nothing: GitHub still shows it collapsed.
        "<details>\n\n<!-- </details> -->\n\n/rsi reverify\n\n</details>",
        "<details>\n<!--\n</details>\n-->\n\n/rsi reverify\n\n</details>",
        "<details>\n\n`</details>`\n\n/rsi reverify\n\n</details>",  # in code: text
        "<details>\n\n&lt;/details>\n\n/rsi reverify\n\n</details>",  # an escaped one
        "<details>\n\n</detail>\n\n/rsi reverify\n\n</details>",  # a misspelt one
        "<DETAILS Open=''>\n\n/rsi reverify",  # any case, never closed
        "<details\n>\n\n/rsi reverify\n\n</details>",
        # Inline in a paragraph: the paragraph's end tag does not close the block.
        "hello <details>\n\n/rsi bisect\n\n</details>",
        "hello <details></p>\n\n/rsi bisect\n\n</details>",
        "<p><details>\n\n/rsi reverify\n\n</details>",
        # Never drawn at all.
        "<template>\n\n/rsi verify\n\n</template>",
        "<span hidden>\n\n/rsi verify\n\n</span>",
        "<!--\n\n/rsi verify\n\n-->",  # a comment runs on across blank lines
        "<svg>\n\n/rsi verify\n\n</svg>",
    ],
)
def test_a_command_github_does_not_show_does_not_act(text: str) -> None:
    """Decided from the comment as GitHub renders it, not from the Markdown's lines."""
    assert parse(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "<details>\n\n<pre></details></pre>\n\n/rsi reverify",  # a real end tag closes it
        "<div>\n\n/rsi reverify\n\n</div>",  # a paragraph in a shown block
        "Please:  \n/rsi reverify",  # after a hard line break
        "<details><summary>log</summary>\n\nx\n\n</details>\nok\n\n/rsi reverify",
    ],
)
def test_a_command_github_shows_acts(text: str) -> None:
    assert parse(text) == Command("reverify")


@pytest.mark.parametrize(
    "text",
    [
        "see<rp>\n/rsi verify\n</rp>",  # ruby parentheses: never drawn
        "<details/>\n\n/rsi verify",  # the slash of a non-void element is ignored
        "<details>\n<table><tr><td></details></td></tr></table>\n\n/rsi verify",
        "<details>\n<table><caption></details></caption></table>\n\n/rsi verify",
        "$x\n/rsi verify\ny$",  # inline math across lines
        "$$x\n/rsi verify\nx$$",
    ],
)
def test_more_ways_github_hides_a_line_do_not_act(text: str) -> None:
    """Found by trying the parser as an attacker would, after it read the rendered HTML."""
    assert parse(text) is None
