"""The README's and docs/'s examples work as written: every python block runs, every documented command line
parses, every benchmark command names a script and options it has, and every link leads somewhere.

The README's blocks read as one session whose run_ut output the pages reuse (a copy of its out/ folder), so the
pages add no second run of a dump unless they show one themselves."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from precheck.commands.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
TEXT = {page: page.read_text(encoding="utf-8") for page in PAGES}
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
BLOCKS = {page: _FENCE.findall(text) for page, text in TEXT.items()}


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _python(page: Path) -> list[str]:
    return [body for lang, body in BLOCKS[page] if lang == "python"]


def _session(folder: Path) -> dict:
    """A folder like the repository root (the examples name tests/data), with nothing else in it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tests").symlink_to(ROOT / "tests")
    return {"__name__": "readme"}


def _run_blocks(page: Path, namespace: dict, commands: bool = False) -> list[object]:
    """Run the page's python blocks in order in one namespace and, with ``commands``, its shell blocks' precheck
    commands between them, in-process, as a user runs the page top to bottom in one folder (so one example's
    output cannot go unseen into the folder another reads); the exit codes of the blocks that sys.exit.
    `precheck record` runs a training script of the user's, so it is left to the record tests."""
    exits = []
    for lang, body in BLOCKS[page]:
        if lang == "bash" and commands:
            for command in (c for line in body.splitlines() for c in _precheck_commands(line)):
                if not command.startswith("record "):
                    assert main(shlex.split(command)) == 0, command
        elif lang == "python":
            try:
                exec(compile(body, _name(page), "exec"), namespace)
            except SystemExit as e:  # the CI gate example ends with sys.exit(report.exit_code())
                exits.append(e.code)
    return exits


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """The README's python blocks run once: its namespace, its folder and the exit codes its blocks gave."""
    folder = tmp_path_factory.mktemp("readme")
    namespace = _session(folder)
    here = os.getcwd()
    os.chdir(folder)
    try:
        exits = _run_blocks(README, namespace, commands=True)
    finally:
        os.chdir(here)
    return namespace, folder, exits


def test_the_readme_examples_run_in_order_in_one_folder(readme_run):
    # The examples read as one session in one folder: the main job's and run_ut's runs are what the regress example
    # compares and what `precheck report` draws; the compare's --precheck run must not become "the newest run".
    namespace, folder, exits = readme_run
    assert len(_python(README)) >= 3
    assert exits == [namespace["report"].exit_code(strict=False)] == [1]  # msprobe's CSV as the baseline: FAIL
    summary = namespace["summary"]
    assert sum(summary.counts.values()) == 47 and summary.backward_counts["SKIP"] == 2
    assert (folder / namespace["md"]).is_file()
    said = " ".join(TEXT[README].split()), " ".join(TEXT[ROOT / "docs/guide/regress.md"].split())
    fails = re.search(r"gate fails \((\d+) APIs\)", said[0])[1], re.search(r"step gives (\d+) FAIL", said[1])[1]
    counts = namespace["report"].counts
    assert set(fails) == {str(counts["FAIL"])} and counts["MISSING"] == counts["NEW"] == 0
    lines = [line for lang, body in BLOCKS[README] if lang == "bash" for line in body.splitlines()]
    shell = [command.split() for line in lines for command in _precheck_commands(line)]
    reported = folder / next(words[1] for words in shell if words[0] == "report")  # a run's report, not a compare's
    assert len(list(reported.glob("report_*.html"))) == 1 and not list(reported.glob("compare_report_*"))


def test_the_grader_example_fails_with_the_message_shown(readme_run):
    namespace = readme_run[0]
    shown = next(b for lang, b in BLOCKS[README] if not lang and b.startswith("output: error"))
    with pytest.raises(AssertionError) as e:
        namespace["test_my_kernel"]()
    assert str(e.value) == shown.rstrip("\n")


DOC_PAGES = [page for page in PAGES[1:] if _python(page)]


@pytest.mark.parametrize("page", DOC_PAGES, ids=_name)
def test_every_python_block_of_a_page_runs_as_written(page, readme_run, tmp_path, monkeypatch):
    namespace = _session(tmp_path)
    shutil.copytree(readme_run[1] / "out", tmp_path / "out")  # the README's run, for pages that read one
    monkeypatch.chdir(tmp_path)
    assert _run_blocks(page, namespace) == []


def test_the_frame_columns_documented_are_those_load_gives(readme_run):
    from precheck import load

    table = TEXT[ROOT / "docs/reference/frame.md"].split("## The columns of a run's frame", 1)[1]
    documented = re.findall(r"^\| `([^`]+)` \|", table, re.M)
    assert documented == list(load(readme_run[1] / "out").columns)


def test_the_frame_columns_examples_are_values_load_gives(readme_run):
    """frame.md said the api column of Functional.linear.0 is `linear`; load gives `Functional.linear`."""
    from precheck import load

    table = TEXT[ROOT / "docs/reference/frame.md"].split("## The columns of a run's frame", 1)[1]
    example = {m[1]: m[2] for m in re.finditer(r"^\| `(call|api|prefix)` \| str \| [^`]*`([^`]+)`", table, re.M)}
    frame = load(readme_run[1] / "out")
    row = frame[frame["call"] == example["call"]].iloc[0]
    assert (row["api"], row["prefix"]) == (example["api"], example["prefix"])


def _precheck_commands(line: str) -> list[str]:
    """The precheck command lines (arguments after `precheck`) of one shell line: `setup && .venv/bin/precheck ...`
    holds one, a comment none; a bare name is a mention, not a command."""
    found = [re.search(r"(?:^|\s|/)precheck (\S.*)", part.split("#")[0]) for part in line.split("&&")]
    return [m[1].strip() for m in found if m and " " in m[1].strip()]


def _documented_commands() -> list[tuple[str, str]]:
    """(page, command line) a page tells a user to type: lines of shell blocks and `precheck ...` code spans."""
    commands: list[tuple[str, str]] = []
    for page, text in TEXT.items():
        lines = [line for lang, body in BLOCKS[page] if lang == "bash" for line in body.splitlines()]
        lines += re.findall(r"`(precheck [^`]+)`", text)
        for found in ((_name(page), command) for line in lines for command in _precheck_commands(line)):
            if found not in commands:
                commands.append(found)
    return commands


# Placeholders of the documented commands, as a user would fill them in.
_PLACEHOLDERS = {"T": "recorded", "DEVICE": "cpu", "LIMIT": "5"}


@pytest.mark.parametrize(("page", "command"), _documented_commands())
def test_every_documented_command_parses(page, command):
    argv = [_PLACEHOLDERS.get(word, word) for word in shlex.split(command.replace("[", "").replace("]", ""))]
    build_parser().parse_args(argv)  # an unknown option or a bad value exits 2


def _subcommands() -> dict:
    """Each command under its own name (msprobe's names of run_ut, acc_check, are its parser again)."""
    choices = build_parser()._subparsers._group_actions[0].choices
    return {name: p for name, p in choices.items() if p.prog.endswith(f" {name}")}


def test_the_run_ut_table_lists_exactly_its_options():
    page = TEXT[ROOT / "docs/guide/run_ut.md"]
    table = page.split("## Options", 1)[1].split("\n\n", 2)[1]
    documented = {opt for row in table.splitlines() for opt in re.findall(r"(?<![\w-])(--?[a-z_][\w-]*)", row[:60])}
    actions = _subcommands()["run_ut"]._option_string_actions
    assert documented <= set(actions), documented - set(actions)
    undocumented = {a.option_strings[-1] for a in actions.values() if not documented & set(a.option_strings)}
    assert undocumented == {"--help"}, undocumented  # every option run_ut takes has its row


def test_every_command_has_a_guide_page_showing_it():
    for name in _subcommands():
        page = ROOT / "docs" / "guide" / f"{name}.md"
        assert page in TEXT, f"no guide page for precheck {name}"
        assert any(c.startswith(f"{name} ") for p, c in _documented_commands() if p == _name(page)), name


@pytest.mark.parametrize("name", list(_subcommands()))
def test_every_option_of_a_command_is_named_on_its_guide_page(name):
    text = TEXT[ROOT / "docs" / "guide" / f"{name}.md"]
    if name == "run_ut":
        text += TEXT[ROOT / "docs" / "guide" / "mindspore.md"]
    unnamed = [
        action.option_strings[-1]
        for action in _subcommands()[name]._actions
        if action.option_strings and "--help" not in action.option_strings
        if not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text) for o in action.option_strings)
    ]
    assert unnamed == [], f"docs/guide/{name}.md does not name {unnamed}"


def test_commands_are_found():
    # The extraction itself: the setup line, the suite generator, repro, regress and the second stage.
    found = " ".join(c for _, c in _documented_commands())
    for command in ("run_ut -api_info", "generate -api_info", "repro API_NAME", "regress --baseline", "apis"):
        assert command in found, command


_BENCH = re.compile(r"(?:^|[\s`])(?:\S*python\S* )?(benchmarks/\w+\.py)([^`#\n]*)")


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_benchmark_command_names_a_script_and_its_options(page):
    for script, rest in _BENCH.findall(TEXT[page]):
        source = (ROOT / script).read_text(encoding="utf-8") if (ROOT / script).is_file() else None
        assert source is not None, f"{_name(page)}: {script} does not exist"
        for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest):
            assert f'"{option}"' in source, f"{_name(page)}: {script} has no {option}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_link_leads_to_a_file_and_heading_of_the_checkout(page):
    # A clone has only what is in the repository: no ../shared, no folder beside it.
    prose = _FENCE.sub("", TEXT[page])
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"https?://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_relative_to(ROOT) and linked.exists(), f"{_name(page)}: {target}"
        if anchor:
            headings = re.findall(r"^#+ (.*)$", _FENCE.sub("", TEXT[linked]), re.M)
            assert anchor in {_slug(h) for h in headings}, f"{_name(page)}: {target}"
    assert "../shared" not in TEXT[page] and "REFERENCE §" not in TEXT[page]


def test_the_readme_is_read_in_five_minutes():
    assert len(TEXT[README].splitlines()) <= 200


def test_the_supported_counts_the_apis_page_states_are_those_apis_gives():
    import torch

    from precheck.support import supported

    text = " ".join(TEXT[ROOT / "docs/guide/apis.md"].split())
    version, counts = re.search(r"\(torch (\d+\.\d+): ([^()]*(?:\([^()]*\)[^()]*)*)\)", text).groups()
    if not torch.__version__.startswith(version + "."):
        pytest.skip(f"the page counts torch {version}'s APIs; this is torch {torch.__version__}")
    stated = {
        p.replace("ATen", "Aten"): int(n.replace(",", "")) for n, p in re.findall(r"(\d[\d,]*) ([A-Z]\w*)", counts)
    }
    assert stated == {prefix: sum(c.values()) for prefix, c in supported().items()}
