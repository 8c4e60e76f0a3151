package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/fspair/fspair/rules/classifier"
	"gopkg.in/yaml.v3"
)

// workloadNames are the workload classes of the knowledge base, in the order
// every generated file lists them. They are the four Filebench personalities
// the published pair study measured (rules/kdb/pairs.yaml).
var workloadNames = classifier.Workloads

// Classes idle and mixed complete the classifier's set.
const (
	classIdle  = classifier.Idle
	classMixed = classifier.Mixed
)

// ErrNoSource is returned for a threshold that does not say where it came from.
var ErrNoSource = classifier.ErrNoSource

// Thresholds is rules/classes.yaml: every number the rules compare against.
type Thresholds struct {
	classifier.Model `yaml:",inline"` // with hysteresis_bonus
	Activity         struct {
		ActiveIOPS Value `yaml:"active_iops"`
	} `yaml:"activity"`
	Efficiency struct {
		MinGuestWriteBytes   Value `yaml:"min_guest_write_bytes_per_second"`
		MinStageRequestsRate Value `yaml:"min_stage_requests_per_second"`
	} `yaml:"efficiency"`
	Fleet struct {
		MinDisksPerPair Value `yaml:"min_disks_per_pair"`
	} `yaml:"fleet"`
	Alerts struct {
		WriteAmplificationVsBest Value `yaml:"write_amplification_vs_best"`
		LatencyOverheadVsBest    Value `yaml:"latency_overhead_vs_best"`
		MailFlushLatencySeconds  Value `yaml:"mail_flush_latency_seconds"`
		ContentionActiveDisks    Value `yaml:"contention_active_disks"`
		EventsDroppedPerSecond   Value `yaml:"events_dropped_per_second"`
		// FspairGuestLatencyHigh: the guest's p99 of reads and writes,
		// and of flushes, which wait for the host's writeback and device
		// cache flush and so run longer.
		GuestReadWriteP99Seconds Value `yaml:"guest_read_write_p99_seconds"`
		GuestFlushP99Seconds     Value `yaml:"guest_flush_p99_seconds"`
	} `yaml:"alerts"`
}

// Value is a single threshold.
type Value struct {
	Value  *float64 `yaml:"value"`
	Source string   `yaml:"source"`
}

// V returns the number; validate has checked it is set.
func (v Value) V() float64 { return *v.Value }

// Ramp is a membership that goes linearly between two bounds.
type Ramp = classifier.Ramp

// decodeStrict decodes one YAML document, refusing unknown fields so that a
// misspelt threshold is an error, not a silent default.
func decodeStrict(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	return nil
}

// LoadThresholds reads and checks rules/classes.yaml.
func LoadThresholds(path string) (*Thresholds, error) {
	var t Thresholds
	if err := decodeStrict(path, &t); err != nil {
		return nil, err
	}
	if err := t.validate(); err != nil {
		return nil, fmt.Errorf("check %s: %w", path, err)
	}
	return &t, nil
}

func (v Value) validate(what string) error {
	if v.Value == nil {
		return fmt.Errorf("%s: no value", what)
	}
	if strings.TrimSpace(v.Source) == "" {
		return fmt.Errorf("%s: %w", what, ErrNoSource)
	}
	return nil
}

func (t *Thresholds) validate() error {
	if err := t.Model.Validate(); err != nil {
		return err
	}
	values := map[string]Value{
		"activity.active_iops":                        t.Activity.ActiveIOPS,
		"efficiency.min_guest_write_bytes_per_second": t.Efficiency.MinGuestWriteBytes,
		"efficiency.min_stage_requests_per_second":    t.Efficiency.MinStageRequestsRate,
		"fleet.min_disks_per_pair":                    t.Fleet.MinDisksPerPair,
		"alerts.write_amplification_vs_best":          t.Alerts.WriteAmplificationVsBest,
		"alerts.latency_overhead_vs_best":             t.Alerts.LatencyOverheadVsBest,
		"alerts.mail_flush_latency_seconds":           t.Alerts.MailFlushLatencySeconds,
		"alerts.contention_active_disks":              t.Alerts.ContentionActiveDisks,
		"alerts.events_dropped_per_second":            t.Alerts.EventsDroppedPerSecond,
		"alerts.guest_read_write_p99_seconds":         t.Alerts.GuestReadWriteP99Seconds,
		"alerts.guest_flush_p99_seconds":              t.Alerts.GuestFlushP99Seconds,
	}
	for _, name := range sortedKeys(values) {
		if err := values[name].validate(name); err != nil {
			return err
		}
	}
	return nil
}

// KB is rules/kdb/pairs.yaml, the published knowledge base.
type KB struct {
	Sources   map[string]string `yaml:"sources"`
	Workloads []KBWorkload      `yaml:"workloads"`

	// Ignored lists the site entries merge left out (not_distinguishable,
	// or a confidence below MinSiteConfidence), "workload pair: why", for
	// the generated file's comment.
	Ignored []string `yaml:"-"`
}

// KBWorkload is what the knowledge base says about one workload. It has no
// advice of its own: the rules derive it from the pair verdicts in force
// (advice.go), so that it never contradicts them.
type KBWorkload struct {
	Name      string    `yaml:"name"`
	Character string    `yaml:"character"`
	Source    string    `yaml:"source"`
	Guest     FSVerdict `yaml:"guest"`
	Host      FSVerdict `yaml:"host"`
	Pairs     []Verdict `yaml:"pairs"`
}

// FSVerdict lists file systems best and worst in one layer (guest or host).
type FSVerdict struct {
	Best  []string `yaml:"best"`
	Worst []string `yaml:"worst"`
}

// Verdict is one pair's verdict for a workload. Site verdicts also carry
// Workload, Date and Measured, and those the pair lab wrote (tests/kdb)
// Confidence and Conditions.
type Verdict struct {
	Workload string             `yaml:"workload"`
	Pair     string             `yaml:"pair"`
	Verdict  string             `yaml:"verdict"`
	Standout bool               `yaml:"standout"`
	Note     string             `yaml:"note"`
	Date     string             `yaml:"date"`
	Measured map[string]float64 `yaml:"measured"`
	// Confidence is how sure the measurement is of the verdict, 0 to 1
	// (the pair lab's bootstrap confidence, tests/kdb/verdict.go). A
	// verdict below MinSiteConfidence is ignored; an entry without one is
	// a verdict the site asserts by hand and is taken as it stands.
	Confidence *float64 `yaml:"confidence"`
	// Conditions are the measurement conditions the verdict holds under
	// (image format, cache mode, host device): shown in the rule's comment.
	Conditions string `yaml:"conditions"`

	// Filled in by the loader.
	GuestFS, HostFS, Source string `yaml:"-"`
	// Filled in by the merge, so that the series show both sources where
	// both rated the pair: PublishedVerdict is the published verdict a
	// site verdict replaced; SiteVerdict a site verdict the rules do not
	// act on (not_distinguishable, or below MinSiteConfidence) on a pair
	// whose published verdict stays in force.
	PublishedVerdict, SiteVerdict string `yaml:"-"`
}

// SiteSource is the source label of a site's own verdicts.
const SiteSource = "site"

// MinSiteConfidence is the confidence a measured site verdict needs for the
// rules to act on it (issue 20: a verdict that depends on when a cell ran is
// worse than none, because the rules and alerts act on it). It is the pair
// lab's default level (tests/kdb -confidence): a lab run at a lower level,
// to explore, writes verdicts the rules ignore.
const MinSiteConfidence = 0.95

// NotDistinguishable is the site verdict for a pair the site measured but
// could not call best or worst; the published verdict stays in effect.
const NotDistinguishable = "not_distinguishable"

var (
	fsName     = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
	figureName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	isoDate    = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
	verdicts   = map[string]bool{"best": true, "worst": true, "contested": true}
)

func (v *Verdict) parsePair() error {
	g, h, ok := strings.Cut(v.Pair, "/")
	if !ok || !fsName.MatchString(g) || !fsName.MatchString(h) {
		return fmt.Errorf("pair %q: want GUEST/HOST in lower case, e.g. ext4/xfs", v.Pair)
	}
	v.GuestFS, v.HostFS = g, h
	if !verdicts[v.Verdict] {
		return fmt.Errorf("pair %s: verdict %q: want best, worst or contested (a site file may also say %s)", v.Pair, v.Verdict, NotDistinguishable)
	}
	return nil
}

// LoadKB reads the published knowledge base and the site's verdicts and
// merges them: a site verdict replaces the published one for the same
// workload and pair, and a new site pair is added after the published ones.
func LoadKB(published, site string) (*KB, error) {
	var kb KB
	if err := decodeStrict(published, &kb); err != nil {
		return nil, err
	}
	if err := kb.validate(); err != nil {
		return nil, fmt.Errorf("check %s: %w", published, err)
	}
	var local []Verdict
	if err := decodeStrict(site, &local); err != nil {
		return nil, err
	}
	if err := kb.merge(local); err != nil {
		return nil, fmt.Errorf("merge %s: %w", site, err)
	}
	return &kb, nil
}

func (kb *KB) validate() error {
	if len(kb.Workloads) != len(workloadNames) {
		return fmt.Errorf("workloads: want exactly %v, in that order", workloadNames)
	}
	for i := range kb.Workloads {
		w := &kb.Workloads[i]
		if w.Name != workloadNames[i] {
			return fmt.Errorf("workloads[%d] is %q: want %v, in that order", i, w.Name, workloadNames)
		}
		if _, ok := kb.Sources[w.Source]; !ok {
			return fmt.Errorf("workload %s: source %q is not under sources", w.Name, w.Source)
		}
		if strings.TrimSpace(w.Character) == "" {
			return fmt.Errorf("workload %s: character is required", w.Name)
		}
		seen := map[string]bool{}
		for j := range w.Pairs {
			v := &w.Pairs[j]
			if v.Workload != "" || v.Date != "" || v.Measured != nil {
				return fmt.Errorf("workload %s pair %s: workload, date and measured belong in the site file", w.Name, v.Pair)
			}
			if err := v.parsePair(); err != nil {
				return fmt.Errorf("workload %s: %w", w.Name, err)
			}
			if seen[v.Pair] {
				return fmt.Errorf("workload %s: pair %s listed twice", w.Name, v.Pair)
			}
			seen[v.Pair] = true
			v.Workload, v.Source = w.Name, w.Source
		}
		for _, fs := range [][]string{w.Guest.Best, w.Guest.Worst, w.Host.Best, w.Host.Worst} {
			for _, f := range fs {
				if !fsName.MatchString(f) {
					return fmt.Errorf("workload %s: file system %q", w.Name, f)
				}
			}
		}
	}
	return nil
}

func (kb *KB) merge(site []Verdict) error {
	seen := map[string]bool{}
	for _, s := range site {
		w := kb.workload(s.Workload)
		if w == nil {
			return fmt.Errorf("workload %q: want one of %v", s.Workload, workloadNames)
		}
		verdict := s.Verdict
		if verdict == NotDistinguishable {
			s.Verdict = "best" // only to check the pair's spelling
		}
		err := s.parsePair()
		s.Verdict = verdict
		if err != nil {
			return fmt.Errorf("workload %s: %w", s.Workload, err)
		}
		if !isoDate.MatchString(s.Date) {
			return fmt.Errorf("workload %s pair %s: date %q: want YYYY-MM-DD", s.Workload, s.Pair, s.Date)
		}
		for name := range s.Measured {
			if !figureName.MatchString(name) {
				return fmt.Errorf("workload %s pair %s: measured figure %q: want snake_case", s.Workload, s.Pair, name)
			}
		}
		key := s.Workload + " " + s.Pair
		if seen[key] {
			return fmt.Errorf("workload %s: pair %s listed twice", s.Workload, s.Pair)
		}
		seen[key] = true
		if c := s.Confidence; c != nil && !(*c >= 0 && *c <= 1) {
			return fmt.Errorf("workload %s pair %s: confidence %v: want 0 to 1", s.Workload, s.Pair, *c)
		}
		published := w.pair(s.Pair)
		if why := notActedOn(s); why != "" {
			kb.Ignored = append(kb.Ignored, key+": "+why)
			// The published verdict stays in force and carries what the
			// site measured beside it.
			if published != nil {
				published.SiteVerdict = s.Verdict
			}
			continue
		}
		s.Source = SiteSource
		if published == nil {
			w.Pairs = append(w.Pairs, s)
			continue
		}
		s.PublishedVerdict = published.Verdict
		*published = s
	}
	return nil
}

// notActedOn says why the rules leave site verdict s out, "" when they act
// on it.
func notActedOn(s Verdict) string {
	switch {
	case s.Verdict == NotDistinguishable:
		return "not distinguishable"
	case s.Confidence != nil && *s.Confidence < MinSiteConfidence:
		return fmt.Sprintf("%s at confidence %v, below %v", s.Verdict, *s.Confidence, MinSiteConfidence)
	}
	return ""
}

func (kb *KB) workload(name string) *KBWorkload {
	for i := range kb.Workloads {
		if kb.Workloads[i].Name == name {
			return &kb.Workloads[i]
		}
	}
	return nil
}

// pair is w's verdict on pair, nil when it rates none.
func (w *KBWorkload) pair(pair string) *Verdict {
	for i := range w.Pairs {
		if w.Pairs[i].Pair == pair {
			return &w.Pairs[i]
		}
	}
	return nil
}

// betterPairs lists the pairs the knowledge base rates best for w, the
// standouts first, each group in file order, leaving out except.
func (w *KBWorkload) betterPairs(except string) []string {
	return w.pairsRated("best", except)
}

// pairsRated lists the pairs w rates verdict, the standouts first, each
// group in file order, leaving out except.
func (w *KBWorkload) pairsRated(verdict, except string) []string {
	var first, rest []string
	for _, v := range w.Pairs {
		if v.Verdict != verdict || v.Pair == except {
			continue
		}
		if v.Standout {
			first = append(first, v.Pair)
		} else {
			rest = append(rest, v.Pair)
		}
	}
	return append(first, rest...)
}
