package probe

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// forFSModes runs f as a subtest in each test mode that has programs of
// file-system type fs.
func forFSModes(t *testing.T, fs string, f func(t *testing.T, m Mode)) {
	ran := false
	for _, m := range testModes(t) {
		has := false
		for _, d := range programs {
			has = has || d.fs == fs && d.inMode(m)
		}
		if has {
			ran = true
			t.Run(string(m), func(t *testing.T) { f(t, m) })
		}
	}
	if !ran {
		t.Fatalf("no test mode has programs of %s", fs)
	}
}

// fsPrograms are p's programs for file-system type fs, by name.
func fsPrograms(p *Probes, fs string) map[string]*Program {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]*Program{}
	for _, pr := range p.programs {
		if pr.FS == fs {
			out[pr.primary] = pr
		}
	}
	return out
}

// fsState says, for each of fs's programs, whether it is attached.
func fsState(p *Probes, fs string) (attached, pending []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.programs {
		switch {
		case pr.FS != fs:
		case pr.Attached && pr.link != nil:
			attached = append(attached, pr.primary)
		case pr.Pending && pr.link == nil:
			pending = append(pending, pr.primary)
		}
	}
	return attached, pending
}

// fsyncs makes n fdatasyncs of fd, each after a 4 KiB write, and returns
// the flushes p counted meanwhile.
func fsyncs(t *testing.T, p *Probes, fd, n int) uint64 {
	t.Helper()
	before := counters(t, p).Requests[opFlush]
	for i := 0; i < n; i++ {
		if _, err := unix.Pwrite(fd, make([]byte, 4096), int64(i)*4096); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fdatasync(fd); err != nil {
			t.Fatal(err)
		}
	}
	return counters(t, p).Requests[opFlush] - before
}

// TestFSProgramsFollowImages: a file system's programs run only while a
// tracked image lives on a file system of that type. Loaded, they wait;
// the first image attaches them (exits and entries) and its flushes are
// counted exactly; untracking the last detaches the entries at once and
// the exits after the grace, after which that type's other files run none
// of them; a new image attaches the same programs again, counted exactly,
// their run-time statistics going on. ext4's programs, in the modes where
// it has them (its fsync hooks).
func TestFSProgramsFollowImages(t *testing.T) {
	_, dir := testFS(t, fsExt4)
	forFSModes(t, fsExt4, func(t *testing.T, m Mode) {
		p, err := Load(Options{Mode: m, followSelf: true, Stats: true})
		if err != nil {
			t.Fatalf("load probes in mode %s: %v", m, err)
		}
		t.Cleanup(func() { p.Close() })
		progs := fsPrograms(p, fsExt4)
		p.mu.Lock()
		p.drainGrace = 200 * time.Millisecond
		p.mu.Unlock()
		if on, _ := fsState(p, fsExt4); len(on) > 0 {
			t.Fatalf("with no image tracked, ext4's programs %v are attached", on)
		}
		for _, pr := range p.Programs() {
			if pr.FS == fsExt4 {
				t.Errorf("Programs lists %s with no image on ext4", pr.Name)
			}
		}

		// Hooks of a type with no image: an untracked file's fsyncs run none.
		other := filepath.Join(dir, string(m)+"-other.img")
		ofd, err := unix.Open(other, unix.O_CREAT|unix.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(ofd) })

		path := filepath.Join(dir, string(m)+"-image.img")
		f := trackFile(t, p, path, 3)
		on, off := fsState(p, fsExt4)
		if len(off) > 0 {
			t.Fatalf("with an image on ext4, programs %v are not attached (attached: %v)", off, on)
		}
		fd := openAs(t, path, "writeback")
		const n = 16
		if got := fsyncs(t, p, fd, n); got != n {
			t.Errorf("image tracked: %d flushes counted, want %d", got, n)
		}
		ino, err := p.Inode(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Untrack(ino, 3); err != nil {
			t.Fatal(err)
		}
		on, _ = fsState(p, fsExt4)
		for _, name := range on {
			if !isExit(progs[name]) {
				t.Errorf("entry program %s still attached after the last image went", name)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(on) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			on, _ = fsState(p, fsExt4)
		}
		if len(on) > 0 {
			t.Fatalf("programs %v still attached 10 s after the last image went", on)
		}
		runs := map[string]uint64{}
		for name, pr := range progs {
			s, err := pr.Stats()
			if err != nil {
				t.Fatal(err)
			}
			runs[name] = s.Runs
		}
		fsyncs(t, p, ofd, n)
		for name, pr := range progs {
			s, err := pr.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if s.Runs != runs[name] {
				t.Errorf("%s ran %d times while detached", name, s.Runs-runs[name])
			}
		}

		// Again: the same programs come back, and count exactly.
		loaded := map[string]any{}
		for name, pr := range progs {
			loaded[name] = pr.prog
		}
		trackFile(t, p, path, 3)
		if _, off := fsState(p, fsExt4); len(off) > 0 {
			t.Fatalf("a new image on ext4 left programs %v detached", off)
		}
		for name, pr := range progs {
			if any(pr.prog) != loaded[name] {
				t.Errorf("%s loaded anew rather than linked again", name)
			}
		}
		if got := fsyncs(t, p, fd, n); got != n {
			t.Errorf("image tracked again: %d flushes counted, want %d", got, n)
		}
		var ran uint64
		for name, pr := range progs {
			s, err := pr.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if s.Runs < runs[name] {
				t.Errorf("%s's runs went back from %d to %d", name, runs[name], s.Runs)
			}
			ran += s.Runs - runs[name]
		}
		if ran == 0 {
			t.Error("no ext4 program ran for the new image's fsyncs")
		}
		if err := unix.Close(fd); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFSReleaseCancelled: an image tracked again within the grace keeps the
// exit programs attached (no detach is left pending to take them later).
func TestFSReleaseCancelled(t *testing.T) {
	_, dir := testFS(t, fsExt4)
	forFSModes(t, fsExt4, func(t *testing.T, m Mode) {
		p := load(t, m)
		p.mu.Lock()
		p.drainGrace = 300 * time.Millisecond
		p.mu.Unlock()
		path := filepath.Join(dir, string(m)+"-again.img")
		f := trackFile(t, p, path, 3)
		ino, err := p.Inode(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Untrack(ino, 3); err != nil {
			t.Fatal(err)
		}
		g, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		ino, err = p.Inode(g)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Track(ino, 3, ImageConfig{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * 300 * time.Millisecond)
		if _, off := fsState(p, fsExt4); len(off) > 0 {
			t.Errorf("programs %v detached although an image on ext4 was tracked again within the grace", off)
		}
	})
}
