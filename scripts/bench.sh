#!/usr/bin/env bash
# make bench: the exporter's cost, measured side by side in one run.
#  1. fio 4k random I/O on a host file (psync, one thread): no tracer,
#     fspair_exporter with all probes following the file, BCC's libbpf-tools
#     (biolatency+biopattern+bitesize) instead. randread-direct goes to the
#     device (O_DIRECT: the block-layer probes' case); randread and randwrite
#     are served by the page cache (the highest rate a file sustains here).
#     Runs alternate and repeat; the median is reported.
#  2. ns per event of every BPF program, from bpf_stats, over one direct
#     random-read run and one random-write run that syncs every 16 writes:
#     fspair's programs, then libbpf-tools' programs on the same runs, then
#     the floor on this machine (an empty tp_btf program, one that counts,
#     one that reads the clock: bench/floor).
#  3. scrape time and exporter RSS at 10, 100 and 1000 tracked disks.
# Results go to stdout and bench/results.txt (BENCHMARKS.md quotes them).
# PARTS=scrape runs part 3 alone (PARTS=iops,stats,scrape is all of it).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/fspair_exporter}
RUNTIME=${RUNTIME:-10}   # seconds per fio run
REPS=${REPS:-5}          # runs per configuration
PARTS=${PARTS:-iops,stats,scrape}
OUT=${OUT:-bench/results.txt}
PORT=19478
work=$(mktemp -d /var/tmp/fspair-bench.XXXXXX)
out=$OUT
mkdir -p bench
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

log() { echo "bench: $*" >&2; }

start_exporter() { # config file
	"$BIN" --web.listen-address=127.0.0.1:$PORT --no-discovery.libvirt --no-discovery.proc \
		--discovery.config.file="$1" --bpf.max-disks=2048 --log.level=warn &
	exporter=$!
	pids+=("$exporter")
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/metrics" -o /dev/null && return; sleep 0.1; done
	log "exporter did not start"; exit 1
}
stop_exporter() { kill "$exporter"; wait "$exporter" 2>/dev/null || true; }

fio_iops() { # workload: randread-direct, randread, randwrite
	local rw=${1%-direct} direct=0
	[ "$1" != "$rw" ] && direct=1
	fio --name=bench --filename="$work/host.img" --rw="$rw" --direct=$direct --bs=4k --size=512m --ioengine=psync \
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

{
echo "# fspair bench $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
} | tee "$out"

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
	for rw in randread-direct randread randwrite; do
		declare -a base=() fsp=() bcc=()
		for i in $(seq "$REPS"); do
			log "$rw run $i/$REPS: no tracer"
			base+=("$(fio_iops $rw)")
			log "$rw run $i/$REPS: fspair_exporter"
			start_exporter "$work/one.yml"
			fsp+=("$(fio_iops $rw)")
			stop_exporter
			log "$rw run $i/$REPS: libbpf-tools biolatency+biopattern+bitesize"
			biolatency 3600 1 >/dev/null 2>&1 & b1=$!
			biopattern 3600 1 >/dev/null 2>&1 & b2=$!
			bitesize 3600 1 >/dev/null 2>&1 & b3=$!
			pids+=("$b1" "$b2" "$b3")
			sleep 2
			bcc+=("$(fio_iops $rw)")
			kill "$b1" "$b2" "$b3" 2>/dev/null; wait "$b1" "$b2" "$b3" 2>/dev/null || true
		done
		b=$(printf '%s\n' "${base[@]}" | median)
		f=$(printf '%s\n' "${fsp[@]}" | median)
		c=$(printf '%s\n' "${bcc[@]}" | median)
		awk -v rw="$rw" -v b="$b" -v f="$f" -v c="$c" 'BEGIN {
			printf "iops %-15s none %.0f  fspair %.0f (%+.2f%%)  libbpf-tools %.0f (%+.2f%%)\n", rw, b, f, 100*(f-b)/b, c, 100*(c-b)/b }' | tee -a "$out"
		echo "iops $rw runs: none ${base[*]} | fspair ${fsp[*]} | libbpf-tools ${bcc[*]}" >> "$out"
	done
fi

if want stats; then
	log "per-program cost (bpf_stats): fspair_exporter"
	start_exporter "$work/one.yml"
	stats_runs
	curl -sf "http://127.0.0.1:$PORT/metrics" > "$work/m.txt"
	stop_exporter
	awk '
		/^fspair_probe_runs_total\{/ { match($0, /program="[^"]*"/); p = substr($0, RSTART+9, RLENGTH-10); runs[p] = $NF }
		/^fspair_probe_run_seconds_total\{/ { match($0, /program="[^"]*"/); p = substr($0, RSTART+9, RLENGTH-10); secs[p] = $NF }
		END { for (p in runs) if (runs[p] > 1000) printf "ns/event fspair       %-26s %9.0f runs  %6.1f ns\n", p, runs[p], 1e9*secs[p]/runs[p] }
	' "$work/m.txt" | sort -k3 | tee -a "$out"

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

# 3: scrape time and RSS by tracked disks.
for n in 10 100 1000; do
	log "scrape at $n disks"
	cfg="$work/n$n.yml"
	echo "disks:" > "$cfg"
	for i in $(seq "$n"); do
		truncate -s 1G "$work/d$i.img"
		printf '  - domain: vm%d\n    uuid: 00000000-0000-0000-0000-%012d\n    target_device: vda\n    source_file: %s\n' \
			"$i" "$i" "$work/d$i.img" >> "$cfg"
	done
	start_exporter "$cfg"
	for _ in $(seq 100); do
		got=$(curl -sf "http://127.0.0.1:$PORT/metrics" | grep -c '^fspair_disk_info{' || true)
		[ "$got" = "$n" ] && break
		sleep 0.2
	done
	# Every disk does each operation once (the exporter follows every
	# process: no pid in the config), so that every histogram has an
	# observation and is written: a histogram appears with its first.
	log "one request of each operation on each of the $n images"
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
	times=() ztimes=()
	for _ in $(seq 20); do times+=("$(curl -sf -o /dev/null -w '%{time_total}' "http://127.0.0.1:$PORT/metrics")"); done
	# As Prometheus asks: gzip if the exporter will (curl inflates it).
	for _ in $(seq 20); do ztimes+=("$(curl -sf --compressed -o /dev/null -w '%{time_total}' "http://127.0.0.1:$PORT/metrics")"); done
	t=$(printf '%s\n' "${times[@]}" | median)
	zt=$(printf '%s\n' "${ztimes[@]}" | median)
	rss=$(awk '/VmRSS/ {print $2}' "/proc/$exporter/status")
	hwm=$(awk '/VmHWM/ {print $2}' "/proc/$exporter/status")
	series=$(curl -sf "http://127.0.0.1:$PORT/metrics" | grep -vc '^#')
	awk -v n="$n" -v t="$t" -v zt="$zt" -v r="$rss" -v h="$hwm" -v s="$series" 'BEGIN {
		printf "scrape disks=%-5d %7.1f ms (median of 20)  gzip %7.1f ms  rss %.1f MiB (peak %.1f)  series %d\n", n, 1000*t, 1000*zt, r/1024, h/1024, s }' | tee -a "$out"
	stop_exporter
	rm -f "$work"/d*.img
done
log "results in $out"
