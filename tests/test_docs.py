"""The documentation: the MkDocs site builds with no warning (broken links, anchors and pages
missing from the nav fail), the README is a landing page whose links all resolve, the commands
and scripts the pages tell users to run exist, and no page carries working notes."""

import pathlib
import re
import subprocess
import sys
import tomllib

REPO = pathlib.Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
# Phrases of a lab notebook, not of documentation for users.
WORKING_NOTES = ("the issue", "helpers' tests", "this session", "previous release", "this turn")


def test_site_builds_strictly(tmp_path):
  result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(REPO / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stdout + result.stderr
  assert "WARNING" not in result.stderr, result.stderr
  assert (tmp_path / "site" / "index.html").exists()


def _links(text):
  """Relative link targets of Markdown text (no scheme, no pure anchors), without anchors."""
  targets = re.findall(r"\]\(([^)\s]+)\)", text)
  return [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_readme_is_a_landing_page_whose_links_resolve():
  readme = (REPO / "README.md").read_text(encoding="utf-8")
  assert len(readme.splitlines()) < 200
  first_screen = "\n".join(readme.splitlines()[:60])
  for needed in ("bash scripts/quickstart.sh", "runs/quickstart", "t2t-lite-decoder", "load_translator"):
    assert needed in first_screen, f"the newcomer path lacks {needed!r}"
  links = _links(readme)
  assert "docs/getting-started.md" in links
  missing = [link for link in links if not (REPO / link).exists()]
  assert not missing, f"README links to missing files: {missing}"


def test_the_commands_and_scripts_pages_name_exist():
  """Every `t2t-lite-NAME` a page names is a console script of pyproject.toml (mkdocs checks
  links, not the commands in the text: a renamed or misspelt command fails only at a user's
  shell), and every script a page runs (`bash scripts/x.sh`, `python scripts/x.py`) is a file."""
  with open(REPO / "pyproject.toml", "rb") as f:
    commands = set(tomllib.load(f)["project"]["scripts"])
  assert "t2t-lite-trainer" in commands
  pages = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
  unknown, missing, scripts = [], [], 0
  for page in pages:
    text = page.read_text(encoding="utf-8")
    names = set(re.findall(r"\bt2t-lite-[a-z0-9-]*[a-z0-9]", text))
    unknown += [f"{page.name}: {name}" for name in sorted(names) if name not in commands]
    for path in sorted(set(re.findall(r"\b(?:bash|python3?) ((?:scripts|tests)/[\w./-]*\w)", text))):
      scripts += 1
      if not (REPO / path).is_file():
        missing.append(f"{page.name}: {path}")
  assert scripts >= 10
  assert not unknown, f"pages name commands pyproject.toml does not install: {unknown}"
  assert not missing, f"pages run scripts that do not exist: {missing}"


def test_no_page_carries_working_notes():
  pages = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
  found = [f"{page.name}: {note!r}" for page in pages
           for note in WORKING_NOTES if note in page.read_text(encoding="utf-8").lower()]
  assert not found, found
