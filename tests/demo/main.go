// Command demo runs fspair end to end on one machine: two lab VMs on two
// different guest/host file-system pairs with different workloads,
// fspair_exporter, and a Prometheus scraping it; then prints where to look
// and a per-disk summary read back from Prometheus. Ctrl-C (or --duration)
// tears everything down.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fspair/fspair/tests/lab"
)

type vmSpec struct {
	name, hostFS, guestFS, format, cache, aio, workload string
	// fio runs inside the guest on the mounted file system, in the background.
	fio string
}

var vms = []vmSpec{
	{
		name: "demo-web", hostFS: "ext4", guestFS: "xfs", format: "raw", cache: "none", aio: "native",
		workload: "random reads of small files plus appends to a log (web-like)",
		fio: "fio --name=web --directory=/mnt --nrfiles=200 --filesize=16k --rw=randread --bs=4k " +
			"--ioengine=psync --direct=1 --time_based --runtime=86400 --thinktime=2000 " +
			"--name=log --directory=/mnt --filename=access.log --rw=write --bs=512 --size=8m " +
			"--ioengine=psync --fdatasync=1 --time_based --runtime=86400 --thinktime=20000",
	},
	{
		name: "demo-mail", hostFS: "btrfs", guestFS: "ext4", format: "qcow2", cache: "writeback", aio: "threads",
		workload: "small synchronous writes, fsync after each (mail-like)",
		fio: "fio --name=mail --directory=/mnt --nrfiles=100 --filesize=16k --rw=randrw --rwmixread=50 --bs=4k " +
			"--ioengine=psync --fsync=1 --time_based --runtime=86400 --thinktime=1000",
	},
}

func main() { os.Exit(run()) }

func run() int {
	var (
		exporterBin = flag.String("exporter", "bin/fspair_exporter", "fspair_exporter binary")
		exporterAt  = flag.String("exporter.listen", "127.0.0.1:9477", "exporter listen address")
		promAt      = flag.String("prometheus.listen", "127.0.0.1:19090", "Prometheus listen address")
		cacheDir    = flag.String("lab.cache", lab.DefaultCacheDir(), "lab kit cache")
		duration    = flag.Duration("duration", 0, "stop after this long (0 = until Ctrl-C)")
		every       = flag.Duration("summary.interval", 30*time.Second, "how often to print the summary")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := demo(ctx, *exporterBin, *exporterAt, *promAt, *cacheDir, *every); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}

func demo(ctx context.Context, exporterBin, exporterAt, promAt, cacheDir string, every time.Duration) (err error) {
	setup := context.Background() // setup steps finish even if Ctrl-C comes mid-way; teardown follows
	l, err := lab.New(setup, "", cacheDir, prefixed("lab: "))
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("demo: tearing down (VMs, mounts, loop devices)")
		if cerr := l.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	for _, v := range vms {
		h, err := l.NewHostFS(setup, v.hostFS, 2048)
		if err != nil {
			return err
		}
		img := h.Path(v.name + "." + v.format)
		if err := lab.MakeImage(setup, img, v.format, v.guestFS, 512); err != nil {
			return err
		}
		vm, err := l.StartVM(setup, lab.VMConfig{Name: v.name, Disks: []lab.DiskConfig{
			{ID: "vda", File: img, Format: v.format, Cache: v.cache, AIO: v.aio, Discard: "unmap"},
		}})
		if err != nil {
			return err
		}
		dev, err := vm.GuestDevice(setup, "vda")
		if err != nil {
			return err
		}
		if _, err := vm.RunOK(setup, fmt.Sprintf("mount -t %s /dev/%s /mnt && (%s >/dev/null 2>&1 &)", v.guestFS, dev, v.fio)); err != nil {
			return fmt.Errorf("start workload in %s: %w", v.name, err)
		}
		fmt.Printf("demo: %s: guest %s on host %s (%s, cache=%s, aio=%s): %s\n",
			v.name, v.guestFS, v.hostFS, v.format, v.cache, v.aio, v.workload)
	}

	exp := exec.Command(exporterBin, "--web.listen-address="+exporterAt, "--no-discovery.libvirt", "--log.level=warn")
	exp.Stdout, exp.Stderr = prefixed("exporter: "), prefixed("exporter: ")
	if err := exp.Start(); err != nil {
		return fmt.Errorf("start %s (run 'make build' first): %w", exporterBin, err)
	}
	defer stopProcess(exp)

	promDir, err := os.MkdirTemp("", "fspair-demo-prometheus")
	if err != nil {
		return err
	}
	defer os.RemoveAll(promDir)
	cfg := fmt.Sprintf("global:\n  scrape_interval: 5s\n  evaluation_interval: 5s\nscrape_configs:\n"+
		"  - job_name: fspair\n    static_configs:\n      - targets: ['%s']\n", exporterAt)
	if err := os.WriteFile(filepath.Join(promDir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	prom := exec.Command("prometheus", "--config.file="+filepath.Join(promDir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(promDir, "data"), "--web.listen-address="+promAt, "--log.level=warn")
	prom.Stdout, prom.Stderr = prefixed("prometheus: "), prefixed("prometheus: ")
	if err := prom.Start(); err != nil {
		return fmt.Errorf("start prometheus (make deps installs it): %w", err)
	}
	defer stopProcess(prom)

	fmt.Printf("\ndemo: running. Look at:\n  exporter    http://%s/metrics\n  prometheus  http://%s/graph"+
		"  (try: rate(fspair_disk_requests_total[1m]))\n  Ctrl-C to stop and clean up.\n\n", exporterAt, promAt)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if err := summary(ctx, promAt); err != nil {
				fmt.Printf("demo: summary: %v\n", err)
			}
		}
	}
}

// queries of the summary table, by column.
var columns = []struct{ head, query, format string }{
	{"READ/s", `sum by (domain, target_device) (rate(fspair_disk_requests_total{op="read"}[1m]))`, "%.1f"},
	{"WRITE/s", `sum by (domain, target_device) (rate(fspair_disk_requests_total{op="write"}[1m]))`, "%.1f"},
	{"FLUSH/s", `sum by (domain, target_device) (rate(fspair_disk_requests_total{op="flush"}[1m]))`, "%.1f"},
	{"KiB/req", `sum by (domain, target_device) (rate(fspair_disk_bytes_total{op=~"read|write"}[1m])) / 1024 / sum by (domain, target_device) (rate(fspair_disk_requests_total{op=~"read|write"}[1m]))`, "%.1f"},
	{"RANDOM%", `100 * sum by (domain, target_device) (rate(fspair_disk_random_requests_total[1m])) / (sum by (domain, target_device) (rate(fspair_disk_random_requests_total[1m])) + sum by (domain, target_device) (rate(fspair_disk_sequential_requests_total[1m])))`, "%.0f"},
	{"SYNC_WR%", `100 * sum by (domain, target_device) (rate(fspair_disk_sync_writes_total[1m])) / sum by (domain, target_device) (rate(fspair_disk_requests_total{op="write"}[1m]))`, "%.0f"},
	{"P99_WRITE_ms", `1000 * histogram_quantile(0.99, sum by (domain, target_device, le) (rate(fspair_disk_request_duration_seconds_bucket{op="write"}[1m])))`, "%.2f"},
}

func summary(ctx context.Context, promAt string) error {
	rows := map[string]map[string]string{}
	pairs := map[string]string{}
	info, err := query(ctx, promAt, `fspair_disk_info`)
	if err != nil {
		return err
	}
	for _, s := range info {
		k := s.Metric["domain"] + "/" + s.Metric["target_device"]
		pairs[k] = s.Metric["guest_fs"] + "/" + s.Metric["host_fs"] + " " + s.Metric["format"]
		rows[k] = map[string]string{}
	}
	for _, c := range columns {
		res, err := query(ctx, promAt, c.query)
		if err != nil {
			return err
		}
		for _, s := range res {
			k := s.Metric["domain"] + "/" + s.Metric["target_device"]
			if rows[k] == nil {
				continue
			}
			v, _ := strconv.ParseFloat(s.Value[1].(string), 64)
			rows[k][c.head] = fmt.Sprintf(c.format, v)
		}
	}
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	head := []string{"DISK", "PAIR(guest/host)"}
	for _, c := range columns {
		head = append(head, c.head)
	}
	fmt.Fprintf(w, "%s\t\n", strings.Join(head, "\t"))
	for _, k := range keys {
		line := []string{k, pairs[k]}
		for _, c := range columns {
			v := rows[k][c.head]
			if v == "" || v == "NaN" {
				v = "-"
			}
			line = append(line, v)
		}
		fmt.Fprintf(w, "%s\t\n", strings.Join(line, "\t"))
	}
	fmt.Printf("demo: per-disk summary from Prometheus at %s (last minute)\n", time.Now().Format("15:04:05"))
	return w.Flush()
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

func query(ctx context.Context, promAt, q string) ([]sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+promAt+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query prometheus: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []sample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("decode prometheus answer: %w", err)
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s", out.Error)
	}
	return out.Data.Result, nil
}

func stopProcess(c *exec.Cmd) {
	if c.Process == nil {
		return
	}
	c.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.Process.Kill()
		<-done
	}
}

// prefixed writes each line with a prefix to stdout.
func prefixed(prefix string) io.Writer { return &prefixWriter{prefix: prefix} }

type prefixWriter struct {
	prefix string
	buf    []byte
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		fmt.Printf("%s%s\n", w.prefix, w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}
