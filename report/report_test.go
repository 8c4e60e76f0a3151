package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	t0   = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	t1   = t0.Add(10 * time.Minute)
	step = time.Minute
)

const mailDisk = `"instance":"kvm1:9477","domain":"mail1","uuid":"u1","target_device":"vda","source_file":"/srv/mail1.img"`

// fakeProm answers the report's queries from canned results, keyed by the
// start of the query; an unknown query fails the test.
func fakeProm(t *testing.T, answers map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		kind := "vector"
		if r.URL.Path == "/api/v1/query_range" {
			kind = "matrix"
		}
		// The longest key the query starts with wins.
		best := ""
		for key := range answers {
			if strings.HasPrefix(q, key) && len(key) > len(best) {
				best = key
			}
		}
		if best != "" {
			fmt.Fprintf(w, `{"status":"success","data":{"resultType":%q,"result":[%s]}}`, kind, answers[best])
			return
		}
		t.Errorf("unexpected query %s", q)
		fmt.Fprint(w, `{"status":"error","errorType":"bad_data","error":"unexpected"}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// points renders values at t0, t0+step, ... ("NaN" entries are left out).
func points(vals ...string) string {
	var p []string
	for i, v := range vals {
		if v == "NaN" {
			continue
		}
		p = append(p, fmt.Sprintf(`[%d,%q]`, t0.Add(time.Duration(i)*step).Unix(), v))
	}
	return strings.Join(p, ",")
}

func fleetAnswers() map[string]string {
	return map[string]string{
		"fspair_kdb_pair_verdict": `{"metric":{"workload":"mail","guest_fs":"xfs","host_fs":"xfs","verdict":"worst","source":"djordjevic2022"},"value":[0,"1"]},
			{"metric":{"workload":"mail","guest_fs":"ext4","host_fs":"xfs","verdict":"best","source":"djordjevic2022"},"value":[0,"1"]},
			{"metric":{"workload":"web","guest_fs":"xfs","host_fs":"xfs","verdict":"best","source":"site"},"value":[0,"1"]}`,
		"count by (class, guest_fs, host_fs)":                   `{"metric":{"class":"mail","guest_fs":"xfs","host_fs":"xfs"},"value":[0,"2"]}`,
		"quantile by (class, guest_fs, host_fs)":                `{"metric":{"class":"mail","guest_fs":"xfs","host_fs":"xfs"},"value":[0,"1.5"]}`,
		"fspair_kdb_workload_info":                              `{"metric":{"workload":"mail","advice":"prefer ext4"},"value":[0,"1"]}`,
		`domain_disk:fspair_pair_verdict:info{verdict="worst"}`: `{"metric":{` + mailDisk + `,"class":"mail","guest_fs":"xfs","host_fs":"xfs","verdict":"worst","source":"djordjevic2022","better_pairs":"ext4/xfs"},"value":[0,"1"]}`,
		"fspair_disk_info": `{"metric":{` + mailDisk + `,"guest_fs":"xfs","host_fs":"xfs","format":"raw","cache":"none"},"value":[0,"1"]},
			{"metric":{"instance":"kvm1:9477","domain":"web1","uuid":"u2","target_device":"vdb","source_file":"/srv/web1.img","guest_fs":"ext4","host_fs":"xfs"},"value":[0,"1"]}`,
		"topk(1, domain_disk:fspair_disk_rw_requests:rate5m)": `{"metric":{` + mailDisk + `},"value":[0,"300"]}`,
		`domain_disk:fspair_pair_verdict:info{instance=`:      `{"metric":{` + mailDisk + `,"class":"mail","verdict":"worst","source":"djordjevic2022","better_pairs":"ext4/xfs"},"value":[0,"1"]}`,
		"domain_disk:fspair_workload_class:info": `{"metric":{` + mailDisk + `,"class":"web"},"values":[` + points("1", "1", "1", "NaN", "NaN", "NaN", "NaN", "NaN", "NaN", "NaN", "NaN") + `]},
			{"metric":{` + mailDisk + `,"class":"mixed"},"values":[` + points("NaN", "NaN", "NaN", "1", "NaN", "NaN", "NaN", "NaN", "NaN", "NaN", "NaN") + `]},
			{"metric":{` + mailDisk + `,"class":"mail"},"values":[` + points("NaN", "NaN", "NaN", "NaN", "1", "1", "1", "1", "1", "1", "1") + `]}`,
		"domain_disk:fspair_workload_score:ratio": `{"metric":{` + mailDisk + `,"class":"mail"},"values":[` + points("0", "0", "0", "0.5", "1", "1", "1", "1", "1", "1", "1") + `]}`,
		"domain_disk:fspair_disk_stage_seconds:mean5m": `{"metric":{` + mailDisk + `,"stage":"file","op":"write"},"values":[` + points("0.002", "0.002", "NaN", "0.003", "0.003", "0.003", "0.003", "0.003", "0.003", "0.003", "0.003") + `]},
			{"metric":{` + mailDisk + `,"stage":"device","op":"write"},"values":[` + points("0.001", "0.001", "0.001", "0.001", "0.001", "0.001", "0.001", "0.001", "0.001", "0.001", "0.001") + `]}`,
		"domain_disk:fspair_write_amplification:ratio_rate5m":     `{"metric":{` + mailDisk + `},"values":[` + points("1.5", "1.5", "1.5", "1.5", "1.5", "1.5", "1.5", "1.5", "1.5", "1.5", "1.5") + `]}`,
		"domain_disk:fspair_disk_flush_device_write_bytes:mean5m": ``,
		"domain_disk:fspair_disk_requests:rate5m":                 `{"metric":{` + mailDisk + `,"op":"flush"},"values":[` + points("100", "100") + `]}`,
	}
}

func TestReportHTML(t *testing.T) {
	srv := fakeProm(t, fleetAnswers())
	out := t.TempDir()
	files, err := Write(context.Background(), Options{Prometheus: srv.URL, From: t0, To: t1, Step: step, Out: out, Width: 1200})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0] != filepath.Join(out, "report.html") {
		t.Fatalf("files %v, want report.html only (no Chromium asked for)", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{
		// The matrix: the worst mail pair with its two disks and their amplification, the best
		// pair with none, the web verdict from the site's own measurements.
		`<td style="background:#ffcdd2">worst<br><b>2 VM disks</b><br>WA 1.50</td>`,
		`<td style="background:#c8e6c9">best</td>`,
		`<td style="background:#c8e6c9">best (site)</td>`,
		// The busiest disk is the one shown, with its verdict.
		`<h2>VM disk mail1/vda</h2>`,
		`Knowledge base (djordjevic2022): <b>worst</b> pair for mail; better pairs: ext4/xfs`,
		`mail1/vda on kvm1:9477: mail on xfs/xfs (djordjevic2022); better: ext4/xfs`,
		// Empty panels say so instead of drawing nothing.
		`no data in this range`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// The class timeline: 3 web steps, 1 mixed, 7 mail.
	for class, n := range map[string]int{"web": 3, "mixed": 1, "mail": 7} {
		if got := strings.Count(page, `fill="`+classColour[class]+`"/>`); got != n {
			t.Errorf("timeline has %d %s steps, want %d", got, class, n)
		}
	}
	// The file-stage latency has a gap at step 2: two line pieces; the device stage one.
	lat := page[strings.Index(page, "<h3>Latency by stage</h3>"):]
	lat = lat[:strings.Index(lat, "</svg>")]
	if got := strings.Count(lat, "<polyline"); got != 3 {
		t.Errorf("latency chart has %d line pieces, want 3 (file split by a gap, device whole)", got)
	}
	if !strings.Contains(lat, "3 ms") && !strings.Contains(lat, "3.15 ms") {
		t.Errorf("latency axis not in ms:\n%s", lat)
	}
}

// TestReportDisagreement: where the published studies and the site rated
// a pair differently, the matrix cell, the list of disks on worst pairs
// and the disk's section show both verdicts and say which one the rules
// act on.
func TestReportDisagreement(t *testing.T) {
	answers := fleetAnswers()
	// The site measured mail xfs/xfs worst (published: best) at a
	// confidence the rules act on, and could not call ext4/xfs (published
	// best, which stays in force).
	answers["fspair_kdb_pair_verdict"] = `{"metric":{"workload":"mail","guest_fs":"xfs","host_fs":"xfs","verdict":"worst","source":"site","published_verdict":"best"},"value":[0,"1"]},
			{"metric":{"workload":"mail","guest_fs":"ext4","host_fs":"xfs","verdict":"best","source":"djordjevic2022","site_verdict":"not_distinguishable"},"value":[0,"1"]}`
	answers[`domain_disk:fspair_pair_verdict:info{verdict="worst"}`] = `{"metric":{` + mailDisk + `,"class":"mail","guest_fs":"xfs","host_fs":"xfs","verdict":"worst","source":"site","published_verdict":"best","better_pairs":"ext4/xfs"},"value":[0,"1"]}`
	answers[`domain_disk:fspair_pair_verdict:info{instance=`] = `{"metric":{` + mailDisk + `,"class":"mail","verdict":"worst","source":"site","published_verdict":"best","better_pairs":"ext4/xfs"},"value":[0,"1"]}`
	srv := fakeProm(t, answers)
	files, err := Write(context.Background(), Options{Prometheus: srv.URL, From: t0, To: t1, Step: step, Out: t.TempDir(), Width: 1200})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{
		`<td style="background:#ffcdd2">worst (site)<br><i>published: best</i><br><b>2 VM disks</b><br>WA 1.50</td>`,
		`<td style="background:#c8e6c9">best<br><i>site: not distinguishable</i></td>`,
		`mail1/vda on kvm1:9477: mail on xfs/xfs (site; published: best; the rules act on the site&#39;s); better: ext4/xfs`,
		`Knowledge base (site; published: best; the rules act on the site&#39;s): <b>worst</b> pair for mail; better pairs: ext4/xfs`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// A verdict both rated alike still names its other source; one only
	// the studies rated names its source alone.
	if got := verdictSources(map[string]string{"source": "djordjevic2022", "site_verdict": "worst"}); got != "djordjevic2022; site: worst; the rules act on the published verdict" {
		t.Errorf("published verdict in force beside a site one: %q", got)
	}
	if got := verdictSources(map[string]string{"source": "djordjevic2022"}); got != "djordjevic2022" {
		t.Errorf("published verdict alone: %q", got)
	}
}

func TestReportPNG(t *testing.T) {
	srv := fakeProm(t, fleetAnswers())
	out := t.TempDir()
	files, err := Write(context.Background(), Options{Prometheus: srv.URL, From: t0, To: t1, Step: step, Out: out, Width: 1000, Chromium: "chromium"})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("files %v, want report.html and report.png", files)
	}
	f, err := os.Open(files[1])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatalf("report.png: %v", err)
	}
	if cfg.Width != 1000 || cfg.Height < 800 {
		t.Errorf("report.png is %dx%d, want 1000 wide and the whole page tall", cfg.Width, cfg.Height)
	}
}

func TestReportErrors(t *testing.T) {
	ctx := context.Background()
	noKB := fleetAnswers()
	noKB["fspair_kdb_pair_verdict"] = ""
	_, err := Write(ctx, Options{Prometheus: fakeProm(t, noKB).URL, From: t0, To: t1, Step: step, Out: t.TempDir()})
	if !errors.Is(err, ErrNoData) || !strings.Contains(err.Error(), "fspair-kdb.rules.yml") {
		t.Errorf("without the knowledge base: %v, want ErrNoData naming the rule file", err)
	}
	_, err = Write(ctx, Options{Prometheus: fakeProm(t, fleetAnswers()).URL, From: t0, To: t1, Step: step, Out: t.TempDir(), Disk: "db1/vdz"})
	if err == nil || !strings.Contains(err.Error(), "known: mail1/vda, web1/vdb") {
		t.Errorf("unknown disk: %v, want the known disks listed", err)
	}
	_, err = Write(ctx, Options{Prometheus: "localhost", From: t0, To: t1, Step: step, Out: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "want e.g. http://") {
		t.Errorf("bad URL: %v", err)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": "bad_data", "error": "parse error"})
	}))
	defer bad.Close()
	_, err = Write(ctx, Options{Prometheus: bad.URL, From: t0, To: t1, Step: step, Out: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "bad_data: parse error") {
		t.Errorf("query error: %v", err)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-since", "x"}, {"-to", "yesterday"}, {"-from", "2026-11-21T12:00:00Z", "-to", "2026-11-21T11:00:00Z"}, {"extra"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("run(%v) = %d, want 2 (usage error); stderr %q", args, code, errb.String())
		}
		if errb.Len() == 0 {
			t.Errorf("run(%v): no message", args)
		}
	}
	to, from, err := timeRange("", "2026-11-21T12:00:00Z", 30*time.Minute, time.Now())
	if err != nil || !to.Equal(t0) || !from.Equal(t0.Add(-30*time.Minute)) {
		t.Errorf("timeRange = %v, %v, %v", to, from, err)
	}
}

func TestHuman(t *testing.T) {
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{{0.0025, "s", "2.5 ms"}, {2e-5, "s", "20 us"}, {3, "s", "3 s"}, {0, "s", "0"}, {49152, "B", "48 KiB"}, {3 << 20, "B", "3 MiB"}, {1.5, "x", "1.5x"}} {
		if got := human(c.v, c.unit); got != c.want {
			t.Errorf("human(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
}
