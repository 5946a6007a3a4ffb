#!/usr/bin/env bash
# files.sh: every local-file exporter (text, pprof, flamegraph) writes
# through the safe opener: with umask 000 the files are 0600 and the
# directory the agent creates 0700; a symlink planted at the output
# directory, or at a file name, is not followed (the target is untouched),
# the refusal is said in a line and the lost data are counted.
#
#   files.sh <otlp_driver>
set -u
driver=$1
base=$(mktemp -d)
trap 'rm -rf "$base"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

run() { # run <name> <output dir>
  (umask 000
   env -i PATH="$PATH" ${LSAN_OPTIONS:+LSAN_OPTIONS=$LSAN_OPTIONS} \
     ${TSAN_OPTIONS:+TSAN_OPTIONS=$TSAN_OPTIONS} \
     SPLUNK_PROFILER_ENABLED=true SPLUNK_PROFILER_CALL_STACK_INTERVAL=100 \
     STACKSHOT_EXPORTERS=text,pprof,flamegraph STACKSHOT_PROFILES_PERIOD=1 \
     STACKSHOT_FLAMEGRAPH_VIEW=wall STACKSHOT_OUTPUT_DIR="$2" STACKSHOT_SHUTDOWN_TIMEOUT=1000 \
     PLANT="${3:-}" VICTIM="$base/victim" \
     sh -c '[ -z "$PLANT" ] || ln -s "$VICTIM" "$PLANT/otlp_driver.$$.txt"; exec "$0" 3 3' \
     "$driver" >"$base/$1.out" 2>"$base/$1.err")
  local rc=$?
  [ $rc -eq 0 ] || { bad "$1: driver exit $rc"; cat "$base/$1.err"; }
}

# 1. fresh directory, umask 000
out="$base/new/out"
run fresh "$out"
mode=$(stat -c %a "$out"); [ "$mode" = 700 ] || bad "output dir mode $mode, want 700"
mode=$(stat -c %a "$base/new"); [ "$mode" = 700 ] || bad "parent dir mode $mode, want 700"
n=0
for f in "$out"/*; do
  n=$((n + 1))
  mode=$(stat -c %a "$f"); [ "$mode" = 600 ] || bad "$(basename "$f") mode $mode, want 600"
done
for suffix in .txt .pb.gz .collapsed .html; do
  ls "$out" | grep -q -- "$suffix\$" || bad "no *$suffix file written (ls: $(ls "$out"))"
done
echo "fresh: $n files, all 0600 in a 0700 directory"

# 2. the output directory is a symlink to a directory elsewhere
mkdir "$base/elsewhere"
ln -s "$base/elsewhere" "$base/linked"
run dirlink "$base/linked"
[ -z "$(ls -A "$base/elsewhere")" ] || bad "files written through the directory symlink: $(ls "$base/elsewhere")"
grep -q "output directory $base/linked is a symbolic link; not following it" "$base/dirlink.err" ||
  { bad "no line about the directory symlink"; cat "$base/dirlink.err"; }
lines=$(grep -c "is a symbolic link" "$base/dirlink.err")
[ "$lines" -eq 1 ] || bad "$lines symlink lines, want 1 (repeats at debug level)"
# the text file is created at the first write: refused then, and every
# round after is counted lost (the exporter tries again each round)
grep -qE "text: rounds [0-9]+ taken = [^;]*; records [0-9]+ taken = 0 exported \+ [1-9][0-9]* dropped \+ [0-9]+ rejected; [0-9]+ retries, [1-9][0-9]* failures" "$base/dirlink.err" ||
  { bad "text's lost data not counted"; grep text "$base/dirlink.err"; }
grep -qE "pprof: rounds [0-9]+ taken = [^;]*; records [0-9]+ taken = 0 exported \+ [1-9][0-9]* dropped \+ [0-9]+ rejected; [0-9]+ retries, [1-9][0-9]* failures" "$base/dirlink.err" ||
  { bad "pprof's lost data not counted"; grep pprof "$base/dirlink.err"; }
echo "dirlink: refused, said once, counted"

# 3. a symlink at the text file's name, to a file of ours elsewhere
out3="$base/out3"; mkdir -m 700 "$out3"
echo precious > "$base/victim"; chmod 644 "$base/victim"
# the shell that execs the driver plants the link at the name its pid gives
run namelink "$out3" "$out3"
[ -L "$out3/$(ls "$out3" | grep '\.txt$')" ] || bad "no planted link (test setup)"
[ "$(cat "$base/victim")" = precious ] || bad "the symlink's target was written"
[ "$(stat -c %a "$base/victim")" = 644 ] || bad "the symlink's target mode changed"
grep -q "otlp_driver.[0-9]*.txt is a symbolic link; not following it, not writing" "$base/namelink.err" ||
  { bad "no line about the file symlink"; cat "$base/namelink.err"; }
ls "$out3" | grep -q '\.pb\.gz$' || bad "pprof (another name) was not written"
echo "namelink: refused, the target untouched"
exit $fail
