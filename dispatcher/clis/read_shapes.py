"""The read-only commands a hook lets a worker run, as exact argument shapes (pure).

Codex has no file-read tool, so its PreToolUse hook lets a small vocabulary of read commands
run from level ``read`` up (``codex.py``). An allow list of programs with arbitrary arguments
runs programs: GNU sed's ``e`` command, ``rg --pre`` / ``--hostname-bin`` / ``--search-zip``,
``sort --compress-program`` (and its abbreviation ``--compress``), ``find -exec``. So each
program here has a small grammar, and anything it does not match is denied:

- every option is listed with the shape of its value; a long option matches only exactly
  (``--opt`` or ``--opt=VALUE``), never abbreviated; an unlisted option, ``--`` and a word
  that starts with ``-`` where a path goes are denied (GNU tools take options anywhere);
- combined short flags (``-la``) only of options that take no value;
- every other word is a path inside the roots (symlinks resolved), except the few operands
  that are patterns or scripts (``rg``'s and ``grep``'s pattern, ``sed``'s ``<N>p``);
- the program by its bare name, no environment assignment before it.

The shell syntax (no operators, expansions, redirections) is checked before, by the caller's
word splitter. Not here, on purpose: ``git`` (it runs what repository config names:
``core.fsmonitor``, ``diff.external``, textconv drivers, ``core.pager``), ``sort``, ``diff``
(it follows links inside directories), ``file``, ``tree``, ``xargs``, ``env``. At ``shell``
the profile's ``allow_commands`` can still allow such a command by prefix: that is the
admin's explicit choice, and the CLI's sandbox still confines it.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Value shapes: each is a full match. PATTERN is a regex or literal for rg/grep (any text:
# it is never a path and never run); the others are kept narrow.
COUNT = re.compile(r"[+-]?\d{1,9}")
NUMBER = re.compile(r"\d{1,9}")
GLOB = re.compile(r"[^-\0\n][^\0\n]{0,255}")
PATTERN = re.compile(r"[^\0]{1,4096}")
FILE_TYPE = re.compile(r"[fdl]")
RG_TYPE = re.compile(r"[A-Za-z0-9_]{1,32}")
NL_STYLE = re.compile(r"[ant]")
SED_PRINT = re.compile(r"\d{1,9}(,(\d{1,9}|\$))?p")
_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)


@dataclass(frozen=True)
class Shape:
    """One program's grammar."""

    usage: str  # what the denial shows
    letters: str = ""  # short options without a value, combinable ("-la")
    exact: frozenset[str] = frozenset()  # options without a value, matched exactly ("--hidden", "-print")
    values: Mapping[str, re.Pattern[str]] = field(default_factory=dict)  # option -> its value's shape
    glued: bool = True  # a short option's value may follow it in the same word ("-C3"), as getopt reads it
    numeric_count: bool = False  # head/tail's "-20"
    required: tuple[str, ...] = ()  # options that must be present (sed's -n)
    operand: re.Pattern[str] | None = None  # the first operand is this (a pattern, a script), not a path
    operand_options: frozenset[str] = frozenset()  # options that take the operand's place (rg -e, --files)
    min_paths: int = 0
    max_paths: int | None = None
    paths_first: bool = False  # find: paths, then the expression


SHAPES: dict[str, Shape] = {
    "cat": Shape("cat [-nbAs] FILE...", letters="nbAs", min_paths=1),
    "head": Shape(
        "head [-n N | -c N | -N] FILE...",
        values={"-n": COUNT, "-c": COUNT},
        numeric_count=True,
        min_paths=1,
    ),
    "tail": Shape(
        "tail [-n N | -n +N | -c N | -N] FILE...",
        values={"-n": COUNT, "-c": COUNT},
        numeric_count=True,
        min_paths=1,
    ),
    "wc": Shape("wc [-lwcm] FILE...", letters="lwcm", min_paths=1),
    "nl": Shape("nl [-b a|t|n] FILE...", values={"-b": NL_STYLE}, min_paths=1),
    "ls": Shape("ls [-1aAdFhlRrSt] [PATH...]", letters="1aAdFhlRrSt"),
    "pwd": Shape("pwd", max_paths=0),
    "sed": Shape(
        "sed -n <N>p FILE... or sed -n <N>,<M>p FILE... (<M> may be $)",
        letters="n",
        required=("-n",),
        operand=SED_PRINT,
        min_paths=1,
    ),
    "grep": Shape(
        "grep [-nirlLcvwxFEHhsoI] [-e PATTERN] [-A|-B|-C|-m N] [--include=GLOB] [--exclude=GLOB] PATTERN [PATH...]",
        letters="nirlLcvwxFEHhsoI",
        values={
            "-e": PATTERN,
            "-A": NUMBER,
            "-B": NUMBER,
            "-C": NUMBER,
            "-m": NUMBER,
            "--include": GLOB,
            "--exclude": GLOB,
        },
        operand=PATTERN,
        operand_options=frozenset({"-e"}),
    ),
    "rg": Shape(
        "rg [-niSsFwlcvxNHou] [--files] [--hidden] [--no-ignore] [-g GLOB] [-t TYPE] [-e PATTERN] "
        "[-A|-B|-C|-m N] PATTERN [PATH...]",
        letters="niSsFwlcvxNHou",
        exact=frozenset(
            {
                "--files",
                "--hidden",
                "--no-ignore",
                "--no-heading",
                "--heading",
                "--line-number",
                "--ignore-case",
                "--smart-case",
                "--fixed-strings",
                "--word-regexp",
                "--files-with-matches",
                "--count",
                "--column",
            }
        ),
        values={
            "-e": PATTERN,
            "--regexp": PATTERN,
            "-g": GLOB,
            "--glob": GLOB,
            "-t": RG_TYPE,
            "--type": RG_TYPE,
            "-A": NUMBER,
            "-B": NUMBER,
            "-C": NUMBER,
            "-m": NUMBER,
            "--max-count": NUMBER,
        },
        operand=PATTERN,
        operand_options=frozenset({"-e", "--regexp", "--files"}),
    ),
    "find": Shape(
        "find [PATH...] [-name|-iname|-path GLOB] [-type f|d|l] [-maxdepth|-mindepth N] [-empty] [-print]",
        exact=frozenset({"-print", "-empty"}),
        values={
            "-name": GLOB,
            "-iname": GLOB,
            "-path": GLOB,
            "-type": FILE_TYPE,
            "-maxdepth": NUMBER,
            "-mindepth": NUMBER,
        },
        glued=False,
        paths_first=True,
    ),
}

_WHY_NOT = {
    "git": "git runs programs that repository config names (core.fsmonitor, diff.external, core.pager)",
    "env": "it runs another program",
    "xargs": "it runs another program",
    "sort": "it can run programs and write files (--compress-program, --output)",
}


def inside(path: Path, roots: Sequence[Path]) -> bool:
    """Whether ``path``, symlinks resolved, is one of ``roots`` or below one (a link out is outside)."""
    resolved = path.resolve()
    return any(resolved == root or resolved.is_relative_to(root) for root in roots)


def _flags_only(shape: Shape, word: str) -> bool:
    """Short options without a value (``-la``), or head/tail's count (``-20``)."""
    if shape.letters and len(word) > 1 and all(c in shape.letters for c in word[1:]):
        return True
    return shape.numeric_count and NUMBER.fullmatch(word[1:]) is not None


def _option(shape: Shape, word: str, following: str | None) -> tuple[str | None, int, str | None]:
    """One option word: (why it is denied or None, words it used, the option that supplies the
    operand or None). ``following`` is the next word (an option's separate value)."""
    if word in shape.exact:
        return None, 1, word if word in shape.operand_options else None
    name, eq, glued_value = word.partition("=") if word.startswith("--") else (word, "", "")
    if eq and name in shape.values:
        value = glued_value
        used = 1
    elif word in shape.values:
        if following is None:
            return f"option {word} needs a value", 1, None
        name, value, used = word, following, 2
    elif shape.glued and not word.startswith("--") and word[:2] in shape.values:
        name, value, used = word[:2], word[2:], 1
    elif _flags_only(shape, word):
        return None, 1, None
    else:
        return f"option {word} is not allowed", 1, None
    if not shape.values[name].fullmatch(value):
        return f"option {name} does not take the value {value!r}", used, None
    return None, used, name if name in shape.operand_options else None


def read_command(words: Sequence[str], cwd: Path, roots: Sequence[Path]) -> str | None:
    """None when ``words`` (a command split into its words) is one of the read-only shapes on
    paths inside ``roots``, run in ``cwd``; else why not (the denial's text)."""
    if not words:
        return "an empty command"
    name, args = words[0], list(words[1:])
    if _ENV_ASSIGNMENT.fullmatch(name):
        return f"an environment assignment ({name.split('=', 1)[0]}=...) is not allowed"
    if "/" in name:
        return f"run read-only commands by their name, not by a path ({name})"
    shape = SHAPES.get(name)
    if shape is None:
        reason = _WHY_NOT.get(name, "it is not one of the read-only commands")
        return f"{name} is not allowed: {reason}; read-only commands: {', '.join(sorted(SHAPES))}"
    if not inside(cwd, roots):
        return "the working directory is outside the workspace"

    def refuse(why: str) -> str:
        return f"{name}: {why}; allowed: {shape.usage}"

    operands: list[str] = []
    seen: set[str] = set()
    operand_given = False
    i = 0
    while i < len(args):
        word = args[i]
        if word in ("--", "-"):
            return refuse(f"{word} is not allowed")
        if word.startswith("-"):
            why, used, supplies = _option(shape, word, args[i + 1] if i + 1 < len(args) else None)
            if why is not None:
                return refuse(why)
            seen.add(word)
            operand_given = operand_given or supplies is not None
            i += used
            continue
        if shape.paths_first and seen:
            return refuse(f"paths come before the expression ({word})")
        operands.append(word)
        i += 1
    missing = [option for option in shape.required if option not in seen]
    if missing:
        return refuse(f"{' '.join(missing)} is required")
    if shape.operand is not None and not operand_given:
        if not operands:
            return refuse("a pattern or script is required")
        first = operands.pop(0)
        if not shape.operand.fullmatch(first):
            return refuse(f"{first!r} is not an allowed script or pattern")
    if len(operands) < shape.min_paths:
        return refuse("a file is required")
    if shape.max_paths is not None and len(operands) > shape.max_paths:
        return refuse("no arguments are allowed")
    for operand in operands:
        if not operand:
            return refuse("an empty path")
        if not inside(cwd / operand, roots):
            return refuse(f"a path outside the workspace: {operand}")
    return None
