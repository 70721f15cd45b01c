"""mkdocs hooks: the command line's reference, generated from its click commands at build time
so that it cannot drift from the code (``<!-- cli-reference -->`` in a page); docstrings'
Sphinx roles shown as code."""

from __future__ import annotations

import re

import click

MARKER = "<!-- cli-reference -->"
#: A Sphinx role as mkdocstrings renders a docstring's ``:class:`~a.B```; ``~`` keeps the last name.
ROLE = re.compile(r":(?:class|mod|func|meth|data|attr|exc|obj):<code>(~?)([^<]*)</code>")
PROGRAM = "feast-stream-backfill"


def cli_reference() -> str:
    """``--help`` of the program and of each subcommand, as Markdown: the commands import
    their heavy modules when run, so nothing but the package and click is loaded."""
    from feast_stream_backfill.cli import cli

    width = {"terminal_width": 100, "max_content_width": 100}  # not the building terminal's
    root = click.Context(cli, info_name=PROGRAM, **width, **cli.context_settings)
    parts = [f"## `{PROGRAM}`\n\n```text\n{cli.get_help(root)}\n```"]
    for name, command in cli.commands.items():
        context = click.Context(command, info_name=name, parent=root)
        parts.append(f"## `{PROGRAM} {name}`\n\n```text\n{command.get_help(context)}\n```")
    return "\n\n".join(parts)


def on_page_markdown(markdown: str, **_: object) -> str:
    return markdown.replace(MARKER, cli_reference()) if MARKER in markdown else markdown


def on_page_content(html: str, **_: object) -> str:
    """Docstrings' roles as plain code, and their ``::`` (a literal block follows) as ``:``."""
    html = ROLE.sub(lambda m: f"<code>{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}</code>", html)
    return html.replace("::</p>", ":</p>")
