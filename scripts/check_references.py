#!/usr/bin/env python3
"""The repository speaks for itself: no tracked text cites what the repository does not hold.

    python3 scripts/check_references.py [--root DIR]

Three checks over the tracked files (git ls-files; every file under DIR where it is no git work
tree), each printing `path:line: what` per offender; exit 1 if any:

  citations     no text file cites a document outside the repository or a tracker's numbers:
                ../shared, shared/research|repro|seeds|..., design.md, style.md, "the brief", a
                numbered design rule, a seed write-up (seed-004, seeds/), an issue or pull-request
                number (issue 5, PR #123, project #1234, github.com/.../issues/N). The raw files the
                measurement tools wrote (bench/results/ but its two Markdown files) and test data
                (tests/data/) are left out, and so are the two checkers themselves.
  links         every relative link of a Markdown file ([text](path), [label]: path) resolves to a
                file or folder in the tree; links inside fenced code blocks are not links.
  results       every bench/results/... path a Markdown file names exists ({a,b} names both; a
                path with * must match a file; one with < or $ is a pattern, not a citation).
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import urllib.parse

CITATION_PATTERNS = [
    (re.compile(r"\.\./shared\b"), "a document outside the repository (../shared)"),
    (re.compile(r"\bshared/(research|repro|seeds|sketches|hooks|design|style)\b"), "a document outside the repository (shared/)"),
    (re.compile(r"\b(design|style)\.md\b"), "a design document the repository does not hold"),
    (re.compile(r"\bthe brief\b", re.I), "a brief the repository does not hold"),
    (re.compile(r"\bdesign rules?\s*#?\d", re.I), "a numbered design rule"),
    (re.compile(r"\bseed[-_ ]?0\d\d\b|\bseeds/", re.I), "a seed write-up"),
    (re.compile(r"\bissues?\s*#?\d+\b(?!\.\d|x)", re.I), "an issue number"),
    (re.compile(r"\b(pr|pull request)\s*#\s*\d+|\b[a-z][a-z0-9_-]*\s#\d{2,}\b", re.I), "a tracker's number"),
    (re.compile(r"github\.com/\S+?/(issues|pull)/\d+", re.I), "a tracker's URL"),
]
SELF = {"scripts/check_references.py", "scripts/check_tree.sh"}
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
RESULTS = re.compile(r"bench/results/(?:\{[^{}\s]*\}|[^\s`'\")|,;:\]{])*")


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
        return [f for f in out.decode().split("\0") if f and os.path.isfile(os.path.join(root, f))]
    except (subprocess.CalledProcessError, FileNotFoundError):
        files = []
        for dirpath, dirnames, names in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and not d.startswith("build")]
            files += [os.path.relpath(os.path.join(dirpath, n), root) for n in names]
        return files


def read_text(path):
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def is_raw_result(rel):
    return rel.startswith("bench/results/") and rel not in ("bench/results/README.md", "bench/results/SCHEMA.md")


def check_citations(rel, text):
    if is_raw_result(rel) or rel.startswith("tests/data/") or rel in SELF:
        return
    for n, line in enumerate(text.splitlines(), 1):
        for pattern, what in CITATION_PATTERNS:
            m = pattern.search(line)
            if m:
                yield f"{rel}:{n}: cites {what} ('{m.group(0)}'): state the reason in place, or write it into docs/"
                break


def markdown_lines(text):
    """(line number, line) of a Markdown text outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if m:
            if fence is None:
                fence = m.group(1)[0]
            elif m.group(1)[0] == fence:
                fence = None
            continue
        if fence is None:
            yield n, re.sub(r"`[^`]*`", "``", line)  # a link inside a code span is no link


def check_links(root, rel, text):
    base = os.path.dirname(rel)
    for n, line in markdown_lines(text):
        targets = LINK.findall(line)
        m = REF_LINK.match(line)
        if m:
            targets.append(m.group(1))
        for target in targets:
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                continue  # a URL, mail address or an anchor in the same page
            path = urllib.parse.unquote(target.split("#", 1)[0])
            if not path:
                continue
            resolved = os.path.normpath(os.path.join(root, path.lstrip("/")) if path.startswith("/")
                                        else os.path.join(root, base, path))
            if not os.path.exists(resolved):
                yield f"{rel}:{n}: link '{target}' does not resolve ({os.path.relpath(resolved, root)} is not in the tree)"


def expand_braces(pattern):
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    return [p for alt in m.group(1).split(",")
            for p in expand_braces(pattern[:m.start()] + alt + pattern[m.end():])]


def check_results_paths(root, rel, text):
    for n, line in enumerate(text.splitlines(), 1):
        for cited in RESULTS.findall(line):
            cited = cited.rstrip(".")
            if "<" in cited or "$" in cited or cited == "bench/results/":
                continue
            for path in expand_braces(cited):  # {a,b}: both are cited
                if re.search(r"[*?\[]", path):
                    if not glob.glob(os.path.join(root, path)):
                        yield f"{rel}:{n}: '{path}' matches no file"
                elif not os.path.exists(os.path.join(root, path)):
                    yield f"{rel}:{n}: '{path}' does not exist"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    problems = {"citations": [], "links": [], "results": []}
    for rel in tracked_files(root):
        text = read_text(os.path.join(root, rel))
        if text is None:
            continue
        problems["citations"] += check_citations(rel, text)
        if rel.endswith(".md") and not is_raw_result(rel):
            problems["links"] += check_links(root, rel, text)
            problems["results"] += check_results_paths(root, rel, text)
    for kind, found in problems.items():
        for p in found:
            print(f"check_tree: {kind}: {p}")
    total = sum(len(v) for v in problems.values())
    if total:
        print(f"check_tree: {total} reference problem(s): "
              + ", ".join(f"{len(v)} {k}" for k, v in problems.items() if v))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
