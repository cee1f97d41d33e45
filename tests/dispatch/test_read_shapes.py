"""dispatcher/clis/read_shapes.py: the read-only commands a worker's hook lets
run, as exact argument shapes. One table of reads that must pass and one hostile corpus that
must be denied, over every allowed program, at every level that has the hook (through
``codex.hook_decision``, as Codex's PreToolUse hook decides). A few rows also run for real:
the legitimate reads write nothing, and the hostile sed script really does run a program."""

import shutil
import subprocess
from pathlib import Path

import pytest

from dispatcher.clis import command_gate, read_shapes
from dispatcher.clis.codex import profile as codex
from dispatcher.core.permissions import PermissionProfile

# Reads a worker needs; each must pass at read, edit and shell. "{ws}" is the workspace.
LEGITIMATE = [
    "cat notes.txt",
    "cat -n notes.txt sub/a.py",
    "cat {ws}/notes.txt",
    "sed -n 1,20p notes.txt",
    "sed -n 5p notes.txt",
    "sed -n '2,$p' notes.txt",
    "sed -n 1p notes.txt sub/a.py",
    "head -n 20 notes.txt",
    "head -20 notes.txt",
    "head -c 100 notes.txt",
    "tail -n 5 notes.txt",
    "tail -n +2 notes.txt",
    "wc -l notes.txt sub/a.py",
    "nl -ba notes.txt",
    "nl -b a notes.txt",
    "ls",
    "ls -la sub",
    "ls -R",
    "ls -1 {ws}",
    "pwd",
    "grep -rn todo .",
    "grep -n -e -x notes.txt",
    "grep -i -C 2 todo notes.txt",
    "grep -rn --include='*.py' def .",
    "grep -c todo notes.txt",
    "rg todo",
    "rg -n todo sub",
    "rg --files",
    "rg --files sub",
    "rg -g '*.py' -C 3 def",
    "rg -C3 -i todo .",
    "rg -e -foo .",
    "rg --hidden --no-heading -n todo .",
    "rg -t py def",
    "find . -name '*.txt'",
    "find sub -maxdepth 2 -type f",
    "find -name notes.txt",
    "find . -type d -empty -print",
]

# Each row: a command and a word its denial must name (what was denied).
HOSTILE = [
    # sed: the e, w, r and W commands, -i, abbreviations, scripts from a file, options after the file
    ("sed -n 1p -e '1e cat /etc/hostname' notes.txt", "-e"),
    ("sed -n '1e cat /etc/hostname' notes.txt", "1e cat"),
    ("sed -n 1p notes.txt -e '1e id'", "-e"),
    ("sed -n 1p '--expression=1e id' notes.txt", "--expression"),
    ("sed -n '1w out.txt' notes.txt", "1w out.txt"),
    ("sed -n '1W out.txt' notes.txt", "1W out.txt"),
    ("sed -n '1r /etc/hostname' notes.txt", "1r"),
    ("sed -n '1p;1e id' notes.txt", "1e id"),
    ("sed -n 1p -i notes.txt", "-i"),
    ("sed -i s/x/y/ notes.txt", "-i"),
    ("sed -n 1p --in-place=.bak notes.txt", "--in-place"),
    ("sed -n 1p --in=.bak notes.txt", "--in"),
    ("sed -n -f script.sed notes.txt", "-f"),
    ("sed -n 1p -- notes.txt", "--"),
    ("sed -n 1p /etc/passwd", "/etc/passwd"),
    ("sed 1p notes.txt", "-n"),
    ("sed -n 1p", "file"),
    # rg: preprocessors, the hostname program, decompressors, links out
    ("rg --pre=sh x .", "--pre"),
    ("rg --pre sh x .", "--pre"),
    ("rg --pre-glob '*' --pre ./prog x", "--pre-glob"),
    ("rg --hostname-bin=./prog x .", "--hostname-bin"),
    ("rg --hostname-bin ./prog x .", "--hostname-bin"),
    ("rg -z x .", "-z"),
    ("rg -iz x .", "-iz"),
    ("rg --search-zip x .", "--search-zip"),
    ("rg --search-z x .", "--search-z"),
    ("rg --pr=sh x .", "--pr"),
    ("rg -L x .", "-L"),
    ("rg --follow x .", "--follow"),
    ("rg x link", "link"),
    ("rg x /etc", "/etc"),
    ("rg --files /etc", "/etc"),
    ("rg -f /etc/passwd .", "-f"),
    ("rg --ignore-file=/etc/x x .", "--ignore-file"),
    ("rg -e x -- /etc", "--"),
    ("rg -e x /etc/hostname", "/etc/hostname"),
    ("rg x -g", "-g"),
    # grep: links followed, patterns from a file, paths outside
    ("grep -R x .", "-R"),
    ("grep -f /etc/passwd notes.txt", "-f"),
    ("grep x /etc/passwd", "/etc/passwd"),
    ("grep -r x link", "link"),
    ("grep --exclude-from=/etc/x -r x .", "--exclude-from"),
    ("grep --devices=read x notes.txt", "--devices"),
    ("grep -e x -- /etc", "--"),
    ("grep -A x y notes.txt", "-A"),
    # find: -exec and friends, writes, links followed, paths outside
    ("find . -exec cat '{}' +", "-exec"),
    ("find . -exec sh -c id ';'", "-exec"),
    ("find . -execdir id ';'", "-execdir"),
    ("find . -ok id ';'", "-ok"),
    ("find . -delete", "-delete"),
    ("find . -fprint out.txt", "-fprint"),
    ("find -L . -name x", "-L"),
    ("find . -follow", "-follow"),
    ("find / -name x", "/"),
    ("find . -newer /etc/passwd", "-newer"),
    ("find . -name x -o -exec id ';'", "-o"),
    ("find . -name x sub", "sub"),
    ("find . -files0-from list", "-files0-from"),
    ("find . -name -exec", "-exec"),
    # programs that run programs or write files, however they are spelled
    ("sort --compress=sh notes.txt", "sort"),
    ("sort --compress-program=sh notes.txt", "sort"),
    ("sort --out=copy.txt notes.txt", "sort"),
    ("sort -o copy.txt notes.txt", "sort"),
    ("xargs cat", "xargs"),
    ("xargs -a notes.txt sh", "xargs"),
    ("git status", "git"),
    ("git -c core.pager=id log", "git"),
    ("git -c core.fsmonitor=id status", "git"),
    ("git diff --output=/tmp/x", "git"),
    ("git log --output=x", "git"),
    ("env cat notes.txt", "env"),
    ("env -i sh", "env"),
    ("sh -c id", "sh"),
    ("bash notes.txt", "bash"),
    ("python3 -c 'print(1)'", "python3"),
    ("awk 'BEGIN { system(\"id\") }'", "awk"),
    ("tee out.txt", "tee"),
    ("touch notes.txt", "touch"),
    ("rm -rf notes.txt", "rm"),
    ("file -C -m x", "file"),
    ("tree -o out.txt", "tree"),
    ("diff -r . link", "diff"),
    ("timeout 5 cat notes.txt", "timeout"),
    ("command cat notes.txt", "command"),
    ("exec cat notes.txt", "exec"),
    # environment assignments, programs by path
    ("FOO=1 cat notes.txt", "FOO="),
    ("LD_PRELOAD=./x.so cat notes.txt", "LD_PRELOAD="),
    ("RIPGREP_CONFIG_PATH=./rc rg x", "RIPGREP_CONFIG_PATH="),
    ("PAGER=id cat notes.txt", "PAGER="),
    ("/bin/cat notes.txt", "/bin/cat"),
    ("./cat notes.txt", "./cat"),
    # the other programs: outside paths, stdin, unlisted options
    ("cat /etc/hostname", "/etc/hostname"),
    ("cat link/canary.txt", "link/canary.txt"),
    ("cat ../outside/canary.txt", "../outside/canary.txt"),
    ("cat -", "-"),
    ("cat -- notes.txt", "--"),
    ("cat", "file"),
    ("cat --show-all=x notes.txt", "--show-all"),
    ("head -n 1 /etc/passwd", "/etc/passwd"),
    ("head --lines=1 notes.txt", "--lines"),
    ("head -n x notes.txt", "-n"),
    ("head -n", "-n"),
    ("tail -f notes.txt", "-f"),
    ("wc --files0-from=list", "--files0-from"),
    ("wc -l /etc/passwd", "/etc/passwd"),
    ("nl -ba /etc/passwd", "/etc/passwd"),
    ("nl --body-numbering=a notes.txt", "--body-numbering"),
    ("ls /etc", "/etc"),
    ("ls -L link", "-L"),
    ("ls link", "link"),
    ("ls --hide=x", "--hide"),
    ("ls -I x", "-I"),
    ("pwd -P", "-P"),
    ("pwd sub", "arguments"),
]

LEVELS = ("read", "edit", "shell")


@pytest.fixture
def ws(tmp_path) -> Path:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "notes.txt").write_text("todo: one\ntwo\nthree\n")
    (ws / "sub" / "a.py").write_text("def f():\n    return 1\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text("canary\n")
    (ws / "link").symlink_to(outside)
    return ws


def decide(tmp_path: Path, ws: Path, level: str, command: str) -> str | None:
    """The Codex hook's decision on ``command`` at ``level`` (at shell with allow_commands that
    never match the corpus)."""
    extra = {"allow_commands": ["uv run pytest*", "make test"]} if level == "shell" else {}
    profile = PermissionProfile.model_validate({"level": level, **extra})
    policy = codex.policy_document(profile, ws, tmp_path / "attempt" / "tmp")
    event = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": command}, "cwd": str(ws)}
    return codex.hook_decision(policy, event)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("command", LEGITIMATE)
def test_legitimate_reads_pass(tmp_path, ws, level, command):
    assert decide(tmp_path, ws, level, command.format(ws=ws)) is None


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("command", "named"), HOSTILE)
def test_the_hostile_corpus_is_denied_saying_what_and_why(tmp_path, ws, level, command, named):
    reason = decide(tmp_path, ws, level, command)
    assert reason is not None, command
    assert reason.startswith("denied exec_command: "), reason
    assert named in reason, reason


def test_every_allowed_program_is_in_both_tables():
    """The table test covers every program of the vocabulary: a read that passes and attacks that fail."""
    legit = {c.split()[0] for c in LEGITIMATE}
    hostile = {c.split()[0] for c, _ in HOSTILE}
    assert set(read_shapes.SHAPES) == legit
    assert set(read_shapes.SHAPES) <= hostile


def test_a_denial_names_the_allowed_shape(tmp_path, ws):
    reason = decide(tmp_path, ws, "read", "sed -n 1p -e '1e cat /etc/hostname' notes.txt")
    assert reason == (
        "denied exec_command: sed: option -e is not allowed; allowed: sed -n <N>p FILE... or "
        "sed -n <N>,<M>p FILE... (<M> may be $); level read allows only the read-only commands"
    )
    assert "git runs programs that repository config names" in decide(tmp_path, ws, "read", "git status")


def test_an_allowed_prefix_at_shell_still_passes_with_any_arguments(tmp_path, ws):
    """allow_commands is the admin's explicit choice: a prefix of words, as before."""
    assert decide(tmp_path, ws, "shell", "uv run pytest -q -k x") is None
    assert decide(tmp_path, ws, "edit", "uv run pytest -q") is not None


def test_a_working_directory_outside_is_denied(tmp_path, ws):
    assert read_shapes.read_command(["ls"], Path("/etc"), [ws]) == "the working directory is outside the workspace"


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"" for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("command", [c for c in LEGITIMATE if shutil.which(c.split()[0])])
def test_the_legitimate_reads_run_and_write_nothing(ws, command):
    words = command_gate.shell_words(command.format(ws=ws))
    assert words is not None
    before = tree(ws.parent)
    done = subprocess.run(words, cwd=ws, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode in (0, 1), done.stderr  # 1: grep found nothing
    assert "canary" not in done.stdout  # nothing read through the link out of the workspace
    assert tree(ws.parent) == before


def test_the_corpus_is_real_gnu_sed_runs_the_e_command(ws):
    """What the old rule allowed (`sed -n <N>p` first, the rest only path-checked) runs a program."""
    words = command_gate.shell_words("sed -n 1p -e '1e touch ran-by-sed' notes.txt")
    assert words is not None
    subprocess.run(words, cwd=ws, capture_output=True, timeout=30)  # exit 2: with -e, "1p" names a file
    assert (ws / "ran-by-sed").exists()
    assert read_shapes.read_command(words, ws, [ws]) is not None
