package workload

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAppScripts checks each app script's shell syntax and that it
// answers the three verbs the lab runs.
func TestAppScripts(t *testing.T) {
	for _, a := range Apps {
		b, err := appScripts.ReadFile("apps/" + a.script() + ".sh")
		if err != nil {
			t.Fatalf("%s: %v", a.Workload, err)
		}
		cmd := exec.Command("sh", "-n")
		cmd.Stdin = strings.NewReader(string(b))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: sh -n: %v: %s", a.script(), err, out)
		}
		for _, verb := range []string{"prepare)", "run)", "clean)"} {
			if !strings.Contains(string(b), "\n"+verb) {
				t.Errorf("%s: no %s branch", a.script(), verb)
			}
		}
	}
}

// TestAppsDisk builds the tools disk and reads its tree back with
// debugfs: every app's programs (with the dynamic loader), data files,
// scripts and env.sh must be on it.
func TestAppsDisk(t *testing.T) {
	for _, tool := range []string{"mke2fs", "debugfs", "ldd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (apt-get install e2fsprogs libc-bin)", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := AppsDisk(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !d.ReadOnly || d.ID != AppsSerial {
		t.Errorf("tools disk %+v: want read-only with id %s", d, AppsSerial)
	}
	want := []string{"/env.sh", "/tools/lib64/ld-linux-x86-64.so.2"}
	for _, a := range Apps {
		want = append(want, "/apps/"+a.script()+".sh")
		for _, p := range a.Programs {
			want = append(want, "/tools/usr/bin/"+p)
		}
		for _, f := range a.Files {
			want = append(want, "/data/"+f[strings.LastIndex(f, "/")+1:])
		}
	}
	for _, p := range want {
		out, err := exec.Command("debugfs", "-R", "stat "+p, d.File).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Type: regular") {
			t.Errorf("tools disk lacks %s: %v: %s", p, err, out)
		}
	}
}

func TestParseVariants(t *testing.T) {
	for _, s := range []string{"mail", "mail-batched", "rfa-bigfiles", "mail-safecat"} {
		w, err := ParseWorkload(s)
		if err != nil || string(w) != s {
			t.Errorf("ParseWorkload(%q) = %q, %v", s, w, err)
		}
	}
	if w, _ := ParseWorkload("mail-batched"); w.Class() != Mail {
		t.Errorf("class of mail-batched: %q", w.Class())
	}
	// Every app is named CLASS-NAME after a class, has its script, and
	// is not also a fio variant.
	for _, w := range AppWorkloads() {
		if !slices.Contains(Workloads, w.Class()) || w.Class() == w {
			t.Errorf("app %q: want CLASS-NAME with CLASS one of %v", w, Workloads)
		}
		a, _ := FindApp(w)
		if _, err := appScripts.ReadFile("apps/" + a.script() + ".sh"); err != nil {
			t.Errorf("app %q: %v", w, err)
		}
		if slices.Contains(Variants(), w) {
			t.Errorf("app %q is also a fio variant", w)
		}
	}
	for _, s := range []string{"mail-nonesuch", "db-oltp", "", "-"} {
		if _, err := ParseWorkload(s); !errors.Is(err, ErrUnknownWorkload) {
			t.Errorf("ParseWorkload(%q): %v, want ErrUnknownWorkload", s, err)
		}
	}
}
