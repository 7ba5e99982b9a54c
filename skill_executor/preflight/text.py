"""Text helpers of the scan (pure): fenced blocks of the docs, shell commands of a script
or a block (words, operators, here-documents, continuations), JavaScript comments."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

#: Words that run the command after them (their options skipped).
WRAPPERS = frozenset(
    {
        "sudo",
        "env",
        "exec",
        "time",
        "nohup",
        "nice",
        "stdbuf",
        "then",
        "do",
        "else",
        "if",
        "while",
        "until",
        "!",
        "{",
        "elif",
    }
)
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
SEPARATORS = frozenset({";", "&&", "||", "|", "&", "|&", ";;", "(", ")", "((", "))", ";&", ";;&", "\n"})
REDIRECT = re.compile(r"^[<>&|]*[<>][<>&|]*$")
#: A quoted string spanning more lines than this is taken as an unbalanced quote.
MAX_QUOTED_LINES = 200
MAX_QUOTED_CHARS = 64 * 1024
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*([^\s`{]*)")


def fenced_blocks(text: str) -> Iterator[tuple[str, int, str]]:
    """Markdown fenced code blocks: (lower-case tag, line number before the first line, content)."""
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, tag = opening.group(1), opening.group(2).lower()
        start = index + 1
        end = start
        while end < len(lines) and not lines[end].strip().startswith(fence[0] * len(fence)):
            end += 1
        yield tag, start, "\n".join(lines[start:end])
        index = end + 1


def prompt_lines(block: str, *, console: bool) -> str:
    """A block's commands: ``$ `` prompts dropped; in a console block only prompted lines
    (and their continuations) are commands, the rest is output (blanked, keeping line numbers)."""
    out: list[str] = []
    continued = False
    for line in block.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith(("$ ", "> ")) or stripped == "$":
            line = stripped[2:]
            continued = line.rstrip().endswith("\\")
        elif console and not continued:
            line = ""
        else:
            continued = line.rstrip().endswith("\\")
        out.append(line)
    return "\n".join(out)


NOT_SHELL_WORDS = frozenset(
    {
        "import",
        "from",
        "def",
        "class",
        "const",
        "let",
        "var",
        "function",
        "return",
        "async",
        "await",
        "try",
        "except",
        "with",
        "package",
        "public",
        "private",
        "print",
        "elif",
        "else",
        "case",
        "switch",
        "module",
        "use",
        "fn",
        "int",
        "void",
    }
)


def looks_like_shell(block: str) -> bool:
    """An untagged block whose every line reads as a command: ``$ `` prompts, or a plain
    command word (or an assignment) followed by arguments."""
    lines = [line.strip() for line in block.split("\n") if line.strip() and not line.strip().startswith("#")]
    if not lines:
        return False
    if all(line.startswith("$ ") for line in lines):
        return True
    if not all(line.isascii() for line in lines):  # arrows, box drawing, prose: a diagram or text
        return False
    for line in lines:
        first = line.split()[0]
        if first in NOT_SHELL_WORDS:
            return False
        if not (re.match(r"^[a-z][a-z0-9._+-]*$", first) or ASSIGNMENT.match(first) or first.startswith("./")):
            return False
        if line.endswith((":", "{", ",", ";")) and not line.endswith(("do;", "then;")):
            return False
    return True


def shell_commands(text: str, functions: set[str] | None = None) -> Iterator[tuple[list[str], int]]:
    """The commands of shell code: (words from the command name on, 1-based line), for
    each part of pipelines and lists; assignments, wrappers (``sudo``, ``env``, ...),
    redirections and heredoc bodies skipped; names of functions it defines go into
    ``functions``."""
    functions = set() if functions is None else functions
    in_case = False
    for logical, line in _logical_lines(text):
        tokens = _tokens(logical)
        segment: list[str] = []
        tokens.append("\n")
        for index, token in enumerate(tokens):
            if token not in SEPARATORS:
                segment.append(token)
                continue
            words, in_case_after = _command_words(segment, in_case, token)
            if token == "(" and len(segment) == 1 and tokens[index + 1 : index + 2] == [")"]:
                functions.add(segment[0])
                words = []
            if segment[:1] == ["function"] and len(segment) > 1:
                functions.add(segment[1].removesuffix("()"))
                words = []
            in_case = in_case_after
            if words:
                yield words, line
            segment = []


def _command_words(segment: list[str], in_case: bool, separator: str) -> tuple[list[str], bool]:
    if not segment:
        return [], in_case
    if segment[0] == "case":
        return [], True
    if segment[0] == "esac":
        return [], False
    if in_case and separator == ")":
        return [], in_case  # a pattern of a case
    words: list[str] = []
    skip_next = False
    for word in segment:
        if skip_next:
            skip_next = False
            continue
        if REDIRECT.match(word):
            skip_next = True
            continue
        words.append(word)
    while words:
        head = words[0]
        if ASSIGNMENT.match(head):
            words = words[1:]
        elif head in WRAPPERS:
            words = words[1:]
            while words and words[0].startswith("-"):
                words = words[1:]
        elif head in (
            "for",
            "select",
            "case",
            "function",
            "[[",
            "[",
            "((",
            "let",
            "local",
            "export",
            "declare",
            "readonly",
        ):
            return [], in_case
        else:
            break
    if not words:
        return [], in_case
    head = words[0]
    if head.startswith(("$", "`", "~", "-", '"', "'")) or "$" in head or "=" in head:
        return [], in_case
    return words, in_case


def _logical_lines(text: str) -> Iterator[tuple[str, int]]:
    """Lines with ``\\`` continuations and quoted strings spanning lines joined, and heredoc
    bodies left out (linear: each physical line is scanned once per start)."""
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        start = index
        parts = [lines[index]]
        quote = _quote_after(lines[index], None)
        size = len(lines[index])
        while index + 1 < len(lines) and size < MAX_QUOTED_CHARS:
            current = parts[-1].rstrip()
            if quote is None and current.endswith("\\"):
                parts[-1] = current[:-1] + " "
            elif quote is not None and index + 1 - start < MAX_QUOTED_LINES:
                parts.append("\n")  # a quoted string goes on
            else:
                break
            index += 1
            parts.append(lines[index])
            size += len(lines[index])
            quote = _quote_after(lines[index], quote)
        if quote is not None:  # never closed: the first line alone
            parts, index = [lines[start]], start
        index += 1
        line = "".join(parts)
        for heredoc in HEREDOC.finditer(line):
            terminator = heredoc.group(2)
            while index < len(lines) and lines[index].strip() != terminator:
                index += 1
            index += 1
        yield HEREDOC.sub(" ", line), start + 1


ARITHMETIC = re.compile(r"\$?\(\((?:[^()]|\([^()]*\))*\)\)")


def _quote_after(text: str, quote: str | None) -> str | None:
    """The quote still open at the end of ``text`` (``'``, ``"`` or None), starting inside
    ``quote``: a linear scan (``\\`` escapes outside single quotes, ``#`` comments)."""
    if quote is None and "'" not in text and '"' not in text:
        return None
    index, length = 0, len(text)
    while index < length:
        char = text[index]
        if quote is None:
            if char == "#" and (index == 0 or text[index - 1] in " \t\n;&|("):
                newline = text.find("\n", index)
                if newline < 0:
                    return None
                index = newline
            elif char in "'\"":
                quote = char
            elif char == "\\":
                index += 1
        elif char == quote:
            quote = None
        elif char == "\\" and quote == '"':
            index += 1
        index += 1
    return quote


PLAIN_WORDS = re.compile(r"[;&|()<>]+|[^\s;&|()<>]+")


def _tokens(line: str) -> list[str]:
    line = ARITHMETIC.sub(" : ", line)  # $(( ... )) and (( ... )) hold no command
    if not any(c in line for c in "'\"\\#"):  # nothing to unquote: a quick split
        return [part for token in PLAIN_WORDS.findall(line) for part in _operators(token)]
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return [part for token in lexer for part in _operators(token)]
    except ValueError:  # an unbalanced quote: take the words up to it
        cut = min((i for i in (line.find("'"), line.find('"')) if i >= 0), default=len(line))
        return _tokens(line[:cut]) if cut < len(line) else line.split()


OPERATOR = re.compile(r";;&|;;|;&|&&|\|\||\|&|&>>|&>|>>|<<<|<<|>&|<&|>\||[;&|()<>]")


def _operators(token: str) -> list[str]:
    """shlex joins adjacent punctuation (``);``): split it into the shell's operators."""
    if token and all(c in ";&|()<>" for c in token):
        return OPERATOR.findall(token)
    return [token]


def strip_js_comments(text: str) -> str:
    """JavaScript with ``//`` and ``/* */`` comments blanked (line numbers kept; strings
    are respected roughly: a ``//`` right after ``:`` is a URL's). Linear."""
    parts: list[str] = []
    position = 0
    while (opening := text.find("/*", position)) >= 0:
        closing = text.find("*/", opening + 2)
        end = len(text) if closing < 0 else closing + 2
        parts += [text[position:opening], "\n" * text.count("\n", opening, end)]
        position = end
    parts.append(text[position:])
    return re.sub(r"(?<![:\\'\"`])//[^\n]*", "", "".join(parts))
