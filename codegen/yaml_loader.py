"""YAML loading that remembers where every mapping, key and list item came from.

The operator YAML is input and may be hostile: anchors and aliases (the
"billion laughs") are refused before they expand, keys must be strings, and a
file that is not UTF-8 or not YAML is one problem with its line, never a
traceback.
"""
from __future__ import annotations

import yaml

from .errors import Problems

MAX_FILE_BYTES = 4 << 20  # a generous bound for a hand-written operator file


class LineDict(dict):
    """A mapping from YAML with `line` (its own) and `key_lines` (each key's)."""

    line: int = 0
    key_lines: dict

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class LineList(list):
    """A list from YAML with `line` (its own) and `item_lines` (each item's)."""

    line: int = 0
    item_lines: list

    def line_at(self, index: int) -> int:
        return self.item_lines[index] if index < len(self.item_lines) else self.line


class YamlShapeError(Exception):
    """A construct the operator files do not allow, at a line."""

    def __init__(self, line: int, field: str, message: str, fix: str):
        super().__init__(message)
        self.line, self.field, self.message, self.fix = line, field, message, fix


class _Loader(yaml.SafeLoader):
    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise YamlShapeError(event.start_mark.line + 1, "", f"YAML alias '*{event.anchor}' is not allowed",
                                 "write the value out in full (anchors and aliases are refused: they can "
                                 "expand without bound)")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        result = LineDict()
        result.line = node.start_mark.line + 1
        result.key_lines = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                raise YamlShapeError(line, str(key), f"the key {key!r} is a {type(key).__name__}, not a name",
                                     "keys are field or argument names; quote it if it is meant as one")
            if key in result:
                raise YamlShapeError(line, key, f"key '{key}' appears twice", "remove one of the two")
            result[key] = self.construct_object(value_node, deep=deep)
            result.key_lines[key] = line
        return result

    def construct_sequence(self, node, deep=False):
        result = LineList(self.construct_object(child, deep=deep) for child in node.value)
        result.line = node.start_mark.line + 1
        result.item_lines = [child.start_mark.line + 1 for child in node.value]
        return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _Loader.construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _Loader.construct_sequence)


def load_yaml(text: str):
    """Parse YAML text; mappings come back as LineDict, lists as LineList."""
    return yaml.load(text, Loader=_Loader)


def load_yaml_file(path: str, file: str, problems: Problems, empty):
    """The parsed file, or None after recording why it cannot be read (`file`
    names it in messages); `empty` stands for a file with no content."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        problems.add(file, 1, "(file)", "", "the file does not exist", f"create {file}")
        return None
    except IsADirectoryError:
        problems.add(file, 1, "(file)", "", "is a directory, not a YAML file", f"put the YAML file at {file}")
        return None
    except OSError as e:
        problems.add(file, 1, "(file)", "", f"cannot be read: {e.strerror}", "check the file's permissions")
        return None
    if len(data) > MAX_FILE_BYTES:
        problems.add(file, 1, "(file)", "", f"is larger than {MAX_FILE_BYTES >> 20} MiB", "split it, or trim it")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        problems.add(file, line, "(file)", "", f"byte {data[e.start]:#04x} is not UTF-8 text",
                     "save the file as UTF-8")
        return None
    try:
        loaded = load_yaml(text)
    except YamlShapeError as e:
        problems.add(file, e.line, "(file)", e.field, e.message, e.fix)
        return None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problems.add(file, mark.line + 1 if mark else 1, "(file)", "", f"not valid YAML: {getattr(e, 'problem', e)}",
                     "fix the YAML syntax")
        return None
    except RecursionError:
        problems.add(file, 1, "(file)", "", "the YAML nests too deeply", "flatten the structure")
        return None
    return empty if loaded is None else loaded


def entry_list(doc: LineDict, key: str, file: str, problems: Problems) -> LineList | None:
    """The list of entries under `key` of a file's top mapping; None when absent, or (reported) not a list."""
    entries = doc.get(key)
    if entries is not None and not isinstance(entries, LineList):
        problems.add(file, doc.line_of(key), "(file)", key, "expected a list of operator entries",
                     f"write each entry as a '- func: ...' item under '{key}:'")
        return None
    return entries
