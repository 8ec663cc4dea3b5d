#!/usr/bin/env python3
"""Every relative link of the front pages resolves to a file or folder of the repository.

    test_doc_links.py SOURCE_DIR

Reads README.md, docs/*.md, configs/README.md, notebooks/README.md, results/README.md and
results/headline.md:
inline links [text](target) and reference definitions [label]: target, outside fenced code
blocks and inline code. A target's #anchor is ignored; web addresses (scheme:) and
in-page anchors are not checked. Prints one line per broken link (file:line: target) and
exits 1 when there is one. Then every folder under results/ must have its row in
results/README.md's index (a row linking to the folder's NOTES.md), and every such row a folder.
Standard library only.
"""
import glob
import os
import re
import sys

INLINE = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")


def pages(src):
    names = ["README.md", "configs/README.md", "notebooks/README.md", "results/README.md",
             "results/headline.md"]
    found = [os.path.join(src, n) for n in names]
    found += sorted(glob.glob(os.path.join(src, "docs", "*.md")))
    return found


def link_targets(text):
    """(line number, target) of each link outside code."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark[0] * len(mark)
            elif mark.startswith(fence):
                fence = None
            continue
        if fence is not None:
            continue
        # inline code holds no links; but a link's text may be code: `[`x`](y)` keeps (y)
        plain = CODE_SPAN.sub(lambda c: "x" * len(c.group(0)), line)
        for m in INLINE.finditer(plain):
            yield n, line[m.start(1):m.end(1)]
        m = REFERENCE.match(plain)
        if m:
            yield n, line[m.start(1):m.end(1)]


def broken(src, page):
    with open(page, encoding="utf-8") as f:
        text = f.read()
    for n, target in link_targets(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a web address, mailto:, or an anchor in this page
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not path:
            continue
        resolved = os.path.normpath(os.path.join(os.path.dirname(page), path))
        inside = os.path.commonpath([os.path.abspath(src), os.path.abspath(resolved)])
        if inside != os.path.abspath(src) or not os.path.exists(resolved):
            yield f"{os.path.relpath(page, src)}:{n}: {target}"


def unindexed(src):
    """The folders of results/ without a row in results/README.md, and rows without a folder."""
    index = os.path.join(src, "results", "README.md")
    if not os.path.exists(index):
        return []
    with open(index, encoding="utf-8") as f:
        rows = set(re.findall(r"^\|\s*`([^`/]+)/`\s*\|.*\]\(\1/NOTES\.md\)", f.read(), re.M))
    folders = {d for d in os.listdir(os.path.join(src, "results"))
               if os.path.isdir(os.path.join(src, "results", d))}
    return ([f"results/{d}/: no row in results/README.md" for d in sorted(folders - rows)] +
            [f"results/README.md: a row for {d}/, which is not there" for d in sorted(rows - folders)])


def main():
    if len(sys.argv) != 2:
        print("usage: test_doc_links.py SOURCE_DIR", file=sys.stderr)
        return 2
    src = sys.argv[1]
    checked = [p for p in pages(src) if os.path.exists(p)]
    missing = [p for p in pages(src) if not os.path.exists(p)]
    bad = [b for p in checked for b in broken(src, p)]
    for p in missing:
        print(f"{os.path.relpath(p, src)}: no such page")
    for b in bad:
        print(f"broken link: {b}")
    n_links = sum(1 for p in checked for _ in link_targets(open(p, encoding="utf-8").read()))
    print(f"doc links: {len(checked)} pages, {n_links} links, {len(bad)} broken")
    index = unindexed(src)
    for line in index:
        print(line)
    return 1 if bad or missing or index else 0


if __name__ == "__main__":
    sys.exit(main())
