#!/usr/bin/env python3
"""The README's headline numbers agree with their one source, results/headline.md.

    test_headline.py SOURCE_DIR

For each row of the README's results table (the first table under "## Results"), the section
of results/headline.md headed by the row's first cell must hold every number of the row's
"measured" and "device, date" cells. Link targets and inline code are left out on both sides
(a path's digits are no figure). Each "A/raw.tar.gz: P" source named there must be a member
of that archive, each linked file must exist. Then the check runs once more on a copy of the
README with one figure changed, which it must refuse. Prints one line per disagreement and
exits 1 when there is one. Standard library only.
"""
import os
import re
import sys
import tarfile

NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
CODE_SPAN = re.compile(r"`[^`]*`")


def normalize(text):
    return " ".join(text.replace("`", "").split())


def numbers(text):
    text = CODE_SPAN.sub(" ", LINK_TARGET.sub("]", text))
    return NUMBER.findall(text)


def readme_rows(readme):
    """(first cell, measured, device-date) of each row of the table under '## Results'."""
    lines = readme.split("\n")
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == "## Results")
    except StopIteration:
        raise SystemExit("README.md: no '## Results' section")
    rows, in_table = [], False
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            in_table = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if set("".join(cells)) <= set("-: ") or cells[0] == "what":
                continue
            rows.append((cells[0], cells[1] if len(cells) > 1 else "",
                         cells[2] if len(cells) > 2 else ""))
        elif in_table:
            break
    return rows


def sections(headline):
    out, key = {}, None
    for line in headline.split("\n"):
        if line.startswith("## "):
            key = normalize(line[3:])
            out[key] = []
        elif key is not None:
            out[key].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def check(readme, headline):
    """Disagreements between the README's table and headline.md, one line each."""
    bad = []
    secs = sections(headline)
    rows = readme_rows(readme)
    if not rows:
        bad.append("README.md: no rows in the results table")
    for what, measured, where in rows:
        sec = secs.get(normalize(what))
        if sec is None:
            bad.append(f"README row '{normalize(what)}': no section '## {normalize(what)}' "
                       "in results/headline.md")
            continue
        have = set(numbers(sec))
        for cell, name in ((measured, "measured"), (where, "device, date")):
            for n in numbers(cell):
                if n not in have:
                    bad.append(f"README row '{normalize(what)[:60]}': {name} {n} is not in its "
                               "section of results/headline.md")
    return bad


def check_sources(src, headline):
    """Each 'A/raw.tar.gz: P' is in its archive; each linked file exists."""
    bad = []
    results = os.path.join(src, "results")
    for archive, member in re.findall(r"`([\w./-]+/raw\.tar\.gz): ([^`]+)`", headline):
        path = os.path.join(results, archive)
        try:
            with tarfile.open(path) as tf:
                tf.getmember(member)
        except (OSError, KeyError, tarfile.TarError) as e:
            bad.append(f"results/headline.md: {archive}: {member}: {type(e).__name__}")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", headline):
        if re.match(r"^[a-z]+:", target):
            continue
        if not os.path.exists(os.path.join(results, target)):
            bad.append(f"results/headline.md: link {target}: no such file")
    return bad


def main():
    if len(sys.argv) != 2:
        print("usage: test_headline.py SOURCE_DIR", file=sys.stderr)
        return 2
    src = sys.argv[1]
    try:
        with open(os.path.join(src, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        with open(os.path.join(src, "results", "headline.md"), encoding="utf-8") as f:
            headline = f.read()
    except OSError as e:
        print(f"test_headline: {e.filename}: {e.strerror}")
        return 1
    bad = check(readme, headline) + check_sources(src, headline)
    for b in bad:
        print(b)
    # The check itself: a README whose first figure moved is refused.
    rows = readme_rows(readme)
    if rows and numbers(rows[0][1]):
        first = numbers(rows[0][1])[0]
        changed = readme.replace(rows[0][1], rows[0][1].replace(first, first + "9", 1), 1)
        if not check(changed, headline):
            bad.append(f"self-check: a README with {first} changed to {first}9 passed")
            print(bad[-1])
    n = sum(len(numbers(m)) + len(numbers(w)) for _, m, w in rows)
    print(f"headline: {len(rows)} README rows, {n} numbers, {len(bad)} disagreements")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
