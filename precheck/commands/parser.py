"""The command line's grammar: ``precheck``'s subcommands (registry.py) under its top-level options, and its
one-line errors (their value types, which turn a bad value into argparse's one-line usage error, are values.py's)."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import NoReturn

from precheck.commands.command import FRAMEWORKS
from precheck.commands.registry import COMMANDS
from precheck.version import __version__


class _Parser(argparse.ArgumentParser):
    """argparse with errors in one line and a pointer to --help: its usage of run_ut alone is 12 lines, and an
    unknown option was named only among "unrecognized arguments", never with the option it was meant to be."""

    _given: list[str] = []
    _whole_words = False  # a subcommand's parser: a word such as -filter_api is one option, never -f ilter_api

    def error(self, message: str) -> NoReturn:
        given = self._given[: self._given.index("--")] if "--" in self._given else self._given  # then a program's
        unknown = [a for a in given if a.startswith("-") and not self._takes(a)]
        if unknown and message.startswith("the following arguments are required"):  # --api-info for -api_info
            message = _unknown(unknown, self)
        elif message.startswith("argument command: invalid choice"):  # precheck runut
            message = _unknown_command(self)
        self.exit(2, f"{self.prog}: error: {message}\n  (see: {self.prog} --help)\n")

    def _takes(self, word: str) -> bool:
        """Whether ``word`` is one of this parser's options (or an abbreviation argparse takes, ``-n4``, ``-1``)."""
        name = word.split("=", 1)[0]
        known = self._option_string_actions
        return (
            any(option.startswith(name) for option in known if len(name) > 2)
            or word[:2] in known
            or word.lstrip("-").replace(".", "", 1).isdigit()
        )

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: object = None) -> tuple:  # type: ignore[override]
        self._given = list(args or [])  # a subcommand's parser is given the words after its name
        if self._whole_words:
            self._refuse_bundles()
        return super().parse_known_args(args, namespace)  # type: ignore[arg-type]

    def _refuse_bundles(self) -> None:
        """argparse reads an unknown ``-filter_api`` as ``-f`` and then ``-i lter_api`` or ``-o rward_only``
        (-forward_only set the output folder): a one-dash word that is not an option is refused whole where it
        would start with a flag taking no value (and is no bundle of such flags), or is a long name (msprobe's
        -api_info style)."""
        given = self._given[: self._given.index("--")] if "--" in self._given else self._given
        flags = {o for a in self._actions if a.nargs == 0 for o in a.option_strings}
        for word in given:
            name = word.split("=", 1)[0]
            if word[:1] != "-" or word[:2] == "--" or len(name) < 3 or name in self._option_string_actions:
                continue
            bundle = all(f"-{letter}" in flags for letter in name[1:])  # -qf: -q -f
            if (word[:2] in flags and not bundle) or "_" in name:
                self.error(_unknown([word], self))

    def parse_args(self, args: Sequence[str] | None = None, namespace: object = None) -> argparse.Namespace:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._command(parsed)
            (command or self).error(_unknown(extras, command, self))
        return parsed

    def _command(self, parsed: argparse.Namespace) -> argparse.ArgumentParser | None:
        """The subcommand's parser, if one was named."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices.get(getattr(parsed, action.dest, None))
        return None


# msprobe's options that precheck has no equal of, and what a user of msprobe types here instead
MSPROBE_OPTIONS = {
    "-j": "worker processes are -n N here (msprobe's -j is its --jit_compile, which precheck does not take)",
    "--jit_compile": "precheck leaves torch_npu's jit compilation as the process starts with it (no switch needed); "
    "--target compile grades each API through torch.compile",
    "--forward_only": "a call's backward is graded only where the dump recorded one (otherwise its Backward Test "
    "Success is N/A); the forward verdicts alone are the result CSV's Forward Test Success column",
}


def _unknown(extras: list[str], *parsers: argparse.ArgumentParser | None) -> str:
    """The first argument no parser took: msprobe's option with what precheck uses instead, or the nearest
    option where it looks like a misspelt one."""
    option = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), None)
    if option is None:
        return f"unexpected argument {extras[0]!r}"
    spelt = "-" + option if option[1] != "-" else option  # -forward_only as --forward_only
    msprobe = MSPROBE_OPTIONS.get(spelt) or MSPROBE_OPTIONS.get(option[:2] if option[1] != "-" else "")
    if msprobe:
        return f"unknown option {option}: {msprobe}"
    known = [name for p in parsers if p is not None for name in p._option_string_actions]
    near = difflib.get_close_matches(option, known, n=1, cutoff=0.6)
    return f"unknown option {option}" + (f"; did you mean {near[0]}?" if near else "")


def _unknown_command(parser: _Parser) -> str:
    """The command typed where no subcommand is, with the nearest one (``runut``: run_ut)."""
    commands = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    given = parser._given
    valued = {i + 1 for i, word in enumerate(given) if word in ("-f", "--framework")}  # -f mindspore runut
    typed = next((w for i, w in enumerate(given) if i not in valued and not w.startswith("-")), "")
    near = difflib.get_close_matches(typed, list(commands), n=1, cutoff=0.6)
    return f"unknown command {typed!r}" + (f"; did you mean {near[0]}?" if near else f"; one of: {', '.join(commands)}")


def build_parser() -> argparse.ArgumentParser:
    """The grammar, from the registry of commands (registry.py); each subcommand's ``func`` default is its
    handler, so the caller dispatches with ``args.func(args)``."""
    parser = _Parser(prog="precheck", description="API precision pre-check for PyTorch dumps")
    parser.add_argument("--version", action="version", version=f"precheck {__version__}")
    parser.add_argument(
        "-f",
        "--framework",
        dest="dump_framework",
        choices=FRAMEWORKS,
        default=None,
        help="msprobe's top-level -f (precheck -f mindspore run_ut ...): the dump's framework for run_ut, as its "
        "--framework (the other commands read it from the dump)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        sub = commands.add_parser(
            command.name, aliases=list(command.aliases), help=command.help, description=command.description
        )
        sub._whole_words = True
        command.add_arguments(sub)
        sub.set_defaults(func=command.handler, needs_torch=command.torch)
    return parser
