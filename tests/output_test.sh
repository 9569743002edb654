#!/usr/bin/env bash
# Output targets of tensorize and detensorize -o: what may be replaced
# (regular files, through symbolic links), what is refused before anything
# is written (devices, FIFOs, directories, missing directories, existing
# files without --force), long names, and what signals leave behind.
# Slow writes come from an HTTP origin that stalls mid-body
# (tests/util/faulty_http.py), for tensorize's input and detensorize's:
# every wait polls for a state, none asserts a duration.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
command -v python3 >/dev/null || { echo "python3 missing" >&2; exit 77; }

python3 tests/util/make_safetensors.py "$T/a.safetensors" 1
python3 tests/util/make_safetensors.py "$T/b.safetensors" 2
$TZ -q "$T/a.safetensors" -o "$T/a.tensors" || { echo "FAIL setup: tensorize" ; exit 1; }
$TZ -q "$T/b.safetensors" -o "$T/b.tensors" || { echo "FAIL setup: tensorize" ; exit 1; }

# No hidden temporary file of target NAME in DIR (old and new naming).
no_temp() { ! ls -A "$1" | grep -q "^\.$2\..*tmp"; }
# Poll (at most ~30 s) until DIR holds a temporary file of NAME.
wait_temp() {
    local i
    for i in $(seq 300); do
        ls -A "$1" | grep -q "^\.$2\..*tmp" && return 0
        sleep 0.1
    done
    return 1
}

# ---- non-regular targets: refused before anything is written ----------
mkfifo "$T/fifo"
$TZ -q "$T/a.safetensors" -o "$T/fifo" --force 2> "$T/e"; rc=$?
fifo_ok=0
if [ $rc = 1 ] && [ -p "$T/fifo" ] && grep -q "FIFO" "$T/e" && no_temp "$T" fifo; then fifo_ok=1; fi
check tensorize_fifo_target_refused test $fifo_ok = 1
$DT "$T/a.tensors" -o "$T/fifo" --force 2> "$T/e"; rc=$?
check detensorize_fifo_target_refused sh -c "test $rc = 1 && test -p '$T/fifo' && grep -q FIFO '$T/e'"
# /dev/null only once a FIFO is refused: as root, code that replaces a FIFO
# would replace the device too.
if [ $fifo_ok = 1 ]; then
    $TZ -q "$T/a.safetensors" -o /dev/null --force 2> "$T/e"; rc=$?
    check dev_null_target_refused sh -c "test $rc = 1 && test -c /dev/null && grep -q 'character device' '$T/e'"
    ls -A /dev | grep -q '^\.null\..*tmp' && fail dev_null_no_temp "a temporary file was left in /dev" ||
        pass dev_null_no_temp
else
    fail dev_null_target_refused "not tried: a FIFO target was replaced, /dev/null would be too"
fi

# A directory target fails at once, before the inputs are read.
mkdir "$T/dir"
$TZ -q "$T/a.safetensors" -o "$T/dir" --force 2> "$T/e"; rc=$?
check directory_target_refused sh -c "test $rc = 1 && test -d '$T/dir' && grep -q 'is a directory' '$T/e'"
check directory_target_no_temp no_temp "$T" dir
# Refused before any input is opened: a FIFO input would block otherwise.
mkfifo "$T/fifo2"
timeout 20 $TZ -q "$T/fifo2" -o "$T/dir" --force 2>/dev/null; rc=$?
check directory_target_fails_before_reading test $rc = 1
$TZ -q "$T/a.safetensors" -o "$T/no/such/dir/x.tensors" 2> "$T/e"; rc=$?
check missing_parent_fails sh -c "test $rc = 1 && grep -q 'does not exist' '$T/e'"

# ---- symbolic links are written through -------------------------------
# As a Hugging Face cache: snapshots/x -> ../blobs/HASH.
mkdir -p "$T/hf/blobs" "$T/hf/snap"
cp "$T/a.tensors" "$T/hf/blobs/h1"
ln -s ../blobs/h1 "$T/hf/snap/m.tensors"
$TZ -q "$T/b.safetensors" -o "$T/hf/snap/m.tensors" --force 2> "$T/e"; rc=$?
check symlink_target_written_through sh -c "test $rc = 0 && test -L '$T/hf/snap/m.tensors' &&
    test \"\$(readlink '$T/hf/snap/m.tensors')\" = ../blobs/h1 && cmp -s '$T/hf/blobs/h1' '$T/b.tensors'"
check symlink_no_temp_left sh -c "! ls -A '$T/hf/snap' '$T/hf/blobs' | grep -q '^\..*tmp'"
ln -s ../blobs/h2 "$T/hf/snap/new.safetensors"   # dangling: the blob gets created
$DT "$T/b.tensors" -o "$T/hf/snap/new.safetensors" --force -q 2> "$T/e"; rc=$?
check dangling_symlink_creates_pointee sh -c "test $rc = 0 && test -L '$T/hf/snap/new.safetensors' && test -s '$T/hf/blobs/h2'"

# ---- long names --------------------------------------------------------
long=$(printf 'm%.0s' $(seq 242)).tensors   # 250 characters, legal
$TZ -q "$T/a.safetensors" -o "$T/$long" 2> "$T/e"; rc=$?
check name_250_chars_tensorize sh -c "test $rc = 0 && cmp -s '$T/$long' '$T/a.tensors'"
longs=$(printf 'm%.0s' $(seq 238)).safetensors   # 250 characters
$DT "$T/a.tensors" -o "$T/$longs" -q 2> "$T/e"; rc=$?
check name_250_chars_detensorize sh -c "test $rc = 0 && test -s '$T/$longs'"

# ---- overwrite policy: --force, like zstd -------------------------------
cp "$T/a.tensors" "$T/keep.tensors"
$TZ -q "$T/b.safetensors" -o "$T/keep.tensors" 2> "$T/e"; rc=$?
check existing_target_refused_without_force sh -c "test $rc = 1 && cmp -s '$T/keep.tensors' '$T/a.tensors' &&
    grep -q -- '--force' '$T/e'"
$DT "$T/b.tensors" -o "$T/keep.tensors" -q 2> "$T/e"; rc=$?
check detensorize_existing_refused_without_force sh -c "test $rc = 1 && cmp -s '$T/keep.tensors' '$T/a.tensors'"
$TZ -q "$T/b.safetensors" -o "$T/keep.tensors" --force 2> "$T/e"; rc=$?
check force_replaces sh -c "test $rc = 0 && cmp -s '$T/keep.tensors' '$T/b.tensors'"
# Input == output with --force: safe, the new file is renamed over the old.
cp "$T/a.tensors" "$T/same.tensors"
$TZ -q "$T/same.tensors" -o "$T/same.tensors" --force 2> "$T/e"; rc=$?
check input_is_output_with_force sh -c "test $rc = 0 && cmp -s '$T/same.tensors' '$T/a.tensors'"
$TZ -q "$T/same.tensors" -o "$T/same.tensors" 2>/dev/null; rc=$?
check input_is_output_refused_without_force test $rc = 1
$TZ -q --shards 2 "$T/a.safetensors" -o "$T/sh.tensors" 2>/dev/null; rc=$?
$TZ -q --shards 2 "$T/a.safetensors" -o "$T/sh.tensors" 2> "$T/e"; rc2=$?
check shard_set_refused_without_force sh -c "test $rc = 0 && test $rc2 = 1 && grep -q exists '$T/e'"
$TZ -q --shards 2 "$T/b.safetensors" -o "$T/sh.tensors" --force 2> "$T/e"; rc=$?
check shard_set_force test $rc = 0

# ---- --direct: O_DIRECT block writes, the same bytes ----------------------
"$BUILD/tzr-bench" --make-sample "$T/d.safetensors" --size-mib 16 --layers 2 >/dev/null
$TZ -q "$T/d.safetensors" -o "$T/d-plain.tensors" && $TZ -q --direct "$T/d.safetensors" -o "$T/d-direct.tensors"
check direct_same_bytes cmp "$T/d-plain.tensors" "$T/d-direct.tensors"
$TZ -q --direct --shards 2 "$T/d.safetensors" -o "$T/dsh.tensors" && $TZ -q --shards 2 "$T/d.safetensors" -o "$T/psh.tensors"
check direct_shards_same_bytes sh -c "cmp '$T/dsh-rank-00000-of-00002.tensors' '$T/psh-rank-00000-of-00002.tensors' &&
    cmp '$T/dsh-rank-00001-of-00002.tensors' '$T/psh-rank-00001-of-00002.tensors'"
$TZ -q --direct "$T/d.safetensors" -o s3://b/k.tensors 2> "$T/e"; rc=$?
check direct_needs_local_output sh -c "test $rc = 2 && grep -q 'goes with a local OUT' '$T/e'"

# ---- SIGPIPE: a closed stderr does not stop a write ---------------------
# (The reader of the pipe exits at once; tensorize's summary line then
# meets a closed pipe.)
$TZ "$T/a.safetensors" -o "$T/pipe.tensors" 2>&1 | true
rc=${PIPESTATUS[0]}
check sigpipe_on_stderr_write_completes sh -c "test $rc = 0 && cmp -s '$T/pipe.tensors' '$T/a.tensors'"

# ---- SIGKILL: the next write removes the dead process's temporary -------
# tensorize opens its input from an HTTP origin whose data GETs stall
# mid-body (faulty_http.py "stall": every 2nd GET, the first being the
# header), so it blocks with its output's temporary file open. Each case
# gets a fresh server, so the count starts again.
mkdir -p "$T/slow"
cp "$T/a.safetensors" "$T/slow/a.safetensors"
srv=
stop_server() { [ -n "$srv" ] && { kill $srv 2>/dev/null; wait $srv 2>/dev/null; }; srv=; }
trap 'stop_server; rm -rf "$T"' EXIT
start_blocked() { # TARGET [EXTRA ARGS]: tensorize pid in $pid, blocked mid-write
    local target=$1 i; shift
    stop_server
    rm -f "$T/slow.port"
    python3 tests/util/faulty_http.py "$T/slow" "$T/slow.port" 2>/dev/null &
    srv=$!
    for i in $(seq 100); do [ -s "$T/slow.port" ] && break; sleep 0.1; done
    $TZ -q "http://127.0.0.1:$(cat "$T/slow.port")/stall/a.safetensors" -o "$target" "$@" 2> "$T/sig.err" &
    pid=$!
}
mkdir "$T/k"
start_blocked "$T/k/out.tensors"
if wait_temp "$T/k" out.tensors; then
    kill -KILL $pid; wait $pid 2>/dev/null
    left=$(ls -A "$T/k" | grep -c '^\..*tmp')
    $TZ -q "$T/a.safetensors" -o "$T/k/out.tensors" 2> "$T/e"; rc=$?
    check sigkill_temp_removed_by_next_write sh -c "test $left = 1 && test $rc = 0 && ! ls -A '$T/k' | grep -q '^\..*tmp'"
else
    kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
    fail sigkill_temp_removed_by_next_write "tensorize never created its temporary file"
fi

# ---- two writers to one new target: without --force the later never
# replaces the earlier. The first tensorize is held mid-write by its input
# (faulty_http.py "gate": the data GET waits for DIR/gate.open); a second
# one writes the target meanwhile; then the gate opens and the first
# finishes: its no-replace rename fails "exists", its temporary removed.
mkdir "$T/race"
stop_server
rm -f "$T/slow.port" "$T/slow/gate.open"
python3 tests/util/faulty_http.py "$T/slow" "$T/slow.port" 2>/dev/null &
srv=$!
for i in $(seq 100); do [ -s "$T/slow.port" ] && break; sleep 0.1; done
$TZ -q "http://127.0.0.1:$(cat "$T/slow.port")/gate/a.safetensors" -o "$T/race/out.tensors" 2> "$T/race1.err" &
pid=$!
if wait_temp "$T/race" out.tensors; then
    $TZ -q "$T/b.safetensors" -o "$T/race/out.tensors" 2> "$T/race2.err"; rc2=$?
    touch "$T/slow/gate.open"
    wait $pid; rc1=$?
    check second_writer_not_replaced sh -c "test $rc2 = 0 && test $rc1 = 1 && grep -q 'out.tensors exists' '$T/race1.err' &&
        cmp '$T/race/out.tensors' '$T/b.tensors' && ! ls -A '$T/race' | grep -q '^\..*tmp'"
else
    kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
    fail second_writer_not_replaced "tensorize never created its temporary file"
fi
stop_server

# ---- the same for shard sets. gate_run DIR WAIT-NAME ARGS...: a tensorize
# from the gated origin (pid in $pid), held once WAIT-NAME's temporary is in DIR.
gate_run() {
    local dir=$1 name=$2 i; shift 2
    stop_server
    rm -f "$T/slow.port" "$T/slow/gate.open"
    python3 tests/util/faulty_http.py "$T/slow" "$T/slow.port" 2>/dev/null &
    srv=$!
    for i in $(seq 100); do [ -s "$T/slow.port" ] && break; sleep 0.1; done
    $TZ -q "http://127.0.0.1:$(cat "$T/slow.port")/gate/a.safetensors" "$@" 2> "$dir.err" &
    pid=$!
    wait_temp "$dir" "$name" && return 0
    kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
    return 1
}
# A held 2-shard run and a 3-shard run to one new OUT: other shard names,
# one manifest name. The manifest the other run published is kept; the
# loser fails "exists" (at the header digests file, published just before
# the manifest) and removes the shards and sidecars it published, so no
# half of its set lies beside the winner's.
mkdir "$T/srace"
if gate_run "$T/srace" ck-rank-00000-of-00002.tensors --shards 2 -o "$T/srace/ck.tensors"; then
    $TZ -q "$T/b.safetensors" --shards 3 -o "$T/srace/ck.tensors" 2> "$T/srace2.err"; rc2=$?
    touch "$T/slow/gate.open"
    wait $pid; rc1=$?
    check shard_manifest_second_writer_not_replaced sh -c "test $rc2 = 0 && test $rc1 = 1 &&
        grep -q 'ck.tzr-hashes exists' '$T/srace.err' && grep -q '\"shard_count\": 3' '$T/srace/ck.tzr-index.json'"
    check shard_manifest_loser_leaves_nothing test "$(ls -A "$T/srace" | tr '\n' ' ')" = \
        "ck-rank-00000-of-00003.tensors ck-rank-00001-of-00003.tensors ck-rank-00002-of-00003.tensors ck.tzr-hashes ck.tzr-index.json "
    $DT "$T/srace/ck.tzr-index.json" --verify > /dev/null 2> "$T/srace3.err"
    check shard_manifest_winner_verifies test $? = 0
else
    fail shard_manifest_second_writer_not_replaced "tensorize never created its temporary file"
fi
# A shard file another run published while this set was written: the
# shards published before it are removed again (rank 0 here).
mkdir "$T/vrace"
if gate_run "$T/vrace" m-000.tensors --shards 2 --names vllm -o "$T/vrace/m-%03d.tensors"; then
    $TZ -q "$T/b.safetensors" -o "$T/vrace/m-001.tensors" 2> "$T/vrace2.err"; rc2=$?
    touch "$T/slow/gate.open"
    wait $pid; rc1=$?
    check shard_lost_publish_removes_published sh -c "test $rc2 = 0 && test $rc1 = 1 &&
        grep -q 'm-001.tensors exists' '$T/vrace.err' && test \"\$(ls -A '$T/vrace')\" = m-001.tensors &&
        cmp '$T/vrace/m-001.tensors' '$T/b.tensors'"
else
    fail shard_lost_publish_removes_published "tensorize never created its temporary file"
fi
stop_server

# ---- SIGINT / SIGTERM / SIGHUP: temp removed, message says what was kept
sigcase() { # SIGNAL EXIT-STATUS PREEXISTING(0/1)
    local sig=$1 want=$2 pre=$3 d="$T/s_$1_$3" rc
    mkdir "$d"
    if [ "$pre" = 1 ]; then cp "$T/b.tensors" "$d/out.tensors"; fi
    start_blocked "$d/out.tensors" --force
    if ! wait_temp "$d" out.tensors; then
        kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
        fail "tensorize_${sig}_pre$pre" "no temporary file appeared"
        return
    fi
    kill -"$sig" $pid
    timeout 20 sh -c "while kill -0 $pid 2>/dev/null; do sleep 0.05; done"
    wait $pid; rc=$?
    local kept=".*out.tensors not created"
    [ "$pre" = 1 ] && kept="existing .*out.tensors left untouched"
    if [ $rc != "$want" ]; then fail "tensorize_${sig}_pre$pre" "exit $rc, want $want"
    elif ! no_temp "$d" out.tensors; then fail "tensorize_${sig}_pre$pre" "temporary file left: $(ls -A "$d")"
    elif ! grep -q "interrupted by SIG$sig: nothing written, $kept" "$T/sig.err"; then
        fail "tensorize_${sig}_pre$pre" "message: $(cat "$T/sig.err")"
    elif [ "$pre" = 1 ] && ! cmp -s "$d/out.tensors" "$T/b.tensors"; then
        fail "tensorize_${sig}_pre$pre" "existing output changed"
    elif [ "$pre" = 0 ] && [ -e "$d/out.tensors" ]; then
        fail "tensorize_${sig}_pre$pre" "output created"
    else pass "tensorize_${sig}_pre$pre"; fi
}
sigcase INT 130 0
sigcase TERM 143 1
sigcase HUP 129 1
sigcase HUP 129 0
stop_server

# ---- disk full / file size limit with the writer's threads in flight ------
# One clear message, nothing at the target (or the old file untouched), no
# temporary left, for a plain write and for --shards. RLIMIT_FSIZE (EFBIG)
# works everywhere; a real full file system (ENOSPC) needs a tmpfs mount
# (root), and is skipped without one.
"$BUILD/tzr-bench" --make-sample "$T/big.safetensors" --size-mib 16 --layers 2 >/dev/null
mkdir "$T/lim"
cp "$T/b.tensors" "$T/lim/out.tensors"
(ulimit -f 4096; exec $TZ -q "$T/big.safetensors" -o "$T/lim/out.tensors" --force) 2> "$T/e"; rc=$?
check fsize_limit_fails_cleanly sh -c "test $rc = 1 && grep -q 'File too large' '$T/e' && grep -q 'big.safetensors\|out.tensors' '$T/e' &&
    cmp -s '$T/lim/out.tensors' '$T/b.tensors' && ! ls -A '$T/lim' | grep -q tmp"
full_case() { # NAME ARGS...: tensorize into the 6 MiB tmpfs $T/full
    local name=$1; shift
    cp "$T/b.tensors" "$T/full/out.tensors"
    $TZ -q "$T/big.safetensors" --force "$@" 2> "$T/e"; rc=$?
    local left
    left=$(ls -A "$T/full" | grep -v '^out.tensors$' | tr '\n' ' ')
    if [ $rc != 1 ]; then fail "$name" "exit $rc, want 1"
    elif ! grep -q 'No space left on device' "$T/e"; then fail "$name" "message: $(head -c 300 "$T/e")"
    elif ! cmp -s "$T/full/out.tensors" "$T/b.tensors"; then fail "$name" "existing output changed"
    elif [ -n "$left" ]; then fail "$name" "left behind: $left"
    else pass "$name"; fi
}
mkdir "$T/full"
if mount -t tmpfs -o size=6m tmpfs "$T/full" 2>/dev/null; then
    full_case disk_full_fails_cleanly -o "$T/full/out.tensors"
    full_case disk_full_shards_fail_cleanly -o "$T/full/s.tensors" --shards 2
    umount "$T/full"
else
    skip disk_full_fails_cleanly "cannot mount a small tmpfs here (needs root)"
    skip disk_full_shards_fail_cleanly "cannot mount a small tmpfs here (needs root)"
fi

# detensorize -o from an HTTP origin whose data GET stalls mid-body: the
# "stall" mode stalls every 2nd GET, the first being the header and index,
# so each case gets a fresh server.
mkdir "$T/www"
cp "$T/a.tensors" "$T/www/a.tensors"
n=0
for sig in TERM INT HUP; do
    n=$((n + 1))
    rm -f "$T/port"
    python3 tests/util/faulty_http.py "$T/www" "$T/port" 2>/dev/null &
    srv=$!
    for i in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.1; done
    if [ ! -s "$T/port" ]; then
        skip "detensorize_$sig" "faulty_http.py did not start"
        kill $srv 2>/dev/null; wait $srv 2>/dev/null
        continue
    fi
    d="$T/d$n"; mkdir "$d"
    [ $sig = INT ] && cp "$T/b.tensors" "$d/out.safetensors"   # an existing output stays as it was
    $DT "http://127.0.0.1:$(cat "$T/port")/stall/a.tensors" -o "$d/out.safetensors" --force -q 2> "$T/dsig.err" &
    pid=$!
    if ! wait_temp "$d" out.safetensors; then
        kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
        fail "detensorize_$sig" "no temporary file appeared: $(head -c 300 "$T/dsig.err")"
    else
        kill -$sig $pid
        timeout 20 sh -c "while kill -0 $pid 2>/dev/null; do sleep 0.05; done"
        wait $pid; rc=$?
        want=$((128 + $(kill -l $sig)))
        kept=".*out.safetensors not created"; [ $sig = INT ] && kept="existing .*out.safetensors left untouched"
        if [ $rc != $want ]; then fail "detensorize_$sig" "exit $rc, want $want: $(cat "$T/dsig.err")"
        elif ! no_temp "$d" out.safetensors; then fail "detensorize_$sig" "temporary file left: $(ls -A "$d")"
        elif ! grep -q "interrupted by SIG$sig: nothing written, $kept" "$T/dsig.err"; then
            fail "detensorize_$sig" "message: $(cat "$T/dsig.err")"
        elif [ $sig = INT ] && ! cmp -s "$d/out.safetensors" "$T/b.tensors"; then
            fail "detensorize_$sig" "existing output changed"
        else pass "detensorize_$sig"; fi
    fi
    kill $srv 2>/dev/null; wait $srv 2>/dev/null
done
exit 0
