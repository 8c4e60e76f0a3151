package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fspair/fspair/tests/lab"
)

// shipped reads the four personalities from the Filebench snapshot beside
// the repository (../shared, as CI sees it); the test fails without it.
func shipped(t *testing.T) map[string]string {
	t.Helper()
	tarball, err := lab.FindFilebenchTarball(".")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := ReadPersonalities(tarball)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

var testParams = Params{Dir: "/mnt/workload/fb", Files: 12345, MemSize: "1m", Runtime: 300}

// changedLine reports whether a shipped line is one Patch may change.
var changedLine = regexp.MustCompile(`^\s*(set\s+\$(dir|nfiles|runtime)\s*=|run(\s|$)|define randvar|\{|\})|memsize|cached=`)

// TestPatchShipped patches the four shipped personalities and checks the
// lab's changes are made and every other line is kept, in order.
func TestPatchShipped(t *testing.T) {
	for name, src := range shipped(t) {
		got, err := Patch(name, src, testParams)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		lines := strings.Split(strings.TrimRight(got, "\n"), "\n")
		for _, want := range []string{"set $dir=/mnt/workload/fb", "set $nfiles=12345"} {
			if n := strings.Count("\n"+strings.Join(lines, "\n")+"\n", "\n"+want+"\n"); n != 1 {
				t.Errorf("%s: %d lines %q, want 1", name, n, want)
			}
		}
		if last := lines[len(lines)-1]; last != "run 300" {
			t.Errorf("%s: last line %q, want run 300", name, last)
		}
		runs := 0
		for _, l := range lines {
			if regexp.MustCompile(`^run(\s|$)`).MatchString(strings.TrimSpace(l)) {
				runs++
			}
			if strings.Contains(l, "memsize=") && !strings.Contains(l, "memsize=1m,") {
				t.Errorf("%s: memsize not set in %q", name, l)
			}
			for _, gone := range []string{"define randvar", ",cached=", "memsize=10m"} {
				if strings.Contains(l, gone) {
					t.Errorf("%s: %q left in %q", name, gone, l)
				}
			}
		}
		if runs != 1 {
			t.Errorf("%s: %d run lines, want 1", name, runs)
		}
		// Every line the patch has no reason to touch is there, in order.
		j := 0
		for _, l := range strings.Split(src, "\n") {
			if changedLine.MatchString(l) || strings.TrimSpace(l) == "" {
				continue
			}
			for j < len(lines) && lines[j] != l {
				j++
			}
			if j == len(lines) {
				t.Errorf("%s: shipped line %q missing or out of order", name, l)
				break
			}
			j++
		}
	}
}

// TestPatchRandomFileAccess checks the 1.4-to-1.5 rewrite on the shipped
// randomfileaccess.f: each randvar keeps its attributes and table, the
// fileset loses cached=, and a run line is added.
func TestPatchRandomFileAccess(t *testing.T) {
	got, err := Patch("randomfileaccess", shipped(t)["randomfileaccess"], testParams)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nset $wrtiosize = randvar(min=512, round=512, type=gamma, mean=16k)\n",
		"\nset $rdiosize = randvar(type=tabular, min=8k, round=1k, randtable =\n{{85,   8k,  8k},\n {15,   8k, 64k}\n})\n",
		"\n {01, 341k, 1707k}\n})\n",
		"\nset $fileidx = randvar(type=gamma, min=0, gamma=100)\n",
		"\ndefine fileset name=bigfileset,path=$dir,size=$filesize,entries=$nfiles,dirwidth=$meandirwidth,prealloc=100\n",
		"thread name=fileuser,memsize=1m,instances=$nthreads",
		"randvar definitions in 1.5 syntax, fileset attribute cached dropped",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("patched randomfileaccess.f lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "= randvar("); n != 4 {
		t.Errorf("%d randvars rewritten, want 4", n)
	}
}

// TestPatchFileserver: fileserver sets $runtime and runs it; both follow
// the run length asked.
func TestPatchFileserver(t *testing.T) {
	got, err := Patch("fileserver", shipped(t)["fileserver"], testParams)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "\nset $runtime=300\n") || strings.Contains(got, "run $runtime") {
		t.Errorf("fileserver's run length not set:\n%s", got)
	}
}

// TestPatchErrors: a personality the patch cannot apply to, or bad
// parameters, are errors, never a file left partly as shipped.
func TestPatchErrors(t *testing.T) {
	ok := "set $dir=/tmp\nset $nfiles=10\ndefine process name=p\n{\n  thread name=t,memsize=10m\n  {\n  }\n}\nrun 60\n"
	if _, err := Patch("ok", ok, testParams); err != nil {
		t.Fatalf("minimal personality: %v", err)
	}
	for name, tc := range map[string]struct {
		src string
		p   Params
	}{
		"no $dir":          {strings.Replace(ok, "set $dir=/tmp\n", "", 1), testParams},
		"no $nfiles":       {strings.Replace(ok, "set $nfiles=10\n", "", 1), testParams},
		"two $dir":         {"set $dir=/a\n" + ok, testParams},
		"no memsize":       {strings.Replace(ok, "memsize=10m", "instances=1", 1), testParams},
		"open table":       {ok + "define randvar name=$x, type=tabular, randtable =\n{{1, 1k, 1k},\n", testParams},
		"randvar unnamed":  {ok + "define randvar type=gamma, name=$x\n", testParams},
		"relative dir":     {ok, Params{Dir: "mnt", Files: 1, MemSize: "1m", Runtime: 1}},
		"dir with a comma": {ok, Params{Dir: "/mnt/a,b", Files: 1, MemSize: "1m", Runtime: 1}},
		"no files":         {ok, Params{Dir: "/mnt", Files: 0, MemSize: "1m", Runtime: 1}},
		"no runtime":       {ok, Params{Dir: "/mnt", Files: 1, MemSize: "1m", Runtime: 0}},
		"bad memsize":      {ok, Params{Dir: "/mnt", Files: 1, MemSize: "lots", Runtime: 1}},
	} {
		if got, err := Patch(name, tc.src, tc.p); err == nil {
			t.Errorf("%s: no error; patched:\n%s", name, got)
		}
	}
}

// TestReadPersonalitiesMissing: a tarball without the four personalities
// says which one it lacks.
func TestReadPersonalitiesMissing(t *testing.T) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	body := []byte("set $dir=/tmp\n")
	if err := tw.WriteHeader(&tar.Header{Name: "fb/workloads/webserver.f", Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	tw.Close()
	gz.Close()
	p := filepath.Join(t.TempDir(), "fb.tar.gz")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadPersonalities(p)
	if err == nil || !strings.Contains(err.Error(), "varmail.f") {
		t.Errorf("tarball with webserver.f only: %v, want an error naming varmail.f", err)
	}
	if _, err := ReadPersonalities(filepath.Join(t.TempDir(), "none.tar.gz")); err == nil {
		t.Error("a missing tarball read without an error")
	}
}

// TestVariants checks the held-out variants: a spec names them with its
// variables sorted, Patch sets each given variable once (a file-size
// distribution's mean for filesize) and refuses one the personality does
// not set or a value that is not a size.
func TestVariants(t *testing.T) {
	s, err := ParseSpec("varmail+nthreads=4+filesize=32k@btrfs/ext4/raw/none/native")
	if err != nil {
		t.Fatal(err)
	}
	if s.Vars != "filesize=32k,nthreads=4" || !s.Variant() || s.String() != "varmail+filesize=32k+nthreads=4@btrfs/ext4/raw/none/native" {
		t.Errorf("spec %+v, string %s", s, s)
	}
	if again, err := ParseSpec(s.String()); err != nil || again != s {
		t.Errorf("round trip: %+v, %v", again, err)
	}
	for _, bad := range []string{"varmail+nthreads@ext4/ext4/raw/none/native", "varmail+nthreads=four@ext4/ext4/raw/none/native", "varmail+$x=1@ext4/ext4/raw/none/native"} {
		if _, err := ParseSpec(bad); err == nil {
			t.Errorf("%s: parsed", bad)
		}
	}
	src := "set $dir=/tmp\nset $nfiles=1000\nset $filesize=cvar(type=cvar-gamma,parameters=mean:16384;gamma:1.5)\nset $nthreads=16\n" +
		"define fileset name=bigfileset,path=$dir,size=$filesize,entries=$nfiles\n" +
		"define process name=filereader\n{\n  thread name=t,memsize=10m,instances=$nthreads\n  {\n    flowop openfile name=o,filesetname=bigfileset,fd=1\n  }\n}\nrun 60\n"
	p := testParams
	p.Vars = s.VarMap()
	out, err := Patch("varmail", src, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"set $nthreads=4\n", "parameters=mean:32768;gamma:1.5)\n", "$nthreads (held-out variant: 4)"} {
		if !strings.Contains(out, want) {
			t.Errorf("patched text lacks %q:\n%s", want, out)
		}
	}
	p.Vars = map[string]string{"iosize": "8k"}
	if _, err := Patch("varmail", src, p); err == nil || !strings.Contains(err.Error(), "0 lines set $iosize") {
		t.Errorf("a variable the personality does not set: %v", err)
	}
	p.Vars = map[string]string{"nfiles": "5"}
	if _, err := Patch("varmail", src, p); err == nil {
		t.Error("a variant of $nfiles, which the lab sets: no error")
	}
}
