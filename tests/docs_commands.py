"""The pages users copy commands from (README.md, docs/*.md), read as a user
reads them: their fenced shell blocks, the commands in each (every word
with its line), the checkout's programs those commands start with the words
each one is given, the HVT_ variables they set, and the pages' links.
tests/single/test_docs_commands.py checks all of it against the code.

    <!-- illustrative -->

on a comment line directly above a block's fence (alone, or among the
comment lines there) marks a template or a site's own example: its
commands are not checked; its HVT_ variables and the page's links are.

Reading only: nothing here runs a program."""

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
ILLUSTRATIVE = "<!-- illustrative -->"
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")

# A path is the checkout's when its first folder is one of these; it runs
# as a program when it has one of these suffixes.
OUR_FOLDERS = ("horovod_train", "benchmarks", "scripts", "docker", "tests")
SCRIPT_SUFFIXES = (".sh", ".py", ".sbatch")
# Programs that run another command given among their words (a site's
# options before it, not ours to check): the command of ours inside is.
WRAPPERS = {"sbatch", "srun", "salloc", "docker", "podman", "apptainer", "singularity"}
# Words before a command that leave it the same command.
PREFIXES = {"sudo", "env", "time", "exec", "nohup"}
SEPARATORS = {";", "&&", "||", "|", "&"}
ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=.*")
PYTHON = re.compile(r"(?:\S*/)?python(?:3(?:\.\d+)?)?")
OPTION = re.compile(r"(--?[A-Za-z][\w-]*)(?:=.*)?")
HVT_SET = re.compile(r"\b(HVT_\w+)=")


class Word(NamedTuple):
    text: str
    line: int  # 1-based, on its page


@dataclass
class Block:
    page: str  # relative to the checkout: "docs/benchmarks.md"
    line: int  # of the opening fence
    language: str
    illustrative: bool
    lines: list[tuple[int, str]]  # (line number, text) of its body


@dataclass
class Command:
    page: str
    words: list[Word]
    illustrative: bool


@dataclass(frozen=True)
class Program:
    """A program of the checkout (or horovodrun, torchrun, pytest: the
    venv's) as the test starts it for its --help."""
    name: str  # as failures name it: "benchmarks/predict_scaling.py", "python -m horovod_train"
    start: tuple[str, ...]  # from the checkout's root; "python", "horovodrun": the venv's
    file: str | None = None  # the checkout's file it needs
    by_path: bool = False  # started as a path: needs the executable bit and a shebang

    def with_subcommand(self, word: str) -> "Program":
        return Program(f"{self.name} {word}", (*self.start, word), self.file, self.by_path)


@dataclass
class Use:
    """One program a command starts, and the words it hands that program."""
    page: str
    at: Word  # the word naming it
    programs: tuple[Program, ...]  # an option is right when one of their --help lists it
    args: list[Word]


HOROVODRUN = Program("horovodrun", ("horovodrun",))
TORCHRUN = Program("torchrun", ("torchrun",))
PYTEST = Program("python -m pytest", ("python", "-m", "pytest"))
TRAINER = Program("horovod_train/pytorch_mnist.py", ("python", "horovod_train/pytorch_mnist.py"),
                  "horovod_train/pytorch_mnist.py")
# Where a program hands its words on: all of them, or those after `--`.
HANDS_ALL_TO = {"scripts/test.sh": PYTEST, "scripts/slurm/horovod.sbatch": TRAINER}
HANDS_AFTER_DOUBLE_DASH_TO = {"scripts/demo.sh": TRAINER, "scripts/slurm/submit.sh": TRAINER,
                              "benchmarks/horovod_settings.py": TRAINER,
                              "benchmarks/time_to_accuracy.py": TRAINER}


# --- the pages ----------------------------------------------------------------

def page_name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def fenced_blocks(page: str, text: str) -> list[Block]:
    """Every fenced block of a page, whatever its language."""
    lines = text.splitlines()
    blocks = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence = opening[1]
        closing = re.compile(rf"\s*{re.escape(fence[0])}{{{len(fence)},}}\s*")
        end = index + 1
        while end < len(lines) and not closing.fullmatch(lines[end]):
            end += 1
        body = [(number + 1, lines[number]) for number in range(index + 1, end)]
        blocks.append(Block(page, index + 1, opening[2].lower(),
                            ILLUSTRATIVE in comment_lines_above(lines, index), body))
        index = end + 1
    return blocks


def comment_lines_above(lines: list[str], index: int) -> list[str]:
    """The HTML comment lines right above line `index` (a block's marks)."""
    found = []
    while index > 0 and re.fullmatch(r"<!--.*-->", lines[index - 1].strip()):
        index -= 1
        found.append(lines[index].strip())
    return found


def without_comment(text: str) -> str:
    """A shell line without its # comment: a # that starts a word, outside
    quotes (registry.example.com#org/image keeps its #)."""
    quote = None
    for at, char in enumerate(text):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or text[at - 1].isspace()):
            return text[:at]
    return text


def shell_words(text: str) -> list[str]:
    """A line's words as the shell splits them, with ;, &&, | and & apart."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # a quote left open: a placeholder, most likely
        return text.split()


def commands_of(block: Block) -> list[Command]:
    """A shell block's commands: `\\` continuations joined, comments dropped,
    split at ;, &&, ||, | and &; in a console block only the lines after a
    `$ ` prompt (and their continuations) are commands."""
    lines_of_words: list[list[Word]] = []
    current: list[Word] | None = None
    for number, raw in block.lines:
        text = raw.strip()
        if block.language == "console" and current is None:
            if not text.startswith("$ "):
                continue  # the command's output
            text = text[2:]
        continued = text.endswith("\\")
        words = [Word(word, number) for word in shell_words(without_comment(text.rstrip("\\")))]
        current = [*(current or []), *words]
        if not continued:
            lines_of_words.append(current)
            current = None
    if current:
        lines_of_words.append(current)
    commands = []
    for words in lines_of_words:
        command: list[Word] = []
        for word in [*words, Word(";", 0)]:
            if word.text in SEPARATORS:
                if command:
                    commands.append(Command(block.page, command, block.illustrative))
                command = []
            else:
                command.append(word)
    return commands


def page_commands(page: str, text: str) -> list[Command]:
    return [command for block in fenced_blocks(page, text)
            if block.language in SHELL_LANGUAGES for command in commands_of(block)]


def all_commands() -> list[Command]:
    return [command for path in PAGES
            for command in page_commands(page_name(path), path.read_text())]


def hvt_variables_set(command: Command) -> list[Word]:
    """The HVT_ names a command sets: `HVT_X=1 cmd`, `export HVT_X=1`,
    `sbatch --export=ALL,HVT_X=1`, `docker run -e HVT_X=1`."""
    return [Word(name, word.line) for word in command.words
            for name in HVT_SET.findall(word.text)]


# --- the checkout's programs a command starts ------------------------------------

def is_our_script(text: str) -> bool:
    path = Path(text.removeprefix("./"))
    return (bool(path.parts) and path.parts[0] in OUR_FOLDERS
            and path.suffix in SCRIPT_SUFFIXES and not re.search(r"[$*?<>]", text))


def starts_a_command(text: str) -> bool:
    """Whether a word, inside a wrapper or after `--`, starts a command of
    ours (the image's name, horovod-train, is not taken for the console
    script there)."""
    return (bool(PYTHON.fullmatch(text)) or Path(text).name in ("horovodrun", "torchrun")
            or is_our_script(text))


def module_file(module: str) -> str:
    path = module.replace(".", "/")
    return f"{path}/__main__.py" if (REPO / path).is_dir() else f"{path}.py"


def uses_of(command: Command) -> list[Use]:
    return uses_in(command.page, command.words)


def uses_in(page: str, words: list[Word]) -> list[Use]:
    """The programs of ours that the words start, and what each is given;
    none for the system's own commands (git, ssh, cd, pip, ...)."""
    while words and (words[0].text in PREFIXES or ASSIGNMENT.fullmatch(words[0].text)
                     or (words[0].text.startswith("-") and words[0].text != "--")):
        words = words[1:]  # sudo -E, env, VAR=value: the command is what follows
    if not words:
        return []
    head = words[0].text
    if head in WRAPPERS:
        inner = next((at for at, word in enumerate(words) if starts_a_command(word.text)), None)
        return uses_in(page, words[inner:]) if inner else []
    if Path(head).name == "horovodrun":
        return launcher_uses(page, words, (HOROVODRUN,))
    if head.removeprefix("./") == "scripts/launch.sh":  # horovodrun's arguments, checked first
        return launcher_uses(page, words, (script(head), HOROVODRUN))
    if Path(head).name == "torchrun":
        return launcher_uses(page, words, (TORCHRUN,))
    if head == "scripts/python.sh" or PYTHON.fullmatch(head):
        return python_uses(page, words)
    if head == "horovod-train":  # the console script: the front door
        return passed_on(page, words[0], Program("python -m horovod_train",
                                                 ("python", "-m", "horovod_train"),
                                                 "horovod_train/__main__.py"), words[1:])
    if head in ("bash", "sh") and len(words) > 1 and is_our_script(words[1].text):
        path = words[1].text.removeprefix("./")
        return passed_on(page, words[1], Program(path, ("bash", path), path), words[2:])
    if is_our_script(head):
        return passed_on(page, words[0], script(head), words[1:])
    return []


def script(text: str) -> Program:
    path = text.removeprefix("./")
    return Program(path, (path,), path, by_path=True)


def python_uses(page: str, words: list[Word]) -> list[Use]:
    """`python -m MODULE ...` or `python FILE.py ...` of the checkout; any
    interpreter (python3, .venv/bin/python, VENV/bin/python) is the venv's."""
    rest = words[1:]
    while rest and rest[0].text.startswith("-") and rest[0].text not in ("-m", "-c"):
        rest = rest[1:]  # python's own options: -u, -X dev
    if len(rest) >= 2 and rest[0].text == "-m":
        module = rest[1].text
        if module.split(".")[0] not in OUR_FOLDERS:
            return []  # python -m pip, pytest, venv: not ours
        program = Program(f"python -m {module}", ("python", "-m", module), module_file(module))
        return passed_on(page, rest[1], program, rest[2:])
    if rest and rest[0].text.endswith(".py") and is_our_script(rest[0].text):
        path = rest[0].text.removeprefix("./")
        return passed_on(page, rest[0], Program(path, ("python", path), path), rest[1:])
    return []


def launcher_uses(page: str, words: list[Word], launcher: tuple[Program, ...]) -> list[Use]:
    """horovodrun's (launch.sh's, torchrun's) options, then the program it
    starts: from the first interpreter (`python trainer.py`), or torchrun's
    script, on."""
    starts = (lambda text: text.endswith(".py")) if launcher == (TORCHRUN,) else PYTHON.fullmatch
    at = next((at for at, word in enumerate(words) if at and starts(word.text)), len(words))
    uses = [Use(page, words[0], launcher, words[1:at])]
    if at == len(words):
        return uses  # horovodrun --check-build
    if launcher == (TORCHRUN,):
        return [*uses, *python_uses(page, [Word("python", words[at].line), *words[at:]])]
    return [*uses, *python_uses(page, words[at:])]


def passed_on(page: str, at: Word, program: Program, args: list[Word]) -> list[Use]:
    """The program's own words, and where it hands the rest: all to the
    trainer or pytest (HANDS_ALL_TO), or what follows `--`: a command of
    ours, or the trainer's options (HANDS_AFTER_DOUBLE_DASH_TO)."""
    if program.name in HANDS_ALL_TO:
        return [Use(page, at, (program,), []), Use(page, at, (HANDS_ALL_TO[program.name],), args)]
    texts = [word.text for word in args]
    if "--" not in texts:
        return [Use(page, at, (program,), args)]
    dashes = texts.index("--")
    own, after = args[:dashes], args[dashes + 1:]
    uses = [Use(page, at, (program,), own)]
    if after and starts_a_command(after[0].text):
        return [*uses, *uses_in(page, after)]
    if after and program.name in HANDS_AFTER_DOUBLE_DASH_TO:
        return [*uses, Use(page, args[dashes], (HANDS_AFTER_DOUBLE_DASH_TO[program.name],), after)]
    return uses  # its own business: not checked


def options_given(args: list[Word]) -> list[Word]:
    """The options among a program's words, without their values; a
    template's `[--gpus-per-node 8]` counts as --gpus-per-node."""
    found = []
    for word in args:
        match = OPTION.fullmatch(word.text.removeprefix("[").removesuffix("]"))
        if match:
            found.append(Word(match[1], word.line))
    return found


# --- links and anchors ----------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
INLINE_CODE = re.compile(r"(`+).*?\1")


def lines_outside_blocks(text: str) -> list[tuple[int, str]]:
    """A page's lines outside its fenced blocks (their fences too)."""
    inside = {number for block in fenced_blocks("", text)
              for number in range(block.line, block.line + len(block.lines) + 2)}
    return [(number, line) for number, line in enumerate(text.splitlines(), 1)
            if number not in inside]


def links(text: str) -> list[Word]:
    """Every link target of a page (inline and reference-style, images too)."""
    found = []
    for number, line in lines_outside_blocks(text):
        line = INLINE_CODE.sub("", line)  # `[a](b)` in code is no link
        found += [Word(target, number) for target in LINK.findall(line)]
        if reference := REFERENCE.match(line):
            found.append(Word(reference[1], number))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text (github-slugger's rule): the
    rendered text lowercased, punctuation but - and _ dropped, each space a -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page: its headings' slugs, a repeated one with -1,
    -2, ... as GitHub numbers them, and explicit <a name/id="...">."""
    found: set[str] = set()
    for _, line in lines_outside_blocks(text):
        heading = re.match(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$", line)
        if not heading:
            continue
        base = slug(heading[1])
        name, count = base, 0
        while name in found:
            count += 1
            name = f"{base}-{count}"
        found.add(name)
    found |= set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    return found

