"""The docs/ site builds with Sphinx, warnings as errors: its Markdown pages (MyST) and the API
reference from the installed package's docstrings (docs/conf.py)."""
import os
import subprocess
import sys

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_docs_site_builds_without_a_warning(tmp_path):
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-q",
                             os.path.join(REPOSITORY, "docs"), str(tmp_path)], capture_output=True, text=True,
                            timeout=600, cwd="/")
    assert result.returncode == 0, result.stderr[-5000:]
    api = (tmp_path / "api.html").read_text()
    assert "torch_simhpu.load_op_plugin" in api and "torch_simhpu.simulation.simulate" in api
    assert (tmp_path / "races.html").is_file() and (tmp_path / "yaml.html").is_file()


def test_readme_is_one_page():
    with open(os.path.join(REPOSITORY, "README.md")) as f:
        assert len(f.read().splitlines()) <= 250
