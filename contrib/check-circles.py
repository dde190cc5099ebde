#!/usr/bin/env python3
#
# Finds include and call circles among the C files of a tree (default: src/)
# and names every file and function of each one; exits 1 when any is found.
#
# Granularity: the file is the layer. A file calls another when a function
# (or function-like macro) defined in it calls, by name, one defined in the
# other; a file includes another with #include "...". Headers are files like
# the rest: a header's inline functions and macros are its calls, and its
# declarations are nothing (so the usual pair x.c -> x.h is no edge unless
# x.h defines what x.c calls). A call circle is a set of files that reach
# each other through calls (a strongly connected component of more than one
# file); an include circle the same through includes.
#
# What is not a call: taking a function's address (an ops table, a
# completion's func): that is how events come up without a circle. Calls
# through pointers are not seen. Names are resolved as the compiler would:
# a file's own definition first, else a header's, else a non-static one in
# another .c file (alternatives built by configure, such as the glue units,
# all count).
#
# The parser is lexical (comments, strings and preprocessor lines aside, it
# follows braces), written for this project's UCX style: a definition is
# "name(...) {" at file scope. It needs no build and no tool beyond python3.
#
# Usage: contrib/check-circles.py [--verbose] [ROOT]
#
# See file LICENSE for terms.
#

import os
import re
import sys

# Upward calls that are part of the design, each with its reason; only the
# functions listed are excepted along the edge, so a new upward call is
# still a circle. (caller file, callee file): {callee functions}. One rule
# needs no entry: a header's inline fast path may fall back to the slow path
# in the .c of the same name (rc_gdr_lock.h -> rc_gdr_lock.c): one object,
# split for inlining, as UCX does.
GLUE_UNITS = ('uct/ib_gdr/rc_gdr_glue_v113.c', 'uct/ib_gdr/rc_gdr_glue_v114.c',
              'uct/ib_gdr/rc_gdr_glue_v122.c', 'uct/ib_gdr/rc_gdr_glue_v2.inl')
ALLOWED_CALLS = {}
for _glue in GLUE_UNITS:
    # The glue unit of a UCX release sits above the md and the interface
    # (UCX's tables call them through it) and also lends them the one
    # release-dependent step each needs at open; configure builds one unit.
    ALLOWED_CALLS[('uct/ib_gdr/rc_gdr_md.c', _glue)] = {
        'uct_rc_gdr_glue_sys_dev_set_name'}
    ALLOWED_CALLS[('uct/ib_gdr/rc_gdr_iface.c', _glue)] = {
        'uct_rc_gdr_glue_mpool_init'}
for _glue in GLUE_UNITS[1:3]:
    # rc_gdr_glue_v2.inl is a template that the v114 and v122 units include:
    # the macros they define before it are its parameters.
    ALLOWED_CALLS[('uct/ib_gdr/rc_gdr_glue_v2.inl', _glue)] = {
        'UCT_RC_GDR_GLUE_ADDR_LENGTH_OK', 'UCT_RC_GDR_GLUE_MD_QUERY_MORE'}

KEYWORDS = {
    'if', 'while', 'for', 'switch', 'return', 'sizeof', 'do', 'else',
    'case', 'goto', 'typeof', '__typeof__', 'defined', '__attribute__',
    'alignof', '_Alignof', '__alignof__', 'offsetof', '_Static_assert',
    'static_assert', '__builtin_offsetof', '__asm__', 'asm',
    '__builtin_expect', 'va_arg',
}

SOURCE_EXT = ('.c', '.h', '.inl')

TOKEN_RE = re.compile(r'''
    (?P<ws>\s+)
  | (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<number>\.?\d[\w.]*)
  | (?P<punct>->|\#\#|.)
''', re.VERBOSE | re.DOTALL)

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
DEFINE_RE = re.compile(r'^\s*#\s*define\s+([A-Za-z_]\w*)\(')


# Strings first, so that "a/*b" opens no comment
STRIP_RE = re.compile(r'"(?:\\.|[^"\\\n])*"'    # a string
                      r"|'(?:\\.|[^'\\\n])*'"    # a character
                      r'|/\*.*?\*/|//[^\n]*',    # comments
                      re.DOTALL)


def blank_comment(m):
    """A comment as blanks (its lines kept); a string or char as it is"""
    t = m.group()
    return re.sub(r'[^\n]', ' ', t) if t[0] == '/' else t


def tokens(text):
    out = []
    for m in TOKEN_RE.finditer(text):
        kind = m.lastgroup
        if kind in ('ws', 'comment'):
            continue
        out.append((kind, m.group()))
    return out


def preprocess(text):
    """Splits a file into its C text (preprocessor lines blanked), its
    quoted includes, and its function-like macros {name: body}."""
    text = STRIP_RE.sub(blank_comment, text)
    lines = text.split('\n')
    c_lines, includes, macros = [], [], {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.lstrip().startswith('#'):
            c_lines.append(line)
            i += 1
            continue
        directive = [line]
        while directive[-1].endswith('\\') and i + 1 < len(lines):
            i += 1
            directive.append(lines[i])
        i += 1
        c_lines.extend([''] * len(directive))
        joined = ' '.join(d.rstrip('\\') for d in directive)
        m = INCLUDE_RE.match(joined)
        if m:
            includes.append(m.group(1))
            continue
        m = DEFINE_RE.match(joined)
        if m:
            macros[m.group(1)] = joined[m.end():]
    return '\n'.join(c_lines), includes, macros


def calls_in(toks):
    """Names called in a token list: NAME ( not after -> or . """
    names = set()
    for k in range(len(toks) - 1):
        kind, val = toks[k]
        if (kind == 'ident' and toks[k + 1][1] == '(' and
                val not in KEYWORDS and
                (k == 0 or toks[k - 1][1] not in ('->', '.'))):
            names.add(val)
    return names


def parse(text):
    """{function: (is_static, called names)} of one file's C text"""
    toks = tokens(text)
    defs = {}
    decl = []           # tokens of the file-scope declaration so far
    k = 0
    while k < len(toks):
        kind, val = toks[k]
        if val == '{':
            # a function's body, or a struct's or initializer's: skipped whole
            name = definition_name(decl)
            end = matching(toks, k, '{', '}')
            if name is not None:
                static = any(v == 'static' for _, v in decl)
                prev = defs.get(name, (static, set()))
                defs[name] = (static, prev[1] | calls_in(toks[k + 1:end]))
                decl = []
            else:
                decl += [(kind, val), ('punct', '}')]
            k = end + 1
            continue
        if val == '}':
            # braces that #if branches leave unbalanced: the file cannot be
            # read lexically, and a silent guess could hide a circle
            raise ParseError("a '}' closes nothing")
        if val == ';':
            decl = []
        else:
            decl.append((kind, val))
        k += 1
    return defs


class ParseError(Exception):
    pass


def matching(toks, k, open_, close):
    level = 0
    for j in range(k, len(toks)):
        if toks[j][1] == open_:
            level += 1
        elif toks[j][1] == close:
            level -= 1
            if level == 0:
                return j
    raise ParseError("a '%s' that no '%s' closes" % (open_, close))


def definition_name(decl):
    """The name of "... name ( params ) [attributes] {", else None"""
    if not decl or '=' in [v for _, v in decl]:
        return None
    # the parameter list is the last balanced (...) before the brace,
    # after which only attribute-like identifiers and their (...) may come
    k = len(decl) - 1
    while k >= 0:
        if decl[k][1] == ')':
            level = 0
            j = k
            while j >= 0:
                if decl[j][1] == ')':
                    level += 1
                elif decl[j][1] == '(':
                    level -= 1
                    if level == 0:
                        break
                j -= 1
            if j > 0 and decl[j - 1][0] == 'ident':
                name = decl[j - 1][1]
                if name in KEYWORDS or name.startswith('__attribute'):
                    k = j - 2
                    continue
                if j >= 2 and decl[j - 2][1] in ('struct', 'union', 'enum'):
                    return None
                return name
            return None
        elif decl[k][0] == 'ident':
            k -= 1
        else:
            return None
    return None


def same_object(f, g):
    """A header calling the .c of the same name (see ALLOWED_CALLS)"""
    return (not f.endswith('.c') and g.endswith('.c') and
            os.path.splitext(f)[0] == os.path.splitext(g)[0])


class Tree:
    def __init__(self, root):
        self.root = root
        self.files = []
        for top, dirs, names in os.walk(root):
            dirs.sort()
            for n in sorted(names):
                if n.endswith(SOURCE_EXT):
                    self.files.append(os.path.relpath(os.path.join(top, n),
                                                      root))
        self.by_base = {}
        for f in self.files:
            self.by_base.setdefault(os.path.basename(f), []).append(f)
        self.defs = {}      # file -> {name: (static, calls)}
        self.includes = {}  # file -> [file]
        for f in self.files:
            with open(os.path.join(root, f), errors='replace') as fh:
                text, incs, macros = preprocess(fh.read())
            try:
                defs = parse(text)
            except ParseError as e:
                raise ParseError("%s: %s" % (f, e))
            for name, body in macros.items():
                defs[name] = (False, calls_in(tokens(body)))
            self.defs[f] = defs
            self.includes[f] = [t for t in
                                (self.resolve_include(f, i) for i in incs)
                                if t is not None]
        self.definers = {}  # name -> [file]
        for f, defs in self.defs.items():
            for name in defs:
                self.definers.setdefault(name, []).append(f)

    def resolve_include(self, f, inc):
        local = os.path.normpath(os.path.join(os.path.dirname(f), inc))
        if local in self.files:
            return local
        found = self.by_base.get(os.path.basename(inc), [])
        return found[0] if len(found) == 1 else None

    def targets(self, f, name):
        """Files whose definition a call of @name in @f reaches"""
        if name in self.defs[f]:
            return []
        out = []
        for g in self.definers.get(name, []):
            static = self.defs[g][name][0]
            if not g.endswith('.c') or not static:
                out.append(g)
        return out

    def call_graph(self):
        """{caller file: {callee file: {(caller fn, callee fn)}}}"""
        graph = {f: {} for f in self.files}
        for f, defs in self.defs.items():
            for fn, (_, called) in defs.items():
                for name in called:
                    for g in self.targets(f, name):
                        if (name in ALLOWED_CALLS.get((f, g), ()) or
                                same_object(f, g)):
                            continue
                        graph[f].setdefault(g, set()).add((fn, name))
        return graph

    def include_graph(self):
        graph = {f: {} for f in self.files}
        for f, incs in self.includes.items():
            for g in incs:
                if g != f:
                    graph[f].setdefault(g, set()).add(('#include', g))
        return graph


def components(graph):
    """Strongly connected components of more than one node (Tarjan)"""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def report(what, graph, comps):
    for comp in comps:
        members = set(comp)
        print("%s circle among %d files: %s" % (what, len(comp),
                                                 ' '.join(comp)))
        for f in comp:
            for g in sorted(graph[f]):
                if g not in members:
                    continue
                for fn, callee in sorted(graph[f][g]):
                    if fn == '#include':
                        print("    %s includes %s" % (f, g))
                    else:
                        print("    %s -> %s: %s() calls %s()" %
                              (f, g, fn, callee))


def main(argv):
    verbose = '--verbose' in argv
    args = [a for a in argv if a != '--verbose']
    root = args[0] if args else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), '..', 'src')
    if not os.path.isdir(root):
        print("check-circles: no directory %s" % root, file=sys.stderr)
        return 2

    try:
        tree = Tree(root)
    except ParseError as e:
        print("check-circles: cannot read %s" % e, file=sys.stderr)
        return 2
    if not tree.files:
        print("check-circles: no C files under %s" % root, file=sys.stderr)
        return 2

    calls = tree.call_graph()
    incs = tree.include_graph()
    if verbose:
        for f in sorted(calls):
            for g in sorted(calls[f]):
                print("call %s -> %s: %s" % (f, g, ', '.join(
                    sorted('%s>%s' % c for c in calls[f][g]))))
    call_comps = components(calls)
    inc_comps = components(incs)
    report("include", incs, inc_comps)
    report("call", calls, call_comps)
    num = len(call_comps) + len(inc_comps)
    print("check-circles: %d files, %d call edges, %d include edges: "
          "%d circle(s)" % (len(tree.files),
                            sum(len(v) for v in calls.values()),
                            sum(len(v) for v in incs.values()), num))
    return 1 if num else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
