package lab

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestJoinInitramfs: the guest's initramfs is the kit's followed by the
// extra archives, in order, byte for byte.
func TestJoinInitramfs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kit := write("kit.img", "KIT")
	out := filepath.Join(dir, "joined.img")
	if err := joinInitramfs(kit, []string{write("a.cpio.gz", "AA"), write("b.cpio.gz", "B")}, out); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "KITAAB" {
		t.Errorf("joined %q, want KITAAB", b)
	}
	if err := joinInitramfs(kit, []string{filepath.Join(dir, "missing")}, out); err == nil {
		t.Error("a missing archive was joined without an error")
	}
}

// TestFindFilebenchTarball: the snapshot is found beside the repository
// (../shared from the directory of go.mod) from any directory inside it,
// FSPAIR_FILEBENCH_TARBALL overrides, and a missing one is ErrNoFilebenchTarball.
func TestFindFilebenchTarball(t *testing.T) {
	top := t.TempDir()
	repo := filepath.Join(top, "repo")
	deep := filepath.Join(repo, "tests", "lab")
	vendor := filepath.Join(top, "shared", "vendor", "filebench")
	for _, d := range []string{deep, vendor} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FSPAIR_FILEBENCH_TARBALL", "")
	if _, err := FindFilebenchTarball(deep); !errors.Is(err, ErrNoFilebenchTarball) {
		t.Errorf("no snapshot: %v, want ErrNoFilebenchTarball", err)
	}
	want := filepath.Join(vendor, FilebenchTarballName)
	if err := os.WriteFile(want, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := FindFilebenchTarball(deep); err != nil || got != want {
		t.Errorf("FindFilebenchTarball(%s) = %q, %v; want %q", deep, got, err, want)
	}
	other := filepath.Join(top, "other.tar.gz")
	if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FSPAIR_FILEBENCH_TARBALL", other)
	if got, err := FindFilebenchTarball(deep); err != nil || got != other {
		t.Errorf("with FSPAIR_FILEBENCH_TARBALL: %q, %v; want %q", got, err, other)
	}
	t.Setenv("FSPAIR_FILEBENCH_TARBALL", filepath.Join(top, "nonesuch"))
	if _, err := FindFilebenchTarball(deep); !errors.Is(err, ErrNoFilebenchTarball) {
		t.Errorf("FSPAIR_FILEBENCH_TARBALL naming nothing: %v, want ErrNoFilebenchTarball", err)
	}
}
