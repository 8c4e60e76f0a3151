package classifier

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Settle is how long a disk must have held its class before the class is
// settled: Windows short rule windows plus Seconds. A class chosen while the
// disk changes what it does (laying out its files, a new workload) reflects a
// window that holds part of each; the window is clear of a change one window
// after the change ends, so a class chosen during a change of up to Seconds
// cannot hold for longer than the window plus Seconds (rules/classes.yaml,
// settle). Until its class is settled, a disk's confidence is damped by the
// share of the settle time held, and no verdict or alert acts on the class.
// Nor do they on a settled workload class whose confidence is below
// MinConfidence: a disk between two boxes holds a class as steadily as one
// inside a box, and settling alone would act on it (idle and mixed, which no
// verdict rates, are paired on settling alone).
type Settle struct {
	Windows       *float64 `yaml:"windows"`
	Seconds       *float64 `yaml:"seconds"`
	Source        string   `yaml:"source"`
	MinConfidence Bonus    `yaml:"min_confidence"`
}

// Time returns the settle time, in seconds, with a short rule window of
// window seconds.
func (s Settle) Time(window float64) float64 { return *s.Windows*window + *s.Seconds }

// validate checks that both numbers are set, not negative, and not both 0,
// that the threshold has a source, and that min_confidence is set, in
// [0, 1], with a source of its own.
func (s Settle) validate() error {
	switch {
	case s.Windows == nil || s.Seconds == nil:
		return errors.New("settle: give windows and seconds")
	case strings.TrimSpace(s.Source) == "":
		return fmt.Errorf("settle: %w", ErrNoSource)
	case !(*s.Windows >= 0 && *s.Seconds >= 0):
		return fmt.Errorf("settle: windows %v and seconds %v must not be negative", *s.Windows, *s.Seconds)
	case *s.Windows == 0 && *s.Seconds == 0:
		return errors.New("settle: windows and seconds are both 0: every class would count as settled at once")
	case s.MinConfidence.Value == nil:
		return errors.New("settle: min_confidence: no value")
	case strings.TrimSpace(s.MinConfidence.Source) == "":
		return fmt.Errorf("settle: min_confidence: %w", ErrNoSource)
	case !(*s.MinConfidence.Value >= 0 && *s.MinConfidence.Value <= 1):
		// The confidence is a difference of two scores in [0, 1]: above 1
		// nothing would ever be paired, below 0 the gate would be off.
		return fmt.Errorf("settle: min_confidence %v: must be in [0, 1]", *s.MinConfidence.Value)
	}
	return nil
}

// Lookback is Prometheus' default lookback delta in seconds: the settle
// rule reads its own previous sample, which an instant query finds only
// when it is younger than this (Prometheus 3 leaves a sample exactly this
// old out; 2.x took it in).
const Lookback = 300

// Evaluation is one evaluation of the class rules: its time in seconds
// (any origin), the class chosen (Held's, with the hysteresis) and the
// confidence before settling (Result.Confidence).
type Evaluation struct {
	Time       float64
	Class      string
	Confidence float64
}

// Settling is what the settle rules record at one evaluation.
type Settling struct {
	// Since is when the disk first chose its class in the evaluations that
	// have chosen it since (domain_disk:fspair_workload_class:since_timestamp_seconds).
	Since float64
	// Held is Time - Since.
	Held float64
	// Ratio is the share of the settle time held, at most 1
	// (domain_disk:fspair_workload_class:settled_ratio).
	Ratio float64
	// Settled is Ratio == 1.
	Settled bool
	// Confidence is the evaluation's confidence times Ratio
	// (domain_disk:fspair_workload_class:confidence).
	Confidence float64
	// Paired is what domain_disk:fspair_class_pair:info records: the
	// class is settled and, for a workload class, Confidence is at least
	// Settle.MinConfidence. Only then do the verdict, the fleet view and
	// the alerts act on the class.
	Paired bool
}

// Settling returns, for the evaluations of one disk in time order, what
// the settle rules record with a short window of window seconds. As the
// rules: a class is held since the first of the evaluations that have
// chosen it without a break; a change of class starts a new hold (the
// previous class's series goes stale); so does a gap of Lookback seconds
// or more between two evaluations (the rule no longer sees its
// last sample). A class is paired as the pairing rule pairs it.
func (m *Model) Settling(window float64, evals []Evaluation) []Settling {
	settle := m.Settle.Time(window)
	gated := map[string]bool{}
	for _, c := range m.Classes {
		gated[c.Name] = true
	}
	out := make([]Settling, len(evals))
	for i, e := range evals {
		since := e.Time
		if i > 0 && evals[i-1].Class == e.Class && e.Time-evals[i-1].Time < Lookback {
			since = out[i-1].Since
		}
		ratio := math.Min((e.Time-since)/settle, 1)
		s := Settling{
			Since: since, Held: e.Time - since, Ratio: ratio, Settled: ratio == 1,
			Confidence: e.Confidence * ratio,
		}
		s.Paired = s.Settled && (!gated[e.Class] || s.Confidence >= m.Settle.MinConfidence.V())
		out[i] = s
	}
	return out
}
