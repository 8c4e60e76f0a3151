package validate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"
)

// Results is the record of one validation run, saved as JSON
// (testdata/results-<kind>.json) and rendered into RESULTS.md.
type Results struct {
	Kind     string       `json:"kind"` // KindCI, KindFull or KindHeldOut
	Updated  time.Time    `json:"updated"`
	Command  string       `json:"command"` // of the last run merged in
	Settings Settings     `json:"settings"`
	Seconds  float64      `json:"seconds"` // wall time of the last run merged in
	Passed   bool         `json:"passed"`
	Problems []string     `json:"problems,omitempty"` // failures that belong to no one workload run
	Pairs    []PairResult `json:"pairs"`
}

// The kinds of run.
const (
	KindCI   = "ci"   // TestValidate: the CI subset, short rule windows
	KindFull = "full" // TestValidateFull (build tag validate): the matrix, production windows
	// KindHeldOut: TestValidateHeldOut (build tag validate), the
	// classifier's held-out variants, short rule windows.
	KindHeldOut = "heldout"
)

// Settings are the conditions of a run.
type Settings struct {
	Short             string  `json:"short_window"`
	Long              string  `json:"long_window"`
	ForScale          float64 `json:"for_scale"`
	PoorPairingFor    string  `json:"poor_pairing_for"` // the `for` of FspairPoorPairing as generated
	Settle            string  `json:"settle,omitempty"` // rules/gen -settle; empty: rules/classes.yaml's
	ScrapeSeconds     float64 `json:"scrape_seconds"`
	EvaluationSeconds float64 `json:"evaluation_seconds"`
	RuntimeSeconds    float64 `json:"runtime_seconds"` // fio runtime per workload
	WarmupSeconds     float64 `json:"warmup_seconds"`  // not counted in the share right
	Concurrent        int     `json:"concurrent"`      // guests running at once
	Guest             string  `json:"guest"`
}

// PairResult is one guest on one pair, running the workloads in turn.
type PairResult struct {
	Pair      string           `json:"pair"`   // guest/host/format
	Domain    string           `json:"domain"` // the guest's name, the domain label
	Measured  time.Time        `json:"measured"`
	Workloads []WorkloadResult `json:"workloads"`
	// Alerts is every FspairPoorPairing the disk had while the guest ran,
	// whatever its class, in time order.
	Alerts []AlertEvent `json:"alerts,omitempty"`
	// Problems that belong to the disk rather than one workload run, e.g.
	// an alert for a class the pair is not worst for.
	Problems []string `json:"problems,omitempty"`
}

// AlertEvent is one episode of FspairPoorPairing for a disk: pending or
// firing in Prometheus (ALERTS) for a stretch of evaluations, or a
// notification the webhook received (delivered: firing; resolved).
type AlertEvent struct {
	Kind    string  `json:"kind"` // pending, firing, delivered or resolved
	Class   string  `json:"class"`
	During  string  `json:"during"`            // the guest's stage: "prepare", "idle", "mail", "after mail"
	At      float64 `json:"at_seconds"`        // since the stage began
	Seconds float64 `json:"seconds,omitempty"` // how long a pending or firing episode lasted
}

func (a AlertEvent) String() string {
	s := fmt.Sprintf("%s %s at %s+%.0fs", a.Kind, a.Class, a.During, a.At)
	if a.Seconds > 0 {
		s += fmt.Sprintf(" for %.0fs", a.Seconds)
	}
	return s
}

// WorkloadResult is one workload run on one pair.
type WorkloadResult struct {
	Workload string `json:"workload"`
	// Verdict is the knowledge base's verdict on the pair for the workload
	// (fspair_kdb_pair_verdict): best, worst, contested, or "" if unlisted.
	Verdict           string         `json:"verdict"`
	Evaluations       int            `json:"evaluations"` // after the warm-up
	Right             int            `json:"right"`
	ShareRight        float64        `json:"share_right"`
	Classes           map[string]int `json:"classes"` // after the warm-up
	FirstRightSeconds *float64       `json:"first_right_seconds,omitempty"`
	SettleSeconds     *float64       `json:"settle_seconds,omitempty"` // absent: never settled
	Flaps             int            `json:"flaps"`
	Alert             AlertResult    `json:"poor_pairing"`
	Problems          []string       `json:"problems,omitempty"`
}

// AlertResult is what FspairPoorPairing did for the disk and the
// workload's class during one run. Times count from the workload switch.
type AlertResult struct {
	Expected         bool     `json:"expected"` // the verdict is worst
	PendingSeconds   *float64 `json:"pending_seconds,omitempty"`
	FiringSeconds    *float64 `json:"firing_seconds,omitempty"`
	DeliveredSeconds *float64 `json:"delivered_seconds,omitempty"` // the webhook received it
	Notifications    int      `json:"notifications"`               // firing notifications received
	Receiver         string   `json:"receiver,omitempty"`
	RunbookURL       string   `json:"runbook_url,omitempty"`
}

// Record turns an Outcome into a WorkloadResult (without the alert part).
func Record(workload, verdict string, o Outcome) WorkloadResult {
	r := WorkloadResult{
		Workload: workload, Verdict: verdict, Evaluations: o.Evaluations, Right: o.Right,
		ShareRight: o.ShareRight, Classes: o.Classes, Flaps: o.Flaps,
		FirstRightSeconds: seconds(o.FirstRight), SettleSeconds: seconds(o.Settle),
	}
	return r
}

func seconds(d *time.Duration) *float64 {
	if d == nil {
		return nil
	}
	s := d.Round(time.Second).Seconds()
	return &s
}

// LoadResults reads a results file; a missing file gives nil.
func LoadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("parse results %s: %w", path, err)
	}
	return &r, nil
}

// Save writes r as indented JSON.
func (r *Results) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// Merge returns the results of a run merged into the earlier results of
// the same kind and settings: pairs measured in r replace the earlier
// record of the same pair, the others stay. This lets the full matrix run
// a few pairs per invocation, releasing the lab lock in between. With
// other settings, or no earlier results, r alone is the result.
func Merge(old, r *Results) *Results {
	if old == nil || old.Kind != r.Kind || old.Settings != r.Settings {
		return r
	}
	out := *r
	out.Pairs = nil
	out.Problems = append([]string(nil), r.Problems...)
	seen := map[string]bool{}
	for _, p := range r.Pairs {
		seen[p.Pair] = true
	}
	for _, p := range old.Pairs {
		if !seen[p.Pair] {
			out.Pairs = append(out.Pairs, p)
		}
	}
	out.Pairs = append(out.Pairs, r.Pairs...)
	out.Passed = r.Passed && pairsPassed(out.Pairs)
	return &out
}

func pairsPassed(ps []PairResult) bool {
	for _, p := range ps {
		if len(p.Problems) > 0 {
			return false
		}
		for _, w := range p.Workloads {
			if len(w.Problems) > 0 {
				return false
			}
		}
	}
	return true
}

// ResultsFile is where a run of kind saves its results, relative to the
// package directory.
func ResultsFile(kind string) string { return "testdata/results-" + kind + ".json" }

func beginMarker(kind string) string {
	return fmt.Sprintf("<!-- BEGIN GENERATED %s from %s -->", kind, ResultsFile(kind))
}

func endMarker(kind string) string { return fmt.Sprintf("<!-- END GENERATED %s -->", kind) }

// Splice replaces the generated section of kind in doc by the rendering of
// r (nil: no run recorded).
func Splice(doc, kind string, r *Results) (string, error) {
	b, e := beginMarker(kind), endMarker(kind)
	i := strings.Index(doc, b)
	j := strings.Index(doc, e)
	if i < 0 || j < i {
		return "", fmt.Errorf("splice results: markers %q ... %q missing", b, e)
	}
	return doc[:i+len(b)] + "\n\n" + Render(kind, r) + "\n" + doc[j:], nil
}

// Render prints a run as Markdown.
func Render(kind string, r *Results) string {
	if r == nil {
		return fmt.Sprintf("No %s run recorded yet.\n", kind)
	}
	var b strings.Builder
	verdict := "PASSED"
	if !r.Passed {
		verdict = "FAILED"
	}
	s := r.Settings
	fmt.Fprintf(&b, "Updated %s: **%s**. Last run (%.0f minutes): `%s`\n\n",
		r.Updated.UTC().Format("2006-01-02 15:04 UTC"), verdict, r.Seconds/60, r.Command)
	fmt.Fprintf(&b, "Rules generated with -short %s -long %s -for-scale %g (FspairPoorPairing `for` %s); "+
		"scrape every %gs, rules every %gs; fio %gs per workload, first %gs not counted; %d guests at once; %s.\n\n",
		s.Short, s.Long, s.ForScale, s.PoorPairingFor, s.ScrapeSeconds, s.EvaluationSeconds,
		s.RuntimeSeconds, s.WarmupSeconds, s.Concurrent, s.Guest)
	b.WriteString("| pair | measured | workload | kdb verdict | evaluations | right | share | first right | settled | flaps | classes seen | FspairPoorPairing pending / firing / delivered | result |\n")
	b.WriteString("|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---|---|\n")
	for _, p := range r.Pairs {
		for _, w := range p.Workloads {
			res := "ok"
			if len(w.Problems) > 0 {
				res = "FAIL: " + strings.Join(w.Problems, "; ")
			}
			v := w.Verdict
			if v == "" {
				v = "-"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %d | %.2f | %s | %s | %d | %s | %s | %s |\n",
				p.Pair, p.Measured.UTC().Format("01-02 15:04"), w.Workload, v, w.Evaluations, w.Right, w.ShareRight,
				fmtSecs(w.FirstRightSeconds), fmtSecs(w.SettleSeconds), w.Flaps,
				FormatCounts(w.Classes), fmtAlert(w.Alert), mdEscape(res))
		}
	}
	b.WriteString("\nTimes count from the start of the workload's fio run (the switch); \"never\" means the class was not right at the end of the run.\n")
	alerts := false
	for _, p := range r.Pairs {
		if len(p.Alerts) == 0 {
			continue
		}
		if !alerts {
			b.WriteString("\nEvery FspairPoorPairing seen, by the stage of the guest it began in (prepare: laying out every workload's files; idle: one rule window before the first run; after W: from the end of W's run to the next; offsets from the stage's start):\n\n")
			alerts = true
		}
		parts := make([]string, len(p.Alerts))
		for i, a := range p.Alerts {
			parts[i] = a.String()
		}
		fmt.Fprintf(&b, "- %s: %s\n", p.Pair, strings.Join(parts, "; "))
	}
	other := append([]string(nil), r.Problems...)
	for _, p := range r.Pairs {
		for _, pr := range p.Problems {
			other = append(other, p.Pair+": "+pr)
		}
	}
	if len(other) > 0 {
		b.WriteString("\nOther problems:\n\n")
		for _, p := range other {
			fmt.Fprintf(&b, "- %s\n", mdEscape(p))
		}
	}
	return b.String()
}

func fmtSecs(s *float64) string {
	if s == nil {
		return "never"
	}
	return fmt.Sprintf("%.0f s", *s)
}

func fmtAlert(a AlertResult) string {
	if a.PendingSeconds == nil && a.FiringSeconds == nil && a.DeliveredSeconds == nil {
		if a.Expected {
			return "none (expected)"
		}
		return "none"
	}
	s := fmt.Sprintf("%s / %s / %s", fmtOpt(a.PendingSeconds), fmtOpt(a.FiringSeconds), fmtOpt(a.DeliveredSeconds))
	if !a.Expected {
		s += " (not expected)"
	}
	return s
}

func fmtOpt(s *float64) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f s", *s)
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
