#!/usr/bin/env bash
# Planted-bug check: applies each mutation of tests/mutants.txt, one at a time, to a copy of the
# tree and runs the checks listed with it; every mutant must make at least one check fail.
#
#   scripts/mutants.sh [--all-checks] [NAME...]
#
# NAME: run only these mutants (default: all). Without --all-checks a mutant stops at its first
# failing check (caught); with it every check runs, to see which tests catch what.
# Work (copy of the tree, its own target dir, an install, logs) goes to build/mutants/ (or
# $MUTANTS_WORK); the list is tests/mutants.txt (or $MUTANTS_LIST). The copy is built in the
# debug profile, so each mutant recompiles only the library (incremental).
# First every check must pass on the unmodified copy. Results: build/mutants/results.txt, one
# line per mutant ("caught by ..." or "MISSED"); the last line is "mutants: N passed, N failed"
# (a passed mutant is a caught one). Exit status 0 when every mutant was caught.
# Record the results in tests/MUTANTS.md.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
all_checks=no
want=()
for a in "$@"; do
    case $a in
        --all-checks) all_checks=yes ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "mutants.sh: unknown option $a" >&2; exit 2 ;;
        *) want+=("$a") ;;
    esac
done
work=${MUTANTS_WORK:-$root/build/mutants}
tree=$work/tree prefix=$work/prefix bin=$work/bin logs=$work/logs
export CARGO_TARGET_DIR=$work/target CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
rm -rf "$bin" && mkdir -p "$work" "$bin"   # C programs are built afresh for each run
rm -rf "$logs" && mkdir -p "$logs"
list=${MUTANTS_LIST:-$root/tests/mutants.txt}

# The copy: tracked and untracked files, nothing ignored (no target/, no build/).
echo "== copying the tree to $tree"
rm -rf "$tree" && mkdir -p "$tree"
git ls-files -co --exclude-standard -z | xargs -0 cp -p --parents -t "$tree" || exit 1   # -p: mtimes kept, so the copy's build stays fresh

# mutants.py ACTION ...: the list's parser and the file edits (Python for exact text).
py() {
    python3 - "$@" <<'EOF'
import sys
act, lst = sys.argv[1], sys.argv[2]
muts = []
for blk in open(lst).read().split("\n== ")[1:]:
    lines = blk.split("\n")
    name, _, what = lines[0].partition(":")
    m = {"name": name.strip(), "what": what.strip(), "nth": 0, "checks": []}
    for l in lines[1:]:
        key, _, rest = l.partition(" ")
        if key in ("file", "old", "new"):
            m[key] = rest
        elif key == "nth":
            m["nth"] = int(rest)
        elif key == "check":
            m["checks"].append(rest)
    muts.append(m)
if act == "names":
    print("\n".join(m["name"] for m in muts))
elif act == "what":
    print(next(m["what"] for m in muts if m["name"] == sys.argv[3]))
elif act == "checks":
    names = sys.argv[3:] or [m["name"] for m in muts]
    seen = []
    for m in muts:
        if m["name"] in names:
            seen += [c for c in m["checks"] if c not in seen]
    print("\n".join(seen))
elif act == "mutchecks":
    print("\n".join(next(m["checks"] for m in muts if m["name"] == sys.argv[3])))
elif act in ("apply", "file"):
    m = next(m for m in muts if m["name"] == sys.argv[3])
    if act == "file":
        print(m["file"])
        sys.exit(0)
    path = sys.argv[4] + "/" + m["file"]
    s = open(path).read()
    n = s.count(m["old"])
    k = m["nth"] or 1
    if (m["nth"] == 0 and n != 1) or n < k:
        sys.exit(f"{m['name']}: `{m['old'].strip()}` occurs {n} times in {m['file']}")
    i = -1
    for _ in range(k):
        i = s.index(m["old"], i + 1)
    open(path, "w").write(s[:i] + m["new"] + s[i + len(m["old"]):])
EOF
}

names=("${want[@]}")
[ ${#names[@]} -gt 0 ] || mapfile -t names < <(py names "$list")
mapfile -t checks < <(py checks "$list" "${names[@]}")

build() { # into $prefix: the debug library and mpirun, installed
    (cd "$tree" && cargo build --lib --bins -q) >"$logs/build.log" 2>&1 &&
        bash "$tree/scripts/install.sh" --no-build --debug --prefix "$prefix" >>"$logs/build.log" 2>&1
}

# check SPEC LOG: 0 when the check passes
check() {
    local spec=$1 log=$2 kind rest envs=() prog n
    read -r kind rest <<<"$spec"
    case $kind in
        c)
            set -- $rest
            while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
            prog=$1 n=$2; shift 2
            (cd "$bin" && env "${envs[@]}" timeout 300 "$prefix/bin/mpirun" --oversubscribe -n "$n" \
                --timeout 240 "$bin/$prog" "$@") >"$log" 2>&1 && grep -q "^OK $prog" "$log" ;;
        cfail) # PROG NRANKS TEXT: the job must fail and say TEXT
            set -- $rest
            (cd "$bin" && timeout 300 "$prefix/bin/mpirun" --oversubscribe -n "$2" --timeout 240 \
                "$bin/$1") >"$log" 2>&1
            local rc=$?
            [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q -- "$3" "$log" ;;
        unit) (cd "$tree" && cargo test --lib -q -- $rest) >"$log" 2>&1 ;;
        itest)
            set -- $rest
            (cd "$tree" && cargo test -q --test "$1" -- "${@:2}") >"$log" 2>&1 ;;
        *) echo "mutants.sh: unknown check kind in '$spec'" >&2; return 2 ;;
    esac
}

echo "== baseline: every check passes on the unmodified tree"
build || { tail -30 "$logs/build.log"; echo "mutants.sh: the unmodified tree does not build" >&2; exit 1; }
for spec in "${checks[@]}"; do
    read -r kind prog _ <<<"$spec"
    if [ "$kind" = c ] || [ "$kind" = cfail ]; then
        set -- ${spec#c* }
        while [[ $1 == *=* ]]; do shift; done
        [ -x "$bin/$1" ] || "$prefix/bin/mpicc" -O1 -o "$bin/$1" "$root/tests/c/$1.c" || exit 1
    fi
done
bad=0
for spec in "${checks[@]}"; do
    if check "$spec" "$logs/baseline.log"; then echo "   ok   $spec"
    else echo "   FAIL $spec (see $logs/baseline.log)"; tail -5 "$logs/baseline.log"; bad=1; fi
done
[ "$bad" -eq 0 ] || { echo "mutants.sh: checks fail without any mutation" >&2; exit 1; }

caught=0 missed=0
: >"$work/results.txt"
for m in "${names[@]}"; do
    f=$(py file "$list" "$m")
    echo "== $m: $(py what "$list" "$m")"
    t0=$SECONDS
    py apply "$list" "$m" "$tree" || exit 1
    by=() broken=no
    if ! build; then
        broken=yes   # a mutant that does not compile is an error of the list, not a catch
        echo "   the mutant does not build:"; tail -5 "$logs/build.log"
    else
        mapfile -t mc < <(py mutchecks "$list" "$m")
        for spec in "${mc[@]}"; do
            log="$logs/$m.$(echo "$spec" | tr -c 'A-Za-z0-9_.\n' '_').log"
            if check "$spec" "$log"; then
                echo "   passed (missed): $spec"
            else
                echo "   FAILED (caught): $spec"
                by+=("$spec")
                [ "$all_checks" = yes ] || break
            fi
        done
    fi
    cp "$root/$f" "$tree/$f"   # undo
    if [ "$broken" = yes ]; then
        missed=$((missed + 1))
        line="$m: ERROR: does not build (fix tests/mutants.txt)"
    elif [ ${#by[@]} -gt 0 ]; then
        caught=$((caught + 1))
        line="$m: caught by $(IFS=';'; echo "${by[*]}" | sed 's/;/; /g') ($((SECONDS - t0)) s)"
    else
        missed=$((missed + 1))
        line="$m: MISSED by every check ($((SECONDS - t0)) s)"
    fi
    echo "   $line"
    echo "$line" >>"$work/results.txt"
done
build >/dev/null 2>&1
echo
cat "$work/results.txt"
echo "mutants: $caught passed, $missed failed"
[ "$missed" -eq 0 ]
