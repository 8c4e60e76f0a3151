package dashboards

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fspair/fspair/tests/alerting"
)

// One real Prometheus per release for the package's tests (tests/alerting's
// stack): the pinned one parses every query (rule target-promql) and, loaded
// with the repository's committed rules and scraping synthetic exporter
// series, each evaluates every panel as Grafana would show it.
var (
	stackMu    sync.Mutex
	stacks     = map[string]*alerting.Stack{}
	stackErrs  = map[string]error{}
	stackClean []func() error
)

// The synthetic disks: two VMs running the same mail workload, one on the
// pair the knowledge base lists as worst for mail (xfs in the VM, btrfs on
// the host) and one on a best pair (ext4/ext4), as in tests/alerting.
func syntheticDisks() []alerting.SyntheticDisk {
	return []alerting.SyntheticDisk{
		{
			Domain: "mail-worst", UUID: "4d1c2b3a-0000-4000-8000-0000000000d1", TargetDevice: "vda",
			SourceFile: "/srv/btrfs/mail-worst.raw", Format: "raw", GuestFS: "xfs", HostFS: "btrfs",
			HostDevice: "/dev/vdb", HostMountpoint: "/srv/btrfs", Workload: alerting.WorkloadMail,
		},
		{
			Domain: "mail-best", UUID: "4d1c2b3a-0000-4000-8000-0000000000d2", TargetDevice: "vda",
			SourceFile: "/srv/ext4/mail-best.raw", Format: "raw", GuestFS: "ext4", HostFS: "ext4",
			HostDevice: "/dev/vdc", HostMountpoint: "/srv/ext4", Workload: alerting.WorkloadMail,
		},
	}
}

func startStack(prometheus string, native bool) (*alerting.Stack, error) {
	// The committed rules but for the settle time: the pairing, the verdict
	// and the fleet view wait for a disk's class to have held for it, 6
	// minutes with the committed rules, which would add 6 minutes to this
	// package's tests, about the panels' queries, not about settling
	// (rules/gen's promtool tests are; its TestSettleFlag checks that -settle
	// changes nothing else).
	gen, err := os.MkdirTemp("", "fspair-dashboards-gen-")
	if err != nil {
		return nil, fmt.Errorf("make rules directory: %w", err)
	}
	stackClean = append(stackClean, func() error { return os.RemoveAll(gen) })
	genCtx, genCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer genCancel()
	if err := alerting.GenerateRulesDir(genCtx, gen, alerting.RuleOptions{Short: "5m", Long: "1h", ForScale: 1, Settle: "2s"}); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fspair-dashboards-rules-")
	if err != nil {
		return nil, fmt.Errorf("make rules directory: %w", err)
	}
	stackClean = append(stackClean, func() error { return os.RemoveAll(dir) })
	for _, f := range []string{"fspair.rules.yml", "fspair-kdb.rules.yml", "fspair.alerts.yml"} {
		// Every group at the stack's global interval (1 s).
		b, err := alerting.WithoutGroupIntervals(filepath.Join(gen, f))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return nil, err
		}
	}
	target, err := alerting.NewSyntheticTarget(syntheticDisks())
	if err != nil {
		return nil, err
	}
	stackClean = append(stackClean, target.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := alerting.New(ctx, alerting.Options{
		RulesDir:      dir,
		ScrapeTargets: []alerting.Target{{Address: target.Addr()}},
		Prometheus:    prometheus,
		// The synthetic target writes classic histograms; in the native
		// variant Prometheus stores them as native ones.
		NativeHistograms: native,
	})
	if err != nil {
		return nil, err
	}
	stackClean = append(stackClean, s.Close)
	return s, nil
}

// promStack is the pinned Prometheus's stack (promStackOf).
func promStack(t *testing.T) *alerting.Stack {
	t.Helper()
	return promStackOf(t, stackVariant{release: alerting.Releases(t)[0]})
}

// stackVariant is a Prometheus release and how it stores the exporter's
// histograms: classic series (_bucket, _sum, _count), or native
// histograms only (what fspair_exporter --histograms=native gives a
// Prometheus that scrapes protobuf).
type stackVariant struct {
	release alerting.PromRelease
	native  bool
}

func (v stackVariant) name() string {
	if v.native {
		return v.release.Name + "-native-histograms"
	}
	return v.release.Name
}

// stackVariants are every release with classic histograms, and the
// releases that store native histograms (3 and later; 2.42 only behind a
// feature flag) with native ones.
func stackVariants(t *testing.T) []stackVariant {
	var out []stackVariant
	for _, r := range alerting.Releases(t) {
		out = append(out, stackVariant{release: r})
		if r.Major >= 3 {
			out = append(out, stackVariant{release: r, native: true})
		}
	}
	return out
}

// promStackOf starts the stack of variant v on first use; the test fails,
// never skips, when Prometheus or Alertmanager is missing
// (scripts/promstack.sh builds the pinned ones, make deps installs 2.42).
func promStackOf(t *testing.T, v stackVariant) *alerting.Stack {
	t.Helper()
	stackMu.Lock()
	defer stackMu.Unlock()
	if _, ok := stacks[v.name()]; !ok && stackErrs[v.name()] == nil {
		stacks[v.name()], stackErrs[v.name()] = startStack(v.release.Prometheus, v.native)
	}
	if err := stackErrs[v.name()]; err != nil {
		t.Fatalf("start Prometheus %s to check the queries with: %v", v.name(), err)
	}
	return stacks[v.name()]
}

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(stackClean) - 1; i >= 0; i-- {
		if err := stackClean[i](); err != nil {
			fmt.Fprintf(os.Stderr, "dashboards: stop test stack: %v\n", err)
		}
	}
	os.Exit(code)
}

// checkPromQL asks Prometheus to parse and run every query, variables
// replaced; an unparsable query comes back as bad_data.
func checkPromQL(t *testing.T, s *alerting.Stack, qs []query) []problem {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []problem
	for _, q := range qs {
		if _, err := s.Query(ctx, Substitute(q.expr, "5m", nil)); err != nil {
			out = append(out, problem{ruleTargetPromQL, q.where, err.Error()})
		}
	}
	return out
}

// waitForRules waits until the deepest rules of the chain have a value for
// the synthetic disks: each disk against the best pair needs the class,
// the pair, the fleet medians and the best pair.
func waitForRules(t *testing.T, s *alerting.Stack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, q := range []string{
		`domain_disk:fspair_write_amplification_vs_best:ratio_rate1h`,
		`domain_disk:fspair_hostfs_latency_overhead_vs_best:ratio_rate1h`,
		`domain_disk:fspair_pair_verdict:info`,
	} {
		for {
			got, err := s.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			domains := map[string]bool{}
			for _, s := range got {
				domains[s.Labels["domain"]] = true
			}
			if len(domains) == len(syntheticDisks()) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s has series for %d disks after 3 minutes, want all %d: %v", q, len(domains), len(syntheticDisks()), got)
			case <-time.After(time.Second):
			}
		}
	}
}

// TestPanelsOnSyntheticDisks shows every panel of the committed dashboards
// the way Grafana would for the worst-pair disk, against the committed
// rules fed by synthetic exporter series: every query must run, and return
// data unless EmptyReasons says why it cannot here. A panel reading a
// label or series the rules do not produce comes back empty and fails.
func TestPanelsOnSyntheticDisks(t *testing.T) {
	for _, v := range stackVariants(t) {
		t.Run("prometheus-"+v.name(), func(t *testing.T) {
			s := promStackOf(t, v)
			if v.native {
				nativeOnly(t, s)
			}
			panelsOnSyntheticDisks(t, s)
		})
	}
}

func panelsOnSyntheticDisks(t *testing.T, s *alerting.Stack) {
	waitForRules(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The dashboard as opened on the worst-pair disk, every multi-value
	// variable at All.
	values := map[string]string{"job": "fspair", "domain": "mail-worst", "disk": "vda"}
	l := newLinter(t)
	files := readDashboards(t, ".")
	ran, empty := 0, 0
	for _, name := range sortedKeys(files) {
		_, qs := l.lint(files[name])
		for _, q := range qs {
			expr := Substitute(q.expr, "30s", values)
			got, err := s.Query(ctx, expr)
			ran++
			switch {
			case err != nil:
				t.Errorf("%s: %s: %v", name, q.where, err)
			case len(got) > 0:
			case WhyEmpty(expr) != "":
				empty++
				t.Logf("%s: %s: empty: %s", name, q.where, WhyEmpty(expr))
			default:
				t.Errorf("%s: %s: no data on the synthetic disks:\n%s", name, q.where, expr)
			}
		}
	}
	t.Logf("%d queries run, %d empty for a stated reason", ran, empty)

	// The headline of the fleet dashboard: the worst-pair disk is listed.
	fleet := files["fspair-fleet.json"]
	if fleet == nil {
		t.Fatal("no fspair-fleet.json")
	}
	for _, p := range flatten(fleet.Panels) {
		if p.Type == panelTypeRow || p.Title != "VM disks on the knowledge base's worst pairs" {
			continue
		}
		got, err := s.Query(ctx, Substitute(p.Targets[0].Expr, "30s", values))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Labels["domain"] != "mail-worst" || got[0].Labels["better_pairs"] == "" {
			t.Errorf("%q lists %v, want mail-worst alone with its better pairs", p.Title, got)
		}
		return
	}
	t.Error("fspair-fleet.json has no panel listing the disks on worst pairs")
}

// nativeOnly checks that stack s stores fspair's histograms as native ones
// and has none of their classic series, so that a panel reading only those
// comes back empty and fails.
func nativeOnly(t *testing.T, s *alerting.Stack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		native, err := s.Query(ctx, `count(histogram_count(fspair_disk_stage_seconds))`)
		if err != nil {
			t.Fatal(err)
		}
		if len(native) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no native fspair_disk_stage_seconds histogram after a minute")
		case <-time.After(time.Second):
		}
	}
	classic, err := s.Query(ctx, `count by (__name__) ({__name__=~"fspair_.+_(bucket|sum|count)"})`)
	if err != nil {
		t.Fatal(err)
	}
	if len(classic) > 0 {
		t.Fatalf("the native-histogram Prometheus stores classic series too: %v", classic)
	}
}

// leMatcher is a selector on a bucket's le text (le="4096", le=~"...").
var leMatcher = regexp.MustCompile(`\ble\s*(=|!=|=~|!~)\s*\\?"`)

// TestBucketLabels: Prometheus 3 stores a classic histogram bucket's le in
// float form ("512.0"), 2.x as the exporter wrote it ("512"). fspair's
// rules and panels never select a bucket by its le text (they aggregate by
// le and read it as a number), so they read the same on both; only a
// heatmap whose range spans an in-place upgrade shows both forms (README).
func TestBucketLabels(t *testing.T) {
	root, err := alerting.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "rules", "*.yml"))
	more, _ := filepath.Glob(filepath.Join(root, "dashboards", "*.json"))
	if len(files) < 3 || len(more) < 4 {
		t.Fatalf("found %d rule files and %d dashboards, want at least 3 and 4", len(files), len(more))
	}
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := leMatcher.Find(b); m != nil {
			t.Errorf("%s selects buckets by their le text (%s): it matches nothing on one of Prometheus 2 and 3", f, m)
		}
	}
	for _, r := range alerting.Releases(t) {
		t.Run("prometheus-"+r.Name, func(t *testing.T) {
			les := bucketBounds(t, promStackOf(t, stackVariant{release: r}))
			// An integral bound the exporter writes plainly ("4096"); one
			// written in exponent form ("1.048576e+06") is the same in both.
			plain, dotZero := 0, 0
			for _, le := range les {
				if _, err := strconv.ParseFloat(le, 64); err != nil {
					t.Fatalf("le=%q is no number", le)
				}
				switch {
				case strings.HasSuffix(le, ".0"):
					dotZero++
				case le != "+Inf" && !strings.ContainsAny(le, ".e"):
					plain++
				}
			}
			t.Logf("%d bucket bounds: %d integral as written (\"4096\"), %d in float form (\"4096.0\")", len(les), plain, dotZero)
			switch {
			case r.Major >= 3 && (plain > 0 || dotZero == 0):
				t.Errorf("Prometheus %s: %d integral bounds stored as written, %d in float form; 3.x stores every one in float form", r.Name, plain, dotZero)
			case r.Major < 3 && (plain == 0 || dotZero > 0):
				t.Errorf("Prometheus %s: %d integral bounds stored as written, %d in float form; 2.x stores them as written", r.Name, plain, dotZero)
			}
		})
	}
}

// bucketBounds returns the distinct le values of fspair's classic
// histograms as stack s stored them, waiting for the first scrapes.
func bucketBounds(t *testing.T, s *alerting.Stack) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		got, err := s.Query(ctx, `count by (le) ({__name__=~"fspair_.+_bucket"})`)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 1 {
			var les []string
			for _, g := range got {
				les = append(les, g.Labels["le"])
			}
			return les
		}
		select {
		case <-ctx.Done():
			t.Fatal("no fspair histogram buckets scraped after a minute")
		case <-time.After(time.Second):
		}
	}
}

// TestLeMatcher shows the le check of TestBucketLabels bites: selectors on
// le as rule files (YAML) and dashboards (JSON, quotes escaped) write them.
func TestLeMatcher(t *testing.T) {
	for _, c := range []struct {
		text string
		want bool
	}{
		{`rate(x_bucket{le="4096"}[5m])`, true},
		{`x_bucket{le=~"4096(\\.0)?"}`, true},
		{`"expr": "x_bucket{le=\"4096\"}"`, true},
		{`x_bucket{job="fspair", le != "1"}`, true},
		{`sum by (le) (rate(x_bucket[5m]))`, false},
		{`x{handle="a", file="b"}`, false},
	} {
		if got := leMatcher.MatchString(c.text); got != c.want {
			t.Errorf("leMatcher on %s: %v, want %v", c.text, got, c.want)
		}
	}
}
