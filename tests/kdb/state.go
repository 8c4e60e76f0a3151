package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/fspair/fspair/tests/workload"
)

// The state directory holds settings.json (the Settings every run shares)
// and runs.jsonl (one Run per line, appended as each run finishes), so
// that an interrupted matrix resumes where it stopped: a rerun skips every
// run the file holds.
const (
	settingsFile = "settings.json"
	runsFile     = "runs.jsonl"
)

// ErrSettingsChanged is returned by OpenStore when the state directory
// holds runs made with other settings.
var ErrSettingsChanged = errors.New("state holds runs made with other settings")

// ErrLegacyState is returned by OpenStore for new runs in a state directory
// made before the randomized blocks (its settings have no Method): its runs
// were made pair by pair, without control runs, so they cannot be mixed
// with blocked runs. -report-only still renders it; since no control runs
// measured its drift, its report settles no verdict (verdict.go).
var ErrLegacyState = errors.New("state made before randomized blocks and control runs")

// newSeed draws the seed of a new state; a variable for the tests.
var newSeed = func() int64 { return rand.Int64N(1<<53) + 1 }

// Store is a state directory.
type Store struct {
	Dir      string
	Settings Settings
	// Dropped describes a last line that was cut short (the process was
	// killed while writing it); OpenStore drops it and the run is made
	// again.
	Dropped string

	runs []Run
	idx  map[runKey]int
}

type runKey struct {
	pair     string
	workload workload.Workload
	repeat   int
	control  string
}

// OpenStore opens (creating) the state directory dir for runs made with
// s. With s nil it opens an existing state read-only, with its settings
// (for -report-only). A zero s.Seed takes the state's seed, or a new one
// for a new state; s.Seed is set to the seed in use.
func OpenStore(dir string, s *Settings) (*Store, error) {
	st := &Store{Dir: dir, idx: map[runKey]int{}}
	sp := filepath.Join(dir, settingsFile)
	b, err := os.ReadFile(sp)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &st.Settings); err != nil {
			return nil, fmt.Errorf("open state %s: %w", sp, err)
		}
		if s != nil && st.Settings.Method == "" {
			return nil, fmt.Errorf("open state %s: %w: its runs were made pair by pair without control runs; use another -state for new runs, or -report-only to render it", dir, ErrLegacyState)
		}
		if s != nil && s.Seed == 0 {
			s.Seed = st.Settings.Seed
		}
		if s != nil && *s != st.Settings {
			return nil, fmt.Errorf("open state %s: %w: stored %+v, asked %+v; use the same flags or another -state", dir, ErrSettingsChanged, st.Settings, *s)
		}
	case errors.Is(err, os.ErrNotExist) && s != nil:
		if s.Seed == 0 {
			s.Seed = newSeed()
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create state %s: %w", dir, err)
		}
		b, _ := json.MarshalIndent(s, "", "  ")
		if err := os.WriteFile(sp, append(b, '\n'), 0o644); err != nil {
			return nil, fmt.Errorf("create state %s: %w", dir, err)
		}
		st.Settings = *s
	default:
		return nil, fmt.Errorf("open state %s: %w", dir, err)
	}
	if err := st.load(s != nil); err != nil {
		return nil, err
	}
	return st, nil
}

// load reads runs.jsonl. A last line without its newline, or one that
// does not parse, is what a kill in the middle of Append leaves: it is
// dropped (and, when writable, cut off the file so that the next Append
// starts a fresh line). A bad line before the last is an error.
func (st *Store) load(writable bool) error {
	p := filepath.Join(st.Dir, runsFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load state %s: %w", p, err)
	}
	good := 0 // bytes up to the end of the last good line
	for off, line := 0, 0; off < len(b); line++ {
		end := bytes.IndexByte(b[off:], '\n')
		complete := end >= 0
		if !complete {
			end = len(b) - off
		}
		text := b[off : off+end]
		next := off + end + 1
		if complete && len(bytes.TrimSpace(text)) == 0 {
			good, off = next, next
			continue
		}
		var r Run
		err := json.Unmarshal(text, &r)
		if !complete || err != nil {
			if next < len(b) {
				return fmt.Errorf("load state %s line %d: %v", p, line+1, err)
			}
			st.Dropped = fmt.Sprintf("line %d (%d bytes, cut short)", line+1, len(text))
			break
		}
		st.put(r)
		good, off = next, next
	}
	if st.Dropped != "" && writable {
		if err := os.Truncate(p, int64(good)); err != nil {
			return fmt.Errorf("cut the broken last line of %s: %w", p, err)
		}
	}
	return nil
}

func (st *Store) put(r Run) {
	k := runKey{r.Pair, r.Workload, r.Repeat, r.Control}
	if i, ok := st.idx[k]; ok {
		st.runs[i] = r
		return
	}
	st.idx[k] = len(st.runs)
	st.runs = append(st.runs, r)
}

// Done reports whether the state holds the job's run.
func (st *Store) Done(j job) bool {
	_, ok := st.idx[runKey{j.pair, j.workload, j.repeat, j.control}]
	return ok
}

// Runs returns the runs held, in the order they were made.
func (st *Store) Runs() []Run { return append([]Run(nil), st.runs...) }

// Append adds a finished run, as one line written with one write(2) and
// synced, so that a kill leaves at most that line cut short.
func (st *Store) Append(r Run) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("append run: %w", err)
	}
	p := filepath.Join(st.Dir, runsFile)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("append run to %s: %w", p, err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("append run to %s: %w", p, err)
	}
	st.put(r)
	return nil
}
