#!/usr/bin/env python3
"""Thread contracts by name (core/base/contract.h): every function defined in core/
whose name ends in _st begins with FERRY_POLLER_ONLY(), and every one whose name ends
in _locked begins with FERRY_HELD(...), so that a build with FERRY_CHECKS checks
each. Prints each definition that does not and fails; --list prints them all.
"""
import os
import re
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*_(st|locked))\s*\(")
QUALIFIERS = re.compile(r"\s*(const|noexcept|override|final|\s)*\{")
FIRST = {"st": "FERRY_POLLER_ONLY();", "locked": "FERRY_HELD("}


def strip_comments(text):
    # Comments and string literals blanked, line structure kept.
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(\\.|[^"\\\n])*"', blank, text, flags=re.S)


def definitions(text):
    """(name, kind, line, first statement) of each function defined in text."""
    for m in NAME.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        q = QUALIFIERS.match(text, i)
        if not q:
            continue
        before = text[:m.start()].rstrip()
        if before.endswith((".", "->", "return", "(", ",", "=", "!", "&&", "||")):
            continue  # a call
        body = text[q.end():].lstrip()
        yield m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1, body


def main():
    listing = "--list" in sys.argv
    bad = 0
    count = {"st": 0, "locked": 0}
    for root, _, files in os.walk(os.path.join(TOP, "core")):
        for f in sorted(files):
            if not f.endswith((".cpp", ".h")):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, TOP)
            for name, kind, line, body in definitions(strip_comments(open(path).read())):
                count[kind] += 1
                ok = body.startswith(FIRST[kind])
                if listing or not ok:
                    print(f"{rel}:{line}: {name}" + ("" if ok else f": does not begin with {FIRST[kind]}"))
                bad += not ok
    print(f"check_contracts: {count['st']} poller-only and {count['locked']} lock-held definitions, "
          f"{bad} unchecked")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
