#!/usr/bin/env bash
# make bench: the exporter's cost, measured side by side in one run.
#  1. fio 4k random I/O on a host file (psync, one thread): no tracer,
#     fspair_exporter following the file in each probe mode this kernel runs
#     (MODES, default: fentry where it has trampolines, tracepoint, syscall),
#     BCC's libbpf-tools (biolatency+biopattern+bitesize) instead.
#     randread-direct goes to the device (O_DIRECT: the block-layer probes'
#     case); randread and randwrite are served by the page cache (the highest
#     rate a file sustains here). Runs alternate and repeat; the median is
#     reported. Then the I/O fspair does not follow (WORKLOADS' @other and
#     @noimage rows): the same fio on an untracked file beside the tracked
#     one (same file system: its hooks fire, the filters must send it away)
#     and on an XFS that holds no image (a loop device backed by /dev/shm,
#     so that its I/O reaches no other host file system). Every run starts
#     settled: its file synced and dropped from the page cache
#     (POSIX_FADV_DONTNEED, the host's other caches left alone), a
#     page-cache workload's file read back. Then the tax on an unrelated
#     system call: a getppid loop (tests/matrix/csrc/getppid.c, as the guest
#     bench runs it) under each of the same configurations. IOPS_VARIANTS
#     replaces the configurations (default: none, MODES, libbpf-tools);
#     MODE@TAG there runs the exporter binary BIN_TAG names in that mode,
#     so that two builds are timed in one run.
#  2. ns per event of every BPF program, from bpf_stats (--probe.stats),
#     over one direct random-read run and one random-write run that syncs
#     every 16 writes: fspair's programs in each mode, then libbpf-tools'
#     programs on the same runs, then the floor on this machine (an empty
#     tp_btf program, one that counts, one that reads the clock: bench/floor).
#     The kernel matrix's part (PARTS=kernel, tests/matrix) measures the
#     same rows in a guest booting Debian 12's 6.1 kernel, which has the
#     trampolines this host lacks.
#  3. scrape time, exporter RSS and series at 10, 100, 1000 and 10,000
#     tracked disks (SCRAPE_DISKS), each in the text format (classic
#     histograms) and in protobuf as Prometheus 3 asks for it with
#     scrape_native_histograms (--histograms=native): a fresh exporter per
#     format, so that each RSS is its own; series counted as Prometheus
#     stores them (bench/series); SCRAPE_FORMATS (default "text proto")
#     picks the formats. The exporter runs in the syscall probe
#     mode there, so that every histogram has data (the worst case), with
#     --memory-limit=SCRAPE_MEMORY_LIMIT (default auto: the limit follows
#     the live heap, README "Memory"). SCRAPE_GUEST lists the guest sides to
#     measure, in its order for each format: none (the default: no source,
#     fspair_disk_guest_info alone) and qmp (every disk's VM has a QMP
#     monitor, served by bench/fakeqmp: a typical guest's reads, writes and
#     flushes, no discards, and the latency histograms the exporter sets;
#     the exporter reads them every --guest.interval, 5 s, through the
#     scrapes, and the row waits until every disk has its histograms).
#     SCRAPE_GUEST_INTERVAL sets another --guest.interval for the qmp rows
#     (e.g. 1h: the poll's first round only, before the timed scrapes);
#     bench/fakeqmp then starts with the histograms already set, as a
#     QEMU keeps them from an exporter before, so that the first round has
#     them.
#     The 20 timed scrapes follow each other at once, as a burst of
#     scrapers would; SCRAPE_PAUSE (seconds, default 0) waits between
#     them, as one Prometheus scraping every interval does (the guest poll
#     gives way to a scrape for at most a fifth of its interval a round,
#     which a burst spends).
#     Before each row's scrapes, POLL_WINDOW seconds (60) without scrapes:
#     the exporter's CPU then, its background work, and with the poll
#     running its CPU a poll (per VM a round: the query-blockstats
#     bench/fakeqmp answered meanwhile).
#  4. what Prometheus itself spends to ingest one host's exporter at
#     INGEST_DISKS tracked disks (default 1000), scraping every 15 s, in
#     each histogram mode (INGEST_MODES): classic (the pinned Prometheus 3
#     of scripts/promstack.sh, or FSPAIR_PROMETHEUS as for tests/alerting;
#     text format, --histograms=classic), native (the
#     same Prometheus with scrape_native_histograms: true, protobuf,
#     --histograms=native) and classic-2.42 (Debian's Prometheus 2.42, text;
#     where /usr/bin/prometheus is installed). Per mode a fresh exporter set
#     up as in part 3 and a fresh Prometheus (empty TSDB, one job, no rules):
#     INGEST_WARMUP (default 2m) of scrapes, then over INGEST_WINDOW
#     (default 5m) Prometheus's CPU seconds and samples appended per scrape,
#     its head series and RSS at the end, the target's median scrape
#     duration, the exporter's CPU per scrape and RSS. About 8 minutes a
#     mode with the defaults. Prometheus's CPU includes the work it does
#     whatever it scrapes (here about 90 ms per 15 s for 3.16, 10 ms for
#     2.42): a run with INGEST_DISKS=10 measures that.
#  5. the libvirt exporter (Debian's prometheus-libvirt-exporter) beside
#     fspair_exporter on the same libvirt domains, at 10, 100 and 1000
#     disks: scrape time, RSS and series of each. The domains are started
#     paused (QEMU -S: no guest code runs, no CPU is used) with
#     LIBVIRT_DISKS_PER_VM virtio disks each; QEMU itself does one write,
#     flush, discard, write_zeroes and read on every disk (HMP qemu-io), so
#     that fspair's histograms have data as in part 3. It takes the lab
#     lock (/var/tmp/fspair-lab.lock) unless a caller holds it, starts
#     virtlogd and libvirtd if they do not answer, and stops what it started.
#  6. BPF time per guest request in each mode (bench/pathcost, a lab guest)
#     and libbpf-tools' per device request on the same runs.
#  7. the tracers' cost inside a guest on a kernel operations teams run
#     (go run ./tests/matrix bench): a one-vCPU TCG guest on the first kernel
#     of MATRIX_KERNELS (the Makefile's, Debian 12's 6.1, which has the
#     trampolines this host lacks), QEMU pinned to one host core; fio
#     4k psync random writes into and reads from the page cache of a 256 MiB
#     ext4 file and O_DIRECT random reads, 10 s each, the same writes and
#     O_DIRECT reads on an untracked file beside it and on an XFS with no
#     image (the tax on I/O fspair does not follow), each run started
#     settled (sync, caches dropped), and a getppid(2) loop (the tax on an
#     unrelated system call), under no tracer, the exporter in each probe
#     mode (KERNEL_VARIANTS, default none, fentry, tracepoint, syscall,
#     libbpf-tools; "current" is the exporter without a mode flag;
#     "empty-pair" an empty fentry+fexit pair on ext4's read and write
#     functions, the hooks' own cost; MODE@TAG another build given as
#     KERNEL_FLAGS="-exporter TAG=PATH") and libbpf-tools
#     biolatency+biopattern+bitesize; 5 rounds, order rotated, medians,
#     ratios to no tracer with their spread; then each mode once more with
#     --probe.stats, for every program's BPF time per request (the profile).
#     Results in bench/results-kernel.txt (KERNEL_FLAGS passes more flags,
#     e.g. -rounds 3 -runtime 5s -profile=false). It takes the lab lock
#     unless a caller holds it.
# Results go to stdout and bench/results.txt (BENCHMARKS.md quotes them).
# PARTS selects parts: iops,stats,scrape,ingest,libvirt,pathcost,kernel is
# all of it (PARTS=scrape runs part 3 alone).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/fspair_exporter}
RUNTIME=${RUNTIME:-10}   # seconds per fio run
REPS=${REPS:-5}          # runs per configuration
# Part 1's workloads: on the tracked file, then on files fspair does not follow.
WORKLOADS=${WORKLOADS:-randread-direct randread randwrite randwrite@other randread-direct@other randwrite@noimage randread-direct@noimage getppid}
PARTS=${PARTS:-iops,stats,scrape,ingest,libvirt,pathcost,kernel}
LIBVIRT_DISKS=${LIBVIRT_DISKS:-10 100 1000} # disks in all, part 5
SCRAPE_DISKS=${SCRAPE_DISKS:-10 100 1000 10000} # tracked disks, part 3
SCRAPE_MEMORY_LIMIT=${SCRAPE_MEMORY_LIMIT:-auto} # the exporter's --memory-limit, part 3
SCRAPE_GUEST=${SCRAPE_GUEST:-none} # guest sides, part 3: none, qmp, or both ("none qmp": alternated)
SCRAPE_FORMATS=${SCRAPE_FORMATS:-text proto} # formats, part 3 (proto where BIN has --histograms)
SCRAPE_GUEST_INTERVAL=${SCRAPE_GUEST_INTERVAL:-} # part 3's qmp rows: the exporter's --guest.interval (empty: its default)
SCRAPE_PAUSE=${SCRAPE_PAUSE:-0} # part 3: seconds between the timed scrapes
POLL_WINDOW=${POLL_WINDOW:-60} # part 3: seconds of the exporter's CPU without scrapes, before each row's scrapes (the guest poll's cost)
INGEST_DISKS=${INGEST_DISKS:-1000}      # tracked disks, part 4
INGEST_WARMUP=${INGEST_WARMUP:-2m}      # scrapes before measuring (s, m or h)
INGEST_WINDOW=${INGEST_WINDOW:-5m}      # measured
LIBVIRT_DISKS_PER_VM=${LIBVIRT_DISKS_PER_VM:-10}
LAB_LOCK=${LAB_LOCK:-/var/tmp/fspair-lab.lock}
OUT=${OUT:-bench/results.txt}
PORT=19478
LIBVIRT_PORT=19479
PROM_PORT=19480
work=$(mktemp -d /var/tmp/fspair-bench.XXXXXX)
out=$OUT
mkdir -p bench
pids=()
undo=() # commands run at exit, the last added first
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for ((i = ${#undo[@]} - 1; i >= 0; i--)); do eval "${undo[i]}" || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

log() { echo "bench: $*" >&2; }
# stop_child: SIGTERM to a process this script started, SIGKILL after 15 s.
stop_child() {
	kill "$1" 2>/dev/null || return 0
	for _ in $(seq 150); do kill -0 "$1" 2>/dev/null || { wait "$1" 2>/dev/null || true; return 0; }; sleep 0.1; done
	log "pid $1 ($2) did not stop within 15 s of SIGTERM: killed"
	kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

start_exporter() { # config file [flags]
	local cfg=$1
	shift
	run_exporter --no-discovery.libvirt --no-discovery.proc --discovery.config.file="$cfg" "$@"
}
run_exporter() { # discovery flags
	# Each timed scrape reads the counters afresh: no reuse of the last
	# reading (--web.reuse, which an older BIN may not have).
	local reuse=() bin=${exporter_bin:-$BIN}
	"$bin" --help 2>&1 | grep -q -- '--web.reuse' && reuse=(--web.reuse=0)
	"$bin" --web.listen-address=127.0.0.1:$PORT --bpf.max-disks="${MAX_DISKS:-2048}" --log.level=warn "${reuse[@]}" "$@" 9>&- &
	exporter=$!
	pids+=("$exporter")
	for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/metrics" -o /dev/null && return; sleep 0.1; done
	log "exporter did not start"; exit 1
}
stop_exporter() { kill "$exporter"; wait "$exporter" 2>/dev/null || true; }

# iops_file: the file a workload of part 1 runs on: rw (the tracked file),
# rw@other (untracked, same file system), rw@noimage (XFS with no image).
iops_file() {
	case $1 in
	*@other) echo "$work/other.img" ;;
	*@noimage) echo "$work/noimage/other.img" ;;
	*) echo "$work/host.img" ;;
	esac
}

# settle: the file synced and dropped from the page cache, then read back
# whole when the workload runs in the page cache (not -direct): every run
# starts from the same state, whatever the configuration before it left.
settle() { # workload
	local f
	f=$(iops_file "$1")
	sync "$f"
	python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$f"
	case ${1%@*} in *-direct) ;; *) cat "$f" >/dev/null ;; esac
}

fio_iops() { # workload: randread-direct, randread, randwrite, each also @other or @noimage
	local w=${1%@*} rw direct=0
	rw=${w%-direct}
	[ "$w" != "$rw" ] && direct=1
	fio --name=bench --filename="$(iops_file "$1")" --rw="$rw" --direct=$direct --bs=4k --size=512m --ioengine=psync \
		--time_based --runtime="$RUNTIME" --randrepeat=0 --norandommap --output-format=json 2>/dev/null |
		jq -r "[.jobs[0].read.iops, .jobs[0].write.iops] | add"
}

# The runs bpf_stats averages over: device reads, then writes written back every 16.
stats_runs() {
	fio --name=stats --filename="$work/host.img" --rw=randread --direct=1 --bs=4k --size=512m --ioengine=psync \
		--time_based --runtime="$RUNTIME" --output=/dev/null
	fio --name=stats --filename="$work/host.img" --rw=randwrite --fdatasync=16 --bs=4k --size=512m --ioengine=psync \
		--time_based --runtime="$RUNTIME" --output=/dev/null
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
want() { [[ ",$PARTS," == *",$1,"* ]]; }

# The probe modes this kernel runs: fentry only where it attaches trampolines.
if [ -z "${MODES:-}" ]; then
	MODES="tracepoint syscall"
	"$BIN" --check --probe.mode=fentry --no-discovery.libvirt --no-discovery.proc --discovery.config.file=/dev/null \
		>/dev/null 2>&1 && MODES="fentry $MODES"
fi

# libbpf-tools' three block-layer tools in the background; bcc_stop ends them.
bcc_start() {
	biolatency 3600 1 >/dev/null 2>&1 & b1=$!
	biopattern 3600 1 >/dev/null 2>&1 & b2=$!
	bitesize 3600 1 >/dev/null 2>&1 & b3=$!
	pids+=("$b1" "$b2" "$b3")
	sleep 2
}
bcc_stop() { kill "$b1" "$b2" "$b3" 2>/dev/null; wait "$b1" "$b2" "$b3" 2>/dev/null || true; }

# getppid_ns: ns per getppid(2) call, the tax tracing puts on a system call
# it does not follow (median of 3 loops of 5 million).
getppid_ns() {
	for _ in 1 2 3; do "$work/getppid" 5000000; done | median
}

# Parts 1-6 write $out; part 7 alone (PARTS=kernel) leaves it as it is.
writes_out() { want iops || want stats || want scrape || want ingest || want libvirt || want pathcost; }
if writes_out; then
	{
	echo "# fspair bench $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
	} | tee "$out"
fi

# 1+2: IOPS cost.
if want iops || want stats; then
	log "preparing a 512 MiB host file (page cache warm)"
	fio --name=fill --filename="$work/host.img" --rw=write --bs=1m --size=512m --ioengine=psync --output=/dev/null
	cat "$work/host.img" > /dev/null
	cat > "$work/one.yml" <<YML
disks:
  - domain: bench
    uuid: 00000000-0000-0000-0000-0000000000b0
    target_device: vda
    source_file: $work/host.img
YML
fi
if want iops; then
	[[ " ${IOPS_VARIANTS:-none} " == *" none "* ]] || { log "IOPS_VARIANTS=$IOPS_VARIANTS: the changes are to none, which it must include"; exit 1; }
	gcc -O2 -static -o "$work/getppid" tests/matrix/csrc/getppid.c
	if [[ " $WORKLOADS " == *@other* ]]; then
		fio --name=fill --filename="$work/other.img" --rw=write --bs=1m --size=512m --ioengine=psync --output=/dev/null
	fi
	if [[ " $WORKLOADS " == *@noimage* ]]; then
		# An XFS no image lives on, on a loop device backed by tmpfs.
		command -v mkfs.xfs >/dev/null || { log "mkfs.xfs is missing: make deps (scripts/install-deps.sh)"; exit 1; }
		shm=$(mktemp -d /dev/shm/fspair-bench.XXXXXX)
		undo+=("rm -rf $shm")
		truncate -s 1G "$shm/xfs.raw"
		mkfs.xfs -q "$shm/xfs.raw"
		loopdev=$(losetup --find --show "$shm/xfs.raw")
		undo+=("losetup -d $loopdev")
		mkdir -p "$work/noimage"
		mount -t xfs "$loopdev" "$work/noimage"
		undo+=("umount $work/noimage")
		fio --name=fill --filename="$work/noimage/other.img" --rw=write --bs=1m --size=512m --ioengine=psync --output=/dev/null
	fi
	for rw in $WORKLOADS; do
		declare -A runs=()
		for i in $(seq "$REPS"); do
			# The configurations in a new order each round (rotated), so that
			# a drift of the machine does not favour one.
			read -r -a confs <<<"${IOPS_VARIANTS:-none $MODES libbpf-tools}"
			n=${#confs[@]}
			for j in $(seq 0 $((n - 1))); do
				conf=${confs[$(((i + j) % n))]}
				log "$rw run $i/$REPS: $conf"
				case $conf in
				none) ;;
				libbpf-tools) bcc_start ;;
				*@*) # MODE@TAG: the exporter BIN_TAG names, beside BIN's in the same run
					tagvar=BIN_${conf#*@}
					[ -x "${!tagvar:-}" ] || { log "$conf: set $tagvar to an exporter binary"; exit 1; }
					exporter_bin=${!tagvar} start_exporter "$work/one.yml" --probe.mode="${conf%@*}" ;;
				*) start_exporter "$work/one.yml" --probe.mode="$conf" ;;
				esac
				if [ "$rw" = getppid ]; then v=$(getppid_ns); else settle "$rw"; v=$(fio_iops "$rw"); fi
				runs[$conf]+="$v "
				case $conf in
				none) ;;
				libbpf-tools) bcc_stop ;;
				*) stop_exporter ;;
				esac
			done
		done
		b=$(printf '%s\n' ${runs[none]} | median)
		line=$(printf '%-23s none %.1f' "$rw" "$b")
		# Each configuration's median, its change against none's and the
		# range of its runs (the spread the change is to be read against).
		for conf in "${confs[@]}"; do
			[ "$conf" = none ] && continue
			v=$(printf '%s\n' ${runs[$conf]} | median)
			line+=$(awk -v c="$conf" -v v="$v" -v b="$b" 'BEGIN { printf "  %s %.1f (%+.2f%%)", c, v, 100*(v-b)/b }')
		done
		line+="  | range:"
		for conf in "${confs[@]}"; do
			line+=$(printf '%s\n' ${runs[$conf]} | sort -g | awk -v c="$conf" '{a[NR]=$1} END {printf " %s %.1f-%.1f", c, a[1], a[NR]}')
		done
		unit=iops
		[ "$rw" = getppid ] && unit=ns/call
		echo "$unit $line" | tee -a "$out"
		for conf in "${confs[@]}"; do echo "$unit $rw runs $conf: ${runs[$conf]}"; done >> "$out"
		unset runs
	done
fi

if want stats; then
	for mode in $MODES; do
		log "per-program cost (bpf_stats): fspair_exporter, $mode mode"
		start_exporter "$work/one.yml" --probe.mode="$mode" --probe.stats
		stats_runs
		curl -sf "http://127.0.0.1:$PORT/metrics" > "$work/m.txt"
		stop_exporter
		awk -v mode="$mode" '
			/^fspair_probe_runs_total\{/ { match($0, /program="[^"]*"/); p = substr($0, RSTART+9, RLENGTH-10); runs[p] = $NF }
			/^fspair_probe_run_seconds_total\{/ { match($0, /program="[^"]*"/); p = substr($0, RSTART+9, RLENGTH-10); secs[p] = $NF }
			END { for (p in runs) if (runs[p] > 1000) printf "ns/event fspair-%-10s %-26s %9.0f runs  %6.1f ns\n", mode, p, runs[p], 1e9*secs[p]/runs[p] }
		' "$work/m.txt" | sort -k3 | tee -a "$out"
	done

	log "per-program cost (bpf_stats): libbpf-tools biolatency+biopattern+bitesize"
	stats_was=$(sysctl -n kernel.bpf_stats_enabled)
	sysctl -qw kernel.bpf_stats_enabled=1
	prog_ids() { bpftool prog show -j | jq -r '.[].id' | sort; }
	declare -A tool_of=()
	tools=()
	for tool in biolatency biopattern bitesize; do
		before=$(prog_ids)
		"$tool" 3600 1 >/dev/null 2>&1 &
		tools+=("$!"); pids+=("$!")
		sleep 2
		for id in $(comm -13 <(echo "$before") <(prog_ids)); do tool_of[$id]=$tool; done
	done
	stats_runs
	for id in "${!tool_of[@]}"; do
		bpftool prog show id "$id" -j | jq -r --arg t "${tool_of[$id]}" \
			'select(.run_cnt != null and .run_cnt > 1000) | "\($t)/\(.name) \(.run_cnt) \(.run_time_ns / .run_cnt)"' |
			awk '{printf "ns/event libbpf-tools %-26s %9d runs  %6.1f ns\n", $1, $2, $3}'
	done | sort -k3 | tee -a "$out"
	kill "${tools[@]}" 2>/dev/null; wait "${tools[@]}" 2>/dev/null || true
	sysctl -qw kernel.bpf_stats_enabled="$stats_was"

	log "cost floor of a block-layer program on this machine"
	clang -O2 -g -target bpf -mcpu=v3 -c bench/floor/bpf/floor.bpf.c -o "$work/floor.o"
	go build -o "$work/floor" ./bench/floor
	"$work/floor" "$work/floor.o" fio --name=floor --filename="$work/host.img" --rw=randread --direct=1 --bs=4k \
		--size=512m --ioengine=psync --time_based --runtime="$RUNTIME" --output=/dev/null |
		awk '{printf "ns/event floor        %-26s %9d runs  %6.1f ns\n", $1, $2, $4}' | tee -a "$out"
fi

# 3: scrape time and RSS by tracked disks, per format.
proto_accept='application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited'
scrape_io() { # one request of each operation on each image
	# Every disk does each operation once (the exporter follows every
	# process: no pid in the config), so that every histogram has an
	# observation and is written: a histogram appears with its first.
	python3 - "$work"/d*.img <<'PY'
import ctypes, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE = 0x01, 0x02, 0x10
def falloc(fd, mode, off, n, path):
    if libc.fallocate(fd, mode, off, n) != 0:
        e = ctypes.get_errno()
        sys.exit(f"fallocate mode {mode:#x} on {path}: {os.strerror(e)}")
buf = mmap.mmap(-1, 4096)  # page-aligned, for O_DIRECT
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, b"x" * 4096, 0)                       # write
    os.fsync(fd)                                        # flush (and device writes)
    falloc(fd, 0, 1 << 20, 65536, path)                 # allocate
    falloc(fd, ZERO_RANGE, 2 << 20, 65536, path)        # write_zeroes
    falloc(fd, PUNCH_HOLE | KEEP_SIZE, 1 << 20, 65536, path)  # discard
    os.close(fd)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    os.preadv(fd, [buf], 0)                             # read, from the device
    os.close(fd)
PY
}
# make_disks: n sparse 1 GiB image files $work/d1.img ... and a static
# discovery config naming each as the disk vda of its own domain.
make_disks() { # n config
	python3 - "$work" "$1" "$2" <<'PY'
import os, sys
work, n, cfg = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(cfg, "w") as out:
    out.write("disks:\n")
    for i in range(1, n + 1):
        path = f"{work}/d{i}.img"
        with open(path, "wb") as f:
            f.truncate(1 << 30)
        out.write(f"  - domain: vm{i}\n    uuid: 00000000-0000-0000-0000-{i:012d}\n    target_device: vda\n    source_file: {path}\n")
PY
}
# with_qmp: the config of make_disks with a QMP monitor of bench/fakeqmp
# for each domain.
with_qmp() { # n config out
	{
		cat "$2"
		echo "qmp_monitors:"
		for i in $(seq "$1"); do printf '  - domain: vm%d\n    socket: %s/qmp/vm%d.qmp\n' "$i" "$work" "$i"; done
	} > "$3"
}
# guest_ready: wait until every one of n disks has its guest side read with
# its latency histograms (the exporter sets them in its first round, reads
# them in the next).
guest_ready() { # n
	local got=0
	for _ in $(seq 120); do
		got=$(curl -sf "http://127.0.0.1:$PORT/metrics" | grep -c '^fspair_disk_guest_info{.*histogram="ok"' || true)
		[ "$got" = "$1" ] && return
		sleep 1
	done
	log "guest side read with histograms on $got of $1 disks"
	exit 1
}
# cpu_seconds: the user and system CPU time of a process so far (the
# fields after the command name, which is in parentheses).
cpu_seconds() { # pid
	sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{ print ($12 + $13) / hz }'
}
# poll_cpu: the exporter's CPU over POLL_WINDOW seconds without scrapes
# (its background work: the guest poll's rounds), and while bench/fakeqmp
# serves, its CPU per poll (per VM a round): the query-blockstats fakeqmp
# answered over the same window (the exporter's own counter moves a
# round at a time, too coarse over a minute).
poll_cpu() { # n
	local s0= s1= c0 c1 t0 t1
	[ -n "${fakeqmp:-}" ] && s0=$(fakeqmp_served)
	c0=$(cpu_seconds "$exporter") t0=$(date +%s.%N)
	sleep "$POLL_WINDOW"
	c1=$(cpu_seconds "$exporter") t1=$(date +%s.%N)
	[ -n "${fakeqmp:-}" ] && s1=$(fakeqmp_served)
	awk -v n="$1" -v s0="$s0" -v s1="$s1" -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" 'BEGIN {
		printf "idle cpu %.3f s/s over %.0f s", (c1 - c0) / (t1 - t0), t1 - t0
		if (s1 > s0) printf ", qmp polls %d (%.1f rounds), %.1f us cpu a poll", s1 - s0, (s1 - s0) / n, 1e6 * (c1 - c0) / (s1 - s0) }'
}
# fakeqmp_served: the query-blockstats bench/fakeqmp has answered so far
# (it writes "served N" on SIGUSR1).
fakeqmp_served() {
	local before
	before=$(grep -c '^served ' "$work/fakeqmp.out" || true)
	kill -USR1 "$fakeqmp"
	for _ in $(seq 100); do
		[ "$(grep -c '^served ' "$work/fakeqmp.out" || true)" -gt "$before" ] && break
		sleep 0.01
	done
	grep '^served ' "$work/fakeqmp.out" | tail -1 | cut -d' ' -f2
}
# exporter_on_disks: a fresh exporter on the config of make_disks, once it
# follows all n disks, with one request of each operation done on each.
exporter_on_disks() { # what n config [flags]
	local what=$1 n=$2 cfg=$3 got start
	shift 3
	MAX_DISKS=$((n > 2048 ? n : 2048)) start_exporter "$cfg" "${disk_flags[@]}" "$@"
	for _ in $(seq 600); do
		got=$(curl -sf "http://127.0.0.1:$PORT/metrics" | grep -c '^fspair_disk_info{' || true)
		[ "$got" = "$n" ] && break
		sleep 0.5
	done
	[ "$got" = "$n" ] || { log "the exporter found $got of $n disks"; exit 1; }
	log "$what: one request of each operation on each of the $n images"
	start=$(date +%s)
	scrape_io
	log "$what: the requests took $(($(date +%s) - start)) s"
}
if want scrape || want ingest; then
	# The syscall mode follows every request path this script takes
	# (buffered writes, fallocate), so that every histogram has data: the
	# worst case. The tracepoint mode leaves some empty on ext4.
	# (The help read whole: grep -q would end the pipe early, and
	# pipefail take the exporter's SIGPIPE for a failure.)
	help=$("$BIN" --help 2>&1 || true)
	disk_flags=()
	[[ $help == *--probe.mode* ]] && disk_flags+=(--probe.mode=syscall)
fi
scrape_flags=()
if want scrape && [[ $help == *--memory-limit* ]]; then
	scrape_flags+=(--memory-limit="$SCRAPE_MEMORY_LIMIT")
elif want scrape && [ "$SCRAPE_MEMORY_LIMIT" != auto ]; then
	log "$BIN has no --memory-limit: SCRAPE_MEMORY_LIMIT=$SCRAPE_MEMORY_LIMIT cannot be set"
	exit 1
fi
if want scrape; then
	for g in $SCRAPE_GUEST; do
		case $g in
		none | qmp) ;;
		*) log "SCRAPE_GUEST=$SCRAPE_GUEST: each of none, qmp"; exit 1 ;;
		esac
	done
	go build -o "$work/series" ./bench/series
	[[ " $SCRAPE_GUEST " == *" qmp "* ]] && go build -o "$work/fakeqmp" ./bench/fakeqmp
	declare -A prev_n prev_s
	formats=
	for f in $SCRAPE_FORMATS; do
		case $f in
		text) formats+=" text" ;;
		proto)
			if [[ $help == *--histograms* ]]; then
				formats+=" proto"
			else
				log "$BIN has no --histograms: no protobuf rows"
			fi
			;;
		*) log "SCRAPE_FORMATS=$SCRAPE_FORMATS: each of text, proto"; exit 1 ;;
		esac
	done
	[ -n "$formats" ] || { log "SCRAPE_FORMATS=$SCRAPE_FORMATS: no format to measure"; exit 1; }
fi
want scrape && for n in $SCRAPE_DISKS; do
	log "scrape at $n disks: $n sparse 1 GiB image files"
	cfg="$work/n$n.yml"
	make_disks "$n" "$cfg"
	if [[ " $SCRAPE_GUEST " == *" qmp "* ]]; then
		with_qmp "$n" "$cfg" "$work/n$n-qmp.yml"
		mkdir -p "$work/qmp"
		"$work/fakeqmp" -dir "$work/qmp" -n "$n" $([ -n "$SCRAPE_GUEST_INTERVAL" ] && echo -histograms) > "$work/fakeqmp.out" &
		fakeqmp=$!
		pids+=("$fakeqmp")
		for _ in $(seq 600); do grep -q ready "$work/fakeqmp.out" && break; sleep 0.1; done
		grep -q ready "$work/fakeqmp.out" || { log "bench/fakeqmp did not start"; exit 1; }
	fi
	for format in $formats; do
		for guest in $SCRAPE_GUEST; do
			accept=()
			[ "$format" = proto ] && accept=(-H "Accept: $proto_accept")
			c=$cfg gflags=()
			[ "$guest" = qmp ] && c="$work/n$n-qmp.yml"
			[ "$guest" = qmp ] && [ -n "$SCRAPE_GUEST_INTERVAL" ] && gflags=(--guest.interval="$SCRAPE_GUEST_INTERVAL")
			exporter_on_disks "$format guest=$guest" "$n" "$c" "${scrape_flags[@]}" "${gflags[@]}" $([ "$format" = proto ] && echo --histograms=native)
			[ "$guest" = qmp ] && guest_ready "$n"
			idle=$(poll_cpu "$n")
			load=$(cut -d' ' -f1-3 /proc/loadavg)
			at=$(date -u +%H:%M:%SZ)
			times=() ztimes=()
			c0=$(cpu_seconds "$exporter")
			for _ in $(seq 20); do
				times+=("$(curl -sf "${accept[@]}" -o /dev/null -w '%{time_total}' "http://127.0.0.1:$PORT/metrics")")
				[ "$SCRAPE_PAUSE" = 0 ] || sleep "$SCRAPE_PAUSE"
			done
			c1=$(cpu_seconds "$exporter")
			# As Prometheus asks: gzip if the exporter will (curl inflates it).
			for _ in $(seq 20); do ztimes+=("$(curl -sf "${accept[@]}" --compressed -o /dev/null -w '%{time_total}' "http://127.0.0.1:$PORT/metrics")"); done
			t=$(printf '%s\n' "${times[@]}" | median)
			zt=$(printf '%s\n' "${ztimes[@]}" | median)
			rss=$(awk '/VmRSS/ {print $2}' "/proc/$exporter/status")
			hwm=$(awk '/VmHWM/ {print $2}' "/proc/$exporter/status")
			bytes=$(curl -sf "${accept[@]}" "http://127.0.0.1:$PORT/metrics" | wc -c)
			series=$(curl -sf "${accept[@]}" "http://127.0.0.1:$PORT/metrics" | "$work/series" -format="$format")
			# The guest poll's last round and its sessions so far.
			poll=$(curl -sf "http://127.0.0.1:$PORT/metrics" | awk '
				/^fspair_guest_round_duration_seconds / { r = $2 }
				/^fspair_guest_polls_total\{source="qmp"\}/ { p = $2 }
				/^fspair_guest_poll_errors_total\{source="qmp"\}/ { e = $2 }
				END { if (r != "") printf "  guest round %.2f s, qmp polls %d, errors %d", r, p, e }')
			[ ${#gflags[@]} -gt 0 ] && poll+="  ${gflags[*]}"
			poll+="  $idle"
			# Paced, the CPU a scrape holds the background work of the pauses too.
			[ "$SCRAPE_PAUSE" = 0 ] || poll+="  paced: ${SCRAPE_PAUSE}s between the timed scrapes"
			# Series per disk: the growth over the previous row of the format,
			# so that the exporter's own series (a few hundred) do not count.
			key="$format/$guest"
			awk -v n="$n" -v f="$format" -v g="$guest" -v t="$t" -v zt="$zt" -v r="$rss" -v h="$hwm" -v s="$series" -v b="$bytes" -v ml="$SCRAPE_MEMORY_LIMIT" -v cpu="$(awk -v a="$c0" -v b="$c1" 'BEGIN {print (b - a) / 20}')" \
				-v pn="${prev_n[$key]:-0}" -v ps="${prev_s[$key]:-0}" -v load="$load" -v at="$at" -v poll="$poll" 'BEGIN {
				per = pn ? sprintf("%.1f per disk", (s-ps)/(n-pn)) : "per disk: next row"
				printf "scrape disks=%-5d %-5s guest=%-4s %7.1f ms (median of 20)  gzip %7.1f ms  rss %.1f MiB (peak %.1f)  series %d (%s)  %.1f MB  memory-limit %s  cpu %.1f ms a scrape  at %s load %s%s\n",
					n, f, g, 1000*t, 1000*zt, r/1024, h/1024, s, per, b/1e6, ml, 1000*cpu, at, load, poll }' | tee -a "$out"
			# The 20 plain scrapes, sorted: with the guest poll on, those that
			# met one of its rounds and those that did not may differ.
			printf '%s\n' "${times[@]}" | sort -g | awk '{ s = s sprintf(" %.1f", 1000 * $1) } END { print "#   the 20 scrapes, ms:" s }' | tee -a "$out"
			prev_n[$key]=$n prev_s[$key]=$series
			stop_exporter
		done
	done
	[ -n "${fakeqmp:-}" ] && stop_child "$fakeqmp" fakeqmp && fakeqmp=
	rm -f "$work"/d*.img
done

# 4: what Prometheus spends to ingest one host's exporter, per histogram mode.
prom_url=http://127.0.0.1:$PROM_PORT
ingest_interval=15 # seconds, as a Prometheus is commonly set to scrape
prom2=/usr/bin/prometheus # Debian 12's 2.42, as tests/alerting.DebianPrometheus
# seconds: a duration as INGEST_WARMUP and INGEST_WINDOW take it (90, 90s,
# 2m, 1h), in seconds.
seconds() { # duration
	local n=${1%[smh]} unit=${1##*[0-9]}
	[[ $n =~ ^[0-9]+$ ]] || { log "duration $1: want whole seconds, minutes or hours (90s, 2m, 1h)"; return 1; }
	case $unit in
	h) echo $((n * 3600)) ;;
	m) echo $((n * 60)) ;;
	*) echo "$n" ;;
	esac
}
# wait_logged: sleep so long, saying each minute how much is left.
wait_logged() { # seconds what
	local left=$1 step
	while [ "$left" -gt 0 ]; do
		log "$2: $left s to go"
		step=$((left < 60 ? left : 60))
		sleep "$step"
		left=$((left - step))
	done
}
# prom_snapshot: Prometheus's own metrics at one instant, for prom_self.
prom_snapshot() {
	curl -sf "$prom_url/metrics" -o "$work/prom-metrics.txt" || { log "Prometheus's /metrics did not answer"; return 1; }
}
# prom_self: one of Prometheus's own metrics in the last snapshot, summed
# over its label sets (only those whose labels hold the given text, if
# any); a failure when there is none.
prom_self() { # name [label text]
	awk -v m="$1" -v l="${2:-}" '
		($1 == m || index($1, m "{") == 1) && (l == "" || index($1, l)) { s += $2; n++ }
		END { if (!n) exit 1; printf "%.17g\n", s }' "$work/prom-metrics.txt"
}
# prom_query: the value of a PromQL expression with one result, at a
# time (Unix seconds).
prom_query() { # expression time
	curl -sf "$prom_url/api/v1/query" --data-urlencode "query=$1" --data-urlencode "time=$2" |
		jq -er '.data.result[0].value[1]' || { log "Prometheus has no answer to $1"; return 1; }
}
# between_scrapes: sleep until halfway between two scrapes of the target,
# so that a reading then counts whole scrapes only (a scrape at 1,000
# disks takes a second or two, well under half the interval).
between_scrapes() {
	local last
	last=$(curl -sf "$prom_url/api/v1/targets" | jq -er '.data.activeTargets[0].lastScrape') ||
		{ log "Prometheus lists no target"; return 1; }
	# The zero time until the first scrape.
	[[ $last != 0001-* ]] || { log "Prometheus has not scraped the exporter yet"; return 1; }
	sleep "$(awk -v l="$(date -d "$last" +%s.%N)" -v n="$(date +%s.%N)" -v i="$ingest_interval" \
		'BEGIN { d = (l + i / 2 - n) % i; if (d < 0) d += i; print d }')"
}
# version_of: the version a Prometheus binary reports (3.16.0, 2.42.0+ds).
version_of() { "$1" --version 2>&1 | awk 'NR == 1 {print $3}'; }
if want ingest; then
	warmup=$(seconds "$INGEST_WARMUP")
	window=$(seconds "$INGEST_WINDOW")
	# Whole intervals, read halfway between scrapes: each scrape counted
	# is a whole one.
	window=$(((window + ingest_interval - 1) / ingest_interval * ingest_interval))
	prom3=${FSPAIR_PROMETHEUS:-$(bash scripts/promstack.sh path prometheus)}
	if [ -z "${INGEST_MODES:-}" ]; then
		INGEST_MODES="classic native"
		if [ -x "$prom2" ]; then
			INGEST_MODES+=" classic-2.42"
		else
			log "no $prom2 (Debian's prometheus package, make deps): Prometheus 2.42 left out"
		fi
	fi
	# A text scrape gets classic histograms whatever --histograms says;
	# an exporter without the flag has no native ones to offer.
	has_histograms=
	[[ $help == *--histograms* ]] && has_histograms=1
	modes_run=()
	for mode in $INGEST_MODES; do
		case $mode in
		classic) modes_run+=("$mode") ;;
		classic-2.42)
			[ -x "$prom2" ] || { log "INGEST_MODES: classic-2.42 needs $prom2 (Debian's prometheus package, make deps)"; exit 1; }
			modes_run+=("$mode")
			;;
		native)
			if [ -n "$has_histograms" ]; then
				modes_run+=("$mode")
			else
				log "$BIN has no --histograms: the native mode left out"
			fi
			;;
		*) log "INGEST_MODES: unknown mode $mode (classic, native, classic-2.42)"; exit 1 ;;
		esac
	done
	log "ingest: ${#modes_run[@]} mode(s), about $(((warmup + window + 60) * ${#modes_run[@]} / 60)) min; $INGEST_DISKS sparse 1 GiB image files"
	cfg=$work/ingest.yml
	make_disks "$INGEST_DISKS" "$cfg"
	{
		echo "# ingest: what Prometheus spends on one host's fspair_exporter at $INGEST_DISKS disks (a static config of as many image files, one request of each operation on each: every histogram has data; exporter ${disk_flags[*]:-in its default probe mode}),"
		echo "#   scrape_interval ${ingest_interval}s (timeout as long), one job, no rules; a fresh exporter and a fresh Prometheus (empty TSDB) per mode; $warmup s of scrapes, then measured over $window s read halfway between scrapes:"
		echo "#   Prometheus's CPU per scrape (process_cpu_seconds_total) and share of a core, RSS and head series at the end, samples appended per scrape (prometheus_tsdb_head_samples_appended_total: a native histogram is one sample),"
		echo "#   the target's last scrape_samples_scraped, its median scrape_duration_seconds, failed scrapes; the exporter's CPU per scrape and RSS"
		for mode in "${modes_run[@]}"; do
			case $mode in
			classic) echo "#   classic: Prometheus $(version_of "$prom3"), text format (exporter --histograms=classic)" ;;
			native) echo "#   native: Prometheus $(version_of "$prom3") with scrape_native_histograms: true, protobuf (exporter --histograms=native)" ;;
			classic-2.42) echo "#   classic-2.42: Debian's Prometheus $(version_of "$prom2"), text format (exporter --histograms=classic)" ;;
			esac
		done
	} | tee -a "$out"
	# Another process on the port would answer for the Prometheus started here.
	if curl -s -o /dev/null "$prom_url/"; then log "something answers on 127.0.0.1:$PROM_PORT already"; exit 1; fi
fi
want ingest && for mode in "${modes_run[@]}"; do
	prom=$prom3 hist=classic native_line=
	case $mode in
	native) hist=native native_line="scrape_native_histograms: true" ;;
	classic-2.42) prom=$prom2 ;;
	esac
	hflags=()
	if [ -n "$has_histograms" ]; then hflags=(--histograms="$hist"); fi
	exporter_on_disks "ingest $mode" "$INGEST_DISKS" "$cfg" "${hflags[@]}"
	dir=$work/prom-$mode
	mkdir -p "$dir"
	cat >"$dir/prometheus.yml" <<YML
global:
  scrape_interval: ${ingest_interval}s
  scrape_timeout: ${ingest_interval}s
scrape_configs:
  - job_name: fspair
    $native_line
    static_configs:
      - targets: ['127.0.0.1:$PORT']
YML
	"$prom" --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
		--web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn 9>&- >"$dir/log" 2>&1 &
	prom_pid=$!
	pids+=("$prom_pid")
	for _ in $(seq 300); do
		curl -sf -o /dev/null "$prom_url/-/ready" && break
		kill -0 "$prom_pid" 2>/dev/null || break
		sleep 0.1
	done
	curl -sf -o /dev/null "$prom_url/-/ready" || { log "Prometheus ($prom) did not start; its log:"; tail -20 "$dir/log" >&2; exit 1; }
	# The first scrapes create every series, which costs more than
	# appending to them: the window starts after them.
	wait_logged "$warmup" "ingest $mode: warming up"
	between_scrapes
	prom_snapshot
	t0=$(date +%s.%N)
	cpu0=$(prom_self process_cpu_seconds_total)
	app0=$(prom_self prometheus_tsdb_head_samples_appended_total)
	hist0=$(prom_self prometheus_tsdb_head_samples_appended_total 'type="histogram"' || echo 0)
	# Observed as each scrape starts, from the second on (none yet after
	# one scrape): the scrapes in the window.
	scr0=$(prom_self prometheus_target_interval_length_seconds_count || echo 0)
	ecpu0=$(cpu_seconds "$exporter")
	wait_logged "$window" "ingest $mode: measuring"
	prom_snapshot
	t1=$(date +%s.%N)
	cpu1=$(prom_self process_cpu_seconds_total)
	app1=$(prom_self prometheus_tsdb_head_samples_appended_total)
	hist1=$(prom_self prometheus_tsdb_head_samples_appended_total 'type="histogram"' || echo 0)
	scr1=$(prom_self prometheus_target_interval_length_seconds_count)
	ecpu1=$(cpu_seconds "$exporter")
	rss=$(prom_self process_resident_memory_bytes)
	series=$(prom_self prometheus_tsdb_head_series)
	exp_rss=$(awk '/VmRSS/ {print $2}' "/proc/$exporter/status")
	target='job="fspair"'
	scraped=$(prom_query "scrape_samples_scraped{$target}" "$t1")
	med=$(prom_query "quantile_over_time(0.5, scrape_duration_seconds{$target}[${window}s])" "$t1")
	durations=$(prom_query "count_over_time(scrape_duration_seconds{$target}[${window}s])" "$t1")
	failed=$(prom_query "count_over_time(up{$target}[${window}s]) - sum_over_time(up{$target}[${window}s])" "$t1")
	scrapes=$(awk -v a="$scr0" -v b="$scr1" 'BEGIN {print b - a}')
	[ "$scrapes" -gt 0 ] || { log "ingest $mode: no scrape in $window s; Prometheus's log:"; tail -20 "$dir/log" >&2; exit 1; }
	if [ "$scrapes" != $((window / ingest_interval)) ] || [ "$durations" != "$scrapes" ]; then
		log "ingest $mode: $scrapes scrapes counted, $durations stored, in $window s: want $((window / ingest_interval))"
	fi
	# A figure for the wrong kind of histogram would pass for the right
	# one: native must have stored native histograms, classic none.
	hists=$(awk -v a="$hist0" -v b="$hist1" 'BEGIN {print b - a}')
	if [ "$mode" = native ] && [ "$hists" = 0 ]; then
		log "ingest native: Prometheus appended no native histogram (did it ask for protobuf?)"
		exit 1
	elif [ "$mode" != native ] && [ "$hists" != 0 ]; then
		log "ingest $mode: Prometheus appended $hists native histograms"
		exit 1
	fi
	awk -v n="$INGEST_DISKS" -v m="$mode" -v v="$(version_of "$prom")" -v dt="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" \
		-v sc="$scrapes" -v c="$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN {print b - a}')" -v r="$rss" -v s="$series" \
		-v ap="$(awk -v a="$app0" -v b="$app1" 'BEGIN {print b - a}')" -v h="$hists" -v ss="$scraped" -v md="$med" \
		-v nd="$durations" -v f="$failed" -v ec="$(awk -v a="$ecpu0" -v b="$ecpu1" 'BEGIN {print b - a}')" -v er="$exp_rss" 'BEGIN {
		printf "ingest disks=%-5d %-12s prometheus %-9s cpu %7.1f ms/scrape (%5.2f%% of a core)  rss %6.1f MiB  head series %7d  appended %8.0f/scrape (histograms %.0f)  scraped %7d  scrape %7.1f ms (median of %d)  failed %d  scrapes %d  |  exporter cpu %6.1f ms/scrape  rss %5.1f MiB\n",
			n, m, v, 1000*c/sc, 100*c/dt, r/1048576, s, ap/sc, h/sc, ss, 1000*md, nd, f, sc, 1000*ec/sc, er/1024 }' | tee -a "$out"
	stop_child "$prom_pid" prometheus
	stop_exporter
	rm -rf "$dir"
done
want ingest && rm -f "$work"/d*.img

# 5: the libvirt exporter beside fspair_exporter, on the same libvirt domains.
libvirt_uri=qemu:///system
libvirt_sock_ro=/var/run/libvirt/libvirt-sock-ro

# holds_lab_lock: whether a caller (flock /var/tmp/fspair-lab.lock make bench)
# holds the lab lock already; taking it again would wait for ever.
holds_lab_lock() {
	local p=$$ args
	while [ "${p:-0}" -gt 1 ]; do
		args=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || return 1
		[[ " $args" == *flock\ *"$LAB_LOCK"* ]] && return 0
		p=$(ps -o ppid= -p "$p" | tr -d ' ')
	done
	return 1
}
# take_lab_lock: the lab lock for the rest of the run, unless a caller holds it.
take_lab_lock() {
	if holds_lab_lock || [ -n "${lab_locked:-}" ]; then
		return
	fi
	exec 9>>"$LAB_LOCK"
	log "waiting for the lab lock $LAB_LOCK"
	flock 9
	lab_locked=1
}
virsh_() { timeout 120 virsh -q -c "$libvirt_uri" "$@"; }
# sock_answers: whether something accepts connections on a UNIX socket (a
# killed daemon leaves its socket file behind).
sock_answers() {
	python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect(sys.argv[1])' "$1" 2>/dev/null
}
libvirt_answers() { timeout 10 virsh -q -c "$libvirt_uri" uri >/dev/null 2>&1; }

# ensure_libvirt: libvirtd answering on the system URI. When it does not,
# virtlogd (QEMU's logs go through it) and libvirtd are started as children
# of this script and stopped at exit, as tests/e2e/libvirt_test.go does:
# Debian's libvirt resolves its QEMU user (libvirt-qemu, made by
# libvirt-daemon-system, which is not installed) when the QEMU driver
# starts, and QEMU runs as root while libvirtd starts so that libvirt's
# capability cache stays valid (/dev/kvm is root-only here; with the QEMU
# user unable to open it, each domain start probes QEMU again for about a
# minute: virQEMUCapsIsValid in src/qemu/qemu_capabilities.c).
ensure_libvirt() {
	for bin in libvirtd virtlogd virsh qemu-system-x86_64 prometheus-libvirt-exporter; do
		command -v "$bin" >/dev/null || { log "$bin is missing: make deps (scripts/install-deps.sh)"; exit 1; }
	done
	if libvirt_answers; then
		log "libvirtd answers on $libvirt_uri: using it"
		return
	fi
	if ! id libvirt-qemu >/dev/null 2>&1; then
		useradd --system --user-group --no-create-home --home-dir /var/lib/libvirt --shell /usr/sbin/nologin libvirt-qemu
		undo+=("userdel libvirt-qemu")
	fi
	if ! sock_answers /var/run/libvirt/virtlogd-sock; then
		virtlogd 9>&- >"$work/virtlogd.log" 2>&1 &
		local vl=$!
		undo+=("stop_child $vl virtlogd")
		for _ in $(seq 100); do sock_answers /var/run/libvirt/virtlogd-sock && break; sleep 0.1; done
		sock_answers /var/run/libvirt/virtlogd-sock || { log "virtlogd did not answer; its log:"; cat "$work/virtlogd.log" >&2; exit 1; }
	fi
	local conf=/etc/libvirt/qemu.conf
	if [ -e "$conf" ]; then cp -p "$conf" "$work/qemu.conf.orig"; fi
	mkdir -p /etc/libvirt
	printf '# fspair bench: written while libvirtd starts, then restored\nuser = "root"\ngroup = "root"\n' >"$conf"
	local restore="rm -f $conf"
	[ -e "$work/qemu.conf.orig" ] && restore="cp -p $work/qemu.conf.orig $conf"
	undo+=("$restore")
	libvirtd 9>&- >"$work/libvirtd.log" 2>&1 &
	local lv=$!
	undo+=("stop_child $lv libvirtd")
	for _ in $(seq 300); do libvirt_answers && break; kill -0 "$lv" 2>/dev/null || break; sleep 0.1; done
	eval "$restore"
	libvirt_answers || { log "libvirtd did not answer within 30 s; its log:"; tail -20 "$work/libvirtd.log" >&2; exit 1; }
	log "started virtlogd and libvirtd (pid $lv)"
}

# bench_domain: define and start one paused transient domain with the
# given images as virtio disks vda, vdb, ... (user aliases ua-vdX, so that
# HMP can name each disk's backend).
bench_domain() { # name image...
	local name=$1 i=0 letters=abcdefghijklmnopqrstuvwxyz
	shift
	{
		echo "<domain type='qemu'>"
		echo "  <name>$name</name>"
		echo "  <memory unit='MiB'>64</memory>"
		echo "  <vcpu>1</vcpu>"
		echo "  <os><type arch='x86_64' machine='pc'>hvm</type></os>"
		echo "  <devices>"
		echo "    <emulator>$(command -v qemu-system-x86_64)</emulator>"
		for img in "$@"; do
			local t=vd${letters:i:1}
			echo "    <disk type='file' device='disk'>"
			echo "      <driver name='qemu' type='raw' cache='none' io='threads' discard='unmap'/>"
			echo "      <source file='$img'/>"
			echo "      <target dev='$t' bus='virtio'/>"
			echo "      <alias name='ua-$t'/>"
			echo "    </disk>"
			i=$((i + 1))
		done
		echo "    <controller type='usb' model='none'/>"
		echo "    <memballoon model='none'/>"
		echo "  </devices>"
		echo "</domain>"
	} >"$work/lv/$name.xml"
	virsh_ create --paused "$work/lv/$name.xml" >/dev/null
}

# domain_io: QEMU does one request of each kind on each disk of the domain,
# from its own process (HMP qemu-io on the disk's backend), as a guest's
# I/O would reach the image: fspair follows the domain's QEMU process only.
domain_io() { # name disks
	local cmds=() t i letters=abcdefghijklmnopqrstuvwxyz
	for ((i = 0; i < $2; i++)); do
		t=vd${letters:i:1}
		for op in "write 0 4k" "flush" "discard 1M 64k" "write -z 2M 64k" "read 0 4k"; do
			cmds+=("qemu-monitor-command $1 --hmp 'qemu-io -d /machine/peripheral/ua-$t/virtio-backend \"$op\"'")
		done
	done
	local IFS=';' res
	res=$(virsh_ "${cmds[*]}" 2>&1) || { log "I/O on $1: $res"; exit 1; }
	if grep -qiE 'error|conflict|fail' <<<"$res"; then log "I/O on $1: $res"; exit 1; fi
}

# destroy_domains: the bench's domains go (transient: destroyed, they are
# gone), with the logs libvirt kept of their QEMU.
# libvirt waits seconds for each QEMU to exit, so ten go at once (waiting
# only for these, not for the daemons this script runs in the background).
destroy_domains() {
	local d pids=()
	for d in $(virsh_ list --name | grep "^$prefix"); do
		{ virsh_ destroy "$d" >/dev/null || true; } &
		pids+=($!)
		if ((${#pids[@]} == 10)); then wait "${pids[@]}"; pids=(); fi
	done
	if ((${#pids[@]})); then wait "${pids[@]}"; fi
	rm -f /var/log/libvirt/qemu/"$prefix"*.log
}

# ours: how many series of a family the bench's domains have, at a URL.
ours() { # url family [extra awk condition]
	curl -sf "$1" | awk -v f="$2" -v d="domain=\"$prefix" "index(\$0, f \"{\") == 1 && index(\$0, d) ${3:+&& $3} {n++} END {print n+0}"
}

wait_for() { # what url family want [condition]
	for _ in $(seq 600); do
		[ "$(ours "$2" "$3" "${5:-}")" = "$4" ] && return 0
		sleep 0.2
	done
	log "$1: $(ours "$2" "$3" "${5:-}") of $4 after 120 s"
	return 1
}

if want libvirt; then
	# Disks are vda..vdt, each a PCI device on the machine's one bus.
	if [ "$LIBVIRT_DISKS_PER_VM" -lt 1 ] || [ "$LIBVIRT_DISKS_PER_VM" -gt 20 ]; then
		log "LIBVIRT_DISKS_PER_VM=$LIBVIRT_DISKS_PER_VM: want 1 to 20"
		exit 1
	fi
	take_lab_lock
	ensure_libvirt
	prefix=fspair-bench-$$-
	undo+=(destroy_domains)
	# The images are opened by QEMU, which a libvirtd this script did not
	# start may run as another user.
	mkdir -p "$work/lv"
	chmod 755 "$work" "$work/lv"
	others=$(virsh_ list --name | grep -v "^$prefix" | grep -c . || true)
	{
		echo "# libvirt: paused transient domains (QEMU -S, TCG, 64 MiB), $LIBVIRT_DISKS_PER_VM virtio disks each (raw 1 GiB sparse, cache=none, io=threads: linux-aio would take an AIO context per disk, and 1,000 of them exceed fs.aio-max-nr),"
		echo "#   one write, flush, discard, write_zeroes and read by QEMU on each disk; $others other running domain(s) on this libvirtd;"
		echo "#   median of 20 scrapes of each exporter, alternating; libvirt exporter: $(dpkg-query -W -f='${Package} ${Version}' prometheus-libvirt-exporter 2>/dev/null), on $libvirt_sock_ro"
	} | tee -a "$out"
	vms=0
	for n in $LIBVIRT_DISKS; do
		want_vms=$(((n + LIBVIRT_DISKS_PER_VM - 1) / LIBVIRT_DISKS_PER_VM))
		log "libvirt: $n disks, $want_vms domains ($((want_vms - vms)) to start)"
		start=$(date +%s.%N)
		while [ "$vms" -lt "$want_vms" ]; do
			vms=$((vms + 1))
			imgs=()
			for ((j = 0; j < LIBVIRT_DISKS_PER_VM; j++)); do
				truncate -s 1G "$work/lv/vm$vms-$j.img"
				imgs+=("$work/lv/vm$vms-$j.img")
			done
			bench_domain "$prefix$vms" "${imgs[@]}"
		done
		log "libvirt: $vms domains running paused ($(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e-s}') s to start)"
		disks=$((vms * LIBVIRT_DISKS_PER_VM))

		run_exporter --no-discovery.proc --discovery.libvirt.socket="$libvirt_sock_ro"
		prometheus-libvirt-exporter --web.listen-address=127.0.0.1:$LIBVIRT_PORT \
			--libvirt.uri="$libvirt_uri?socket=$libvirt_sock_ro" 9>&- >"$work/libvirt-exporter.log" 2>&1 &
		lexp=$!
		pids+=("$lexp")
		fsp_url=http://127.0.0.1:$PORT/metrics
		lv_url=http://127.0.0.1:$LIBVIRT_PORT/metrics
		# Counters of a disk are written once fspair follows it: op="read"
		# from the start, discard and the other rarer operations only once
		# the disk has done one.
		wait_for "fspair_exporter following the domains' disks" "$fsp_url" fspair_disk_requests_total "$disks" '/op="read"/' || exit 1
		wait_for "libvirt exporter listing the domains' disks" "$lv_url" libvirt_domain_block_stats_read_bytes_total "$disks" || {
			tail -5 "$work/libvirt-exporter.log" >&2; exit 1; }
		log "libvirt: one request of each kind on each of the $disks disks, by QEMU"
		for ((v = 1; v <= vms; v++)); do domain_io "$prefix$v" "$LIBVIRT_DISKS_PER_VM"; done
		wait_for "fspair_exporter counting the reads" "$fsp_url" fspair_disk_requests_total "$disks" '/op="read"\} [1-9]/' || true
		io_disks=$(ours "$fsp_url" fspair_disk_requests_total '/op="read"\} [1-9]/')

		ft=() fz=() lt=() lz=()
		for _ in $(seq 20); do
			ft+=("$(curl -sf -o /dev/null -w '%{time_total}' "$fsp_url")")
			lt+=("$(curl -sf -o /dev/null -w '%{time_total}' "$lv_url")")
		done
		for _ in $(seq 20); do
			fz+=("$(curl -sf --compressed -o /dev/null -w '%{time_total}' "$fsp_url")")
			lz+=("$(curl -sf --compressed -o /dev/null -w '%{time_total}' "$lv_url")")
		done
		up=$(curl -sf "$lv_url" | awk '/^libvirt_up / {print $2}')
		[ "$up" = 1 ] || { log "libvirt exporter: libvirt_up $up"; tail -5 "$work/libvirt-exporter.log" >&2; exit 1; }
		awk -v n="$disks" -v vms="$vms" -v io="$io_disks" \
			-v ft="$(printf '%s\n' "${ft[@]}" | median)" -v fz="$(printf '%s\n' "${fz[@]}" | median)" \
			-v fr="$(awk '/VmRSS/ {print $2}' "/proc/$exporter/status")" -v fs="$(curl -sf "$fsp_url" | grep -vc '^#')" \
			-v lt="$(printf '%s\n' "${lt[@]}" | median)" -v lz="$(printf '%s\n' "${lz[@]}" | median)" \
			-v lr="$(awk '/VmRSS/ {print $2}' "/proc/$lexp/status")" -v ls="$(curl -sf "$lv_url" | grep -vc '^#')" 'BEGIN {
			printf "libvirt disks=%-5d vms=%-4d fspair %7.1f ms  gzip %7.1f ms  rss %5.1f MiB  series %7d  |  libvirt-exporter %7.1f ms  gzip %7.1f ms  rss %5.1f MiB  series %6d  (disks with I/O counted: %d)\n",
				n, vms, 1000*ft, 1000*fz, fr/1024, fs, 1000*lt, 1000*lz, lr/1024, ls, io }' | tee -a "$out"
		stop_exporter
		stop_child "$lexp" prometheus-libvirt-exporter
	done
fi

# 6: BPF time per guest request in each mode, with libbpf-tools' per
# device request beside it (bench/pathcost: a lab guest, cache=none disks
# through QEMU's three aio modes).
if want pathcost; then
	take_lab_lock
	first=1
	for mode in $MODES; do
		log "BPF time per guest request: $mode mode"
		go run ./bench/pathcost -exporter "$BIN" -mode "$mode" -libbpf-tools=$([ -n "$first" ] && echo true || echo false) |
			tee -a "$out"
		first=
	done
fi

# 7: the tracers' cost in a guest on the matrix's first kernel.
if want kernel; then
	read -r kernel _ <<<"${FSPAIR_MATRIX_KERNELS:-}"
	if [ -z "$kernel" ]; then
		log "FSPAIR_MATRIX_KERNELS is not set: run make bench (it passes the Makefile's MATRIX_KERNELS)"
		exit 1
	fi
	kargs=(-kernel "$kernel" -out "${KERNEL_OUT:-bench/results-kernel.txt}")
	[ -n "${KERNEL_VARIANTS:-}" ] && kargs+=(-variants "$KERNEL_VARIANTS")
	if holds_lab_lock; then kargs+=(-lock ""); else kargs+=(-lock "$LAB_LOCK"); fi
	# shellcheck disable=SC2086 # KERNEL_FLAGS is a list of flags
	go run ./tests/matrix bench "${kargs[@]}" ${KERNEL_FLAGS:-}
fi

if writes_out; then log "results in $out"; fi
