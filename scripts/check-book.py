#!/usr/bin/env python3
"""Checks the book (docs/book) and the README without building them: every
chapter SUMMARY.md lists exists and every chapter is listed, every
`{{#include}}` and Markdown link resolves, every repository path the
README, the book or docs/*.md names (docs/..., scripts/..., a crate's
file...) exists, and every archive section docs/BENCHMARKS.md cites is
one. Run by scripts/test.sh; exits non-zero naming each break."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
src = root / "docs/book/src"
broken = []

summary = (src / "SUMMARY.md").read_text()
listed = set(re.findall(r"\]\(([^)]+\.md)\)", summary))
for chapter in sorted(listed):
    if not (src / chapter).is_file():
        broken.append(f"SUMMARY.md lists {chapter}, which does not exist")
for chapter in sorted(p.name for p in src.glob("*.md")):
    if chapter != "SUMMARY.md" and chapter not in listed:
        broken.append(f"{chapter} is not in SUMMARY.md")

# A path as the text names one: a top-level directory of this repository,
# then at least one more part, ending in a file name with an extension.
TOP = "docs|deploy|scripts|executor|crates|actions|benches|precompiler|fuzz|vendor|wit"
named = re.compile(rf"(?<![\w./-])((?:{TOP})/[\w.@+-]+(?:/[\w.@+-]+)*\.(?:md|sh|toml|rs|py|wat|json|yaml|c|h|wit))\b")
texts = [root / "README.md", *src.glob("*.md"), *(root / "docs").glob("*.md")]
for text in texts:
    body = text.read_text()
    where = text.relative_to(root)
    for include in re.findall(r"\{\{#include ([^}]+)\}\}", body):
        if not (text.parent / include.strip()).is_file():
            broken.append(f"{where}: includes {include}, which does not exist")
    for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", body):
        if not (text.parent / link).exists():
            broken.append(f"{where}: links {link}, which does not exist")
    for path in set(named.findall(body)):
        if not (root / path).exists():
            broken.append(f"{where}: names {path}, which does not exist")

# The results page: every section it cites ("...") in the archive column
# of a table begins a heading of the archive, so that each figure leads to
# how it was measured.
archive = (root / "docs/BENCHMARKS-ARCHIVE.md").read_text()
headings = [h.strip() for h in re.findall(r"^#{2,4} (.+)$", archive, re.M)]
for row in (root / "docs/BENCHMARKS.md").read_text().splitlines():
    if not row.startswith("|") or row.startswith("|---"):
        continue
    for cited in re.findall(r'"([^"]+)"', row.rstrip("| ").rsplit("|", 1)[-1]):
        if not any(h.startswith(cited) for h in headings):
            broken.append(f"docs/BENCHMARKS.md cites \"{cited}\", no section of the archive")

for line in broken:
    print(f"check-book: {line}", file=sys.stderr)
sys.exit(1 if broken else 0)
