"""Keeps generated C++ within 100 columns, the way a reviewer would wrap it:
after a comma (or before || and &&) at the outermost open parenthesis,
continuing 4 columns deeper; comments wrap at spaces. Never inside a string
literal. A line with no such place is left as it is."""
from __future__ import annotations

LIMIT = 100


def wrap_cpp(text: str, limit: int = LIMIT) -> str:
    out = []
    for line in text.split("\n"):
        out.extend(_wrap_line(line, limit))
    return "\n".join(out)


def _wrap_line(line: str, limit: int) -> list[str]:
    if len(line) <= limit or line.lstrip().startswith("#include"):
        return [line]
    macro = line.endswith(" \\")
    body = line[:-2].rstrip() if macro else line
    stripped = body.lstrip()
    indent = body[:len(body) - len(stripped)]
    if stripped.startswith("//"):
        pieces = _wrap_comment(stripped, indent, limit - (2 if macro else 0))
    else:
        pieces = _wrap_code(body, indent + "    ", limit - (2 if macro else 0))
    return [p + " \\" for p in pieces] if macro else pieces


def _wrap_comment(text: str, indent: str, limit: int) -> list[str]:
    words = text[2:].split(" ")
    lines, current = [], indent + "//"
    for word in words:
        if word == "":
            continue
        if len(current) + 1 + len(word) > limit and current != indent + "//":
            lines.append(current)
            current = indent + "//"
        current += " " + word
    lines.append(current)
    return lines


def _break_points(line: str) -> list[tuple[int, int]]:
    """(index after which to break, paren depth there) for each ', ' outside strings."""
    points, depth, in_string, i = [], 0, False, 0
    while i < len(line):
        c = line[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "([{<" and not (c == "<" and line[i - 1:i] == " "):
            depth += 1
        elif c in ")]}>" and not (c == ">" and line[i - 1:i] in (" ", "-")):
            depth -= 1
        elif c == "," and line[i + 1:i + 2] == " ":
            points.append((i + 1, depth))
        elif line.startswith(" || ", i) or line.startswith(" && ", i):
            points.append((i, depth))
        i += 1
    return points


def _wrap_code(line: str, continuation: str, limit: int) -> list[str]:
    lines = []
    while len(line) > limit:
        points = [p for p in _break_points(line) if p[0] <= limit and p[0] > len(continuation)]
        if not points:
            break
        shallowest = min(depth for _, depth in points)
        cut = max(index for index, depth in points if depth == shallowest)
        lines.append(line[:cut].rstrip())
        line = continuation + line[cut:].lstrip()
    lines.append(line)
    return lines
