"""The command line's value types: each turns a bad value into argparse's one-line usage error (exit code 2)
instead of a traceback. Their own module so that every command's grammar (parser.py, compare_cli.py) takes the
same values the same way."""

from __future__ import annotations

import argparse
import math


def number(text: str, kind: type, expected: str) -> int | float:
    """``text`` as a finite number of ``kind``; argparse would say "invalid fraction value" about a ValueError."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r} (expected {expected})") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not finite (expected {expected})")
    return value


def positive_int(text: str) -> int:
    value = number(text, int, "a whole number, at least 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is below 1 (expected a whole number, at least 1)")
    return value


def count_from_zero(text: str) -> int:
    value = number(text, int, "a whole number, 0 or more")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is below 0 (expected a whole number, 0 or more)")
    return value


def tolerance(text: str) -> float:
    value = number(text, float, "a number of 0 or more, such as 1e-3")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is below 0 (expected a number such as 1e-3)")
    return value


def fraction(text: str) -> float:
    value = number(text, float, "a number in [0, 1], such as 0.99")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is outside [0, 1] (expected a number such as 0.99)")
    return value


def positive_float(text: str) -> float:
    value = number(text, float, "a number above 0, such as 1e-4")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not above 0 (expected a number such as 1e-4)")
    return value


MIN_MEMORY = 2**20  # below a megabyte no record's inputs fit: every row would be SKIP


def size(text: str) -> int:
    """A memory size: bytes, or a number with K, M, G or T (powers of 1024); finite and at least 1M."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = units[t[-1]] if t and t[-1] in units else 1
    value = number(text.strip()[: len(t) - (unit > 1)], float, "a size such as 512M or 8G") * unit
    if not math.isfinite(value) or value < MIN_MEMORY:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size from 1M up (examples: 512M, 8G)")
    return int(value)


SWITCH_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def stack_json(text: str) -> str:
    """compare's -s, a stack.json path; msprobe's ``-s True`` (its stack-mode switch) would be read as a file
    named True, and the call stacks would go missing without a word."""
    if text.strip().lower() in SWITCH_WORDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is msprobe's stack-mode switch; here -s is a stack.json path, and the call stacks "
            "(NPU_Stack_Info) are read from the stack.json beside the dump without it: leave -s out"
        )
    return text
