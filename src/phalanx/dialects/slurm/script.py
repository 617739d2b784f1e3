"""Batch scripts: sbatch's validity checks and its ``#SBATCH`` directive reader.

Exactly sbatch's rules (sbatch.c ``_get_script_buffer``; opt.c
``_opt_batch_script``, ``_get_argument``):

* the script must not be empty or whitespace only, must start with ``#!``, must
  not contain a NUL byte or DOS line breaks, and must not be larger than
  :data:`MAX_SCRIPT_BYTES` (4 MiB, Slurm's default ``max_script_size``);
* a directive is a line starting at column 0 with ``#SBATCH``; the rest of the
  line is split into words (whitespace separates, ``"..."``/``'...'`` group,
  ``\\`` escapes the next character, an unquoted ``#`` starts a comment, no
  shell expansion);
* blank lines and lines whose first non-blank character is ``#`` are skipped;
  the first other line ends directive processing for good;
* ``#SBATCH hetjob`` (or the older ``packjob``, any case) starts the next component
  of a heterogeneous job: the directives after it (and the words after it on its
  line) are that component's (:attr:`Directive.component`); a word that starts with
  ``:`` is refused (``Unexpected `:` ``), as sbatch does.

On top of sbatch, phalanx diagnoses two defects users paste from web pages,
naming ``FILE:LINE``: a ``//`` "comment" before the directives (sbatch would
silently ignore every directive after it) and a line ending in ``\\\\`` (an
escaped backslash, not a line continuation); and ``hetjob`` after other words on a
directive line, which sbatch drops without starting a component. With ``lenient=False``
these raise
one :class:`~phalanx.errors.Invalid`; with ``lenient=True`` they become warnings
and ``//`` lines are read as comments.
"""

from __future__ import annotations

from dataclasses import dataclass

from phalanx.errors import Invalid

__all__ = [
    "MAX_SCRIPT_BYTES",
    "Directive",
    "ScriptDirectives",
    "check_script",
    "read_directives",
    "split_directive",
]

MAX_SCRIPT_BYTES = 4 << 20
"""The largest batch script, in bytes: Slurm's default ``max_script_size`` (4 MiB). The
server refuses a longer ``run.script`` too (:class:`phalanx.model.RunSpec`)."""

_MAGIC = "#SBATCH"
_LEGACY = "#SLURM"
_SEPARATORS = ("hetjob", "packjob")
"""The words that start the next component of a heterogeneous job (``packjob``: before
Slurm 20.02)."""


@dataclass(frozen=True)
class Directive:
    """One ``#SBATCH`` line: its 1-based number, its words and the heterogeneous job
    component they belong to (0 for an ordinary job)."""

    line: int
    argv: tuple[str, ...]
    component: int = 0


@dataclass(frozen=True)
class ScriptDirectives:
    """What :func:`read_directives` found."""

    directives: tuple[Directive, ...]
    warnings: tuple[str, ...] = ()

    def words(self, component: int | None = None) -> list[tuple[int, str]]:
        """Every directive word with its line number, in order (only ``component``'s,
        when given)."""
        return [
            (d.line, w)
            for d in self.directives
            if component is None or d.component == component
            for w in d.argv
        ]

    @property
    def components(self) -> int:
        """How many heterogeneous job components the directives describe (1: an
        ordinary job)."""
        return 1 + max((d.component for d in self.directives), default=0)


def _too_large(text: str) -> bool:
    if len(text) > MAX_SCRIPT_BYTES:
        return True  # at least one byte a character: no need to encode it
    try:  # a byte that is not UTF-8 was read as a surrogate (``surrogateescape``)
        size = len(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        size = len(text.encode("utf-8", "surrogatepass"))
    return size > MAX_SCRIPT_BYTES


def check_script(text: str, source: str = "<stdin>") -> None:
    """sbatch's checks of a batch script's bytes; :class:`Invalid` with its message.

    ``source`` names the script in the one message that is phalanx's (its size).
    """
    if _too_large(text):
        raise Invalid(
            f"sbatch: error: {source}: the batch script is larger than {MAX_SCRIPT_BYTES} "
            "bytes (4 MiB, Slurm's default max_script_size)"
        )
    if "\0" in text:
        raise Invalid("sbatch: error: The batch script contains a NULL character")
    if text == "":
        raise Invalid("sbatch: error: Batch script is empty!")
    if text.strip() == "":
        raise Invalid("sbatch: error: Batch script contains only whitespace!")
    if not text.startswith("#!"):
        raise Invalid(
            "sbatch: error: This does not look like a batch script.  The first\n"
            "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
            "sbatch: error: For instance: #!/bin/sh"
        )
    if "\r\n" in text:
        raise Invalid(
            "sbatch: error: Batch script contains DOS line breaks (\\r\\n)\n"
            "sbatch: error: instead of expected UNIX line breaks (\\n)."
        )


def split_directive(rest: str, source: str, lineno: int, line: str) -> list[str]:
    """The words of a directive's text after ``#SBATCH`` (opt.c ``_get_argument``), up to
    a ``hetjob``/``packjob`` word (see :func:`_split`)."""
    return _split(rest, source, lineno, line)[0]


def _separator_at(rest: str, i: int) -> str | None:
    """The heterogeneous job separator (``hetjob``, ``packjob``) that starts at ``rest[i]``,
    followed by a blank or the end of the line, as ``_get_argument`` tests it (any case)."""
    for word in _SEPARATORS:
        end = i + len(word)
        if rest[i:end].lower() == word and (end == len(rest) or rest[end].isspace()):
            return rest[i:end]
    return None


def _split(rest: str, source: str, lineno: int, line: str) -> tuple[list[str], str | None, int]:
    """``(words, separator, at)``: the words of a directive's text, the ``hetjob`` or
    ``packjob`` word that ended them (``None``: none did) and its index in ``rest``.

    sbatch's ``_get_argument`` blanks a separator at the start of a word and stops
    reading the line there: whatever follows it on the line is dropped.
    """
    words: list[str] = []
    i, n = 0, len(rest)
    while i < n and rest[i].isspace():
        i += 1
    while True:
        start = i  # what _get_argument is handed: the line from here on
        while i < n and rest[i].isspace():
            i += 1
        if i >= n:
            return words, None, i
        separator = _separator_at(rest, i)
        if separator is not None:
            return words, separator, i
        if rest[i] == ":":
            raise Invalid(
                f"sbatch: fatal: {source}: line {lineno}: Unexpected `:` in [{rest[start:]}]"
            )
        chars: list[str] = []
        quote = ""
        escape = False
        while i < n and (quote or escape or not rest[i].isspace()):
            ch = rest[i]
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
                i += 1
                continue
            elif quote:
                if ch == quote:
                    quote = ""
                    i += 1
                    continue
            elif ch in "\"'":
                quote = ch
                i += 1
                continue
            elif ch == "#":
                break
            chars.append(ch)
            i += 1
        if quote:
            raise Invalid(
                f"sbatch: error: {source}: line {lineno}: Unmatched `{quote}` in [{line}]"
            )
        if not chars:
            return words, None, i  # a comment (or an empty quoted word, which sbatch also drops)
        words.append("".join(chars))


def _first_char(line: str) -> str:
    stripped = line.lstrip()
    return stripped[:1]


def _span(lines: list[int]) -> str:
    if len(lines) == 1:
        return f"line {lines[0]}"
    return f"lines {lines[0]}-{lines[-1]}"


def read_directives(text: str, source: str, *, lenient: bool = False) -> ScriptDirectives:
    """The ``#SBATCH`` directives of the batch script ``text`` (named ``source`` in errors)."""
    check_script(text, source)
    lines = text.split("\n")
    problems: list[str] = []
    warnings: list[str] = []

    # What sbatch reads, and what it would read if `//` lines were comments.
    strict_dirs: list[Directive] = []
    lenient_dirs: list[Directive] = []
    slash_lines: list[int] = []
    stopped_strict = False
    component = 0
    packjob_warned = False
    for number, line in enumerate(lines, start=1):
        first = _first_char(line)
        is_slash = line.lstrip().startswith("//")
        if line.startswith(_MAGIC):
            text = line[len(_MAGIC) :]
            words, separator, at = _split(text, source, number, line)
            if separator is not None and not words:
                # `#SBATCH hetjob`: the next component starts.
                component += 1
                if separator.lower() == "packjob" and not packjob_warned:
                    packjob_warned = True
                    warnings.append(
                        f'{source}:{number}: the "packjob" component separator is being '
                        'deprecated. Please, use "hetjob" instead.'
                    )
                dropped = text[at + len(separator) :].strip()
                if dropped and not dropped.startswith("#"):
                    problems.append(
                        f"{source}: line {number}: sbatch ignores what follows `{separator}` "
                        f"on its line ({dropped}). Fix: put it on an #SBATCH line of its own "
                        "below."
                    )
            elif separator is not None:
                problems.append(
                    f"{source}: line {number}: `{separator}` separates heterogeneous job "
                    "components only at the start of a directive; sbatch ignores it and the "
                    f"rest of the line after {words[-1]}. Fix: put `#SBATCH {separator}` on a "
                    "line of its own."
                )
            directive = Directive(number, tuple(words), component)
            lenient_dirs.append(directive)
            if not stopped_strict:
                strict_dirs.append(directive)
            continue
        if line.startswith(_LEGACY) and not stopped_strict:
            warnings.append(
                f"{source}:{number}: Change from #SLURM to #SBATCH in your script and verify "
                "the options are valid in #SBATCH (sbatch ignores #SLURM lines)"
            )
            continue
        if first in ("", "#"):
            continue
        if is_slash:
            slash_lines.append(number)
            stopped_strict = True
            continue
        stopped_strict = True
        break  # the first command: no more directives, for sbatch and for us
    stop_line = next(
        (
            n
            for n, line in enumerate(lines, start=1)
            if _first_char(line) not in ("", "#") and not line.lstrip().startswith("//")
        ),
        len(lines) + 1,
    )

    if slash_lines:
        ignored = [d.line for d in lenient_dirs if d.line > slash_lines[0]]
        if ignored:
            count = len(ignored)
            noun = "directive" if count == 1 else "directives"
            others = [n for n in slash_lines[1:] if n < stop_line]
            also = f" (also {_span(others)})" if others else ""
            problems.append(
                f"{source}: line {slash_lines[0]}: `//` is not a comment in a "
                "shell script; sbatch stops reading #SBATCH directives at the first line that "
                f"is not a comment, so the {count} {noun} below ({_span(ignored)}) would be "
                f"ignored. Fix: start the line with `#`{also}."
            )
        else:
            for n in slash_lines:
                warnings.append(
                    f"{source}:{n}: `//` is not a comment in a shell script; the shell runs it "
                    "as a command. Fix: start the line with `#`."
                )

    # #SBATCH lines after the first command: sbatch ignores them (legal, but rarely meant).
    late = [n for n, line in enumerate(lines, start=1) if n > stop_line and line.startswith(_MAGIC)]
    if late:
        warnings.append(
            f"{source}:{late[0]}: #SBATCH after the first command (line {stop_line}) is "
            f"ignored by sbatch ({_span(late) if len(late) > 1 else 'line ' + str(late[0])}). "
            "Fix: move the directives above the first command."
        )

    for number, line in enumerate(lines, start=1):
        if _first_char(line) == "#":
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing >= 2 and trailing % 2 == 0:
            problems.append(
                f"{source}: line {number} ends with `\\\\`: the shell reads an escaped "
                "backslash, not a line continuation, so the command ends on this line. "
                "Fix: end it with a single `\\`."
            )

    if problems and not lenient:
        raise Invalid("\n".join(problems))
    chosen = lenient_dirs if lenient else strict_dirs
    chosen = [d for d in chosen if d.line < stop_line]
    return ScriptDirectives(directives=tuple(chosen), warnings=tuple(problems + warnings))
