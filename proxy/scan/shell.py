"""Shell text -> commands of words with source spans, and the settings in them.

A small POSIX-shell word splitter: quotes, backslash escapes, line continuations,
comments, `$(...)`/backticks kept inside a word, and command separators (newline,
`;`, `&`, `|`, parentheses). Good enough for deployment scripts, Dockerfile RUN/CMD
lines and compose command strings; it never executes anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from proxy.scan.model import Host, KeyValueSite, Occurrence, WordsSite

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_SHORT_FLAG = re.compile(r"-[A-Za-z]")
_SEPARATORS = "\n;&|()"
# Programs in front of which `NAME=VALUE ` sets the environment of vLLM itself.
_VLLM_PROGRAMS = frozenset({"vllm", "python", "python3", "vllm-cutover"})


@dataclass(frozen=True)
class Word:
    """One shell word: its value after quote removal and its raw span."""

    text: str
    start: int
    end: int


def _skip_quoted(text: str, i: int, end: int) -> tuple[str, int]:
    """Parse a quoted or substituted run at text[i]; return (value, index after it)."""
    ch = text[i]
    if ch == "'":
        close = text.find("'", i + 1, end)
        close = end if close < 0 else close
        return text[i + 1:close], close + 1
    if ch == '"':
        out: list[str] = []
        j = i + 1
        while j < end and text[j] != '"':
            if text[j] == "\\" and j + 1 < end and text[j + 1] in '"\\$`\n':
                if text[j + 1] != "\n":
                    out.append(text[j + 1])
                j += 2
                continue
            out.append(text[j])
            j += 1
        return "".join(out), j + 1
    if ch == "`":
        close = text.find("`", i + 1, end)
        close = end if close < 0 else close
        return text[i:close + 1], close + 1
    # "$(" or "${": keep raw up to the balancing bracket.
    opener, closer = text[i + 1], ")" if text[i + 1] == "(" else "}"
    depth, j = 0, i + 1
    while j < end:
        if text[j] == opener:
            depth += 1
        elif text[j] == closer:
            depth -= 1
            if depth == 0:
                break
        j += 1
    return text[i:j + 1], j + 1


def split_commands(text: str, start: int = 0, end: int | None = None) -> list[list[Word]]:
    """Split text[start:end] into simple commands, each a list of words."""
    end = len(text) if end is None else end
    commands: list[list[Word]] = []
    words: list[Word] = []
    buf: list[str] = []
    word_start = -1
    i = start

    def finish_word(at: int) -> None:
        nonlocal word_start
        if word_start >= 0:
            words.append(Word("".join(buf), word_start, at))
            buf.clear()
            word_start = -1

    def finish_command() -> None:
        nonlocal words
        if words:
            commands.append(words)
        words = []

    while i < end:
        ch = text[i]
        if ch == "\\" and i + 1 < end:
            if text[i + 1] == "\n":
                i += 2
                continue
            if word_start < 0:
                word_start = i
            buf.append(text[i + 1])
            i += 2
        elif ch in " \t\r":
            finish_word(i)
            i += 1
        elif ch in _SEPARATORS:
            finish_word(i)
            finish_command()
            i += 1
        elif ch == "#" and word_start < 0:
            newline = text.find("\n", i, end)
            i = end if newline < 0 else newline
        elif ch in "'\"`" or (ch == "$" and i + 1 < end and text[i + 1] in "({"):
            if word_start < 0:
                word_start = i
            value, i = _skip_quoted(text, i, end)
            buf.append(value)
        else:
            if word_start < 0:
                word_start = i
            buf.append(ch)
            i += 1
    finish_word(min(i, end))
    finish_command()
    return commands


def is_assignment(word: Word, text: str) -> bool:
    """NAME=VALUE with an unquoted name (what the shell treats as an assignment)."""
    match = _ASSIGNMENT.match(text, word.start)
    return match is not None and match.end() <= word.end


def _assignment(word: Word, text: str, host: Host, entry: tuple[int, int]) -> Occurrence:
    name, _, value = word.text.partition("=")
    eq = word.start + len(name)
    site = KeyValueSite(
        name_span=(word.start, eq),
        value_span=(eq + 1, word.end),
        entry_span=entry,
        name_style="raw",
        value_style="shell",
    )
    return Occurrence("env", name, value, word.start, host, site)


def _line_entry(text: str, first: Word, last: Word) -> tuple[int, int]:
    """The span to delete to drop a whole command: its lines when it has them alone."""
    line_start = text.rfind("\n", 0, first.start) + 1
    line_end = text.find("\n", last.end)
    line_end = len(text) if line_end < 0 else line_end + 1
    before = text[line_start:first.start]
    after = text[last.end:line_end]
    if not before.strip() and (not after.strip() or after.strip().startswith("#")):
        return line_start, line_end
    return first.start, last.end


def command_occurrences(words: list[Word], text: str, host: Host) -> list[Occurrence]:
    """The env assignments and `--flags` of one simple command."""
    found: list[Occurrence] = []
    i = 0
    while i < len(words) and is_assignment(words[i], text):
        i += 1
    prefix = words[:i]
    program = words[i] if i < len(words) else None
    if program is None:
        for word in prefix:
            entry = _line_entry(text, word, word) if len(prefix) == 1 else (word.start, word.end)
            found.append(_assignment(word, text, host, entry))
        return found
    for k, word in enumerate(prefix):
        found.append(_assignment(word, text, host, (word.start, words[k + 1].start)))
    rest = words[i:]
    if program.text in ("export", "env", "declare"):
        assigns = [w for w in rest[1:] if is_assignment(w, text)]
        for word in assigns:
            single = len(assigns) == 1 and program.text == "export"
            entry = _line_entry(text, rest[0], word) if single else (word.start, word.end)
            found.append(_assignment(word, text, host, entry))
        if program.text != "env":
            return found
    if runs_sglang([w.text for w in rest]):
        return found
    runs = rest[1] if program.text in ("exec", "nohup") and len(rest) > 1 else program
    env_prefix_at = program.start if runs.text.rsplit("/", 1)[-1] in _VLLM_PROGRAMS else None
    for k, word in enumerate(rest):
        nxt = rest[k + 1] if k + 1 < len(rest) else None
        if word.text in ("-e", "--env") and nxt is not None and is_assignment(nxt, text):
            found.append(_assignment(nxt, text, host, (word.start, nxt.end)))
        elif is_flag(word.text):
            found.append(_flag(word, nxt, host, env_prefix_at))
    return found


def _flag(word: Word, nxt: Word | None, host: Host, env_prefix_at: int | None) -> Occurrence:
    if "=" in word.text:
        name, _, value = word.text.partition("=")
        return Occurrence("flag", name, value, word.start, host,
                          WordsSite(word.start, word.end, env_prefix_at))
    if nxt is not None and not nxt.text.startswith("-"):
        return Occurrence("flag", word.text, nxt.text, word.start, host,
                          WordsSite(word.start, nxt.end, env_prefix_at))
    return Occurrence("flag", word.text, None, word.start, host,
                      WordsSite(word.start, word.end, env_prefix_at))


def is_flag(word: str) -> bool:
    """`--long-flag[=v]` or a one-letter `-q` (vLLM's alias for --quantization)."""
    return (word.startswith("--") and len(word) > 2) or _SHORT_FLAG.fullmatch(word) is not None


def runs_sglang(words: list[str]) -> bool:
    """SGLang's server takes `--fp4-gemm-backend` itself: its flags are not vLLM's."""
    return any("sglang" in word for word in words[:4])


def find_in_shell(text: str, host: Host, start: int = 0, end: int | None = None
                  ) -> list[Occurrence]:
    """All settings in shell text (a whole script or one region of a file)."""
    found: list[Occurrence] = []
    for words in split_commands(text, start, end):
        for occ in command_occurrences(words, text, host):
            exported = occ.kind == "env" and (words[0].text in ("export", "declare")
                                              or all(is_assignment(w, text) for w in words))
            found.append(replace(occ, group=(host.start, -1 if exported else words[0].start)))
    return found
