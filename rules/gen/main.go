// Command gen writes the fspair Prometheus rules: recording rules (per-disk
// workload features, live workload class, pair efficiency, fleet view), the
// knowledge base of guest/host file-system pairs as series, and the alerts;
// and the same rules split for a fleet (fleet/: what each host's Prometheus
// and what Thanos Ruler evaluates; see fleet.go).
//
//	go run ./rules/gen -out rules/ [-short 5m] [-long 1h] [-for-scale 1]
//
// The windows are flags, as monitoring mixins make them, so that CI can
// generate a set with short windows and `for` durations (e.g. -short 1m
// -long 5m -for-scale 0.1); the committed files use the defaults. Numbers
// come from rules/classes.yaml, verdicts from rules/kdb/*.yaml.
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

// groupInterval parses a group's interval given as flag's value v: above 0
// and below Prometheus' 5m lookback, within which the group's readers find
// its last sample.
func groupInterval(flag, v string) (string, error) {
	secs, err := parseDuration(v)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", flag, err)
	}
	if secs <= 0 || secs >= 300 {
		return "", fmt.Errorf("check %s %s: must be above 0 and below 5m (Prometheus' lookback)", flag, v)
	}
	return formatDuration(secs), nil
}

// Options are the command's flags.
type Options struct {
	Out, Short, Long  string
	LongInterval      string // empty: longInterval of Long
	WorkloadInterval  string // empty: as LongInterval; "global": the global evaluation interval
	Settle            string // empty: classes.yaml's settle with the short window
	ForScale          float64
	Classes, KB, Site string
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	fs.StringVar(&o.Out, "out", "rules", "directory to write fspair.rules.yml, fspair-kdb.rules.yml, fspair.alerts.yml and fleet/ to")
	fs.StringVar(&o.Short, "short", "5m", "short rate window: workload features and class, flush latency, contention")
	fs.StringVar(&o.Long, "long", "1h", "long rate window: features, efficiency and the fleet view")
	fs.StringVar(&o.LongInterval, "long-interval", "", "evaluate the long-window groups, fspair.guest.quantiles, fspair.workload and fspair.fleet this often (empty: a twentieth of -long, 3m for 1h); a test's setting, e.g. the demo smoke's 30s")
	fs.StringVar(&o.WorkloadInterval, "workload-interval", "", "evaluate the workload classifier (fspair.workload) this often (empty: as -long-interval; global: at Prometheus' global evaluation_interval, as a test whose analysis counts an evaluation of the class every global interval needs)")
	fs.StringVar(&o.Settle, "settle", "", "a class is settled once held this long (empty: rules/classes.yaml settle, one short window plus 60 s, 6m for 5m); a test's setting for stacks whose test is not about settling, e.g. 5s")
	fs.Float64Var(&o.ForScale, "for-scale", 1, "multiply every alert's `for` by this (e.g. 0.1 in CI)")
	fs.StringVar(&o.Classes, "classes", "rules/classes.yaml", "thresholds file")
	fs.StringVar(&o.KB, "kdb", "rules/kdb/pairs.yaml", "published knowledge base")
	fs.StringVar(&o.Site, "site", "rules/kdb/site.yaml", "the site's own verdicts")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	files, err := Generate(o)
	if err != nil {
		fmt.Fprintln(stderr, "gen:", err)
		return 1
	}
	fleet, err := GenerateFleet(o)
	if err != nil {
		fmt.Fprintln(stderr, "gen:", err)
		return 1
	}
	for name, b := range fleet {
		files[name] = b
	}
	for _, dir := range []string{o.Out, filepath.Join(o.Out, fleetDir)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintf(stderr, "gen: create %s: %v\n", dir, err)
			return 1
		}
	}
	for _, name := range sortedKeys(files) {
		p := filepath.Join(o.Out, name)
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			fmt.Fprintf(stderr, "gen: write %s: %v\n", p, err)
			return 1
		}
	}
	return 0
}

// Generate reads the inputs and returns the rule files by name.
func Generate(o Options) (map[string][]byte, error) {
	p, err := params(o)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, f := range []File{recordingFile(p), kdbFile(p), alertFile(p)} {
		b, err := f.Marshal()
		if err != nil {
			return nil, err
		}
		out[f.Name] = b
	}
	return out, nil
}

func params(o Options) (*Params, error) {
	short, err := parseDuration(o.Short)
	if err != nil {
		return nil, fmt.Errorf("parse -short: %w", err)
	}
	long, err := parseDuration(o.Long)
	if err != nil {
		return nil, fmt.Errorf("parse -long: %w", err)
	}
	if long <= short {
		return nil, fmt.Errorf("check windows: -long %s must be longer than -short %s", o.Long, o.Short)
	}
	every := longInterval(window{formatDuration(long), long})
	if o.LongInterval != "" {
		// Readers of the long-window series (fleet rules, alerts,
		// dashboards) must never see a gap.
		if every, err = groupInterval("-long-interval", o.LongInterval); err != nil {
			return nil, err
		}
	}
	workloadEvery := every
	switch o.WorkloadInterval {
	case "":
	case "global":
		workloadEvery = ""
	default:
		// The class and settle rules read their own last sample: it
		// must be younger than the lookback at the next evaluation.
		if workloadEvery, err = groupInterval("-workload-interval", o.WorkloadInterval); err != nil {
			return nil, err
		}
	}
	var settle int64
	if o.Settle != "" {
		// Above 0: the settled ratio divides by it.
		if settle, err = parseDuration(o.Settle); err != nil || settle <= 0 {
			return nil, fmt.Errorf("check -settle %q: want a duration above 0, e.g. 5s", o.Settle)
		}
	}
	if !(o.ForScale >= 0) {
		return nil, fmt.Errorf("check -for-scale %v: must be >= 0", o.ForScale)
	}
	t, err := LoadThresholds(o.Classes)
	if err != nil {
		return nil, err
	}
	if settle == 0 {
		settle = int64(math.Ceil(t.Settle.Time(float64(short))))
	}
	kb, err := LoadKB(o.KB, o.Site)
	if err != nil {
		return nil, err
	}
	return &Params{
		Short:         window{formatDuration(short), short},
		Long:          window{formatDuration(long), long},
		LongEvery:     every,
		WorkloadEvery: workloadEvery,
		Settle:        settle,
		ForScale:      o.ForScale,
		T:             t,
		KB:            kb,
	}, nil
}
