#!/usr/bin/env python3
"""The size limits of ARCHITECTURE.md ("The picture"), checked on the source tree:
 1. README.md is at most 300 lines, and so is every file under apps/;
 2. a library function (a C++ function body in a library folder, its lambdas and local classes
    included) is at most 100 lines, from the first line of its declaration to its closing brace;
 3. a folder holds at most 50 sources (.h and .cpp);
 4. train/trainer.cpp is at most 350 lines, templates/chat_template.cpp at most 800.
EXCEPTIONS names what may pass a limit for good, each with its reason. RATCHET lists what passed a
limit when the check came in (#46): such an entry may not grow past its recorded length, and a
notice says when it has come under the limit, so that its entry can go.
Usage: limits.py SOURCE_DIR        the check
       limits.py --self-test FIXTURE  the function finder against FIXTURE's `// expect:` lines,
                                      and the check against a made-up tree
Standard library only; needs no build."""

import bisect
import os
import re
import sys
import tempfile

LIBRARY = ("core", "templates", "tokenizers", "data", "kernels", "layers", "models", "inference",
           "train", "interop", "serve", "bench")
README_LINES = 300
APPS_FILE_LINES = 300
FUNCTION_LINES = 100
FOLDER_SOURCES = 50
FILE_LINES = {"train/trainer.cpp": 350, "templates/chat_template.cpp": 800}

# What may pass a limit for good: "path" or "path:function" -> the reason. (The CLI's command
# tables, apps/*_commands.cpp's add_*_commands, need no entry: apps/ is held to 300 lines a file
# instead of 100 a function.)
EXCEPTIONS = {
    "models/config.cpp:fields": "the model config's field table: one entry per YAML key",
    "train/run_config.cpp:fields": "the run config's field table: one entry per YAML key",
}

# What passed a limit when this check came in (measured at ded7d1a): "path" or "path:function"
# -> its length then, which it may not pass. Remove an entry once it is under its limit.
RATCHET = {}

# ---------------------------------------------------------------------------------------------
# C++ tokens: comments, preprocessor lines and whitespace dropped; string, raw string and
# character literals kept whole, so no brace inside one is counted.

TOKEN = re.compile(r"""
   (?P<directive>^[ \t]*\#(?:/\*[\s\S]*?\*/|\\[\s\S]|[^\n\\/]|/(?!\*))*)
  |(?P<space>[ \t\r\f\v\n]+|\\\n)
  |(?P<comment>//(?:\\\n|[^\n])*|/\*[\s\S]*?\*/)
  |(?P<raw>(?:u8|[uUL])?R"(?P<delimiter>[^()\\\s]{0,16})\([\s\S]*?\)(?P=delimiter)")
  |(?P<string>(?:u8|[uUL])?"(?:\\[\s\S]|[^"\\\n])*")
  |(?P<char>(?:u8|[uUL])?'(?:\\[\s\S]|[^'\\\n])*')
  |(?P<number>\.?[0-9](?:'?[0-9A-Za-z_]|[eEpP][+-]|\.)*)
  |(?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
  |(?P<punct>::|->|\.\.\.|&&|\|\||<<|[-+*/%&|^!=<>]=|[\s\S])
""", re.M | re.X)

SKIPPED = {"directive", "space", "comment"}


def tokens(text):
    """[(text, kind, offset)] of a C++ source."""
    out = []
    for m in TOKEN.finditer(text):
        if m.lastgroup not in SKIPPED:
            out.append((m.group(), m.lastgroup, m.start()))
    return out


# ---------------------------------------------------------------------------------------------
# Function bodies. At namespace and class level, the tokens since the last `;`, `{` or `}` are a
# declaration's head; a `{` after a head of the shape `name(parameters) qualifiers`, or of a
# constructor's `name(parameters) : initializers`, opens a function body, which runs to its
# matching `}` (everything in it, lambdas and local classes too, is the function's).

QUALIFIERS = {"const", "&", "&&", "noexcept", "override", "final"}
CLASS_KEYS = {"class", "struct", "union"}


class FinderError(Exception):
    pass


def _close(toks, i, open_, close):
    """The index after the group that opens at toks[i]."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j][0] == open_:
            depth += 1
        elif toks[j][0] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def _strip_template(head):
    """The head without its leading `template <...>` clauses."""
    while len(head) > 1 and head[0][0] == "template" and head[1][0] == "<":
        depth, j = 0, 1
        while j < len(head):
            depth += {"<": 1, ">": -1}.get(head[j][0], 0)
            j += 1
            if depth == 0:
                break
        head = head[j:]
    return head


def _depth0(head):
    """Yields (index, token) of the head's tokens outside (), [] and {} (their openers included)."""
    depth = 0
    for k, t in enumerate(head):
        if t[1] == "punct" and t[0] in ("(", "[", "{"):
            depth += 1
            if depth == 1:
                yield k, t
        elif t[1] == "punct" and t[0] in (")", "]", "}"):
            depth -= 1
        elif depth == 0:
            yield k, t


def _name_before(head, k):
    """The qualified name ending just before head[k]: `Trainer::step`, `~Queue`, `operator()`."""
    j = k - 1
    parts = []
    while j >= 0:
        text = head[j][0]
        if text == ">":  # template arguments: Foo<T>::bar
            depth = 0
            while j >= 0:
                depth += {">": 1, "<": -1}.get(head[j][0], 0)
                j -= 1
                if depth == 0:
                    break
            continue
        if head[j][1] != "id":
            break
        part = text
        if j > 0 and head[j - 1][0] == "~":
            part, j = "~" + part, j - 1
        parts.append(part)
        if j > 0 and head[j - 1][0] == "::":
            j -= 2
            continue
        break
    return "::".join(reversed(parts))


def _parameter_lists(head):
    """(name, index of `(`) of each place in the head that may open the parameter list."""
    depth0 = list(_depth0(head))
    for k, t in depth0:
        if t[0] == "operator":
            # the name runs to the next `(` (`operator==`, `operator bool`), or is `operator()`
            skip = k + 2 if [tt[0] for tt in head[k + 1:k + 3]] == ["(", ")"] else k
            after = next((kk for kk, tt in depth0 if kk > skip and tt[0] == "("), None)
            if after is not None:
                symbol = ""
                for tt in head[k + 1:after]:  # `operator()`, `operator==`, `operator bool`
                    spaced = tt[1] == "id" and (not symbol or re.search(r"\w$", symbol))
                    symbol += (" " if spaced else "") + tt[0]
                owner = _name_before(head, k - 1) if k > 0 and head[k - 1][0] == "::" else ""
                yield (owner + "::" if owner else "") + "operator" + symbol, after
            return
        if t[0] == "(" and k > 0:
            before = head[k - 1]
            if before[1] == "id" or before[0] == ">":  # f(...), f<int>(...)
                yield _name_before(head, k), k


def _tail_is_function(tail):
    """Whether the tokens after a parameter list let it be a function's: qualifiers, then
    optionally `-> type` or `requires ...`."""
    j = 0
    while j < len(tail):
        text = tail[j][0]
        if text in ("->", "requires"):
            return True
        if text not in QUALIFIERS:
            return False
        if text == "noexcept" and j + 1 < len(tail) and tail[j + 1][0] == "(":
            j = _close(tail, j + 1, "(", ")") or len(tail)
        else:
            j += 1
    return True


def _classify(head):
    """What a `{` after this head opens: ("namespace",), ("class", name), ("function", name),
    ("initializer",): a constructor's braced member initializer, which continues the head, or
    ("other",): a variable's braced value (a table), anything else not scanned for functions."""
    h = _strip_template(head)
    texts = [t[0] for t in h]
    if not h:
        return ("other",)
    if "namespace" in texts or (texts[0] == "extern" and len(h) == 2 and h[1][1] == "string"):
        return ("namespace",)
    depth0 = list(_depth0(h))
    for name, k in _parameter_lists(h):
        end = _close(h, k, "(", ")")
        if end is None:
            return ("other",)  # inside an unclosed `(`: a braced argument
        tail = h[end:]
        colon = next((n for n, t in enumerate(tail) if t[0] == ":"), None)
        if colon is not None and _tail_is_function(tail[:colon]):
            # a constructor: `{` opens the body after an initializer's `)` or `}`, else it opens
            # a braced initializer (`member_{value}`)
            if texts[-1] in (")", "}"):
                return ("function", name)
            return ("initializer",)
        if _tail_is_function(tail):
            return ("function", name)
    for k, t in depth0:
        if t[0] in CLASS_KEYS:  # class, struct, union, enum class: `Name<...> final : bases`
            name = []
            for tt in h[k + 1:]:
                if tt[0] in (":", "<", "final"):
                    break
                name.append(tt[0])
            return ("class", "".join(name))
    return ("other",)


def functions(text):
    """[(name, first line, last line)] of the function bodies in a C++ source."""
    toks = tokens(text)
    newlines = [m.start() for m in re.finditer("\n", text)]
    line = lambda offset: bisect.bisect_left(newlines, offset) + 1
    found = []

    def scope(i, owner):
        """Scans a file, namespace or class body from toks[i]; returns the index after its `}`."""
        head = []
        while i < len(toks):
            word, kind, _ = toks[i]
            if kind != "punct":
                head.append(toks[i])
                i += 1
            elif word == "}":
                if owner is None:
                    raise FinderError(f"line {line(toks[i][2])}: a '}}' closes nothing")
                return i + 1
            elif word == ";":
                head, i = [], i + 1
            elif word == ":" and len(head) == 1 and head[0][0] in ("public", "protected", "private"):
                head, i = [], i + 1
            elif word != "{":
                head.append(toks[i])
                i += 1
            else:
                what = _classify(head)
                if what[0] == "namespace":
                    i, head = scope(i + 1, owner or ""), []
                elif what[0] == "class":
                    i, head = scope(i + 1, (owner or "") + what[1] + "::"), []
                else:
                    end = _close(toks, i, "{", "}")
                    if end is None:
                        raise FinderError(f"line {line(toks[i][2])}: this '{{' is never closed")
                    if what[0] == "function":
                        found.append(((owner or "") + what[1], line(head[0][2]), line(toks[end - 1][2])))
                        head = []
                    else:
                        head = head + toks[i:end]
                    i = end
        if owner is not None:
            raise FinderError("the file ends inside a '{'")
        return i

    scope(0, None)
    return found


# ---------------------------------------------------------------------------------------------
# The check.

def _count_lines(path):
    with open(path, "rb") as f:
        return f.read().count(b"\n")


def _files(root, folders, endings=("",)):
    """Relative paths of the files under the folders whose names end so, hidden ones (an editor's
    lock or swap files) and links aside."""
    out = []
    for folder in folders:
        for directory, subdirectories, files in os.walk(os.path.join(root, folder)):
            subdirectories[:] = sorted(d for d in subdirectories if not d.startswith("."))
            for name in sorted(files):
                path = os.path.join(directory, name)
                if name.endswith(endings) and not name.startswith(".") and not os.path.islink(path):
                    out.append(os.path.relpath(path, root).replace(os.sep, "/"))
    return out


def measure(root):
    """[(key, what it is and where, length, limit)] of everything a limit applies to; the key is
    "path", "folder/" or "path:function", as EXCEPTIONS and RATCHET name them."""
    rows = []
    whole = [p for p in ["README.md"] + sorted(FILE_LINES) if os.path.exists(os.path.join(root, p))]
    for path in whole + _files(root, ["apps"]):
        limit = FILE_LINES.get(path, README_LINES if path == "README.md" else APPS_FILE_LINES)
        rows.append((path, path, _count_lines(os.path.join(root, path)), limit))
    library = _files(root, LIBRARY, (".h", ".cpp"))
    folders = {}
    for path in library + _files(root, ["apps"], (".h", ".cpp")):
        folders.setdefault(path.rsplit("/", 1)[0] + "/", []).append(path)
    for folder, paths in sorted(folders.items()):
        rows.append((folder, folder, len(paths), FOLDER_SOURCES))
    for path in library:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        try:
            found = functions(text)
        except FinderError as e:
            raise FinderError(f"{path}: {e}") from None
        for name, first, last in found:
            rows.append((f"{path}:{name}", f"{path}:{first} {name}", last - first + 1, FUNCTION_LINES))
    return rows


def check(root, exceptions, ratchet):
    """(failures, notices) of the tree at root."""
    failures, notices = [], []
    seen = set()
    for key, what, length, limit in measure(root):
        seen.add(key)
        said = f"{what} holds {length} sources" if key.endswith("/") else f"{what} is {length} lines"
        if key in exceptions or (length <= limit and key not in ratchet):
            continue
        if key not in ratchet:
            failures.append(f"{said} (limit {limit}): give part of it a place of its own")
        elif length > ratchet[key]:
            failures.append(f"{said} (limit {limit}); it was {ratchet[key]} when this check came in, "
                            "and may shrink, not grow")
        elif length <= limit:
            notices.append(f"{said}, within its limit of {limit}: remove its entry from RATCHET")
    for table, keys in (("EXCEPTIONS", exceptions), ("RATCHET", ratchet)):
        for key in sorted(set(keys) - seen):
            notices.append(f"{key} is gone: remove its entry from {table}")
    return failures, notices


def main(root):
    try:
        failures, notices = check(root, EXCEPTIONS, RATCHET)
    except FinderError as e:
        print(f"limits: cannot read functions in {e}", file=sys.stderr)
        return 1
    for notice in notices:
        print(f"limits: notice: {notice}")
    for failure in failures:
        print(f"limits: {failure}", file=sys.stderr)
    if failures:
        print(f"limits: {len(failures)} finding(s)", file=sys.stderr)
        return 1
    shrinking = f" and {len(RATCHET)} entries to shrink, none of which grew" if RATCHET else ""
    print(f"limits: README and apps/ files within {README_LINES} lines, library functions within "
          f"{FUNCTION_LINES}, folders within {FOLDER_SOURCES} sources, the trainer and the template "
          f"engine within theirs, but for {len(EXCEPTIONS)} exception(s){shrinking}")
    return 0


# ---------------------------------------------------------------------------------------------
# The check's own tests.

def self_test(fixture):
    problems = []
    with open(fixture, encoding="utf-8") as f:
        text = f.read()
    expected = [(m.group(1), int(m.group(2)), int(m.group(3)))
                for m in re.finditer(r"^// expect: (.+) line (\d+), (\d+) lines?$", text, re.M)]
    found = [(name, first, last - first + 1) for name, first, last in functions(text)]
    if not expected:
        problems.append(f"{fixture} has no `// expect:` lines")
    if found != expected:
        problems.append(f"{fixture}: expected\n  " + "\n  ".join(map(str, expected)) +
                        "\nfound\n  " + "\n  ".join(map(str, found)))
    for source, error in (("void f() {\n", "never closed"), ("}\n", "closes nothing"),
                          ("namespace a {\nvoid f() {}\n", "ends inside")):
        try:
            functions(source)
            problems.append(f"{source!r} read without the error '{error}'")
        except FinderError as e:
            if error not in str(e):
                problems.append(f"{source!r}: '{e}' does not say '{error}'")

    # A made-up tree with one case of each rule, checked with its own exceptions and ratchet.
    body = lambda n: "".join(f"  x += {k};\n" for k in range(n - 2))  # a function of n lines
    tree = {
        "README.md": "line\n" * 301,
        "apps/zoo.cpp": "// a command\n" * 300,
        "apps/long.cpp": "// a command\n" * 301,
        "core/a.cpp": f"int at_limit() {{\n{body(100)}}}\nint over() {{\n{body(101)}}}\n",
        "core/b.cpp": f"int grew() {{\n{body(130)}}}\nint shrank() {{\n{body(90)}}}\n"
                      f"int table() {{\n{body(200)}}}\nint kept() {{\n{body(110)}}}\n",
        "train/trainer.cpp": "\n" * 351,
        "templates/chat_template.cpp": "\n" * 800,
        **{f"kernels/k{n}.h": "" for n in range(51)},
        **{f"layers/l{n}.h": "" for n in range(50)},
        **{f"apps/a{n}.h": "" for n in range(49)},
    }
    exceptions = {"core/b.cpp:table": "a field table", "core/b.cpp:moved": "a table"}
    ratchet = {"README.md": 301, "core/b.cpp:grew": 120, "core/b.cpp:shrank": 110,
               "core/b.cpp:kept": 110, "templates/chat_template.cpp": 1454, "models/gone.cpp:f": 200}
    expected_failures = [
        "apps/long.cpp is 301 lines (limit 300): give part of it a place of its own",
        "kernels/ holds 51 sources (limit 50): give part of it a place of its own",
        "apps/ holds 51 sources (limit 50): give part of it a place of its own",
        "core/a.cpp:101 over is 101 lines (limit 100): give part of it a place of its own",
        "core/b.cpp:1 grew is 130 lines (limit 100); it was 120 when this check came in, and may "
        "shrink, not grow",
        "train/trainer.cpp is 351 lines (limit 350): give part of it a place of its own",
    ]
    expected_notices = [
        "templates/chat_template.cpp is 800 lines, within its limit of 800: remove its entry from RATCHET",
        "core/b.cpp:131 shrank is 90 lines, within its limit of 100: remove its entry from RATCHET",
        "models/gone.cpp:f is gone: remove its entry from RATCHET",
        "core/b.cpp:moved is gone: remove its entry from EXCEPTIONS",
    ]
    with tempfile.TemporaryDirectory() as root:
        for path, content in tree.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(content)
        failures, notices = check(root, exceptions, ratchet)
    for what, want, got in (("failures", expected_failures, failures), ("notices", expected_notices, notices)):
        if sorted(want) != sorted(got):
            problems.append(f"the made-up tree's {what}: expected\n  " + "\n  ".join(sorted(want)) +
                            "\nfound\n  " + "\n  ".join(sorted(got)))

    for problem in problems:
        print(f"limits --self-test: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"limits --self-test: {len(expected)} functions of {os.path.basename(fixture)} found with "
          f"their lengths, the check's failures and notices as expected")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--self-test":
        sys.exit(self_test(sys.argv[2]))
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
