"""YAML loading that remembers where every mapping and key came from."""
from __future__ import annotations

import yaml


class LineDict(dict):
    """A mapping from YAML with `line` (its own) and `key_lines` (each key's)."""

    line: int = 0
    key_lines: dict

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class DuplicateKey(Exception):
    def __init__(self, key: str, line: int):
        super().__init__(f"key '{key}' appears twice")
        self.key, self.line = key, line


class _Loader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        result = LineDict()
        result.line = node.start_mark.line + 1
        result.key_lines = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in result:
                raise DuplicateKey(str(key), key_node.start_mark.line + 1)
            result[key] = self.construct_object(value_node, deep=deep)
            result.key_lines[key] = key_node.start_mark.line + 1
        return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _Loader.construct_mapping)


def load_yaml(text: str):
    """Parse YAML text; mappings come back as LineDict."""
    return yaml.load(text, Loader=_Loader)
