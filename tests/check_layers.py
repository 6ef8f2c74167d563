#!/usr/bin/env python3
"""The shape of core/: its layers and the include graph of its modules.

A module is a folder's x.h with its x.cpp (or either alone). core/CMakeLists.txt says
which layers each layer builds on (ferry_layer(NAME BELOW ...)); this script reads the
includes of every module and fails when

  - a module includes a header of a layer its own does not build on (a back-edge:
    the build refuses it too, this says so without building), or
  - modules include each other in a loop that tests/known_cycles.txt does not list
    (the loops that are left to break; a listed loop that no longer exists must be
    taken off the list too, so it can only shrink).

  check_layers.py          the verdict, one line per finding
  check_layers.py --graph  also the graph: each layer's modules and what they include
"""
import os
import re
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = os.path.join(TOP, 'core')
INCLUDE = re.compile(r'^\s*#\s*include\s+"core/(\w+)/(\w+)\.(?:h|cpp|def)"', re.M)
LAYER = re.compile(r'ferry_layer\((\w+)((?:\s+BELOW(?:\s+(?!SOURCES)\w+)+)?)\s+SOURCES')


def layers():
    """Each layer and the layers it may include, in the order CMake declares them."""
    text = open(os.path.join(CORE, 'CMakeLists.txt')).read()
    order, below = [], {}
    for name, rest in LAYER.findall(text):
        order.append(name)
        direct = rest.split()[1:] if rest.strip() else []
        seen = set()
        for d in direct:
            if d not in below:
                sys.exit(f'check_layers: layer {name} builds on {d}, declared after it')
            seen |= {d} | below[d]
        below[name] = seen
    return order, below


def modules(order):
    """module name (layer/stem) -> set of modules it includes (itself left out)."""
    graph, where = {}, {}
    for layer in order:
        folder = os.path.join(CORE, layer)
        for f in sorted(os.listdir(folder)):
            stem, ext = os.path.splitext(f)
            if ext not in ('.h', '.cpp', '.def'):
                continue
            m = f'{layer}/{stem}'
            graph.setdefault(m, set())
            text = open(os.path.join(folder, f), errors='replace').read()
            for l, s in INCLUDE.findall(text):
                if f'{l}/{s}' != m:
                    graph[m].add(f'{l}/{s}')
                    where.setdefault((m, f'{l}/{s}'), f'core/{layer}/{f}')
    for m in list(graph):
        for t in graph[m]:
            if t not in graph and not os.path.exists(os.path.join(CORE, t + '.h')):
                sys.exit(f'check_layers: {m} includes core/{t}, which does not exist')
            graph.setdefault(t, set())
    return graph, where


def cycles(graph):
    """The strongly connected parts of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = n[0]
        n[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n[0]
                    n[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                part = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    part.append(w)
                    if w == v:
                        break
                if len(part) > 1:
                    out.append(sorted(part))
    return sorted(out)


def known():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'known_cycles.txt')
    out = []
    for line in open(path):
        line = line.split('#', 1)[0].split()
        if line:
            out.append(sorted(line))
    return sorted(out)


def main():
    order, below = layers()
    graph, where = modules(order)
    findings = []
    for m in sorted(graph):
        for t in sorted(graph[m]):
            ml, tl = m.split('/')[0], t.split('/')[0]
            if tl != ml and tl not in below[ml]:
                findings.append(f'back-edge: {where[(m, t)]} includes core/{t} ({tl} is not below {ml})')
    found, listed = cycles(graph), known()
    for c in found:
        if c not in listed:
            findings.append('loop: ' + ' '.join(c) + ' (modules that include each other; break it)')
    for c in listed:
        if c not in found:
            findings.append('gone: ' + ' '.join(c) + ' is no loop any more: take it off tests/known_cycles.txt')
    if '--graph' in sys.argv:
        for layer in order:
            print(f'{layer} (builds on: {" ".join(sorted(below[layer])) or "nothing"})')
            for m in sorted(x for x in graph if x.startswith(layer + '/')):
                print(f'  {m.split("/")[1]:18} -> {" ".join(sorted(graph[m])) or "-"}')
    edges = sum(len(v) for v in graph.values())
    in_loops = sum(len(c) for c in found)
    print(f'check_layers: {len(order)} layers, {len(graph)} modules, {edges} includes, '
          f'{len(found)} known loop(s) over {in_loops} modules')
    for f in findings:
        print(f)
    return 1 if findings else 0


if __name__ == '__main__':
    sys.exit(main())
