"""The Python snippets of README.md and of the docs/ pages run as written: each one alone,
in a fresh interpreter outside the source tree, as a newcomer would paste it.

A snippet may be preceded by an HTML comment that says how README means it:

    <!-- readme-test: skip (why) -->            not a program (a setup.py, ...)
    <!-- readme-test: torchrun -->              a script for torchrun, 2 processes
    <!-- readme-test: file=race.py fails-with-next-block -->
        run as race.py; it must fail, and its error must be the next code block's
        text (compared word by word, as README wraps it)
"""
import os
import re
import subprocess
import sys

import pytest

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(REPOSITORY, "README.md")
DOCS = os.path.join(REPOSITORY, "docs")
PAGES = [README] + sorted(os.path.join(DOCS, n) for n in os.listdir(DOCS) if n.endswith(".md"))
BLOCK = re.compile(r"^(?:<!-- readme-test: (?P<how>[^\n]*?) -->\n)?```(?P<lang>\w*)\n(?P<code>.*?)^```", re.M | re.S)


def snippets():
    for page in PAGES:
        yield from _snippets(page)


def _snippets(page):
    name = os.path.relpath(page, REPOSITORY)
    text = open(page).read()
    blocks = [(text.count("\n", 0, m.start("code")) + 1, m["lang"], m["how"] or "", m["code"])
              for m in BLOCK.finditer(text)]
    for index, (line, lang, how, code) in enumerate(blocks):
        if lang != "python":
            continue
        following = blocks[index + 1][3] if index + 1 < len(blocks) else ""
        skipped = [pytest.mark.skip(reason=f"{name}:{line} {how}")] if how.startswith("skip") else []
        yield pytest.param(how, code, following, id=f"{name}:{line}", marks=skipped)


def words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("how, code, following", list(snippets()))
def test_readme_snippet_runs_as_written(how, code, following, tmp_path):
    options = dict(option.split("=", 1) if "=" in option else (option, "") for option in how.split())
    script = tmp_path / options.get("file", "snippet.py")
    script.write_text(code)
    command = [sys.executable, script.name]
    if "torchrun" in options:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                   script.name]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    if "fails-with-next-block" in options:
        assert done.returncode != 0, done.stdout
        # The launch sites name the script by its full path; README by its name.
        error = done.stderr.strip().splitlines()[-1].replace(f"{tmp_path}{os.sep}", "")
        assert words(error) == words(following), (error, following)
    else:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def test_every_python_snippet_of_readme_is_collected():
    # A fence README writes otherwise (```py, indented) would escape the test above.
    fences = sum(len(re.findall(r"^```python$", open(page).read(), re.M)) for page in PAGES)
    assert fences == len(list(snippets())) >= 14
