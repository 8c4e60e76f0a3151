package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// runWith runs the exporter's run() with args, returning its exit code and
// what it wrote to stderr. Only for arguments that make it exit before it
// starts anything.
func runWith(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	oldArgs, oldErr := os.Args, os.Stderr
	os.Args, os.Stderr = append([]string{name}, args...), w
	defer func() { os.Args, os.Stderr = oldArgs, oldErr }()
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	code := run()
	w.Close()
	return code, <-out
}

// TestHistogramsFlag: a --histograms value other than classic, native or
// both stops the exporter at start-up with usage status 2 and a message
// that names the flag and the values it takes.
func TestHistogramsFlag(t *testing.T) {
	code, stderr := runWith(t, "--histograms=nativ")
	if code != 2 {
		t.Errorf("--histograms=nativ: exit %d, want 2", code)
	}
	for _, want := range []string{"histograms", "want classic, native or both", "nativ"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("--histograms=nativ: stderr %q does not name %q", stderr, want)
		}
	}
}
