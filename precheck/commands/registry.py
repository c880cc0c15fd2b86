"""Every subcommand of ``precheck``, in the order ``precheck --help`` lists them: the one list parser.py builds
the grammar from and cli.py dispatches through. A new command is a :class:`~precheck.commands.command.Command`
in a module of its own (its arguments and its handler together) and one entry here."""

from __future__ import annotations

from precheck.commands import compare_cli, record_cli, run_ut_cli, tools_cli
from precheck.commands.command import Command

COMMANDS: dict[str, Command] = {
    command.name: command
    for command in (run_ut_cli.COMMAND, *tools_cli.COMMANDS, *compare_cli.COMMANDS, record_cli.COMMAND)
}
