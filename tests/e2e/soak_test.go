//go:build soak

package e2e

// The soak run (scripts/soak.sh, `make soak`): not part of `make test`.

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

// soakSample is one row of the soak's CSV.
type soakSample struct {
	at                       time.Duration
	proc                     procSample
	goroutines, heapInuse    float64
	cpuSeconds               float64
	tracked, dropped         float64
	imageErrors, discErrors  float64
	refreshes, stayWrites    float64
	scrape                   time.Duration
	scrapeErrors             int
	cyclesOK, cyclesFailed   int
	diskByInode, vmmTgids    int
	formatClusters, otherMap int
}

const soakCSVHeader = "seconds,rss_kib,hwm_kib,threads,fds,goroutines,heap_inuse_bytes,cpu_seconds,disks_tracked," +
	"events_dropped,image_errors,discovery_errors,discovery_refreshes,stay_writes,scrape_ms,scrape_errors," +
	"cycles_ok,cycles_failed,map_disk_by_inode,map_vmm_tgids,map_format_clusters,map_other_hash_entries"

func (r soakSample) csv() string {
	return fmt.Sprintf("%.0f,%d,%d,%d,%d,%.0f,%.0f,%.2f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.1f,%d,%d,%d,%d,%d,%d,%d",
		r.at.Seconds(), r.proc.rssKiB, r.proc.hwmKiB, r.proc.threads, r.proc.fds, r.goroutines, r.heapInuse, r.cpuSeconds,
		r.tracked, r.dropped, r.imageErrors, r.discErrors, r.refreshes, r.stayWrites, float64(r.scrape.Microseconds())/1000,
		r.scrapeErrors, r.cyclesOK, r.cyclesFailed, r.diskByInode, r.vmmTgids, r.formatClusters, r.otherMap)
}

// soakWarmup is left out of the memory trend: the Go heap and the
// kernel's caches settle in the first minutes.
const soakWarmup = 5 * time.Minute

// TestSoak runs the lab for FSPAIR_SOAK_DURATION (default 30m): one guest
// doing steady I/O on a disk that stays, and beside it short-lived VMs
// (paused QEMU processes) coming and going all the time, every third on a
// qcow2 image, every fifth with a disk hot-plugged and unplugged over QMP
// and every seventh with its image replaced under it. Every FSPAIR_SOAK_SAMPLE (default 30s) it
// records the exporter's memory, threads, descriptors, goroutines, tracked
// disks, dropped events, errors and BPF hash map entries, and at the end
// writes a CSV of them and a summary to FSPAIR_SOAK_DIR (default
// /var/tmp/fspair-soak). It fails on any lost or double count, any scrape
// error, a counter going down, an error in the exporter's log, or
// descriptors, goroutines or resident memory growing over the run.
func TestSoak(t *testing.T) {
	duration := envDuration(t, "FSPAIR_SOAK_DURATION", 30*time.Minute)
	every := envDuration(t, "FSPAIR_SOAK_SAMPLE", 30*time.Second)
	outDir := os.Getenv("FSPAIR_SOAK_DIR")
	if outDir == "" {
		outDir = "/var/tmp/fspair-soak"
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	stamp := os.Getenv("FSPAIR_SOAK_STAMP")
	if stamp == "" {
		stamp = time.Now().UTC().Format("20060102T150405Z")
	}
	base := filepath.Join(outDir, "soak-"+stamp)

	ctx := context.Background()
	l := lab.ForTest(t)
	h, err := l.NewHostFS(ctx, "xfs", 2048)
	if err != nil {
		t.Fatal(err)
	}
	stay := h.Path("stay.raw")
	if err := makeDataImage(ctx, stay, "raw"); err != nil {
		t.Fatal(err)
	}
	// The default discovery interval is 5s; 1s makes five times the
	// rounds, and image identification every 10s instead of every minute.
	ex := runExporter(t, "--no-discovery.libvirt", "--discovery.interval=1s", "--image.refresh-interval=10s")
	pid := ex.cmd.Process.Pid
	vm := steadyGuest(ctx, t, l, "soak-stay", stay)
	stayWrites := map[string]string{"source_file": stay, "op": "write"}
	sampler := newWatcher(ex.url, stay)
	if _, _, err := sampler.until(30*time.Second, "the staying disk's writes", func(s scrape) bool {
		v, _ := s.get("fspair_disk_requests_total", stayWrites)
		return v > 0
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("soak: %s, sampling every %s; results in %s.{csv,txt}", duration, every, base)

	// The churn: one short-lived VM after another until the end.
	dir := filepath.Join(h.Dir, "soak")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var (
		mu                      sync.Mutex
		cyclesOK, cyclesFailed  int
		hotplugs, replaces      int
		cycleErrs               []string
		appeared, gone          []time.Duration
		churnScrapes, churnSlow int
		churnSlowest            time.Duration
		churnBacks              []string
		stopChurn               = make(chan struct{})
		churnDone               = make(chan struct{})
	)
	start := time.Now()
	go func() {
		defer close(churnDone)
		w := newWatcher(ex.url)
		for i := 0; ; i++ {
			select {
			case <-stopChurn:
				mu.Lock()
				churnScrapes, churnSlow, churnSlowest, churnBacks = w.scrapes, w.slow, w.slowest, w.backs
				mu.Unlock()
				return
			default:
			}
			c := cycleConfig{dir: dir, name: fmt.Sprintf("soak-%05d", i), writes: churnWrites, qcow2: i%3 == 2,
				hotplug: i%5 == 4, timeout: 20 * time.Second}
			var r cycleResult
			var err error
			if i%7 == 6 {
				r, err = runReplaceCycle(w, c)
			} else {
				r, err = runCycle(w, c)
			}
			mu.Lock()
			if err != nil {
				cyclesFailed++
				if len(cycleErrs) < 20 {
					cycleErrs = append(cycleErrs, fmt.Sprintf("%.0fs: %v", time.Since(start).Seconds(), err))
				}
			} else {
				cyclesOK++
				appeared, gone = append(appeared, r.appeared), append(gone, r.gone)
				if c.hotplug {
					hotplugs++
				}
				if i%7 == 6 {
					replaces++
				}
			}
			mu.Unlock()
			time.Sleep(500 * time.Millisecond)
		}
	}()

	var samples []soakSample
	scrapeErrors := 0
	var scrapeErrs []string
	take := func() {
		at := time.Since(start)
		s, took, err := fetch(ex.url)
		if err != nil {
			scrapeErrors++
			if len(scrapeErrs) < 10 {
				scrapeErrs = append(scrapeErrs, fmt.Sprintf("%.0fs: %v", at.Seconds(), err))
			}
			return
		}
		sampler.observe(s)
		r := soakSample{at: at, scrape: took, scrapeErrors: scrapeErrors}
		if r.proc, err = readProc(pid); err != nil {
			t.Fatalf("exporter process: %v (did it exit?)\n%s", err, tail(ex.log.String(), 40))
		}
		r.goroutines, _ = s.get("go_goroutines", nil)
		r.heapInuse, _ = s.get("go_memstats_heap_inuse_bytes", nil)
		r.cpuSeconds, _ = s.get("process_cpu_seconds_total", nil)
		r.tracked, _ = s.get("fspair_disks_tracked", nil)
		r.dropped = s.sum("fspair_probe_events_dropped_total", nil)
		r.imageErrors, _ = s.get("fspair_image_errors_total", nil)
		r.discErrors = s.sum("fspair_discovery_errors_total", nil)
		r.refreshes, _ = s.get("fspair_discovery_refreshes_total", nil)
		r.stayWrites, _ = s.get("fspair_disk_requests_total", stayWrites)
		if maps, _, err := bpfIDs(pid); err == nil {
			if n, err := mapEntries(maps); err == nil {
				r.diskByInode, r.vmmTgids, r.formatClusters = n["disk_by_inode"], n["vmm_tgids"], n["format_clusters"]
				r.otherMap = n["host_devices"] + n["btrfs_devices"] + n["flush_windows"] + n["aio_calls"]
			}
		}
		mu.Lock()
		r.cyclesOK, r.cyclesFailed = cyclesOK, cyclesFailed
		mu.Unlock()
		samples = append(samples, r)
		t.Logf("soak %5.0fs: RSS %6d KiB, heap %5.1f MiB, %3.0f goroutines, %3d fds, %2.0f disks tracked, %4d cycles (%d failed), %.0f dropped, scrape %s",
			at.Seconds(), r.proc.rssKiB, r.heapInuse/(1<<20), r.goroutines, r.proc.fds, r.tracked, r.cyclesOK, r.cyclesFailed, r.dropped,
			took.Round(time.Millisecond))
	}
	take()
	tick := time.NewTicker(every)
	for time.Since(start) < duration {
		<-tick.C
		take()
	}
	tick.Stop()
	close(stopChurn)
	<-churnDone
	take() // the churn's last VM is gone: the tracked set is back to the staying disk
	var dropReasons []string
	if s, _, err := fetch(ex.url); err == nil {
		for _, m := range s.series("fspair_probe_events_dropped_total", nil) {
			if v := m.GetCounter().GetValue(); v > 0 {
				dropReasons = append(dropReasons, fmt.Sprintf("%s=%v", labelsOf(m)["reason"], v))
			}
		}
	}

	if out, err := vm.RunOK(ctx, `kill -0 "$(cat /tmp/steady.pid)" && kill "$(cat /tmp/steady.pid)"; cat /tmp/steady.log`); err != nil {
		t.Errorf("steady fio in the guest is not running at the end: %v: %s", err, out)
	}
	logErrors := ex.logErrors()

	// Report.
	var csv strings.Builder
	csv.WriteString(soakCSVHeader + "\n")
	for _, r := range samples {
		csv.WriteString(r.csv() + "\n")
	}
	if err := os.WriteFile(base+".csv", []byte(csv.String()), 0o644); err != nil {
		t.Error(err)
	}
	if err := os.WriteFile(base+"-exporter.log", []byte(ex.log.String()), 0o644); err != nil {
		t.Error(err)
	}
	var sum strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sum, format+"\n", args...) }
	first, last := samples[0], samples[len(samples)-1]
	var settled []soakSample // after the warm-up, before the final sample
	for _, r := range samples[:len(samples)-1] {
		if r.at >= soakWarmup {
			settled = append(settled, r)
		}
	}
	p("fspair soak %s: %s requested, %.0fs run, %d samples every %s", stamp, duration, last.at.Seconds(), len(samples), every)
	p("exporter: --discovery.interval=1s --image.refresh-interval=10s, /proc discovery; one TCG guest (steady fio randrw 20+20 IOPS) + short-lived paused QEMUs (1 in 3 on qcow2)")
	mu.Lock()
	p("cycles: %d ok, %d failed (%d with a hot-plug, %d with the image replaced); %d writes each, all counted exactly in the ok ones",
		cyclesOK, cyclesFailed, hotplugs, replaces, churnWrites)
	p("disk exported %s..%s after QEMU started; series gone %s..%s after it exited", minOf(appeared), maxOf(appeared), minOf(gone), maxOf(gone))
	for _, e := range cycleErrs {
		p("  cycle error: %s", e)
	}
	slowSamples := 0
	for _, r := range samples {
		if r.scrape >= time.Second {
			slowSamples++
		}
	}
	p("scrapes: %d by the churn (slowest %s, %d took 1s or more), %d samples (%d took 1s or more); %d failed",
		churnScrapes, churnSlowest.Round(time.Millisecond), churnSlow, len(samples), slowSamples, scrapeErrors)
	for _, e := range scrapeErrs {
		p("  scrape error: %s", e)
	}
	backs := append(append([]string{}, sampler.backs...), churnBacks...)
	mu.Unlock()
	p("counters of the staying disk that went down: %d; staying disk writes %.0f at the end", len(backs), last.stayWrites)
	p("exporter log: %d error lines, %d warnings; events dropped %.0f %v; image errors %.0f; discovery errors %.0f; %.0f discovery rounds; CPU %.1fs",
		len(logErrors), len(ex.grep("level=WARN")), last.dropped, dropReasons, last.imageErrors, last.discErrors, last.refreshes, last.cpuSeconds)
	rss := func(r soakSample) float64 { return float64(r.proc.rssKiB) }
	lo, hi := minMax(samples, rss)
	p("RSS KiB: first %d, min %.0f, max %.0f, last %d; peak (VmHWM) %d", first.proc.rssKiB, lo, hi, last.proc.rssKiB, last.proc.hwmKiB)
	slopeAll := slopePer10m(samples, rss)
	p("RSS trend over the whole run: %+.0f KiB per 10 min", slopeAll)
	slopeSettled := math.NaN()
	if len(settled) >= 10 {
		slopeSettled = slopePer10m(settled, rss)
		p("RSS trend after the %s warm-up: %+.0f KiB per 10 min (%d samples); heap in use %+.0f KiB per 10 min",
			soakWarmup, slopeSettled, len(settled), slopePer10m(settled, func(r soakSample) float64 { return r.heapInuse / 1024 }))
	} else {
		p("RSS trend after the warm-up: not judged, %d samples after %s (need 10)", len(settled), soakWarmup)
	}
	g := func(r soakSample) float64 { return r.goroutines }
	f := func(r soakSample) float64 { return float64(r.proc.fds) }
	glo, ghi := minMax(samples, g)
	flo, fhi := minMax(samples, f)
	p("goroutines: first %.0f, min %.0f, max %.0f, last %.0f; descriptors: first %d, min %.0f, max %.0f, last %d",
		first.goroutines, glo, ghi, last.goroutines, first.proc.fds, flo, fhi, last.proc.fds)
	_, trackedMax := minMax(samples, func(r soakSample) float64 { return r.tracked })
	p("disks tracked: first %.0f, max %.0f, last %.0f (the churn adds one or two at a time; more are other QEMUs on the host); BPF disk_by_inode first %d last %d, vmm_tgids first %d last %d, format_clusters first %d last %d, other hash entries last %d",
		first.tracked, trackedMax, last.tracked, first.diskByInode, last.diskByInode, first.vmmTgids, last.vmmTgids, first.formatClusters, last.formatClusters, last.otherMap)
	p("")
	p("memory over time (one row per 5 min):")
	p("  %7s %9s %10s %10s %4s %6s %7s", "minute", "RSS KiB", "heap MiB", "goroutines", "fds", "cycles", "tracked")
	next := time.Duration(0)
	for i, r := range samples {
		if r.at >= next || i == len(samples)-1 {
			p("  %7.1f %9d %10.1f %10.0f %4d %6d %7.0f", r.at.Minutes(), r.proc.rssKiB, r.heapInuse/(1<<20), r.goroutines, r.proc.fds, r.cyclesOK, r.tracked)
			for next <= r.at {
				next += 5 * time.Minute
			}
		}
	}
	if err := os.WriteFile(base+".txt", []byte(sum.String()), 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("soak summary (%s.txt, CSV %s.csv):\n%s", base, base, sum.String())

	// Verdicts.
	if cyclesFailed > 0 {
		t.Errorf("%d of %d cycles failed", cyclesFailed, cyclesOK+cyclesFailed)
	}
	if cyclesOK == 0 {
		t.Errorf("no cycle ran")
	}
	if scrapeErrors > 0 {
		t.Errorf("%d scrapes failed", scrapeErrors)
	}
	if len(backs) > 0 {
		t.Errorf("counters went down:\n%s", strings.Join(backs, "\n"))
	}
	if len(logErrors) > 0 {
		t.Errorf("exporter logged %d errors, first: %s", len(logErrors), logErrors[0])
	}
	if last.tracked != first.tracked {
		t.Errorf("%v disks tracked at the end, %v at the start", last.tracked, first.tracked)
	}
	if last.proc.fds != first.proc.fds {
		t.Errorf("exporter holds %d descriptors at the end, %d at the start", last.proc.fds, first.proc.fds)
	}
	if last.goroutines > first.goroutines+2 {
		t.Errorf("%v goroutines at the end, %v at the start", last.goroutines, first.goroutines)
	}
	if last.diskByInode != first.diskByInode || last.vmmTgids != first.vmmTgids || last.formatClusters != first.formatClusters {
		t.Errorf("BPF maps: disk_by_inode %d -> %d, vmm_tgids %d -> %d, format_clusters %d -> %d entries",
			first.diskByInode, last.diskByInode, first.vmmTgids, last.vmmTgids, first.formatClusters, last.formatClusters)
	}
	// Flat: after the warm-up the resident memory may wobble with the
	// garbage collector, but not climb; 512 KiB per 10 minutes is 1.5 MiB
	// over a 30-minute run, below the collector's own swings here.
	if !math.IsNaN(slopeSettled) && slopeSettled > 512 {
		t.Errorf("exporter RSS climbs by %.0f KiB per 10 min after the warm-up", slopeSettled)
	}
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 30m", name, v)
	}
	return d
}

func minMax(rs []soakSample, f func(soakSample) float64) (float64, float64) {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	sort.Float64s(vs)
	return vs[0], vs[len(vs)-1]
}

// slopePer10m is the least-squares slope of f over time, per 10 minutes.
func slopePer10m(rs []soakSample, f func(soakSample) float64) float64 {
	n := float64(len(rs))
	var sx, sy, sxx, sxy float64
	for _, r := range rs {
		x, y := r.at.Minutes()/10, f(r)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}
