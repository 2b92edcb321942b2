"""The README is a front door: a short quickstart with the two commands, then links
that all lead somewhere; the reference pages in docs/ are each reached from it."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def section(text: str, heading: str) -> list[str]:
    """The lines under ``## heading``, up to the next ``## `` heading."""
    lines = text.splitlines()
    start = lines.index(f"## {heading}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_quickstart_comes_first_and_fits_30_lines():
    headings = [line for line in README.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Quickstart"
    quickstart = "\n".join(section(README, "Quickstart"))
    assert len(section(README, "Quickstart")) <= 30
    for command in ("bash scripts/main.sh", "bash scripts/test.sh", "ipusim run",
                    "report.html", 'pytest -m "not slow"'):
        assert command in quickstart, command


def test_ci_runs_the_readmes_test_command():
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_every_link_between_the_pages_leads_to_a_file_and_a_heading():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            found = (page.parent / path).resolve() if path else page
            if not found.is_file():
                broken.append(f"{page.name}: {target}")
            elif fragment and fragment not in {
                    anchor(line.lstrip("#")) for line in found.read_text().splitlines()
                    if line.startswith("#")}:
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_every_page_of_the_docs_is_linked_from_the_readme():
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in LINK.findall(README)}
    assert set(PAGES[1:]) <= linked


def test_the_compare_example_names_folders_the_main_job_writes():
    """`reports/SCENARIO/MODEL`: the main job writes each scenario's models under its name."""
    import sys

    from ipusim.cli import _COMPARE_EPILOG
    sys.path.insert(0, str(ROOT))
    from scenarios.main import SCENARIOS
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    for text in (guide, _COMPARE_EPILOG):
        named = re.findall(r"ipusim compare (reports/\S+) \\?\s*(reports/\S+)", text)
        assert named, text[:80]
        for path in named[0]:
            scenario, model = path.split("/")[1:3]
            assert scenario in SCENARIOS, path
            script = (ROOT / "scenarios" / SCENARIOS[scenario][0]).read_text()
            prefix = re.match(r"\D+", model).group(0)  # tutorial_r, before the replicas
            assert f'modelName(f"{prefix}' in script, path
