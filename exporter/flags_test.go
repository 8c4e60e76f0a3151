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

// usageError checks that the exporter given arg stops at start-up with
// usage status 2 and a message naming each of wants.
func usageError(t *testing.T, arg string, wants ...string) {
	t.Helper()
	code, stderr := runWith(t, arg)
	if code != 2 {
		t.Errorf("%s: exit %d, want 2", arg, code)
	}
	for _, want := range wants {
		if !strings.Contains(stderr, want) {
			t.Errorf("%s: stderr %q does not name %q", arg, stderr, want)
		}
	}
}

// TestHistogramsFlag: a --histograms value other than classic, native or
// both stops the exporter at start-up, naming the flag and the values it
// takes.
func TestHistogramsFlag(t *testing.T) {
	usageError(t, "--histograms=nativ", "histograms", "want classic, native or both", "nativ")
}

// TestLibvirtMonitorHistogramsFlag: the libvirt pass-through needs the
// libvirt source (and the guest statistics) it goes through.
func TestLibvirtMonitorHistogramsFlag(t *testing.T) {
	code, stderr := runWith(t, "--guest.libvirt-monitor-histograms", "--no-discovery.libvirt")
	if code != 2 || !strings.Contains(stderr, "--guest.libvirt-monitor-histograms needs --discovery.libvirt") {
		t.Errorf("exit %d, stderr %q; want 2 naming the flag and what it needs", code, stderr)
	}
}
