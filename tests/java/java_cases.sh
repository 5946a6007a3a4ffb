#!/usr/bin/env bash
# Java agent cases that need no jstack comparison:
#   java_cases.sh <case> <java_home> <libstackshot.so> <classes dir>
# cases:
#   bad_option   a bad option string prints one line per bad item, the JVM
#                runs normally and the agent still samples with the good ones
#   disabled     without SPLUNK_PROFILER_ENABLED=true the agent starts no
#                thread (no "stackshot-" in /proc comm nor in jstack) and
#                writes nothing; the same run enabled shows the thread
#                (so the check can fail)
#   shutdown     at exit (VMDeath) every round taken reaches the file: the
#                text exporter's closing counters equal the rounds in it,
#                and exit is not held up (generous bound: 5 s over the run)
#   depth        STACKSHOT_MAX_DEPTH=10: the 40-deep recursive thread keeps its
#                10 leaf-side frames and ends with the truncation marker
#   vthreads     JDK 21+, STACKSHOT_MAX_VIRTUAL_THREADS=100 and 2000 virtual
#                threads: rounds hold exactly 100 of them and count 1900 as
#                skipped; once those end and 50 new ones start, rounds hold
#                the 50 and skip none (VirtualThreadEnd frees the slots)
#   redefine     RedefTarget.nap redefined (java.lang.instrument) while
#                sampled, STACKSHOT_JVMTI_REFRESH=1: early rounds print it at
#                Redef.java:51, the last ones at RedefTarget.java:16
#   churn        classes loaded and unloaded in a loop (custom loaders, GC),
#                sampled every 10 ms for STACKSHOT_CHURN_SECONDS (default 20)
#                without a crash, frames of the churned classes resolved
set -uo pipefail
case_=$1 jh=$2 lib=$3 classes=$4
java=$jh/bin/java
tmp=$(mktemp -d /tmp/ss-java-case.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
unset SPLUNK_PROFILER_ENABLED SPLUNK_PROFILER_CALL_STACK_INTERVAL STACKSHOT_OUTPUT_DIR \
      STACKSHOT_LOG_LEVEL STACKSHOT_EXPORTERS SPLUNK_PROFILER_INCLUDE_INTERNAL_STACKS
export STACKSHOT_EXPORTERS=text # these cases read the thread-dump text file
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Start the demo in the background; wait for "ready". Sets $pid.
start_demo() {
    local seconds=$1; shift
    "$java" "$@" -cp "$classes" Demo "$seconds" >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    for _ in $(seq 1 300); do
        grep -q '^ready' "$tmp/out" 2>/dev/null && return 0
        sleep 0.1
    done
    fail "demo did not get ready: $(cat "$tmp/err")"
    return 1
}

agent_threads() { # names of stackshot threads of $pid, from /proc
    cat /proc/"$pid"/task/*/comm 2>/dev/null | grep -c '^stackshot-' || true
}

case $case_ in
preload)
    # LD_PRELOAD alone (with SPLUNK_PROFILER_ENABLED=true): the JVM loads
    # the agent through JAVA_TOOL_OPTIONS and samples its Java threads
    # exactly once; with -agentpath given too, or JAVA_TOOL_OPTIONS already
    # naming it, still once; other JAVA_TOOL_OPTIONS are kept
    for how in alone agentpath tool_options other_options; do
        rm -rf "$tmp/o"
        args=(-cp "$classes" Demo 2)
        envs=(SPLUNK_PROFILER_ENABLED=true SPLUNK_PROFILER_CALL_STACK_INTERVAL=200
              STACKSHOT_OUTPUT_DIR=$tmp/o "LD_PRELOAD=$lib")
        case $how in
        agentpath) args=("-agentpath:$lib" "${args[@]}") ;;
        tool_options) envs+=("JAVA_TOOL_OPTIONS=-agentpath:$lib") ;;
        other_options) envs+=("JAVA_TOOL_OPTIONS=-Dss.marker=kept") ;;
        esac
        env "${envs[@]}" "$java" "${args[@]}" >"$tmp/out" 2>"$tmp/err"
        rc=$?
        [ $rc -eq 0 ] || fail "$how: JVM exit code $rc: $(cat "$tmp/err")"
        grep -q '^ready' "$tmp/out" || fail "$how: demo did not run"
        starts=$(grep -c 'stackshot: started in pid .* (jvmti sampler' "$tmp/err")
        [ "$starts" -eq 1 ] || fail "$how: $starts JVMTI starts (want 1): $(cat "$tmp/err")"
        ! grep -q 'native sampler' "$tmp/err" || fail "$how: the native sampler started in a JVM"
        files=$(ls "$tmp"/o 2>/dev/null | wc -l)
        [ "$files" -eq 1 ] || fail "$how: $files output files (want 1): $(ls "$tmp/o")"
        grep -q 'at Demo.sleeper(Demo.java:' "$tmp"/o/java.*.txt 2>/dev/null ||
            fail "$how: no Java frames sampled"
        loads=$(grep -o -- "-agentpath:[^ ]*" "$tmp/err" | grep -c stackshot || true)
        case $how in
        alone|other_options) [ "$loads" -eq 1 ] || fail "$how: -agentpath picked up $loads times" ;;
        esac
        if [ $how = other_options ]; then
            grep -q 'Picked up JAVA_TOOL_OPTIONS: -Dss.marker=kept -agentpath:' "$tmp/err" ||
                fail "other_options: the host's JAVA_TOOL_OPTIONS not kept: $(grep Picked "$tmp/err")"
        fi
        echo "$how: $starts start, $files file, $(grep -c '^Full thread dump' "$tmp"/o/java.*.txt) rounds"
    done
    ;;
bad_option)
    # (a comma splits only before KEY=: "garbage" must come first to be an item)
    opts="garbage,SPLUNK_PROFILER_ENABLED=true,NOT_A_KEY=1,SPLUNK_PROFILER_CALL_STACK_INTERVAL=abc,STACKSHOT_OUTPUT_DIR=$tmp/o"
    "$java" "-agentpath:$lib=$opts" -cp "$classes" Demo 2 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "JVM exit code $rc"
    grep -q '^ready' "$tmp/out" || fail "demo did not run"
    grep '^stackshot: ' "$tmp/err" | grep -v -e 'started in pid' -e 'text: ' -e 'jvmti: ' -e ' memory: peak' >"$tmp/lines"
    cat "$tmp/lines"
    expect=$(printf '%s\n' \
        "stackshot: option 'garbage': expected key=value; ignoring it" \
        "stackshot: option 'NOT_A_KEY': unknown key; ignoring it" \
        "stackshot: SPLUNK_PROFILER_CALL_STACK_INTERVAL=abc: not an integer; using 1000")
    [ "$(cat "$tmp/lines")" = "$expect" ] || fail "expected exactly these lines:
$expect"
    grep -q 'at Demo.sleeper(Demo.java:' "$tmp"/o/java.*.txt 2>/dev/null ||
        fail "the agent did not sample with the good options"
    # disabled and a bad option: still one line, still runs
    "$java" "-agentpath:$lib=bogus" -cp "$classes" Demo 1 >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 0 ] || fail "JVM with a bare bad option failed"
    [ "$(grep -c '^stackshot: ' "$tmp/err")" -eq 1 ] || fail "bare bad option: $(cat "$tmp/err")"
    ;;
disabled)
    start_demo 30 "-agentpath:$lib=STACKSHOT_OUTPUT_DIR=$tmp/off" || exit 1
    sleep 0.5
    n=$(agent_threads)
    [ "$n" -eq 0 ] || fail "disabled agent runs $n stackshot threads"
    "$jh/bin/jstack" "$pid" >"$tmp/jstack"
    grep -q '"main"' "$tmp/jstack" || fail "jstack did not work"
    ! grep -q '"stackshot-' "$tmp/jstack" || fail "jstack shows a stackshot thread"
    [ ! -e "$tmp/off" ] || fail "disabled agent created $tmp/off"
    [ ! -s "$tmp/err" ] || fail "disabled agent printed: $(cat "$tmp/err")"
    kill "$pid"; wait "$pid" 2>/dev/null
    # control: enabled, the thread is there
    export SPLUNK_PROFILER_ENABLED=true
    start_demo 30 "-agentpath:$lib=STACKSHOT_OUTPUT_DIR=$tmp/on" || exit 1
    sleep 0.5
    [ "$(agent_threads)" -gt 0 ] || fail "control: enabled agent shows no stackshot thread"
    "$jh/bin/jstack" "$pid" | grep -q '"stackshot-sampler"' ||
        fail "control: jstack does not show stackshot-sampler"
    kill "$pid"; wait "$pid" 2>/dev/null
    ;;
shutdown)
    t0=$(date +%s%N)
    SPLUNK_PROFILER_ENABLED=true SPLUNK_PROFILER_CALL_STACK_INTERVAL=20 \
        STACKSHOT_SHUTDOWN_TIMEOUT=1000 STACKSHOT_OUTPUT_DIR=$tmp/o STACKSHOT_LOG_LEVEL=debug \
        "$java" "-agentpath:$lib" -cp "$classes" Demo 2 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    [ $rc -eq 0 ] || fail "JVM exit code $rc"
    f=$(ls "$tmp"/o/java.*.txt 2>/dev/null | head -1)
    rounds=$(grep -c '^Full thread dump' "$f" 2>/dev/null || echo 0)
    line=$(grep 'accounting: .*text: rounds' "$tmp/err" | tail -1) # the exit's line (debug)
    echo "$line; $rounds rounds in the file; JVM ran $ms ms"
    [ "$rounds" -gt 20 ] || fail "only $rounds rounds"
    echo "$line" | grep -q "($rounds in, 0 dropped queued, [0-9]* consumed); records [0-9]* taken = [0-9]* exported + 0 dropped" ||
        fail "exporter counters ($line) do not match the $rounds rounds in the file"
    [ "$ms" -lt 9000 ] || fail "the JVM took $ms ms for a 2 s run"
    ;;
depth)
    SPLUNK_PROFILER_ENABLED=true SPLUNK_PROFILER_CALL_STACK_INTERVAL=100 \
        STACKSHOT_MAX_DEPTH=10 STACKSHOT_OUTPUT_DIR=$tmp/o \
        "$java" "-agentpath:$lib" -cp "$classes" Demo 1 >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 0 ] || fail "JVM failed: $(cat "$tmp/err")"
    f=$(ls "$tmp"/o/java.*.txt 2>/dev/null | head -1)
    # the last round's "recursive" block
    awk '/^Full thread dump/ {b=""} {b = b $0 "\n"} END {printf "%s", b}' "$f" |
        awk '/^"recursive"/ {on=1} on && /^$/ {exit} on' >"$tmp/rec"
    cat "$tmp/rec"
    [ "$(grep -c $'^\tat ' "$tmp/rec")" -eq 11 ] || fail "expected 10 frames and the marker"
    sed -n 3p "$tmp/rec" | grep -q 'at java.lang.Thread.sleep' || fail "leaf frame is not Thread.sleep"
    tail -1 "$tmp/rec" | grep -qx $'\tat stackshot.truncated(STACKSHOT_MAX_DEPTH:10)' ||
        fail "no truncation marker"
    ;;
vthreads)
    # exact thread counts: the VM's own threads (sampled natively) left out
    SPLUNK_PROFILER_ENABLED=true SPLUNK_PROFILER_CALL_STACK_INTERVAL=100 \
        STACKSHOT_JAVA_VM_THREADS=false \
        STACKSHOT_MAX_VIRTUAL_THREADS=100 STACKSHOT_OUTPUT_DIR=$tmp/o \
        "$java" "-agentpath:$lib" -cp "$classes" VThreads 2000 >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 0 ] || fail "JVM failed: $(cat "$tmp/err")"
    f=$(ls "$tmp"/o/java.*.txt 2>/dev/null | head -1)
    # per round: header, then the count of virtual threads in nap / nap2
    awk '/^Full thread dump/ {if (h) print h " nap=" a " nap2=" b; h=$0; a=0; b=0}
         /at VThreads.nap\(/ {a++} /at VThreads.nap2\(/ {b++}
         END {print h " nap=" a " nap2=" b}' "$f" >"$tmp/rounds"
    grep -q '(pid [0-9]*, 101 threads, 1900 skipped) nap=100 nap2=0$' "$tmp/rounds" ||
        fail "no round with 100 tracked and 1900 skipped virtual threads"
    # phase 3: the first 100 are gone, the 50 new ones all tracked (the
    # very last round may come while they end, so any round of phase 3)
    sed -n '/nap=100 /,$p' "$tmp/rounds" |
        grep -q '(pid [0-9]*, 51 threads, 0 skipped) nap=0 nap2=50$' ||
        fail "no round after the first 100 with the 50 new ones: $(tail -3 "$tmp/rounds")"
    grep -c 'nap=100' "$tmp/rounds" | sed 's/^/rounds with the first 100: /'
    tail -1 "$tmp/rounds"
    ;;
redefine)
    src=$(cd "$(dirname "$0")" && pwd)
    mkdir -p "$tmp/v2" "$tmp/jar"
    "$jh/bin/javac" -cp "$classes" -d "$tmp/v2" "$src/redef-v2/RedefTarget.java" ||
        { fail "javac v2"; exit 1; }
    printf 'Premain-Class: Redef\nCan-Redefine-Classes: true\n' >"$tmp/manifest"
    cp "$classes/Redef.class" "$tmp/jar/"
    "$jh/bin/jar" cfm "$tmp/agent.jar" "$tmp/manifest" -C "$tmp/jar" Redef.class ||
        { fail "jar"; exit 1; }
    SPLUNK_PROFILER_ENABLED=true SPLUNK_PROFILER_CALL_STACK_INTERVAL=100 \
        STACKSHOT_JVMTI_REFRESH=1 STACKSHOT_OUTPUT_DIR=$tmp/o \
        "$java" "-javaagent:$tmp/agent.jar" "-agentpath:$lib" -cp "$classes" \
        Redef "$tmp/v2/RedefTarget.class" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 0 ] || fail "JVM failed: $(cat "$tmp/err")"
    grep -q '^redefined' "$tmp/out" || fail "the class was not redefined"
    f=$(ls "$tmp"/o/java.*.txt 2>/dev/null | head -1)
    # the frame of RedefTarget.nap in each round's main thread, in order
    awk '/^"main"/ {on=1} on && /at RedefTarget.nap\(/ {print; on=0} /^$/ {on=0}' "$f" |
        uniq -c >"$tmp/naps"
    cat "$tmp/naps"
    head -1 "$tmp/naps" | grep -q 'at RedefTarget.nap(Redef.java:51)$' ||
        fail "before the redefinition: not Redef.java:51"
    tail -1 "$tmp/naps" | grep -q 'at RedefTarget.nap(RedefTarget.java:16)$' ||
        fail "after the redefinition: not RedefTarget.java:16"
    ;;
churn)
    secs=${STACKSHOT_CHURN_SECONDS:-20}
    SPLUNK_PROFILER_ENABLED=true SPLUNK_PROFILER_CALL_STACK_INTERVAL=10 \
        STACKSHOT_OUTPUT_DIR=$tmp/o \
        "$java" -Xlog:class+unload=info:file="$tmp/unload.log" "-agentpath:$lib" \
        -cp "$classes" ClassChurn "$secs" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    cat "$tmp/out"
    [ $rc -eq 0 ] || fail "JVM exit code $rc: $(tail -5 "$tmp/err")"
    unloaded=$(grep -c ChurnPayload "$tmp/unload.log" || true)
    [ "$unloaded" -gt 100 ] || fail "only $unloaded classes unloaded: the test tests nothing"
    f=$(ls "$tmp"/o/java.*.txt 2>/dev/null | head -1)
    rounds=$(grep -c '^Full thread dump' "$f" 2>/dev/null || echo 0)
    [ "$rounds" -gt $((secs * 20)) ] || fail "only $rounds rounds in ${secs}s at 10 ms"
    grep -q 'at ChurnPayload.descend(ClassChurn.java:' "$f" ||
        fail "no resolved ChurnPayload frame"
    ! grep -v 'text: rounds' "$tmp/err" | grep -i '^stackshot: .*\(error\|warn\|fail\)' ||
        fail "agent complained"
    echo "unloaded $unloaded classes, $rounds rounds, $(grep -c 'unknown.unknown' "$f") frames of unloaded methods"
    ;;
*)
    echo "unknown case $case_"; exit 2 ;;
esac
[ $fails -eq 0 ] && echo "OK: $case_" || { echo "$fails failure(s)"; exit 1; }
