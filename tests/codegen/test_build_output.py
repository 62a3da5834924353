"""What setup.py's build prints (build_tools/ninja_output.py): one line per
translation unit, the compiler's messages when one fails and one closing line,
the full commands only with SIMHPU_VERBOSE_BUILD=1. Runs ninja on a tiny build
file whose "compiler" is the shell: no C++ build needed."""
import os
import sys

import pytest
from setuptools.errors import CompileError
from torch.utils import cpp_extension
from yaml_edit import ROOT

sys.path.insert(0, ROOT)
try:
    from build_tools import ninja_output
finally:
    sys.path.remove(ROOT)

BUILD = """rule compile
  command = sh -c 'case $in in *bad.c) echo "bad.c:1: error: nope" >&2; exit 1;; esac; touch $out'

build {root}/out/a.o: compile {root}/a.c
build {root}/out/b.o: compile {root}/{second}
"""


def run_build(tmp_path, monkeypatch, second="b.c", verbose=None):
    for name in ("a.c", "b.c", "bad.c"):
        (tmp_path / name).write_text("")
    (tmp_path / "out").mkdir(exist_ok=True)
    (tmp_path / "build.ninja").write_text(BUILD.format(root=tmp_path, second=second))
    if verbose is None:
        monkeypatch.delenv(ninja_output.VERBOSE_ENV, raising=False)
    else:
        monkeypatch.setenv(ninja_output.VERBOSE_ENV, verbose)
    monkeypatch.setattr(cpp_extension, "_run_ninja_build", cpp_extension._run_ninja_build)
    ninja_output.install(str(tmp_path))
    cpp_extension._run_ninja_build(str(tmp_path), True, "Error compiling objects for extension")


def test_each_unit_is_one_line_with_a_counter(tmp_path, monkeypatch, capfd):
    run_build(tmp_path, monkeypatch)
    lines = capfd.readouterr().out.splitlines()
    # ninja runs the two in parallel: either may finish first.
    assert sorted(line.split("] ")[1] for line in lines) == ["compiling a.c", "compiling b.c"], lines
    assert sorted(line.split("] ")[0] for line in lines) == ["[1/2", "[2/2"], lines


def test_a_failed_unit_shows_the_compilers_messages_and_one_closing_line(tmp_path, monkeypatch, capfd):
    with pytest.raises(CompileError, match="the compiler's messages are above"):
        run_build(tmp_path, monkeypatch, second="bad.c")
    out = capfd.readouterr().out
    assert "bad.c:1: error: nope" in out
    assert f"(its command: {ninja_output.VERBOSE_ENV}=1)" in out
    assert "sh -c" not in out  # the command line itself is the verbose build's


def test_the_verbose_switch_shows_the_commands(tmp_path, monkeypatch, capfd):
    run_build(tmp_path, monkeypatch, verbose="1")
    assert "sh -c" in capfd.readouterr().out
