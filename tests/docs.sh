#!/bin/sh
# The documentation holds together: every relative link in every README.md resolves (the file
# or directory exists inside the tree, and a #fragment names a heading of the linked page), the
# top README stays a front door (at most 260 lines), and no file refers to documents outside
# the repository or to issue-tracker numbers, which a reader of the tree cannot follow. The
# fixtures directory's default location (a models directory beside the checkout) is the one
# outside path the build may name: it is configuration, not a document.
# First it proves on a crafted tree that it finds each kind of fault, then it checks the real one.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "python3 is not installed"

# Prints one line per fault under ROOT and exits with their count (at most 100).
check_tree() { # ROOT
    python3 - "$1" <<'PY'
import os, re, subprocess, sys

root = os.path.realpath(sys.argv[1])
MAX_TOP_LINES = 260
# Files written by autoreconf, configure or a build: not the project's text.
GENERATED = re.compile(r'(^|/)(configure|Makefile\.in|aclocal\.m4|config\.(guess|sub|h\.in|status|log)|'
                       r'ltmain\.sh|libtool\.m4|lt[a-z~]*\.m4|compile|depcomp|install-sh|missing|'
                       r'test-driver|ar-lib|autom4te\.cache/.*)$')
SKIP_DIRS = {'.git', 'autom4te.cache', 'build-aux', 'corpus', 'figures', '__pycache__', 'Testing'}
SELF = 'tests/docs.sh'

def tree_files():
    try:
        out = subprocess.run(['git', '-C', root, 'ls-files', '-co', '--exclude-standard'],
                             capture_output=True, text=True, check=True).stdout.split('\n')
        if os.path.realpath(subprocess.run(['git', '-C', root, 'rev-parse', '--show-toplevel'],
                            capture_output=True, text=True).stdout.strip() or '/') == root:
            # an untracked build directory inside the tree (not ignored) holds no project text
            build = os.path.relpath(os.path.realpath(os.environ.get('RA_DOCS_BUILD', '/')), root) + '/'
            return sorted(f for f in out if f and os.path.isfile(os.path.join(root, f)) and not f.startswith(build))
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []  # a tree without git (a release tarball): walk it, build directories left out
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith(('build', '_build', '_inst'))]
        found += [os.path.relpath(os.path.join(d, n), root) for n in names if not n.endswith('~')]
    return sorted(found)

faults = []
def fault(msg):
    faults.append(msg)
    print(msg)

# --- links of every README.md
def slug(heading):
    s = re.sub(r'`|\*\*|\[|\]\([^)]*\)', lambda m: '' if m.group(0) != ']' else '', heading.strip())
    s = s.lower()
    s = re.sub(r'[^\w\- ]', '', s)
    return s.replace(' ', '-')

def anchors(path):
    seen, result = {}, set()
    text = open(path, encoding='utf-8', errors='replace').read()
    text = re.sub(r'^```.*?^```', '', text, flags=re.S | re.M)
    for m in re.finditer(r'^#{1,6}[ \t]+(.+?)[ \t#]*$', text, re.M):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else '%s-%d' % (base, n))
    result.update(re.findall(r'<a\s+(?:name|id)="([^"]+)"', text))
    return result

def links(text):
    text = re.sub(r'^```.*?^```', '', text, flags=re.S | re.M)   # fenced code
    text = re.sub(r'`[^`\n]*`', '', text)                          # inline code
    for m in re.finditer(r'!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)', text):
        yield m.group(1)
    for m in re.finditer(r'^\s*\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s|$)', text, re.M):
        yield m.group(1)

files = tree_files()
for rel in files:
    if os.path.basename(rel) != 'README.md':
        continue
    path = os.path.join(root, rel)
    text = open(path, encoding='utf-8', errors='replace').read()
    for link in links(text):
        if re.match(r'[a-z][a-z0-9+.-]*:', link, re.I):
            continue  # http:, https:, mailto:
        target, _, frag = link.partition('#')
        dest = os.path.realpath(os.path.join(os.path.dirname(path), target)) if target else path
        if dest != root and not dest.startswith(root + os.sep):
            fault('%s: link %s leaves the repository' % (rel, link))
        elif not os.path.exists(dest):
            fault('%s: link %s: no such file or directory' % (rel, link))
        elif frag and dest.endswith('.md') and frag not in anchors(dest):
            fault('%s: link %s: %s has no heading with the anchor #%s'
                  % (rel, link, os.path.relpath(dest, root), frag))

top = os.path.join(root, 'README.md')
if not os.path.exists(top):
    fault('README.md: missing')
else:
    n = sum(1 for _ in open(top, encoding='utf-8', errors='replace'))
    if n > MAX_TOP_LINES:
        fault('README.md: %d lines; the front door keeps to %d (move the reference to a '
              'directory README)' % (n, MAX_TOP_LINES))

# --- references a reader of the tree cannot follow
OUTSIDE = [
    (re.compile(r'\bDESIGN\.md\b'), 'a design document outside the repository'),
    (re.compile(r'(?<![\w./-])(notes|papers)/'), 'notes or papers outside the repository'),
    (re.compile(r'\.\./shared\b(?!/models)'), 'a file outside the repository'),
    (re.compile(r'\b[Ii]ssues?\s+#?\d+'), 'an issue number'),
    (re.compile(r'(?<![\w$"\'#/&{\\-])#\d{1,5}\b(?![\da-fA-F])'), 'an issue number'),
]
for rel in files:
    if rel == SELF or GENERATED.search(rel) or set(rel.split('/')[:-1]) & SKIP_DIRS:
        continue
    try:
        lines = open(os.path.join(root, rel), encoding='utf-8').read().split('\n')
    except (UnicodeDecodeError, OSError):
        continue  # binary files (figures, corpora, checkpoints)
    for i, line in enumerate(lines, 1):
        for rx, what in OUTSIDE:
            m = rx.search(line)
            if m:
                fault('%s:%d: "%s" refers to %s' % (rel, i, m.group(0), what))
sys.exit(min(len(faults), 100))
PY
}

# The checker finds each kind of fault on a crafted tree, and passes a clean one.
T="$TMP/tree"
mkdir -p "$T/src" "$T/jobs"
{
    echo '# top'
    echo 'See [the core](src/README.md), [its formats](src/README.md#model-formats),'
    echo '[jobs](jobs/) and [a section](#the-main-options).'
    echo '## The main options'
    echo '`[not a link](nowhere.md)`'
} >"$T/README.md"
printf '# src/: the core\n\n## Model formats\n\nBack [up](../README.md#top).\n' >"$T/src/README.md"
printf '/* A comment that says what and why, with a colour "#444444" and $# args. */\n' >"$T/src/a.c"
out=$(check_tree "$T"; echo "count $?")
[ "$out" = "count 0" ] || fail "self-test: a clean tree gave faults: $out"

printf '[gone](src/missing.md) [bad anchor](src/README.md#no-such-heading) [out](../../x.md)\n' >>"$T/README.md"
i=0; while [ $i -lt 260 ]; do echo; i=$((i + 1)); done >>"$T/README.md"
printf '/* see DESIGN.md and notes/perf.md and ../shared/papers/x.txt */\n/* fixed in issue 12, and #26 */\n' >"$T/src/b.c"
printf '#!/bin/sh\nmodels=${RA_MODELS_DIR:-../shared/models}\n' >"$T/jobs/ok"
out=$(check_tree "$T"; echo "count $?")
for want in 'README.md: link src/missing.md: no such file' 'README.md: link src/README.md#no-such-heading: src/README.md has no heading' \
            'README.md: link ../../x.md leaves the repository' 'README.md: 266 lines' \
            'src/b.c:1: "DESIGN.md"' 'src/b.c:2: "issue 12"' 'count 9'; do
    printf '%s\n' "$out" | grep -qF "$want" || fail "self-test: the checker missed: $want (it said: $out)"
done
printf '%s\n' "$out" | grep -q 'jobs/ok' && fail "self-test: the fixtures default was flagged: $out"

# The real tree.
export RA_DOCS_BUILD="$BUILD" # its untracked files are not the project's
out=$(check_tree "$SRC"; echo "count $?")
printf '%s\n' "$out" | grep -v '^count ' >&2
[ "${out##*count }" = 0 ] || fail "the documentation has ${out##*count } fault(s) (listed above)"
finish
