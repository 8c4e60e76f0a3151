package lab

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
)

// ForTest makes a lab for a test: progress goes to the test log, a failure
// to set up fails the test, and a cleanup registered with t.Cleanup closes
// the lab and fails the test if anything leaked. Tests that use it need
// root and the packages in packages.txt; they fail, never skip, without.
func ForTest(t testing.TB) *Lab {
	t.Helper()
	l, err := New(context.Background(), "", "", &testLog{t: t})
	if err != nil {
		t.Fatalf("set up lab: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("tear down lab: %v", err)
		}
		leaks, err := l.Leaks()
		if err != nil {
			t.Errorf("check lab leaks: %v", err)
		}
		for _, leak := range leaks {
			t.Errorf("lab leaked %s", leak)
		}
	})
	return l
}

// TestLog returns a writer that sends whole lines to t's log, for the
// progress of tools a test runs.
func TestLog(t testing.TB) io.Writer { return &testLog{t: t} }

// testLog writes whole lines to the test log.
type testLog struct {
	t   testing.TB
	mu  sync.Mutex
	buf strings.Builder
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	s := w.buf.String()
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			break
		}
		w.t.Log(s[:i])
		s = s[i+1:]
	}
	w.buf.Reset()
	w.buf.WriteString(s)
	return len(p), nil
}
