package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fspair/fspair/tests/alerting"
)

// The rule files rules/gen writes for a fleet, under its -out directory.
const (
	HostRules  = "fleet/fspair-host.rules.yml"
	FleetRules = "fleet/fspair-fleet.rules.yml"
)

// RulerLabel is Thanos Ruler's external label: its recorded series and
// alerts say they come from the fleet rules, not from one host.
const RulerLabel = `ruler="fleet"`

// Options configure a Lab. Zero values pick the defaults noted.
type Options struct {
	// Hosts are the simulated KVM hosts (default Hosts()).
	Hosts []Host
	// RulesDir is a rules/gen output directory: the lab reads HostRules
	// and FleetRules from it (e.g. the repository's rules/, or rules
	// generated with short windows by alerting.GenerateRules).
	RulesDir string
	// Interval is every Prometheus's scrape and evaluation interval and
	// the Ruler's evaluation interval (default: deploy/fleet/prometheus.yml's).
	Interval time.Duration
	// Timing of the Alertmanager's notifications (alerting.Timing defaults).
	Timing alerting.Timing
	// Prometheus and Thanos binaries (default: the pinned ones,
	// scripts/promstack.sh).
	Prometheus, Thanos string
	// Dir holds every daemon's configuration and data (default: a new
	// temporary directory, removed by Close).
	Dir string
	// StartTimeout bounds the start of each daemon (default 60 s).
	StartTimeout time.Duration
	// EveryInterval evaluates every rule group at Interval, dropping the
	// groups' own intervals (alerting.WithoutGroupIntervals): with the
	// production windows' rule names (which the dashboards read), the
	// long-window groups otherwise run every 3 minutes.
	EveryInterval bool
	// QueryAddr is where Thanos Query listens for HTTP (default: a free
	// loopback port), e.g. a fixed one for a Grafana data source.
	QueryAddr string
}

// HostStack is one simulated host's exporter, Prometheus and sidecar.
type HostStack struct {
	Host
	Exporter      *alerting.SyntheticTarget
	PrometheusURL string
	SidecarGRPC   string
}

// Lab is a running lab fleet: per host a synthetic exporter, a Prometheus
// with the per-host rules and a Thanos sidecar; Thanos Query over the
// sidecars and the Ruler; Thanos Ruler with the fleet rules; one
// Alertmanager (with tests/alerting's webhook as every receiver).
type Lab struct {
	Hosts        []*HostStack
	Alertmanager *alerting.Stack
	QueryURL     string // Thanos Query's HTTP API: the fleet's data source
	RulerURL     string // Thanos Ruler's HTTP API (its rules and alerts)

	opts    Options
	dir     string
	tmp     string
	daemons []*alerting.Daemon
}

// Start starts the lab fleet and waits until Thanos Query sees every
// sidecar and the Ruler. On error everything started is stopped.
func Start(ctx context.Context, opts Options) (*Lab, error) {
	if len(opts.Hosts) == 0 {
		opts.Hosts = Hosts()
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = time.Minute
	}
	for _, b := range []struct {
		path *string
		name string
	}{{&opts.Prometheus, "prometheus"}, {&opts.Thanos, "thanos"}} {
		if *b.path != "" {
			continue
		}
		p, err := alerting.PinnedBinary(b.name)
		if err != nil {
			return nil, err
		}
		*b.path = p
	}
	for _, f := range []string{HostRules, FleetRules} {
		if _, err := os.Stat(filepath.Join(opts.RulesDir, f)); err != nil {
			return nil, fmt.Errorf("find the fleet rules (go run ./rules/gen -out DIR writes DIR/%s): %w", f, err)
		}
	}
	l := &Lab{opts: opts, dir: opts.Dir}
	if l.dir == "" {
		d, err := os.MkdirTemp("", "fspair-fleet-")
		if err != nil {
			return nil, fmt.Errorf("make fleet directory: %w", err)
		}
		l.dir, l.tmp = d, d
	}
	if err := l.start(ctx); err != nil {
		logs := l.Logs()
		if cerr := l.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, fmt.Errorf("%w\n%s", err, logs)
	}
	return l, nil
}

func (l *Lab) start(ctx context.Context) error {
	amDir := filepath.Join(l.dir, "alertmanager")
	if err := os.MkdirAll(amDir, 0o755); err != nil {
		return fmt.Errorf("make %s: %w", amDir, err)
	}
	am, err := alerting.New(ctx, alerting.Options{Timing: l.opts.Timing, Dir: amDir})
	if err != nil {
		return err
	}
	l.Alertmanager = am
	root, err := alerting.RepoRoot()
	if err != nil {
		return err
	}
	template, err := os.ReadFile(filepath.Join(root, "deploy", "fleet", "prometheus.yml"))
	if err != nil {
		return fmt.Errorf("read the per-host Prometheus configuration: %w", err)
	}
	var endpoints []map[string]string
	for _, h := range l.opts.Hosts {
		hs, err := l.startHost(ctx, h, template)
		if err != nil {
			return fmt.Errorf("start host %s: %w", h.Name, err)
		}
		endpoints = append(endpoints, map[string]string{"address": hs.SidecarGRPC})
	}

	addrs := map[string]string{}
	addrs["query-http"] = l.opts.QueryAddr
	for _, n := range []string{"query-http", "query-grpc", "ruler-http", "ruler-grpc"} {
		if addrs[n] != "" {
			continue
		}
		if addrs[n], err = alerting.FreeAddr(); err != nil {
			return err
		}
	}
	endpoints = append(endpoints, map[string]string{"address": addrs["ruler-grpc"]})
	sd, err := yaml.Marshal(map[string]any{"endpoints": endpoints})
	if err != nil {
		return err
	}
	sdFile := filepath.Join(l.dir, "query-endpoints.yml")
	if err := os.WriteFile(sdFile, sd, 0o644); err != nil {
		return fmt.Errorf("write Thanos Query's endpoints: %w", err)
	}
	l.QueryURL, l.RulerURL = "http://"+addrs["query-http"], "http://"+addrs["ruler-http"]
	fleetRules := filepath.Join(l.dir, "ruler", "rules", filepath.Base(FleetRules))
	if err := l.copyRules(FleetRules, fleetRules); err != nil {
		return err
	}
	ruler := []string{"rule",
		"--data-dir=" + filepath.Join(l.dir, "ruler"),
		"--rule-file=" + fleetRules,
		"--query=" + addrs["query-http"],
		"--alertmanagers.url=" + am.AlertmanagerURL(),
		"--label=" + RulerLabel,
		"--http-address=" + addrs["ruler-http"],
		"--grpc-address=" + addrs["ruler-grpc"],
	}
	if l.opts.Interval > 0 {
		ruler = append(ruler, "--eval-interval="+l.opts.Interval.String())
	}
	if _, err := l.daemon(ctx, "thanos-ruler", exec.Command(l.opts.Thanos, ruler...), l.RulerURL+"/-/ready"); err != nil {
		return err
	}
	// No partial answers: a store that fails makes the query fail, so that
	// a test never reads a fleet with a host missing as a smaller fleet.
	query := exec.Command(l.opts.Thanos, "query",
		"--endpoint.sd-config-file="+sdFile,
		"--http-address="+addrs["query-http"],
		"--grpc-address="+addrs["query-grpc"],
		"--no-query.partial-response",
	)
	if _, err := l.daemon(ctx, "thanos-query", query, l.QueryURL+"/-/ready"); err != nil {
		return err
	}
	return l.waitStores(ctx, len(l.opts.Hosts)+1)
}

// startHost starts a host's exporter, Prometheus (deploy/fleet/prometheus.yml
// with the lab's intervals and targets) and sidecar.
func (l *Lab) startHost(ctx context.Context, h Host, template []byte) (*HostStack, error) {
	exp, err := alerting.NewSyntheticTarget(h.Disks)
	if err != nil {
		return nil, err
	}
	hs := &HostStack{Host: h, Exporter: exp}
	l.Hosts = append(l.Hosts, hs)
	dir := filepath.Join(l.dir, h.Name)
	var cfg map[string]any
	if err := yaml.Unmarshal(template, &cfg); err != nil {
		return nil, fmt.Errorf("parse deploy/fleet/prometheus.yml: %w", err)
	}
	if g, ok := cfg["global"].(map[string]any); ok && l.opts.Interval > 0 {
		iv := l.opts.Interval.String()
		g["scrape_interval"], g["evaluation_interval"], g["scrape_timeout"] = iv, iv, iv
	}
	amAddr := strings.TrimPrefix(l.Alertmanager.AlertmanagerURL(), "http://")
	files := map[string]any{
		"targets/fspair.yml":       []any{map[string]any{"targets": []string{exp.Addr()}, "labels": map[string]string{"instance": SharedInstance}}},
		"targets/alertmanager.yml": []any{map[string]any{"targets": []string{amAddr}}},
		"prometheus.yml":           cfg,
	}
	for name, v := range files {
		b, err := yaml.Marshal(v)
		if err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(dir, name), b); err != nil {
			return nil, err
		}
	}
	if err := l.copyRules(HostRules, filepath.Join(dir, "rules", filepath.Base(HostRules))); err != nil {
		return nil, err
	}
	promAddr, err := alerting.FreeAddr()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	prom := exec.Command(l.opts.Prometheus,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+data,
		"--web.listen-address="+promAddr,
		// What a sidecar asks of the Prometheus it serves: blocks of 2 h,
		// not compacted further, so that it could ship them.
		"--storage.tsdb.min-block-duration=2h",
		"--storage.tsdb.max-block-duration=2h",
	)
	prom.Env = append(os.Environ(), "FSPAIR_HOST="+h.Name)
	hs.PrometheusURL = "http://" + promAddr
	if _, err := l.daemon(ctx, h.Name+"/prometheus", prom, hs.PrometheusURL+"/-/ready"); err != nil {
		return nil, err
	}
	sideHTTP, err := alerting.FreeAddr()
	if err != nil {
		return nil, err
	}
	if hs.SidecarGRPC, err = alerting.FreeAddr(); err != nil {
		return nil, err
	}
	side := exec.Command(l.opts.Thanos, "sidecar",
		"--prometheus.url="+hs.PrometheusURL,
		"--tsdb.path="+data,
		"--http-address="+sideHTTP,
		"--grpc-address="+hs.SidecarGRPC,
	)
	if _, err := l.daemon(ctx, h.Name+"/thanos-sidecar", side, "http://"+sideHTTP+"/-/ready"); err != nil {
		return nil, err
	}
	return hs, nil
}

// copyRules copies the rule file name of RulesDir to path, without the
// groups' own intervals when EveryInterval is set.
func (l *Lab) copyRules(name, path string) error {
	src := filepath.Join(l.opts.RulesDir, name)
	b, err := os.ReadFile(src)
	if l.opts.EveryInterval {
		b, err = alerting.WithoutGroupIntervals(src)
	}
	if err != nil {
		return fmt.Errorf("copy rules: %w", err)
	}
	return writeFile(path, b)
}

func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("make %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// daemon starts cmd and waits until ready answers 200.
func (l *Lab) daemon(ctx context.Context, name string, cmd *exec.Cmd, ready string) (*alerting.Daemon, error) {
	d, err := alerting.StartDaemonCmd(name, cmd)
	if err != nil {
		return nil, err
	}
	l.daemons = append(l.daemons, d)
	sctx, cancel := context.WithTimeout(ctx, l.opts.StartTimeout)
	defer cancel()
	if err := d.WaitReady(sctx, ready); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return d, nil
}

// waitStores waits until Thanos Query lists n stores, none failing.
func (l *Lab) waitStores(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, l.opts.StartTimeout)
	defer cancel()
	var last string
	for {
		got, err := Stores(ctx, l.QueryURL)
		if err == nil {
			healthy := 0
			for _, s := range got {
				if s.LastError == "" {
					healthy++
				}
			}
			if healthy == n {
				return nil
			}
			last = fmt.Sprintf("%d of %d stores healthy: %+v", healthy, n, got)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for Thanos Query to see the %d hosts' sidecars and the Ruler: %s", n-1, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Store is one store Thanos Query lists (/api/v1/stores).
type Store struct {
	Type, Name, LastError string
	Labels                []map[string]string
}

// Stores lists the stores of the Thanos Query at base.
func Stores(ctx context.Context, base string) ([]Store, error) {
	var resp struct {
		Data map[string][]struct {
			Name      string              `json:"name"`
			LastError *string             `json:"lastError"`
			LabelSets []map[string]string `json:"labelSets"`
		} `json:"data"`
	}
	if err := alerting.GetJSON(ctx, base+"/api/v1/stores", &resp); err != nil {
		return nil, fmt.Errorf("list Thanos Query's stores: %w", err)
	}
	var out []Store
	for typ, ss := range resp.Data {
		for _, s := range ss {
			st := Store{Type: typ, Name: s.Name, Labels: s.LabelSets}
			if s.LastError != nil {
				st.LastError = *s.LastError
			}
			out = append(out, st)
		}
	}
	return out, nil
}

// Close stops every daemon, the exporters and the Alertmanager, and
// removes the temporary directory.
func (l *Lab) Close() error {
	var errs []error
	for i := len(l.daemons) - 1; i >= 0; i-- {
		if err := l.daemons[i].Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	l.daemons = nil
	for _, h := range l.Hosts {
		h.Exporter.Close()
	}
	if l.Alertmanager != nil {
		if err := l.Alertmanager.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if l.tmp != "" {
		if err := os.RemoveAll(l.tmp); err != nil {
			errs = append(errs, fmt.Errorf("remove fleet directory: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Logs is the last output of every daemon, for a failure report.
func (l *Lab) Logs() string {
	var b strings.Builder
	for _, d := range l.daemons {
		fmt.Fprintf(&b, "--- %s ---\n%s\n", d.Name(), d.Log())
	}
	return b.String()
}

// Dir holds the daemons' configuration and data.
func (l *Lab) Dir() string { return l.dir }
