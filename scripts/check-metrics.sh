#!/usr/bin/env bash
# Runs the exporter against a static disk on a scratch file, does some I/O on
# it, and checks the exposition with `promtool check metrics`.
set -euo pipefail
bin=${1:-bin/fspair_exporter}
work=$(mktemp -d)
port=19477
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
truncate -s 64M "$work/disk.img"
cat > "$work/disks.yml" <<YML
disks:
  - domain: lint
    uuid: 00000000-0000-0000-0000-000000000001
    target_device: vda
    source_file: $work/disk.img
YML
"$bin" --web.listen-address=127.0.0.1:$port --no-discovery.libvirt --no-discovery.proc \
	--discovery.config.file="$work/disks.yml" --log.level=warn &
pid=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/metrics" -o /dev/null && break; sleep 0.2; done
fio --name=lint --filename="$work/disk.img" --rw=randwrite --bs=4k --size=4M --ioengine=psync --fsync=10 --output=/dev/null
curl -sf "http://127.0.0.1:$port/metrics" > "$work/metrics.txt"
grep -q '^fspair_disk_info{' "$work/metrics.txt" || { echo "check-metrics: no fspair_disk_info in the output"; exit 1; }
promtool=$(bash "$(dirname "$0")/promstack.sh" path promtool)
out=$("$promtool" check metrics < "$work/metrics.txt" 2>&1) || { echo "$out"; exit 1; }
[ -z "$out" ] || { echo "$out"; exit 1; }
echo "check-metrics: $(grep -c '^fspair_' "$work/metrics.txt") fspair series, promtool clean"
