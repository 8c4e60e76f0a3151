// Package classifier is fspair's workload classifier as numbers and as a
// computation: the model rules/classes.yaml describes, which rules/gen turns
// into recording rules and which the lab's offline evaluation
// (tests/workload) runs on measured windows, so that both compute the same
// scores from the same file.
//
// A disk is a point in a small feature space (Features): the read/write
// ratio on a log scale, the mean read size on a log scale and the share of
// durable writes. Each workload class is a box in that space, the range of
// each feature its training models were measured at; a box whose every
// range is one value is a centre, the fitted model's form
// (rules/classes.yaml), and the distance from it counts how far
// a disk lies from the class's typical window. A feature's distance
// from a box is how far the value lies outside the box, divided by the
// feature's scale (half the narrowest gap between the measured boxes the
// feature separates), so one unit means the same on every axis; the class
// distance is the Euclidean norm of those. One feature out of range lowers
// a class's score by its distance alone instead of zeroing it, as a product
// of ramps did.
//
// The scores are a softmax of the negative squared distances (each class's
// share of exp(-d^2)), damped when the disk is far from every class (Far)
// and when it is idle (Idle). mixed rises as the best workload score falls
// (Mixed): two classes at the same distance split the score and a disk far
// from all scores low for every class.
package classifier

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Workloads are the workload classes, in the knowledge base's order.
var Workloads = []string{"web", "mail", "fileserver", "rfa"}

// Classes besides the workloads.
const (
	Idle  = "idle"
	Mixed = "mixed"
)

// Feature names the model knows how to compute, from the image-file side of a
// disk over the rule window (Inputs).
const (
	// ReadWriteLog2 is log2(reads / writes) by requests, clamped to
	// [-RatioClamp, RatioClamp]: a disk that only reads sits at +RatioClamp.
	ReadWriteLog2 = "read_write_log2"
	// ReadSizeLog2 is log2 of the mean read request in bytes; undefined on a
	// disk without reads.
	ReadSizeLog2 = "read_size_log2"
	// SyncWriteShare is the share of writes that had to be durable (O_DSYNC,
	// or covered by a flush of at most 4 writes); 0 on a disk without
	// writes (nothing was made durable).
	SyncWriteShare = "sync_write_share"
	// FlushesPerWriteLog2 is log2(flushes / writes) on the image file,
	// clamped to [-FlushClamp, FlushClampHigh]: a disk that writes without
	// flushing sits at -FlushClamp. 0 on a disk without writes or flushes.
	FlushesPerWriteLog2 = "flushes_per_write_log2"
	// WriteSizeLog2 is log2 of the mean write request in bytes; undefined on
	// a disk without writes.
	WriteSizeLog2 = "write_size_log2"
	// RandomWriteShare is the share of writes that continue none of the
	// last 16 requests on the image file (fspair's sequential rule);
	// undefined on a disk without writes.
	RandomWriteShare = "random_write_share"
)

// FeatureNames lists the features a model may use.
var FeatureNames = []string{ReadWriteLog2, ReadSizeLog2, SyncWriteShare, FlushesPerWriteLog2, WriteSizeLog2, RandomWriteShare}

// conditional are the features a disk has only with requests of a kind:
// the mean request sizes, and the random share of writes. Without those
// requests a class with a value on the feature counts the end of the far
// ramp for it (MissingTerm), or its own charge (Class.Missing).
var conditional = map[string]bool{ReadSizeLog2: true, WriteSizeLog2: true, RandomWriteShare: true}

// Conditional reports whether f is undefined on a disk without requests of
// its kind (a mean request size, the random share of writes).
func Conditional(f string) bool { return conditional[f] }

// RatioClamp bounds ReadWriteLog2: 2^10 reads per write is read-only for
// every class.
const RatioClamp = 10

// FlushClamp and FlushClampHigh bound FlushesPerWriteLog2: one flush per
// 4,096 writes is a disk that does not flush, and 16 flushes per write is a
// disk that flushes without writing.
const (
	FlushClamp     = 12
	FlushClampHigh = 4
)

// GuestFileSystems are the guest file systems a class may have boxes of
// their own for (fspair_disk_info's guest_fs).
var GuestFileSystems = []string{"ext4", "xfs", "btrfs"}

// ErrNoSource is returned for a number that does not say where it came from.
var ErrNoSource = errors.New("threshold has no source")

// Ramp is a membership that goes linearly between two bounds: Above ramps
// from 0 at Above[0] to 1 at Above[1], Below from 1 at Below[0] to 0 at
// Below[1].
type Ramp struct {
	Above  []float64 `yaml:"above"`
	Below  []float64 `yaml:"below"`
	Source string    `yaml:"source"`
}

// Bounds returns the ramp's two bounds.
func (r Ramp) Bounds() []float64 {
	if r.Above != nil {
		return r.Above
	}
	return r.Below
}

// Validate checks that the ramp has a source and exactly one pair of bounds,
// lo < hi.
func (r Ramp) Validate(what string) error {
	if strings.TrimSpace(r.Source) == "" {
		return fmt.Errorf("%s: %w", what, ErrNoSource)
	}
	if (r.Above == nil) == (r.Below == nil) {
		return fmt.Errorf("%s: give exactly one of above: [lo, hi] or below: [lo, hi]", what)
	}
	b := r.Bounds()
	if len(b) != 2 || !(b[0] < b[1]) {
		return fmt.Errorf("%s: bounds %v must be two numbers, lo < hi", what, b)
	}
	return nil
}

// Of returns the ramp's membership of v in [0, 1].
func (r Ramp) Of(v float64) float64 {
	b := r.Bounds()
	m := (v - b[0]) / (b[1] - b[0])
	if r.Below != nil {
		m = (b[1] - v) / (b[1] - b[0])
	}
	return math.Max(0, math.Min(1, m))
}

// Feature is one axis of the space and its scale (what one unit of distance
// is on it).
type Feature struct {
	Name   string  `yaml:"name"`
	Scale  float64 `yaml:"scale"`
	Source string  `yaml:"source"`
}

// Class is one workload class: per feature, the range [lo, hi] its training
// runs were measured at. A feature the class has no range for does not
// count in its distance. GuestFS holds, per guest file system, ranges that
// replace Box's on a disk with that guest file system: the features whose
// meaning the guest file system changes (how it batches durable writes
// into its journal or log, and the size it writes in).
//
// A range of one value is the class's centre: the distance from it is how
// far the disk lies from the class's typical window.
//
// Missing, where given, is the squared distance c counts for a conditional
// feature the disk cannot show (a mean request size or the random share of
// writes, without reads or writes) instead of
// MissingTerm: a class whose own windows often lack it (rfa, whose reads
// stay in the guest's cache after its layout) is not charged as far for
// lacking it.
//
// Others are further centres (or boxes) of the same class, each with its
// own name (what its windows were): one program of a class can reach the
// host in more than one shape (a mail server whose few writers each wait
// for their flush writes nearly every request durable; sixteen writers
// batched by the guest's log, few), and a disk's distance from the class
// is its distance from the nearest of them.
type Class struct {
	Name    string                           `yaml:"name"`
	Box     map[string][2]float64            `yaml:"box"`
	GuestFS map[string]map[string][2]float64 `yaml:"guest_fs,omitempty"`
	Missing map[string]float64               `yaml:"missing,omitempty"`
	Others  []Class                          `yaml:"others,omitempty"`
	Source  string                           `yaml:"source"`
}

// Centres returns c's centres (or boxes): c itself, then its Others.
func (c Class) Centres() []Class { return append([]Class{c}, c.Others...) }

// BoxFor returns c's ranges on a disk whose guest file system is guestFS
// ("" or one without boxes of its own: Box).
func (c Class) BoxFor(guestFS string) map[string][2]float64 {
	over := c.GuestFS[guestFS]
	if len(over) == 0 {
		return c.Box
	}
	out := make(map[string][2]float64, len(c.Box))
	for f, b := range c.Box {
		out[f] = b
		if o, ok := over[f]; ok {
			out[f] = o
		}
	}
	return out
}

// Model is the classifier of rules/classes.yaml.
type Model struct {
	Idle  Ramp `yaml:"idle"`
	Mixed Ramp `yaml:"mixed"`
	// Far is an above ramp on the distance to the nearest class: every
	// workload score is damped by (1 - Far).
	Far      Ramp      `yaml:"far"`
	Features []Feature `yaml:"features"`
	Classes  []Class   `yaml:"workloads"`
	// Hysteresis is the bonus the class rule gives the class it chose at
	// its previous evaluation (Held, and rules/gen's class rule).
	Hysteresis Bonus `yaml:"hysteresis_bonus"`
	// Settle is how long a class must be held before anything acts on it
	// (settle.go).
	Settle Settle `yaml:"settle"`
	// Temperature divides the softmax's exponent (Softmax): above 1,
	// classes at close distances share the score more evenly. Unset: 1.
	Temperature *Bonus `yaml:"temperature,omitempty"`
	// Softmax says what the softmax's exponent is of. Unset: the squared
	// distances.
	Softmax *Softmax `yaml:"softmax,omitempty"`
	// Confidence, when set, gives a workload class's confidence from the
	// distances themselves instead of the spread of the scores.
	Confidence *Confidence `yaml:"confidence,omitempty"`
}

// Confidence is how sure the classifier is of a workload class, set
// apart from the scores that choose it: the softmax's temperature decides
// how scores split between close classes, and one number cannot also be
// calibrated so that a confidence means how often the class is right.
// The confidence is Margin's ramp on how much nearer the disk lies to its
// nearest class than to the runner-up (in units) times Near's on how far
// it lies from the nearest: a disk between two classes, or far from
// every class, is not confidently anything.
type Confidence struct {
	Margin Ramp   `yaml:"margin"`
	Near   Ramp   `yaml:"near"`
	Source string `yaml:"source"`
}

// Of returns the confidence of a disk whose nearest class lies at d1 units
// and the runner-up at d2.
func (c Confidence) Of(d1, d2 float64) float64 { return c.Margin.Of(d2-d1) * c.Near.Of(d1) }

// Softmax is the softmax's exponent: of the squared distances (exp(-d^2/T),
// the default) or of the distances themselves (exp(-d/T)). With squared
// distances one unit of margin between two classes weighs more the farther
// the disk lies from both (at 3 and 4 units the exponents differ by 7, at 0
// and 1 by 1), so a disk between boxes, far from both, gets a confident
// class; over the distances the same margin weighs the same anywhere.
type Softmax struct {
	Over   string `yaml:"over"`
	Source string `yaml:"source"`
}

// The values of Softmax.Over.
const (
	OverSquared  = "squared_distance"
	OverDistance = "distance"
)

// SoftmaxOver returns what the softmax's exponent is of (OverSquared when
// the model sets nothing).
func (m *Model) SoftmaxOver() string {
	if m.Softmax == nil || m.Softmax.Over == "" {
		return OverSquared
	}
	return m.Softmax.Over
}

// T returns the softmax's temperature (1 when the model sets none).
func (m *Model) T() float64 {
	if m.Temperature == nil || m.Temperature.Value == nil {
		return 1
	}
	return *m.Temperature.Value
}

// Bonus is a score bonus with where its number came from.
type Bonus struct {
	Value  *float64 `yaml:"value"`
	Source string   `yaml:"source"`
}

// V returns the bonus; Validate has checked it is set.
func (b Bonus) V() float64 { return *b.Value }

// Load reads the model from rules/classes.yaml (its other thresholds are
// rules/gen's) and validates it.
func Load(path string) (*Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var m Model
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("check %s: %w", path, err)
	}
	return &m, nil
}

// Validate checks the model: sources everywhere, the ramps' directions, the
// four workload classes in order, known features with positive scales, and
// boxes with lo <= hi on known features.
func (m *Model) Validate() error {
	switch h := m.Hysteresis; {
	case h.Value == nil:
		return errors.New("hysteresis_bonus: no value")
	case strings.TrimSpace(h.Source) == "":
		return fmt.Errorf("hysteresis_bonus: %w", ErrNoSource)
	case !(*h.Value >= 0 && *h.Value < 1):
		return fmt.Errorf("hysteresis_bonus %v: must be in [0, 1)", *h.Value)
	}
	if err := m.Settle.validate(); err != nil {
		return err
	}
	if t := m.Temperature; t != nil {
		switch {
		case t.Value == nil || !(*t.Value > 0):
			return errors.New("temperature: want a value above 0")
		case strings.TrimSpace(t.Source) == "":
			return fmt.Errorf("temperature: %w", ErrNoSource)
		}
	}
	if c := m.Confidence; c != nil {
		if strings.TrimSpace(c.Source) == "" {
			return fmt.Errorf("confidence: %w", ErrNoSource)
		}
		if err := c.Margin.Validate("confidence: margin"); err != nil {
			return err
		}
		if err := c.Near.Validate("confidence: near"); err != nil {
			return err
		}
		if c.Margin.Above == nil || c.Near.Below == nil {
			return errors.New("confidence: margin must be an above ramp, near a below one")
		}
	}
	if sm := m.Softmax; sm != nil {
		switch {
		case sm.Over != OverSquared && sm.Over != OverDistance:
			return fmt.Errorf("softmax: over %q, want %s or %s", sm.Over, OverSquared, OverDistance)
		case strings.TrimSpace(sm.Source) == "":
			return fmt.Errorf("softmax: %w", ErrNoSource)
		}
	}
	for _, r := range []struct {
		name  string
		r     Ramp
		below bool
	}{{"idle", m.Idle, true}, {"mixed", m.Mixed, true}, {"far", m.Far, false}} {
		if err := r.r.Validate(r.name); err != nil {
			return err
		}
		if r.below != (r.r.Below != nil) {
			return fmt.Errorf("%s: must be a %s ramp", r.name, map[bool]string{true: "below", false: "above"}[r.below])
		}
	}
	known := map[string]bool{}
	for _, f := range m.Features {
		if !contains(FeatureNames, f.Name) {
			return fmt.Errorf("feature %q: unknown; known: %s", f.Name, strings.Join(FeatureNames, ", "))
		}
		if known[f.Name] {
			return fmt.Errorf("feature %q: listed twice", f.Name)
		}
		if !(f.Scale > 0) {
			return fmt.Errorf("feature %s: scale %v must be positive", f.Name, f.Scale)
		}
		if strings.TrimSpace(f.Source) == "" {
			return fmt.Errorf("feature %s: %w", f.Name, ErrNoSource)
		}
		known[f.Name] = true
	}
	if len(m.Classes) != len(Workloads) {
		return fmt.Errorf("workloads: want exactly %v, in that order", Workloads)
	}
	for i, c := range m.Classes {
		if c.Name != Workloads[i] {
			return fmt.Errorf("workloads[%d] is %q: want %v, in that order", i, c.Name, Workloads)
		}
		names := map[string]bool{c.Name: true}
		for _, o := range c.Others {
			if o.Name == "" || names[o.Name] {
				return fmt.Errorf("workload %s: others: centre name %q: want a name of its own", c.Name, o.Name)
			}
			names[o.Name] = true
			if len(o.Others) > 0 {
				return fmt.Errorf("workload %s: others: %s has others of its own", c.Name, o.Name)
			}
			if err := validateCentre(c.Name+" ("+o.Name+")", o, known); err != nil {
				return err
			}
		}
		if err := validateCentre(c.Name, c, known); err != nil {
			return err
		}
	}
	return nil
}

// validateCentre checks one centre or box of a class (what names it in
// errors): a source, a box on known features with lo <= hi, guest file
// system ranges on its box's features, missing charges on its mean
// request sizes.
func validateCentre(what string, c Class, known map[string]bool) error {
	if len(c.Box) == 0 {
		return fmt.Errorf("workload %s: empty box", what)
	}
	if strings.TrimSpace(c.Source) == "" {
		return fmt.Errorf("workload %s: %w", what, ErrNoSource)
	}
	for f, b := range c.Box {
		if !known[f] {
			return fmt.Errorf("workload %s: box on feature %q, which features does not list", what, f)
		}
		if !(b[0] <= b[1]) {
			return fmt.Errorf("workload %s: box %s %v: want lo <= hi", what, f, b)
		}
	}
	for g, over := range c.GuestFS {
		if !contains(GuestFileSystems, g) {
			return fmt.Errorf("workload %s: guest_fs %q: want one of %s", what, g, strings.Join(GuestFileSystems, ", "))
		}
		for f, b := range over {
			if _, ok := c.Box[f]; !ok {
				return fmt.Errorf("workload %s: guest_fs %s: range on feature %q, which its box has none on", what, g, f)
			}
			if !(b[0] <= b[1]) {
				return fmt.Errorf("workload %s: guest_fs %s: %s %v: want lo <= hi", what, g, f, b)
			}
		}
	}
	for f, v := range c.Missing {
		if _, ok := c.Box[f]; !ok || !conditional[f] {
			return fmt.Errorf("workload %s: missing on feature %q: want a conditional feature (a mean request size, the random share of writes) its box has a range on", what, f)
		}
		if !(v >= 0) {
			return fmt.Errorf("workload %s: missing %s %v: must be 0 or more", what, f, v)
		}
	}
	return nil
}

// Scale returns the scale of feature name (0 for one the model lacks).
func (m *Model) Scale(name string) float64 {
	for _, f := range m.Features {
		if f.Name == name {
			return f.Scale
		}
	}
	return 0
}

// BoxFeatures returns the features of c's box, in the model's feature order.
func (m *Model) BoxFeatures(c Class) []string {
	var out []string
	for _, f := range m.Features {
		if _, ok := c.Box[f.Name]; ok {
			out = append(out, f.Name)
		}
	}
	return out
}

// MissingTerm is the squared distance a mean request size adds to a class with
// a range on it when the disk has no requests of its kind: the end of the far
// ramp, so such a class alone counts as far.
func (m *Model) MissingTerm() float64 {
	hi := m.Far.Bounds()[1]
	return hi * hi
}

// MissingOf returns the squared distance class c counts for the mean
// request size f on a disk without requests of its kind: c's own, at most
// MissingTerm.
func (m *Model) MissingOf(c Class, f string) float64 {
	if v, ok := c.Missing[f]; ok {
		return math.Min(v, m.MissingTerm())
	}
	return m.MissingTerm()
}

// Term is the squared, scaled distance of value v from box b on a feature
// of scale s.
func Term(v float64, b [2]float64, s float64) float64 {
	d := math.Max(0, math.Max(v-b[1], b[0]-v)) / s
	return d * d
}

// Distance returns the distance of the point x of a disk whose guest file
// system is guestFS ("" when unknown) from class c, in units; NaN when x
// lacks a feature other than a mean request size (a disk without reads or
// writes), as the rules have no distance series then.
func (m *Model) Distance(c Class, x map[string]float64, guestFS string) float64 {
	d := m.centreDistance(c, x, guestFS)
	for _, o := range c.Others {
		d = math.Min(d, m.centreDistance(o, x, guestFS))
	}
	return d
}

// centreDistance is Distance from one of a class's centres.
func (m *Model) centreDistance(c Class, x map[string]float64, guestFS string) float64 {
	box := c.BoxFor(guestFS)
	sum := 0.0
	for _, f := range m.BoxFeatures(c) {
		v, ok := x[f]
		if !ok && conditional[f] {
			sum += m.MissingOf(c, f)
			continue
		}
		if !ok {
			return math.NaN()
		}
		sum += Term(v, box[f], m.Scale(f))
	}
	return math.Sqrt(sum)
}

// Result is a classification of one window.
type Result struct {
	Distances map[string]float64 // per workload class, in units
	Scores    map[string]float64 // per class, workloads, idle and mixed
	Class     string             // the highest score (ties: the first in Workloads, then idle, mixed)
	// Confidence is the best score minus the runner-up; 0 when the best
	// is mixed, which names no class.
	Confidence float64
}

// Classify scores the point x of a disk doing iops reads and writes per
// second whose guest file system is guestFS ("" when unknown), as the
// recording rules do at one evaluation (without their hysteresis, which
// needs the previous evaluation).
func (m *Model) Classify(x map[string]float64, iops float64, guestFS string) Result {
	dist := map[string]float64{}
	for _, c := range m.Classes {
		dist[c.Name] = m.Distance(c, x, guestFS)
	}
	return m.Score(dist, iops)
}

// Score scores a disk doing iops reads and writes per second whose distances
// from the workload classes are dist (in units, by class name), as Classify
// does with the distances from the model's boxes.
func (m *Model) Score(dist map[string]float64, iops float64) Result {
	r := Result{Distances: dist, Scores: map[string]float64{}}
	idle := m.Idle.Of(iops)
	r.Scores[Idle] = idle
	minD := math.Inf(1)
	for _, c := range m.Classes {
		minD = math.Min(minD, dist[c.Name])
	}
	// Each class's share, relative to the nearest class's (the same ratios
	// as the rules' exp(-d^2/T) or exp(-d/T), without underflow).
	t, linear := m.T(), m.SoftmaxOver() == OverDistance
	share := func(d float64) float64 {
		if linear {
			return math.Exp(-(d - minD) / t)
		}
		return math.Exp(-(d*d - minD*minD) / t)
	}
	sum := 0.0
	for _, d := range r.Distances {
		sum += share(d)
	}
	best := 0.0
	for _, c := range m.Classes {
		d := r.Distances[c.Name]
		s := share(d) / sum * (1 - m.Far.Of(minD)) * (1 - idle)
		if math.IsNaN(s) {
			s = 0 // no distances: the rules score 0
		}
		r.Scores[c.Name] = s
		best = math.Max(best, s)
	}
	r.Scores[Mixed] = m.Mixed.Of(best) * (1 - idle)
	vals := make([]float64, 0, len(scoreOrder))
	for _, c := range scoreOrder {
		if r.Class == "" || r.Scores[c] > r.Scores[r.Class] {
			r.Class = c
		}
		vals = append(vals, r.Scores[c])
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(vals)))
	r.Confidence = vals[0] - vals[1]
	if c := m.Confidence; c != nil && r.Class != Idle && r.Class != Mixed {
		d1, d2 := NearestTwo(dist)
		r.Confidence = c.Of(d1, d2) * (1 - idle)
	}
	if r.Class == Mixed {
		r.Confidence = 0 // mixed names no class: nothing to be confident of
	}
	return r
}

// NearestTwo returns the two smallest of a disk's distances from the
// classes (by class name), what Confidence is of. Where a workload class
// scores highest every distance is defined: one undefined (NaN) makes
// every workload score 0.
func NearestTwo(dist map[string]float64) (d1, d2 float64) {
	d := make([]float64, 0, len(dist))
	for _, v := range dist {
		d = append(d, v)
	}
	sort.Float64s(d)
	return d[0], d[1]
}

// scoreOrder is the order the rules break ties between equal scores in.
var scoreOrder = append(append([]string{}, Workloads...), Idle, Mixed)

// Held returns the class the recording rules choose from scores when they
// chose prev at their previous evaluation ("" at the first): the highest
// score, prev's raised by the hysteresis bonus, ties broken as Score does.
func (m *Model) Held(scores map[string]float64, prev string) string {
	best, bestScore := "", math.Inf(-1)
	for _, c := range scoreOrder {
		s := scores[c]
		if c == prev {
			s += m.Hysteresis.V()
		}
		if s > bestScore {
			best, bestScore = c, s
		}
	}
	return best
}

// Counts are the image-file side's requests over a window (any unit: per
// second or totals, the same for all): reads and writes completed, their
// bytes, the writes that had to be durable, and the flushes.
type Counts struct {
	Reads, Writes, ReadBytes, WriteBytes, SyncWrites, Flushes float64
	// RandomWrites are the writes the sequential rule counts random.
	RandomWrites float64
}

// Inputs returns the model's features of a window. A feature that the
// window cannot show is left out.
func Inputs(n Counts) map[string]float64 {
	x := map[string]float64{}
	if n.Reads+n.Writes > 0 {
		x[ReadWriteLog2] = clamp(math.Log2(n.Reads/n.Writes), -RatioClamp, RatioClamp)
	}
	if n.Reads > 0 {
		x[ReadSizeLog2] = math.Log2(n.ReadBytes / n.Reads)
	}
	x[SyncWriteShare] = 0
	x[FlushesPerWriteLog2] = 0
	if n.Writes > 0 {
		x[SyncWriteShare] = n.SyncWrites / n.Writes
		x[FlushesPerWriteLog2] = clamp(math.Log2(n.Flushes/n.Writes), -FlushClamp, FlushClampHigh)
		x[WriteSizeLog2] = math.Log2(n.WriteBytes / n.Writes)
		x[RandomWriteShare] = n.RandomWrites / n.Writes
	} else if n.Flushes > 0 {
		x[FlushesPerWriteLog2] = FlushClampHigh
	}
	return x
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Class returns the workload class named name.
func (m *Model) Class(name string) (Class, bool) {
	for _, c := range m.Classes {
		if c.Name == name {
			return c, true
		}
	}
	return Class{}, false
}
